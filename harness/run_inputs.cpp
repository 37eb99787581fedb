// run_inputs.cpp: duplicate ids across files, the worker's last words (run_inputs.hpp).
#include "harness/run_inputs.hpp"

#include <map>
#include <set>
#include <sstream>

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

std::string last_words(const std::string& tail) {
  std::istringstream in(tail);
  // The worker's own message starts "bih" ("bih: error: ...", "bih worker: ..."); lines after it
  // quote what it quotes (an adapter's stderr), so its first line is the one to show.
  std::string line, last, last_bih;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
    if (line.rfind("bih", 0) == 0) last_bih = line;
  }
  if (!last_bih.empty()) last = last_bih;
  constexpr size_t kWidth = 400;
  if (last.size() > kWidth) last = last.substr(0, kWidth - 3) + "...";
  return last;
}

}  // namespace bih
