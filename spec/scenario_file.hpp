// scenario_file.hpp: from a scenario or matrix file on disk to the list of scenarios to run.
//
// A file holds either one scenario object, or a matrix: {"name", "base": {...}, "axes":
// {"dotted.key": [values...]}, "cases": [{"dotted.key": value, ...}], "compare": {"reference":
// {"dotted.key": value, ...}, "across": ["dotted.key", ...]}}. Expansion, --set overrides
// and --only filters live here; the meaning of each key lives in scenario.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/json_file.hpp"
#include "spec/scenario.hpp"

namespace bih {

struct ScenarioSet {
  std::string name;  // the file's "name", else its file name without extension
  std::vector<Scenario> scenarios;
};

// Loads a scenario or matrix file. A matrix expands, for each case (one empty case when there are
// none), to every point of the cartesian product of its axes (file order, last axis fastest):
// base + case values + axis values. Each `set_overrides` entry, "dotted.key=value" (value parsed
// as JSON when it parses, else taken as a string), then applies to every scenario. Setting
// model.path drops model.preset and vice versa, since they are alternatives. Throws InputError
// (unknown or misspelt keys, bad values, duplicate ids) naming the file and the JSON pointer of
// the value at fault.
// With a "compare" block each scenario gets its Scenario::config_reference: the scenario with the
// reference's knobs applied (one shared object per distinct reference id). Every across key needs
// a reference value; a reference knob that an axis or case varies must be in across; neither may
// touch plan, model or other keys that change what is generated (docs/config-comparison.md).
ScenarioSet load_scenarios(const std::string& path,
                           const std::vector<std::string>& set_overrides = {});

// Keeps the scenarios whose id matches any filter: a filter containing '*' or '?' is a glob over
// the whole id (fnmatch), any other filter a substring. An empty `only` keeps all. Order is kept.
std::vector<Scenario> filter_scenarios(std::vector<Scenario> scenarios,
                                       const std::vector<std::string>& only);

}  // namespace bih
