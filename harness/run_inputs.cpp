// run_inputs.cpp: checks on a run's inputs taken as a whole (run_inputs.hpp).
#include "harness/run_inputs.hpp"

#include <map>
#include <set>

#include "base/errors.hpp"
#include "models/weights.hpp"

namespace bih {

void check_unique_ids(const std::vector<Scenario>& scenarios) {
  std::map<std::string, const Scenario*> first;
  for (const Scenario& s : scenarios) {
    auto [it, inserted] = first.emplace(s.id(), &s);
    if (inserted) continue;
    const std::string& a = it->second->source_file;
    const std::string& b = s.source_file;
    const std::string where =
        a == b ? "the file " + a + " is given twice" : "both " + a + " and " + b + " define it";
    throw InputError(b, "",
                     "scenario " + s.id() + " appears twice (" + where +
                         "); its second report would overwrite the first; valid: each scenario "
                         "id once per run (drop one file, or tell them apart with --only or a "
                         "different knob)");
  }
}

void check_checkpoints(const std::vector<Scenario>& scenarios) {
  std::set<std::string> checked;
  for (const Scenario& s : scenarios) {
    if (s.model.path.empty() || !checked.insert(s.model.path).second) continue;
    try {
      validate_checkpoint(s.model.path);
    } catch (const std::exception& e) {
      throw InputError(s.source_file, "/model/path",
                       "bad checkpoint: " + std::string(e.what()) +
                           "; valid: a checkpoint whose safetensors match its config.json "
                           "(re-download or re-export it, e.g. bih export --model SRC --format "
                           "hf --out DIR)");
    }
  }
}

}  // namespace bih
