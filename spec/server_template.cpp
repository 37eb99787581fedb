// server_template.cpp: see server_template.hpp.
#include "spec/server_template.hpp"

#include <cstdlib>
#include <stdexcept>

namespace bih {
namespace {

const std::vector<std::string> kLaunchNames{
    "port", "host",         "model.path",           "work_dir",         "knobs_file",
    "bih",  "served_model", "limits.max_model_len", "limits.max_batch", "limits.max_tokens"};

bool valid_env_name(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool allowed(const std::string& name, TemplateScope scope) {
  for (const auto& n : kLaunchNames) {
    if (n == name) return true;
  }
  if (name == "value") return scope != TemplateScope::launch;
  if (name == "name") return scope == TemplateScope::wildcard;
  return false;
}

// Walks `text`, calling on_literal / on_placeholder; returns what is malformed, or "".
template <class Literal, class Placeholder>
std::string walk(const std::string& text, Literal on_literal, Placeholder on_placeholder) {
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if ((c == '{' || c == '}') && i + 1 < text.size() && text[i + 1] == c) {
      on_literal(c);
      i += 2;
      continue;
    }
    if (c == '}') return "a lone '}' (write '}}' for a literal brace)";
    if (c != '{') {
      on_literal(c);
      ++i;
      continue;
    }
    const size_t close = text.find('}', i + 1);
    if (close == std::string::npos) return "a '{' without its '}' (write '{{' for a literal brace)";
    const std::string problem = on_placeholder(text.substr(i + 1, close - i - 1));
    if (!problem.empty()) return problem;
    i = close + 1;
  }
  return "";
}

}  // namespace

std::string template_placeholders(TemplateScope scope) {
  std::string out;
  for (const auto& n : kLaunchNames) out += (out.empty() ? "{" : ", {") + n + "}";
  out += ", {env:NAME|default}";
  if (scope != TemplateScope::launch) out += ", {value}";
  if (scope == TemplateScope::wildcard) out += ", {name}";
  return out + ", '{{' and '}}' for literal braces";
}

std::string template_problem(const std::string& text, TemplateScope scope) {
  const std::string problem = walk(
      text, [](char) {},
      [&](const std::string& name) -> std::string {
        if (name.rfind("env:", 0) == 0) {
          const std::string var = name.substr(4, name.find('|') - 4);
          if (valid_env_name(var)) return "";
          return "placeholder {" + name + "} names no environment variable";
        }
        if (allowed(name, scope)) return "";
        return "unknown placeholder {" + name + "}";
      });
  if (problem.empty()) return "";
  return problem + " in '" + text + "'; valid: " + template_placeholders(scope);
}

std::string expand_template(const std::string& text, const TemplateValues& values) {
  std::string out;
  const std::string problem = walk(
      text, [&](char c) { out += c; },
      [&](const std::string& name) -> std::string {
        if (name.rfind("env:", 0) == 0) {
          const size_t bar = name.find('|');
          const std::string var = name.substr(4, bar == std::string::npos ? bar : bar - 4);
          const char* set = std::getenv(var.c_str());
          if (set != nullptr && *set != '\0') {
            out += set;
          } else if (bar != std::string::npos) {
            out += name.substr(bar + 1);
          }
          return "";
        }
        if (name == "value" && values.value) {
          out += *values.value;
          return "";
        }
        if (name == "name" && values.name) {
          out += *values.name;
          return "";
        }
        const auto it = values.vars.find(name);
        if (it == values.vars.end()) return "no value for {" + name + "}";
        out += it->second;
        return "";
      });
  if (!problem.empty()) throw std::logic_error("template '" + text + "': " + problem);
  return out;
}

}  // namespace bih
