#include "spec/scenario_file.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "base/edit_distance.hpp"
#include "base/errors.hpp"
#include "spec/dotted_keys.hpp"

namespace bih {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
namespace fs = std::filesystem;

const std::vector<std::string> kMatrixKeys{"$schema", "name", "base", "axes", "cases", "compare"};
const std::vector<std::string> kMatrixCompareKeys{"reference", "across"};
constexpr size_t kMaxExpandedScenarios = 100000;

// One value put into a scenario from outside the base: where it came from, for messages.
struct Override {
  std::string dotted_key;
  ordered_json value;
  std::string file_label;  // the file, or "FILE (--set k=v)"
  std::string pointer;     // where the value sits in that file
};

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
  o.pointer = dotted_key_pointer(o.dotted_key);
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
      const std::string prefix = dotted_key_pointer(o->dotted_key);
      if (e.pointer() == prefix || e.pointer().rfind(prefix + "/", 0) == 0) {
        throw InputError(o->file_label, o->pointer + e.pointer().substr(prefix.size()),
                         e.detail() + (point.label.empty() ? "" : " [in " + point.label + "]"));
      }
    }
    throw InputError(path, base_pointer + e.pointer(),
                     e.detail() + (point.label.empty() ? "" : " [in " + point.label + "]"));
  }
}

// A matrix's "compare" block: the reference's knobs (file order) and the keys compared across.
struct CompareBlock {
  std::vector<Override> reference;
  std::vector<std::string> across;
  std::vector<std::string> keys;  // across, then the reference's other knobs
};

// Keys that would make the reference run other prompts or another model: its generations could
// not be compared position by position with the configuration's.
bool changes_what_is_compared(const std::string& dotted) {
  for (const char* head : {"plan", "model", "name", "expect", "localize", "timeout_s", "debug"}) {
    const std::string h = head;
    if (dotted == h || dotted.rfind(h + ".", 0) == 0) return true;
  }
  return false;
}

CompareBlock parse_compare(const ordered_json& block, const std::string& path,
                           const std::vector<std::pair<std::string, ordered_json>>& axes,
                           const std::vector<Point>& cases) {
  const std::string valid =
      "valid: {\"reference\": {\"dotted.key\": value, ...}, \"across\": [\"dotted.key\", ...]}";
  if (!block.is_object()) throw InputError(path, "/compare", "expected an object; " + valid);
  for (const auto& [key, value] : block.items()) {
    if (std::find(kMatrixCompareKeys.begin(), kMatrixCompareKeys.end(), key) !=
        kMatrixCompareKeys.end())
      continue;
    std::string what = "unknown compare key '" + key + "'";
    if (auto near = nearest_key(key, kMatrixCompareKeys))
      what += " (did you mean '" + *near + "'?)";
    throw InputError(path, "/compare/" + json_pointer_token(key),
                     what + "; valid: keys reference, across");
  }
  if (!block.contains("reference") || !block["reference"].is_object() ||
      block["reference"].empty()) {
    throw InputError(path, "/compare/reference",
                     "expected a non-empty object of the reference's knobs; valid: e.g. "
                     "{\"parallel.tp\": 1, \"sequence_parallel.enabled\": false}");
  }
  if (!block.contains("across") || !block["across"].is_array() || block["across"].empty()) {
    throw InputError(path, "/compare/across",
                     "expected a non-empty array of dotted keys; valid: e.g. [\"parallel.tp\"]");
  }
  std::set<std::string> varying;  // keys an axis or a case sets
  for (const auto& axis : axes) varying.insert(axis.first);
  for (const Point& c : cases) {
    for (const Override& o : c.overrides) varying.insert(o.dotted_key);
  }
  CompareBlock out;
  for (size_t i = 0; i < block["across"].size(); ++i) {
    const std::string pointer = "/compare/across/" + std::to_string(i);
    const ordered_json& key = block["across"][i];
    if (!key.is_string()) {
      throw InputError(path, pointer, "expected a dotted key; valid: e.g. \"parallel.tp\"");
    }
    const std::string dotted = key.get<std::string>();
    check_dotted_key(dotted, path, pointer);
    if (changes_what_is_compared(dotted)) {
      throw InputError(path, pointer,
                       "'" + dotted +
                           "' cannot be compared across: the reference must run the same plan "
                           "(prompts, max_tokens, batch sizes) on the same model; valid: knobs of "
                           "the configuration, e.g. parallel.tp, kernels, engine.options.threads");
    }
    if (std::find(out.across.begin(), out.across.end(), dotted) != out.across.end()) {
      throw InputError(path, pointer, "'" + dotted + "' is listed twice; valid: each key once");
    }
    if (!block["reference"].contains(dotted)) {
      throw InputError(path, pointer,
                       "'" + dotted +
                           "' has no value in compare.reference; valid: give the reference a "
                           "value for every key it is compared across, e.g. \"reference\": {\"" +
                           dotted + "\": ...}");
    }
    out.across.push_back(dotted);
  }
  out.keys = out.across;
  for (const auto& [dotted, value] : block["reference"].items()) {
    const std::string pointer = "/compare/reference/" + json_pointer_token(dotted);
    check_dotted_key(dotted, path, pointer);
    if (changes_what_is_compared(dotted)) {
      throw InputError(path, pointer,
                       "the reference cannot set '" + dotted +
                           "': it must run the same plan (prompts, max_tokens, batch sizes) on "
                           "the same model as every configuration; valid: knobs of the "
                           "configuration, e.g. parallel.tp, kernels, engine.options.threads");
    }
    const bool in_across =
        std::find(out.across.begin(), out.across.end(), dotted) != out.across.end();
    if (!in_across && varying.count(dotted)) {
      throw InputError(path, pointer,
                       "reference knob '" + dotted +
                           "' varies over the matrix (an axis or a case sets it) but is not in "
                           "compare.across; valid: add it to across, or drop it from the "
                           "reference (an axis outside across groups the configurations, each "
                           "group against its own reference)");
    }
    if (!in_across) out.keys.push_back(dotted);
    out.reference.push_back({dotted, value, path, pointer});
  }
  return out;
}

// Builds the reference of one configuration (the configuration with the reference's knobs
// applied: axes outside `across` keep their values, so each such group has its own reference),
// once per distinct id, and checks that the two generate the same things.
void attach_reference(Scenario& scenario, const ordered_json& base, const Point& point,
                      const CompareBlock& compare, const std::string& path,
                      const std::string& base_pointer,
                      std::map<std::string, std::shared_ptr<const Scenario>>& references) {
  Point reference_point = point;
  for (const Override& o : compare.reference) reference_point.overrides.push_back(o);
  reference_point.label += std::string(reference_point.label.empty() ? "" : ", ") +
                           "as the reference of compare.reference";
  Scenario reference = build(base, reference_point, path, base_pointer);
  const nlohmann::json mine = scenario.to_json(), theirs = reference.to_json();
  for (const char* key : {"plan", "model"}) {
    if (mine.value(key, nlohmann::json()) != theirs.value(key, nlohmann::json())) {
      throw InputError(path, "/compare/reference",
                       std::string("the reference of [") + point.label + "] runs another " + key +
                           " than the configuration, so their generations cannot be compared; "
                           "valid: a reference that changes only configuration knobs");
    }
  }
  if (scenario.engine.kind != reference.engine.kind) {
    throw InputError(path, "/compare/reference",
                     "the reference of [" + point.label +
                         "] uses another engine kind; valid: the same engine for both");
  }
  const std::string id = reference.id();
  auto it = references.find(id);
  if (it == references.end()) {
    reference.compare_keys = compare.keys;
    auto shared = std::make_shared<Scenario>(std::move(reference));
    it = references.emplace(id, shared).first;
  }
  scenario.config_reference = it->second;
  scenario.compare_keys = compare.keys;
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
                       what + "; valid: keys $schema, name, base, axes, cases, compare");
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

  std::optional<CompareBlock> compare;
  if (is_matrix && doc.contains("compare"))
    compare = parse_compare(doc["compare"], path, axes, cases);

  size_t points_per_case = 1;
  for (const auto& axis : axes) {
    points_per_case *= axis.second.size();
    if (points_per_case * cases.size() > kMaxExpandedScenarios) {
      throw InputError(path, "/axes",
                       "the matrix expands to more than " + std::to_string(kMaxExpandedScenarios) +
                           " scenarios; valid: fewer axis values");
    }
  }

  std::vector<std::pair<std::string, std::string>> seen;              // id, label
  std::map<std::string, std::shared_ptr<const Scenario>> references;  // by id: each built once
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
      if (compare)
        attach_reference(scenario, base, point, *compare, path, base_pointer, references);
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
