// config_compare.cpp: the knobs that differ from the reference, and the "config" comparisons.
#include "harness/config_compare.hpp"

#include "base/errors.hpp"
#include "spec/dotted_keys.hpp"

namespace bih {

bool is_config_reference(const Scenario& s) {
  return s.config_reference && s.config_reference->id() == s.id();
}

bool needs_config_reference(const Scenario& s) {
  return s.config_reference && s.config_reference->id() != s.id();
}

std::vector<Comparison::KnobChange> knob_changes(const Scenario& s, const Scenario& reference) {
  const nlohmann::json mine = s.to_json(), theirs = reference.to_json();
  std::vector<Comparison::KnobChange> changes;
  for (const std::string& key : s.compare_keys) {
    const nlohmann::json::json_pointer p(dotted_key_pointer(key));
    const nlohmann::json a = mine.contains(p) ? mine.at(p) : nlohmann::json();
    const nlohmann::json b = theirs.contains(p) ? theirs.at(p) : nlohmann::json();
    if (a != b) changes.push_back({key, a.dump(), b.dump()});
  }
  return changes;
}

std::vector<std::string> config_compared_labels(const Plan& plan) {
  std::vector<std::string> labels;
  if (plan.in_process.empty()) return labels;
  labels.push_back(plan.in_process.front().label);
  // The last batch size's first run: the last in-process generation that is neither a repeat nor
  // the warm-cache rerun.
  for (auto g = plan.in_process.rbegin(); g != plan.in_process.rend(); ++g) {
    if (g->repeat != 0 || g->cache == "warm") continue;
    if (g->label != labels.front()) labels.push_back(g->label);
    break;
  }
  return labels;
}

std::vector<Comparison> compare_with_reference(const Scenario& s, const Plan& plan,
                                               const std::map<std::string, Generation>& mine,
                                               const ReferenceRun& reference,
                                               size_t max_divergences) {
  std::vector<Comparison> out;
  const auto changes = knob_changes(s, *s.config_reference);
  for (const std::string& label : config_compared_labels(plan)) {
    const auto theirs = reference.generations.find(label);
    const auto ours = mine.find(label);
    if (theirs == reference.generations.end() || ours == mine.end()) {
      throw InfraError("config comparison: generation \"" + label + "\" is missing from " +
                       (ours == mine.end() ? "this configuration's" : "the reference's") + " run");
    }
    Generation a = theirs->second;
    a.label = kReferencePrefix + label;
    // Top-k and digests too where the scenario asks for them (the reference shares the compare
    // keys unless they are an axis compared across).
    Comparison c = compare(a, ours->second, "config", max_divergences, s.compare);
    c.reference_id = reference.id;
    c.knob_changes = changes;
    out.push_back(std::move(c));
  }
  return out;
}

std::string strip_reference_prefix(const std::string& label) {
  const std::string prefix = kReferencePrefix;
  return label.rfind(prefix, 0) == 0 ? label.substr(prefix.size()) : label;
}

}  // namespace bih
