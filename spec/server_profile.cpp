// server_profile.cpp: finding a server profile and checking it whole, once (format:
// docs/server-profiles.md). Every fault is an InputError naming the file, the JSON pointer and
// what would be valid, so a profile that loads cannot fail later for its own sake.
#include "spec/server_profile.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "base/child_process.hpp"
#include "base/json_file.hpp"
#include "base/strings.hpp"
#include "spec/server_template.hpp"

namespace bih {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* const kFormat = "bih.server-profile/1";
const std::vector<std::string> kProfileKeys{
    "$schema",  "format",      "name",       "doc",          "model_format", "command",
    "check",    "env",         "dialects",   "served_model", "ready",        "version",
    "resolved", "reset_cache", "knobs_file", "gpus",         "knobs",        "options"};
const std::vector<std::string> kEndpointKeys{"method", "path", "body", "timeout_s", "doc"};
const std::vector<std::string> kMappingKeys{"doc",  "args", "env",    "request",    "json_arg",
                                            "path", "map",  "values", "unsupported"};
const std::vector<std::string> kShipped{"vllm", "sglang", "llama-server", "bih"};

struct At {
  const std::string& file;
  std::string pointer;
  At at(const std::string& key) const { return {file, pointer + "/" + json_pointer_token(key)}; }
  At at(size_t i) const { return {file, pointer + "/" + std::to_string(i)}; }
  [[noreturn]] void fail(const std::string& what, const std::string& valid) const {
    throw InputError(file, pointer, what + "; valid: " + valid);
  }
};

void check_keys(const json& j, const At& at, const std::vector<std::string>& allowed) {
  if (!j.is_object()) at.fail("expected an object, got " + j.dump(), "an object");
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      at.at(key).fail("unknown key '" + key + "'", "keys " + join(allowed));
    }
  }
}

std::string string_of(const json& j, const At& at, const std::string& valid) {
  if (!j.is_string()) at.fail("expected a string, got " + j.dump(), valid);
  return j.get<std::string>();
}

std::string checked_template(const json& j, const At& at, TemplateScope scope) {
  const std::string text = string_of(j, at, "a string (template)");
  if (const std::string problem = template_problem(text, scope); !problem.empty()) {
    at.fail(problem.substr(0, problem.find("; valid: ")),
            problem.substr(problem.find("; valid: ") + 9));
  }
  return text;
}

std::map<std::string, std::string> checked_env(const json& j, const At& at, TemplateScope scope) {
  if (!j.is_object()) at.fail("expected an object, got " + j.dump(), "{\"NAME\": \"template\"}");
  std::map<std::string, std::string> env;
  for (const auto& [key, value] : j.items()) {
    const std::string name = checked_template(json(key), at.at(key), scope);
    if (name.empty() || name.find('=') != std::string::npos) {
      at.at(key).fail("'" + key + "' is not an environment variable name", "a name without '='");
    }
    env[key] = checked_template(value, at.at(key), scope);
  }
  return env;
}

HttpEndpoint checked_endpoint(const json& j, const At& at, double* timeout_s) {
  check_keys(j, at, kEndpointKeys);
  HttpEndpoint e;
  if (const auto it = j.find("method"); it != j.end()) {
    e.method = string_of(*it, at.at("method"), "GET or POST");
    if (e.method != "GET" && e.method != "POST") {
      at.at("method").fail("method '" + e.method + "'", "GET or POST");
    }
  }
  const auto path = j.find("path");
  if (path == j.end()) at.fail("no \"path\"", "an absolute path such as \"/health\"");
  e.path = string_of(*path, at.at("path"), "an absolute path such as \"/health\"");
  if (e.path.empty() || e.path[0] != '/') {
    at.at("path").fail("path '" + e.path + "' does not start with '/'", "\"/health\"");
  }
  if (const auto it = j.find("body"); it != j.end()) e.body = *it;
  if (const auto it = j.find("timeout_s"); it != j.end()) {
    if (timeout_s == nullptr) {
      at.at("timeout_s").fail("only the ready endpoint has a timeout", "no timeout_s here");
    }
    if (!it->is_number() || it->get<double>() <= 0 || it->get<double>() > 86400) {
      at.at("timeout_s").fail("timeout " + it->dump(), "seconds, more than 0 and up to 86400");
    }
    *timeout_s = it->get<double>();
  }
  return e;
}

void check_request_values(const json& j, const At& at, TemplateScope scope) {
  if (j.is_string()) {
    checked_template(j, at, scope);
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items()) check_request_values(v, at.at(k), scope);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) check_request_values(j[i], at.at(i), scope);
  }
}

void check_mapping(const json& m, const At& at, TemplateScope scope) {
  check_keys(m, at, kMappingKeys);
  if (const auto it = m.find("unsupported"); it != m.end()) {
    if (!it->is_string() || it->get<std::string>().empty()) {
      at.at("unsupported").fail("expected the reason as a non-empty string", "\"why\"");
    }
    for (const auto& [key, value] : m.items()) {
      if (key != "unsupported" && key != "doc") {
        at.at(key).fail("'" + key + "' beside \"unsupported\"", "\"unsupported\" alone (and doc)");
      }
    }
    return;
  }
  if (const auto it = m.find("args"); it != m.end()) {
    if (!it->is_array()) at.at("args").fail("expected an array, got " + it->dump(), "[templates]");
    for (size_t i = 0; i < it->size(); ++i) {
      if ((*it)[i] == "{value...}") continue;  // one argument per element of a list value
      checked_template((*it)[i], at.at("args").at(i), scope);
    }
  }
  if (const auto it = m.find("env"); it != m.end()) checked_env(*it, at.at("env"), scope);
  if (const auto it = m.find("request"); it != m.end()) {
    if (!it->is_object()) at.at("request").fail("expected an object", "{\"field\": value}");
    check_request_values(*it, at.at("request"), scope);
  }
  const bool has_arg = m.contains("json_arg");
  if (has_arg != m.contains("path")) {
    at.fail("json_arg and path go together", "{\"json_arg\": \"--flag\", \"path\": \"a.b\"}");
  }
  if (has_arg) {
    const std::string arg = string_of(m["json_arg"], at.at("json_arg"), "an argument name");
    if (arg.empty()) at.at("json_arg").fail("an empty argument name", "\"--compilation-config\"");
    const std::string path = string_of(m["path"], at.at("path"), "a dotted path");
    if (path.empty() || path.front() == '.' || path.back() == '.' ||
        path.find("..") != std::string::npos) {
      at.at("path").fail("path '" + path + "'", "dotted field names such as pass_config.enable_sp");
    }
  }
  if (const auto it = m.find("map"); it != m.end()) {
    if (!it->is_object() || it->empty()) {
      at.at("map").fail("expected a non-empty object", "{\"knob value\": server value}");
    }
  }
  if (const auto it = m.find("values"); it != m.end()) {
    if (!it->is_object() || it->empty()) {
      at.at("values").fail("expected a non-empty object", "{\"knob value\": mapping, \"*\": ...}");
    }
    for (const auto& [key, sub] : it->items()) check_mapping(sub, at.at("values").at(key), scope);
  }
}

bool valid_knob_key(const std::string& key) {
  const std::string section = key.substr(0, key.find('.'));
  if (std::find(knob_sections().begin(), knob_sections().end(), section) == knob_sections().end()) {
    return false;
  }
  return key == "nccl_env.*" || is_scenario_dotted_key(key);
}

ServerProfile parse_profile(const std::string& file) {
  const json j = read_json_file(file);
  const At at{file, ""};
  check_keys(j, at, kProfileKeys);
  ServerProfile p;
  p.file = file;
  const auto format = j.find("format");
  if (format == j.end() || *format != kFormat) {
    (format == j.end() ? at : at.at("format"))
        .fail(format == j.end() ? "no \"format\"" : "format " + format->dump(),
              std::string("\"format\": \"") + kFormat + "\"");
  }
  const auto name = j.find("name");
  if (name == j.end()) at.fail("no \"name\"", "a name such as \"vllm\"");
  p.name = string_of(*name, at.at("name"), "a name such as \"vllm\"");
  const bool name_ok = !p.name.empty() && std::all_of(p.name.begin(), p.name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
  if (!name_ok) at.at("name").fail("name '" + p.name + "'", "lower-case letters, digits, - _ .");
  if (const auto it = j.find("model_format"); it != j.end()) {
    p.model_format = string_of(*it, at.at("model_format"), "hf or gguf");
    if (p.model_format != "hf" && p.model_format != "gguf") {
      at.at("model_format").fail("model format '" + p.model_format + "'", "hf or gguf");
    }
  }
  const auto command = j.find("command");
  if (command == j.end() || !command->is_array() || command->empty()) {
    (command == j.end() ? at : at.at("command"))
        .fail("no command", "a non-empty array of argument templates");
  }
  for (size_t i = 0; i < command->size(); ++i) {
    p.command.push_back(
        checked_template((*command)[i], at.at("command").at(i), TemplateScope::launch));
  }
  if (p.command[0].empty()) at.at("command").at(0).fail("an empty program", "a program name");
  if (const auto it = j.find("check"); it != j.end()) {
    if (!it->is_array() || it->empty()) {
      at.at("check").fail("expected a non-empty array", "argument templates, as command");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      p.check.push_back(checked_template((*it)[i], at.at("check").at(i), TemplateScope::launch));
    }
  }
  if (const auto it = j.find("env"); it != j.end()) {
    p.env = checked_env(*it, at.at("env"), TemplateScope::launch);
  }
  const auto dialects = j.find("dialects");
  if (dialects == j.end() || !dialects->is_array() || dialects->empty()) {
    (dialects == j.end() ? at : at.at("dialects"))
        .fail("no dialects", "a non-empty array of " + join(http_dialects()));
  }
  for (size_t i = 0; i < dialects->size(); ++i) {
    const std::string d = string_of((*dialects)[i], at.at("dialects").at(i), join(http_dialects()));
    if (std::find(http_dialects().begin(), http_dialects().end(), d) == http_dialects().end()) {
      at.at("dialects").at(i).fail("unknown dialect '" + d + "'", join(http_dialects()));
    }
    p.dialects.push_back(d);
  }
  p.served_model = "bih";
  if (const auto it = j.find("served_model"); it != j.end()) {
    p.served_model = checked_template(*it, at.at("served_model"), TemplateScope::launch);
    if (p.served_model.find("{served_model}") != std::string::npos) {
      at.at("served_model").fail("served_model names itself", "a template without it");
    }
  }
  const auto ready = j.find("ready");
  if (ready == j.end()) at.fail("no \"ready\"", "{\"method\": \"GET\", \"path\": \"/health\"}");
  p.ready = checked_endpoint(*ready, at.at("ready"), &p.ready_timeout_s);
  if (const auto it = j.find("version"); it != j.end()) {
    p.version = checked_endpoint(*it, at.at("version"), nullptr);
  }
  if (const auto it = j.find("resolved"); it != j.end()) {
    p.resolved = checked_endpoint(*it, at.at("resolved"), nullptr);
  }
  if (const auto it = j.find("reset_cache"); it != j.end()) {
    p.reset_cache = checked_endpoint(*it, at.at("reset_cache"), nullptr);
  }
  if (const auto it = j.find("knobs_file"); it != j.end()) {
    if (!it->is_boolean()) at.at("knobs_file").fail("expected true or false", "true or false");
    p.knobs_file = it->get<bool>();
  }
  if (const auto it = j.find("gpus"); it != j.end()) {
    p.gpus = string_of(*it, at.at("gpus"), "a knob such as \"parallel.tp\" or a count \"1\"");
    const bool count = !p.gpus.empty() && std::all_of(p.gpus.begin(), p.gpus.end(), ::isdigit);
    if (!count && p.gpus != "parallel.tp") {
      at.at("gpus").fail("gpus '" + p.gpus + "'", "\"parallel.tp\" or a count such as \"1\"");
    }
  }
  if (const auto it = j.find("knobs"); it != j.end()) {
    if (!it->is_object()) at.at("knobs").fail("expected an object", "{\"knob\": mapping}");
    for (const auto& [key, m] : it->items()) {
      if (!valid_knob_key(key)) {
        at.at("knobs").at(key).fail(
            "'" + key + "' is not a scenario knob",
            "a knob leaf such as parallel.tp, kernels, cudagraph.mode, or nccl_env.* (sections " +
                join(knob_sections()) + ")");
      }
      check_mapping(m, at.at("knobs").at(key),
                    key == "nccl_env.*" ? TemplateScope::wildcard : TemplateScope::mapping);
    }
    p.knobs = *it;
  }
  if (const auto it = j.find("options"); it != j.end()) {
    if (!it->is_object()) at.at("options").fail("expected an object", "{\"option\": mapping}");
    for (const auto& [key, m] : it->items()) {
      check_mapping(m, at.at("options").at(key), TemplateScope::mapping);
    }
    p.options = *it;
  }
  return p;
}

bool is_path_like(const std::string& s) {
  return s.find('/') != std::string::npos ||
         (s.size() >= 5 && s.compare(s.size() - 5, 5, ".json") == 0);
}

// The first `name`.profile.json in `dir` or one of its direct subfolders.
std::string find_in(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  const std::string file = name + ".profile.json";
  if (fs::is_regular_file(dir / file, ec)) return (dir / file).string();
  std::vector<fs::path> subs;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) subs.push_back(it->path());
  }
  std::sort(subs.begin(), subs.end());
  for (const auto& sub : subs) {
    if (fs::is_regular_file(sub / file, ec)) return (sub / file).string();
  }
  return "";
}

}  // namespace

std::vector<std::string> shipped_profile_names() { return kShipped; }

std::vector<std::string> profile_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("BIH_PROFILE_PATH"); path != nullptr) {
    std::string rest = path;
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const std::string dir = rest.substr(0, colon);
      if (!dir.empty()) dirs.push_back(dir);
      rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    }
  }
  try {
    const fs::path exe_dir = fs::path(self_executable()).parent_path();
    for (const fs::path& d : {exe_dir / "adapters", exe_dir.parent_path() / "adapters",
                              exe_dir.parent_path().parent_path() / "adapters",
                              exe_dir.parent_path() / "share" / "bih" / "adapters"}) {
      std::error_code ec;
      if (!fs::is_directory(d, ec)) continue;
      const std::string dir = fs::weakly_canonical(d, ec).string();
      if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
    }
  } catch (const InfraError&) {
    // No /proc: only BIH_PROFILE_PATH is searched, and the message says so.
  }
  return dirs;
}

ServerProfile load_server_profile(const std::string& name_or_path, const std::string& relative_to) {
  const std::string valid = "a shipped profile (" + join(kShipped) +
                            ") or a profile file's path (holding '/' or ending .json)";
  if (name_or_path.empty())
    throw InputError(relative_to, "/engine/profile", "empty; valid: " + valid);
  std::string file;
  if (is_path_like(name_or_path)) {
    fs::path p(name_or_path);
    if (p.is_relative()) p = fs::path(relative_to).parent_path() / p;
    std::error_code ec;
    file = fs::absolute(p, ec).lexically_normal().string();
    if (!fs::is_regular_file(file, ec)) {
      throw InputError(relative_to, "/engine/profile",
                       "the profile file " + file + " does not exist; valid: " + valid);
    }
  } else {
    const std::vector<std::string> dirs = profile_search_dirs();
    for (const auto& d : dirs) {
      file = find_in(d, name_or_path);
      if (!file.empty()) break;
    }
    if (file.empty()) {
      throw InputError(
          relative_to, "/engine/profile",
          "no profile '" + name_or_path + "' (looked for " + name_or_path + ".profile.json in " +
              (dirs.empty() ? std::string("no folder") : join(dirs)) +
              " and their subfolders; BIH_PROFILE_PATH, colon-separated, adds folders); valid: " +
              valid);
    }
  }
  return parse_profile(file);
}

}  // namespace bih
