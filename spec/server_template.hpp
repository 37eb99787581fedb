// server_template.hpp: the placeholders of a server profile's strings ("{port}", "{env:X|y}").
//
// One parser serves both the check at load (an unknown placeholder is the profile's error, found
// before anything runs) and the expansion at launch, so the two cannot disagree. "{{" and "}}"
// stand for literal braces (a JSON text in an argument).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bih {

// What a placeholder may name where a template sits.
enum class TemplateScope {
  launch,   // command, env, served_model: {port} {host} {model.path} {work_dir} {knobs_file}
            // {bih} {served_model} {limits.*} {env:NAME|default}
  mapping,  // a knob's or option's mapping: the above and {value}
  wildcard  // a "nccl_env.*" mapping: the above and {name} (the part after "nccl_env.")
};

// The placeholders of the launch scope; values are strings.
struct TemplateValues {
  std::map<std::string, std::string> vars;  // "port" -> "8000", "limits.max_batch" -> "64"
  std::optional<std::string> value;         // {value}: the knob's value as text
  std::optional<std::string> name;          // {name}
};

// "" when `text` is a valid template in `scope`; else what is wrong and what is valid.
std::string template_problem(const std::string& text, TemplateScope scope);

// Fills `text` in. A placeholder without a value (checked templates never have one) throws
// std::logic_error.
std::string expand_template(const std::string& text, const TemplateValues& values);

// The placeholders valid in `scope`, for messages.
std::string template_placeholders(TemplateScope scope);

}  // namespace bih
