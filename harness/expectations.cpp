#include "harness/expectations.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "base/edit_distance.hpp"
#include "base/errors.hpp"
#include "base/json_text.hpp"
#include "base/strings.hpp"

namespace bih {
namespace {

const std::vector<std::string> kTopKeys = {"schema", "$schema", "expectations", "require_all"};
const std::vector<std::string> kEntryKeys = {"id", "verdict", "why", "require"};

std::vector<std::string> verdict_names() {
  return {"invariant",       "batch_variant", "nondeterministic", "config_variant",
          "prefill_variant", "error",         "unsupported"};
}

void reject_unknown_keys(const nlohmann::json& object, const std::vector<std::string>& allowed,
                         const std::string& path, const std::string& pointer) {
  for (const auto& [key, value] : object.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string what = "unknown key '" + key + "'";
    if (auto near = nearest_key(key, allowed)) what += " (did you mean '" + *near + "'?)";
    throw InputError(path, pointer + "/" + key, what + "; valid: " + join(allowed));
  }
}

// The value and 1-based line of every `"id": "..."` member in the text, in file order, skipping
// comments. Only expectation entries have an "id" key (unknown keys are rejected), so the k-th
// hit is entry k's id: that is how the gate can say which line to change.
std::vector<std::pair<std::string, int>> id_members(const std::string& text) {
  struct Token {
    char kind;  // 's' string, otherwise the punctuation character itself
    std::string literal;
    int line;
  };
  std::vector<Token> tokens;
  int line = 1;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\n') {
      ++line, ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      i += 2;
      while (i + 1 < text.size() && !(text[i] == '*' && text[i + 1] == '/'))
        line += text[i++] == '\n';
      i += 2;
    } else if (c == '"') {
      const size_t start = i++;
      while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
      ++i;
      tokens.push_back({'s', text.substr(start, i - start), line});
    } else {
      if (c == ':' || c == ',' || c == '{' || c == '}' || c == '[' || c == ']') {
        tokens.push_back({c, "", line});
      }
      ++i;
    }
  }
  std::vector<std::pair<std::string, int>> members;
  for (size_t k = 0; k + 2 < tokens.size(); ++k) {
    if (tokens[k].kind == 's' && tokens[k].literal == "\"id\"" && tokens[k + 1].kind == ':' &&
        tokens[k + 2].kind == 's') {
      try {
        members.emplace_back(nlohmann::json::parse(tokens[k + 2].literal).get<std::string>(),
                             tokens[k + 2].line);
      } catch (const nlohmann::json::exception&) {
        members.emplace_back("", tokens[k + 2].line);
      }
    }
  }
  return members;
}

}  // namespace

bool is_glob(std::string_view pattern) {
  return pattern.find_first_of("*?") != std::string_view::npos;
}

ExpectationsFile parse_expectations(const std::string& text, const std::string& path) {
  const nlohmann::json doc = parse_json_text<nlohmann::json>(text, path);
  if (!doc.is_object()) {
    throw InputError(path, "",
                     std::string("expected an object, got ") + doc.type_name() +
                         "; valid: {\"schema\": \"" + kExpectationsSchema +
                         "\", \"expectations\": [...]}");
  }
  reject_unknown_keys(doc, kTopKeys, path, "");
  if (!doc.contains("schema") || doc["schema"] != kExpectationsSchema) {
    throw InputError(
        path, "/schema",
        std::string(doc.contains("schema") ? "unsupported schema " + doc["schema"].dump()
                                           : "missing \"schema\"") +
            "; valid: \"" + kExpectationsSchema + "\"");
  }
  if (!doc.contains("expectations") || !doc["expectations"].is_array()) {
    throw InputError(path, "/expectations",
                     "expected an array of {\"id\", \"verdict\", \"why\"} entries");
  }
  const auto id_lines = id_members(text);
  ExpectationsFile file;
  file.path = path;
  if (doc.contains("require_all")) {
    if (!doc["require_all"].is_boolean()) {
      throw InputError(path, "/require_all",
                       "expected true (every scenario must run: unsupported fails the gate) or "
                       "false");
    }
    file.require_all = doc["require_all"].get<bool>();
  }
  std::set<std::string> seen;
  const auto& entries = doc["expectations"];
  for (size_t k = 0; k < entries.size(); ++k) {
    const std::string pointer = "/expectations/" + std::to_string(k);
    const auto& entry = entries[k];
    if (!entry.is_object()) {
      throw InputError(path, pointer,
                       std::string("expected an object, got ") + entry.type_name() +
                           "; valid: {\"id\": \"<id or glob>\", \"verdict\": \"...\", \"why\": "
                           "\"...\"}");
    }
    reject_unknown_keys(entry, kEntryKeys, path, pointer);
    Expectation e;
    e.index = k;
    if (!entry.contains("id") || !entry["id"].is_string() ||
        entry["id"].get<std::string>().empty()) {
      throw InputError(path, pointer + "/id",
                       "expected a non-empty string: an exact scenario id (`bih list FILE` "
                       "prints them) or a glob with * and ?");
    }
    e.id = entry["id"].get<std::string>();
    e.glob = is_glob(e.id);
    if (!seen.insert(e.id).second) {
      throw InputError(path, pointer + "/id",
                       "id '" + e.id + "' is listed twice; only the first entry could ever apply");
    }
    if (!entry.contains("verdict") || !entry["verdict"].is_string()) {
      throw InputError(path, pointer + "/verdict",
                       "missing or not a string; valid: " + join(verdict_names()));
    }
    const std::string verdict = entry["verdict"].get<std::string>();
    const auto parsed = parse_verdict(verdict);
    if (!parsed) {
      std::string what = "unknown verdict '" + verdict + "'";
      if (auto near = nearest_key(verdict, verdict_names())) {
        what += " (did you mean '" + *near + "'?)";
      }
      throw InputError(path, pointer + "/verdict", what + "; valid: " + join(verdict_names()));
    }
    e.verdict = *parsed;
    if (entry.contains("why")) {
      if (!entry["why"].is_string()) {
        throw InputError(path, pointer + "/why", "expected a string (free text)");
      }
      e.why = entry["why"].get<std::string>();
    }
    if (entry.contains("require")) {
      if (!entry["require"].is_boolean()) {
        throw InputError(path, pointer + "/require",
                         "expected true (the scenario must run: unsupported fails the gate) or "
                         "false");
      }
      e.require = entry["require"].get<bool>();
    }
    if (k < id_lines.size() && id_lines[k].first == e.id) e.line = id_lines[k].second;
    file.entries.push_back(std::move(e));
  }
  return file;
}

ExpectationsFile load_expectations(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot read the expectations file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_expectations(text.str(), path);
}

const Expectation* match_expectation(const ExpectationsFile& file, const std::string& id) {
  for (const auto& e : file.entries) {
    if (!e.glob && e.id == id) return &e;
  }
  for (const auto& e : file.entries) {
    if (e.glob && fnmatch(e.id.c_str(), id.c_str(), 0) == 0) return &e;
  }
  return nullptr;
}

std::string to_string(ExpectationCheck check) {
  switch (check) {
    case ExpectationCheck::met:
      return "met";
    case ExpectationCheck::missed:
      return "missed";
    case ExpectationCheck::unchecked:
      return "unchecked";
    case ExpectationCheck::required_unchecked:
      return "required_unchecked";
  }
  return "?";
}

ExpectationCheck check_expectation(Verdict got, const Expected& expected) {
  if (got == expected.verdict) return ExpectationCheck::met;
  if (got != Verdict::unsupported || !expected.declared) return ExpectationCheck::missed;
  return expected.must_run ? ExpectationCheck::required_unchecked : ExpectationCheck::unchecked;
}

std::string unchecked_summary(const std::vector<std::string>& reasons) {
  if (reasons.empty()) return "";
  std::vector<std::pair<std::string, int>> distinct;
  for (const std::string& reason : reasons) {
    std::string line = reason.substr(0, reason.find('\n'));
    if (line.empty()) line = "no reason given";
    auto it = std::find_if(distinct.begin(), distinct.end(),
                           [&](const auto& d) { return d.first == line; });
    if (it == distinct.end()) {
      distinct.emplace_back(line, 1);
    } else {
      ++it->second;
    }
  }
  std::string out = std::to_string(reasons.size()) + " not checked on this machine: ";
  for (size_t i = 0; i < distinct.size(); ++i) {
    out += (i ? "; " : "") + distinct[i].first;
    if (distinct.size() > 1 && distinct[i].second > 1) {
      out += " (" + std::to_string(distinct[i].second) + "\u00d7)";
    }
  }
  return out;
}

std::string entry_json(const std::string& id, Verdict verdict, const std::string& why) {
  return "{\"id\": " + nlohmann::json(id).dump() + ", \"verdict\": \"" + to_string(verdict) +
         "\", \"why\": " + nlohmann::json(why).dump() + "}";
}

}  // namespace bih
