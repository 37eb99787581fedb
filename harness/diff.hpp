// diff.hpp: the bitwise diff of two generations, and the verdict it implies.
//
// Two generations of the same prompts are compared position by position (every prompt, every
// step): token ids by value, logprobs by float32 bit pattern, never with a tolerance. The counts
// are the issue's own terms ("1522/1536 logprobs differ, 11/64 greedy sequences changed"); the
// magnitudes (max |delta|, max ULP distance) say how far apart the bits moved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/generation.hpp"
#include "spec/scenario.hpp"
#include "spec/verdict.hpp"

namespace bih {

// Number of representable float32 values between a and b, through the ordered-integer mapping
// (sign-magnitude bits -> a line where consecutive floats are consecutive integers). Properties:
//   ulp_distance(1.0f, nextafter(1.0f, 2.0f)) == 1; +0 and -0 are one point, distance 0;
//   across zero the distances add (smallest denormal to its negative == 2); infinities are the
//   ends of the line (FLT_MAX to +inf == 1).
// NaN: identical bit patterns give 0; otherwise any NaN operand gives UINT64_MAX ("unmeasurably
// far"), so a NaN can never hide behind a small distance.
uint64_t ulp_distance(float a, float b);

// "0xbf8a1c00": eight lower-case hex digits of a float32 bit pattern.
std::string hex_bits(uint32_t bits);

// The first position where one prompt's outputs differ between the two generations.
struct Divergence {
  int prompt = 0;  // index into the generations' sequences
  int step = 0;    // generated-token index, 0-based
  int32_t token_a = 0, token_b = 0;
  uint32_t logprob_a_bits = 0, logprob_b_bits = 0;
  uint64_t ulp = 0;  // ulp_distance of the two logprobs
};

struct Comparison {
  // "batch" (bs=1 vs bs=N) | "repeat" (same process) | "fresh" (new process) | "cache" (the batch
  // cold vs the batch again on a warm prefix cache) | "config" (a generation vs the same-label
  // generation of the matrix's reference configuration, harness/config_compare.hpp) | "prefill"
  // (a generation vs its scoring in one prefill: tokens are decoded vs the prefill's argmax,
  // logprobs the decoded token's in both)
  std::string kind;
  std::string a_label, b_label;
  int64_t tokens_compared = 0;     // positions (prompt, step) compared
  int64_t tokens_differ = 0;       // positions whose token ids differ
  int64_t logprobs_compared = 0;   // == tokens_compared
  int64_t logprobs_differ = 0;     // positions whose logprob bit patterns differ
  int64_t sequences_compared = 0;  // prompts
  int64_t sequences_diverged = 0;  // prompts with any token difference (greedy sequence changed)
  double max_abs_delta = 0;  // max |a - b| over logprobs; NaN pairs skipped (they show in max_ulp)
  uint64_t max_ulp = 0;      // max ulp_distance over logprobs
  // For each prompt with any difference (token or logprob bits) its first differing step, sorted
  // by (step, prompt), at most `max_divergences` of them.
  std::vector<Divergence> first_divergences;
  // kind "config" only: the reference configuration's id and the knobs in which this configuration
  // differs from it, (dotted key, this value, the reference's value) as JSON text.
  std::string reference_id;
  struct KnobChange {
    std::string key, value, reference_value;
  };
  std::vector<KnobChange> knob_changes;
  // compare.top_k / row_digest: positions whose top-k lists (ids and value bits) or row digests
  // were compared on both sides, and those that differ. 0 compared: not asked, or a side lacks them
  // (then `notes` says which).
  int64_t top_k_compared = 0;
  int64_t top_k_differ = 0;
  int64_t row_digests_compared = 0;
  int64_t row_digests_differ = 0;
  std::vector<std::string> notes;  // what was asked for but not compared, and why
  // Non-empty: the comparison could not run (an engine that cannot score, for prefill), with the
  // reason; its counts are all 0 and the verdict ignores it.
  std::string unsupported;

  bool identical() const {
    return tokens_differ == 0 && logprobs_differ == 0 && top_k_differ == 0 &&
           row_digests_differ == 0;
  }
};

// The valid comparison kinds.
inline const std::vector<std::string>& comparison_kinds() {
  static const std::vector<std::string> kinds{"batch", "repeat", "fresh",
                                              "cache", "config", "prefill"};
  return kinds;
}

// Diffs a against b. Both must hold the same prompts (same count, same prompt token ids) and the
// same number of generated tokens per prompt, else InputError naming both labels and the JSON
// pointer of the first mismatch. `kind` must be one of comparison_kinds() (std::invalid_argument
// otherwise: that is a programming error, not user input).
// `asked`: the scenario's compare keys; top-k and digests are compared where both sides have them,
// and a note is added when they were asked for and a side lacks them.
Comparison compare(const Generation& a, const Generation& b, std::string kind,
                   size_t max_divergences = 16, const CompareSpec& asked = {});

// A comparison that could not run: `kind`, the labels and why (Comparison::unsupported).
Comparison unsupported_comparison(std::string kind, std::string a_label, std::string b_label,
                                  std::string why);

// One line: "1522/1536 logprobs differ, 11/64 greedy sequences changed, max |Δ| 0.031, max 4011
// ulp". The magnitudes are left out when nothing differs. A "config" comparison starts with the
// knobs that differ from the reference: "TP=4 vs TP=1: 1536/1536 logprobs differ, ...". Top-k and
// digest counts follow when compared ("; top-k 3/24 differ; row digests 5/24 differ"); an
// unsupported one reads "not compared: WHY".
std::string summarize(const Comparison& c);

// "TP=4, SP=on vs TP=1, SP=off": the knobs of a config comparison, this side then the reference's
// (common knobs by their short names, on/off for booleans, others as dotted.key=value).
std::string knob_change_text(const std::vector<Comparison::KnobChange>& changes);

// invariant | batch_variant | nondeterministic from the comparisons alone: nondeterministic if any
// "repeat" or "fresh" comparison differs (run to run beats batch size: a batch difference means
// nothing when the same batch cannot reproduce itself); else batch_variant if any "batch"
// comparison differs, or a "cache" one (a prefix-cache hit moved the bits: the output depends on
// what other requests ran before, which is batch dependence, not run-to-run noise); else
// prefill_variant if any "prefill" comparison differs (decode is reproducible and batch
// invariant, but scoring disagrees with it: the configuration's own variance, reported before the
// reference's); else config_variant if any "config" comparison differs (against a reference it
// cannot reproduce itself, a config difference means little); else invariant. Unsupported
// comparisons are skipped; when every one is, the verdict is unsupported. error comes from the
// driver, not from here.
// An empty list throws std::invalid_argument: a plan with nothing to compare proves nothing.
Verdict decide_verdict(const std::vector<Comparison>& comparisons);

}  // namespace bih
