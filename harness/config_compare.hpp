// config_compare.hpp: a configuration's generations against its matrix's reference configuration.
//
// A matrix file with a "compare" block (spec/scenario_file.hpp) gives each configuration a
// reference: the same scenario with the reference's knobs applied. After both ran their own plans,
// the configuration's first bs=1 generation and its first batch generation are diffed bitwise
// against the reference's generations of the same labels (comparison kind "config"), which says
// whether changing TP, SP, graphs, prefix caching or kernels moved the bits, in the terms people
// use: "TP=4 vs TP=1: 1536/1536 logprobs differ, 12/64 greedy sequences changed".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/diff.hpp"
#include "harness/generation.hpp"
#include "spec/plan.hpp"
#include "spec/scenario.hpp"

namespace bih {

// What a reference's run left for its configurations: its verdict, and its generations by label.
struct ReferenceRun {
  std::string id;
  Verdict verdict = Verdict::error;
  std::string reason;
  std::map<std::string, Generation> generations;
};

// The scenario is the reference of its matrix (its config_reference is itself).
bool is_config_reference(const Scenario& s);
// The scenario is a configuration with another scenario as its reference.
bool needs_config_reference(const Scenario& s);

// The knobs (of s.compare_keys) whose resolved values differ between s and its reference, with
// both values as JSON text; a key one side leaves to the engine's default reads "null" there.
std::vector<Comparison::KnobChange> knob_changes(const Scenario& s, const Scenario& reference);

// The labels compared against the reference: the first batch size's generation ("bs=1") and the
// last batch size's first run ("bs=64"), once when they are the same.
std::vector<std::string> config_compared_labels(const Plan& plan);

// The "config" comparisons of s against its reference's run, one per config_compared_labels entry,
// a = the reference's generation (labelled "reference:bs=1"), b = this configuration's.
std::vector<Comparison> compare_with_reference(const Scenario& s, const Plan& plan,
                                               const std::map<std::string, Generation>& mine,
                                               const ReferenceRun& reference,
                                               size_t max_divergences);

// "reference:bs=1" -> "bs=1"; other labels unchanged.
std::string strip_reference_prefix(const std::string& label);
inline constexpr const char* kReferencePrefix = "reference:";

}  // namespace bih
