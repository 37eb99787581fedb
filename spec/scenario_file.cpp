#include "spec/scenario_file.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/edit_distance.hpp"
#include "base/errors.hpp"

namespace bih {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
namespace fs = std::filesystem;

const std::vector<std::string> kMatrixKeys{"$schema", "name", "base", "axes", "cases"};
constexpr size_t kMaxExpandedScenarios = 100000;

// One value put into a scenario from outside the base: where it came from, for messages.
struct Override {
  std::string dotted_key;
  ordered_json value;
  std::string file_label;  // the file, or "FILE (--set k=v)"
  std::string pointer;     // where the value sits in that file
};

std::string pointer_of_dotted(const std::string& dotted) {
  std::string pointer;
  std::stringstream parts(dotted);
  std::string part;
  while (std::getline(parts, part, '.')) {
    pointer += '/';
    pointer += json_pointer_token(part);
  }
  return pointer;
}

void check_dotted_key(const std::string& dotted, const std::string& file,
                      const std::string& pointer) {
  if (is_scenario_dotted_key(dotted)) return;
  const std::vector<std::string> keys = scenario_dotted_keys();
  std::string what = "unknown scenario key '" + dotted + "'";
  if (auto near = nearest_key(dotted, keys)) what += " (did you mean '" + *near + "'?)";
  throw InputError(
      file, pointer, what + "; valid: " + [&] {
        std::string all;
        for (const auto& k : keys) all += (all.empty() ? "" : ", ") + k;
        return all + ", nccl_env.NCCL_*";
      }());
}

// Writes `value` at a dotted key, creating objects on the way. model.preset and model.path are
// alternatives, so setting one drops the other.
void set_dotted(ordered_json& scenario, const std::string& dotted, const ordered_json& value) {
  std::vector<std::string> parts;
  std::stringstream stream(dotted);
  std::string part;
  while (std::getline(stream, part, '.')) parts.push_back(part);
  ordered_json* node = &scenario;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    ordered_json& child = (*node)[parts[i]];
    if (!child.is_object()) child = ordered_json::object();
    node = &child;
  }
  if (dotted == "model.path") node->erase("preset");
  if (dotted == "model.preset") node->erase("path");
  (*node)[parts.back()] = value;
}

Override parse_set(const std::string& text, const std::string& path) {
  const std::string label = path + " (--set " + text + ")";
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw InputError(label, "", "expected key=value; valid: e.g. --set parallel.tp=4");
  }
  Override o;
  o.dotted_key = text.substr(0, eq);
  const std::string value_text = text.substr(eq + 1);
  // Not JSON: a bare string like vendor. JSON that breaks parse_json_text's rules (too deep, a
  // key twice) is refused rather than taken as a string the user did not mean.
  if (ordered_json::accept(value_text)) {
    o.value = parse_json_text<ordered_json>(value_text, label, {.comments = false});
  } else {
    o.value = value_text;
  }
  o.file_label = label;
  o.pointer = pointer_of_dotted(o.dotted_key);
  check_dotted_key(o.dotted_key, label, o.pointer);
  return o;
}

// One scenario to build: base + these overrides, in order, and a label for duplicate messages.
struct Point {
  std::vector<Override> overrides;
  std::string label;
  std::string pointer;  // the case's pointer, for a duplicate-id message
};

// Parses the merged object; an error in a value that an override put there is re-pointed at the
// override (the last one to write at or above the failing pointer), else at the base.
Scenario build(const ordered_json& base, const Point& point, const std::string& path,
               const std::string& base_pointer) {
  ordered_json merged = base;
  for (const Override& o : point.overrides) set_dotted(merged, o.dotted_key, o.value);
  try {
    return scenario_from_json(json(merged), path, "");
  } catch (const ScenarioError& e) {
    for (auto o = point.overrides.rbegin(); o != point.overrides.rend(); ++o) {
      const std::string prefix = pointer_of_dotted(o->dotted_key);
      if (e.pointer() == prefix || e.pointer().rfind(prefix + "/", 0) == 0) {
        throw InputError(o->file_label, o->pointer + e.pointer().substr(prefix.size()),
                         e.detail() + (point.label.empty() ? "" : " [in " + point.label + "]"));
      }
    }
    throw InputError(path, base_pointer + e.pointer(),
                     e.detail() + (point.label.empty() ? "" : " [in " + point.label + "]"));
  }
}

}  // namespace

ScenarioSet load_scenarios(const std::string& path, const std::vector<std::string>& set_overrides) {
  const ordered_json doc = parse_json_file<ordered_json>(path);
  if (!doc.is_object()) {
    throw InputError(path, "",
                     std::string("expected an object, got ") + doc.type_name() +
                         "; valid: a scenario object, or a matrix {\"base\", \"axes\", \"cases\"}");
  }
  std::vector<Override> sets;
  for (const std::string& text : set_overrides) sets.push_back(parse_set(text, path));

  const bool is_matrix = doc.contains("base") || doc.contains("axes") || doc.contains("cases");
  ScenarioSet set;
  ordered_json base = ordered_json::object();
  std::string base_pointer;
  std::vector<Point> cases;
  std::vector<std::pair<std::string, ordered_json>> axes;  // file order

  if (!is_matrix) {
    base = doc;
    cases.push_back({});
  } else {
    for (const auto& [key, value] : doc.items()) {
      if (std::find(kMatrixKeys.begin(), kMatrixKeys.end(), key) != kMatrixKeys.end()) continue;
      std::string what = "unknown matrix key '" + key + "'";
      if (auto near = nearest_key(key, kMatrixKeys)) what += " (did you mean '" + *near + "'?)";
      throw InputError(path, "/" + json_pointer_token(key),
                       what + "; valid: keys $schema, name, base, axes, cases");
    }
    if (doc.contains("name")) {
      if (!doc["name"].is_string()) {
        throw InputError(path, "/name", "expected a string; valid: free text");
      }
      set.name = doc["name"].get<std::string>();
    }
    if (doc.contains("base")) base = doc["base"];
    base_pointer = "/base";
    if (!base.is_object()) {
      throw InputError(path, "/base", "expected an object; valid: a scenario object");
    }
    if (doc.contains("axes")) {
      const ordered_json& axes_json = doc["axes"];
      if (!axes_json.is_object()) {
        throw InputError(path, "/axes",
                         "expected an object; valid: {\"dotted.key\": [value, ...], ...}");
      }
      for (const auto& [key, values] : axes_json.items()) {
        const std::string pointer = "/axes/" + json_pointer_token(key);
        check_dotted_key(key, path, pointer);
        if (!values.is_array() || values.empty()) {
          throw InputError(path, pointer,
                           "expected a non-empty array of values; valid: e.g. [2, 4]");
        }
        axes.emplace_back(key, values);
      }
    }
    if (doc.contains("cases")) {
      const ordered_json& cases_json = doc["cases"];
      if (!cases_json.is_array()) {
        throw InputError(path, "/cases",
                         "expected an array; valid: [{\"dotted.key\": value, ...}, ...]");
      }
      for (size_t i = 0; i < cases_json.size(); ++i) {
        const std::string case_pointer = "/cases/" + std::to_string(i);
        const ordered_json& c = cases_json[i];
        if (!c.is_object()) {
          throw InputError(path, case_pointer,
                           "expected an object; valid: {\"dotted.key\": value, ...}");
        }
        Point point;
        point.pointer = case_pointer;
        point.label = "case " + std::to_string(i);
        if (c.contains("name") && c["name"].is_string()) {
          point.label += " '" + c["name"].get<std::string>() + "'";
        }
        for (const auto& [key, value] : c.items()) {
          const std::string pointer = case_pointer + "/" + json_pointer_token(key);
          check_dotted_key(key, path, pointer);
          point.overrides.push_back({key, value, path, pointer});
        }
        cases.push_back(std::move(point));
      }
    }
    if (cases.empty()) cases.push_back({});
  }

  size_t points_per_case = 1;
  for (const auto& axis : axes) {
    points_per_case *= axis.second.size();
    if (points_per_case * cases.size() > kMaxExpandedScenarios) {
      throw InputError(path, "/axes",
                       "the matrix expands to more than " + std::to_string(kMaxExpandedScenarios) +
                           " scenarios; valid: fewer axis values");
    }
  }

  std::vector<std::pair<std::string, std::string>> seen;  // id, label
  for (const Point& c : cases) {
    for (size_t index = 0; index < points_per_case; ++index) {
      Point point = c;
      // Mixed radix, last axis fastest.
      std::vector<size_t> digits(axes.size());
      size_t rest = index;
      for (size_t a = axes.size(); a-- > 0;) {
        digits[a] = rest % axes[a].second.size();
        rest /= axes[a].second.size();
      }
      for (size_t a = 0; a < axes.size(); ++a) {
        const auto& [key, values] = axes[a];
        point.overrides.push_back(
            {key, values[digits[a]], path,
             "/axes/" + json_pointer_token(key) + "/" + std::to_string(digits[a])});
        point.label +=
            std::string(point.label.empty() ? "" : ", ") + key + "=" + values[digits[a]].dump();
      }
      for (const Override& o : sets) point.overrides.push_back(o);
      Scenario scenario = build(base, point, path, base_pointer);
      const std::string id = scenario.id();
      for (const auto& [other_id, other_label] : seen) {
        if (other_id != id) continue;
        throw InputError(
            path, point.pointer.empty() ? (axes.empty() ? "" : "/axes") : point.pointer,
            "scenarios [" + other_label + "] and [" + point.label + "] have the same id '" + id +
                "'; valid: cases and axis values that differ in a knob of the id");
      }
      seen.emplace_back(id, point.label.empty() ? "the base" : point.label);
      set.scenarios.push_back(std::move(scenario));
    }
  }
  if (set.name.empty() && !set.scenarios.empty()) set.name = set.scenarios.front().name;
  if (set.name.empty()) set.name = fs::path(path).stem().string();
  return set;
}

std::vector<Scenario> filter_scenarios(std::vector<Scenario> scenarios,
                                       const std::vector<std::string>& only) {
  if (only.empty()) return scenarios;
  std::vector<Scenario> kept;
  for (Scenario& s : scenarios) {
    const std::string id = s.id();
    const bool matches = std::any_of(only.begin(), only.end(), [&](const std::string& filter) {
      if (filter.find_first_of("*?") != std::string::npos) {
        return fnmatch(filter.c_str(), id.c_str(), 0) == 0;
      }
      return id.find(filter) != std::string::npos;
    });
    if (matches) kept.push_back(std::move(s));
  }
  return kept;
}

}  // namespace bih
