// diff.cpp: positionwise bitwise comparison of two generations.
#include "harness/diff.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "base/errors.hpp"

namespace bih {
namespace {

// Maps a float's bits onto a line where adjacent floats are adjacent integers: non-negative floats
// keep their magnitude bits, negative ones are mirrored below zero. +0 and -0 both land on 0.
int64_t ordered_int(uint32_t bits) {
  const int64_t magnitude = bits & 0x7fffffffu;
  return (bits & 0x80000000u) ? -magnitude : magnitude;
}

std::string pair_name(const Generation& a, const Generation& b) {
  return "comparison of \"" + a.label + "\" vs \"" + b.label + "\"";
}

}  // namespace

std::string knob_change_text(const std::vector<Comparison::KnobChange>& changes) {
  // The names people use for the common knobs; any other knob as key=value.
  static const std::vector<std::pair<std::string, std::string>> kShort{
      {"parallel.tp", "TP"},
      {"sequence_parallel.enabled", "SP"},
      {"cudagraph.mode", "graph"},
      {"prefix_caching.enabled", "prefix"},
      {"chunked_prefill.max_tokens", "chunked"}};
  auto one = [](const std::string& key, std::string value) {
    if (value == "true") value = "on";
    if (value == "false") value = "off";
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    for (const auto& [dotted, name] : kShort) {
      if (dotted == key) return name + "=" + value;
    }
    return key + "=" + value;
  };
  if (changes.empty()) return "same knobs as the reference";
  std::string mine, theirs;
  for (const auto& k : changes) {
    mine += (mine.empty() ? "" : ", ") + one(k.key, k.value);
    theirs += (theirs.empty() ? "" : ", ") + one(k.key, k.reference_value);
  }
  return mine + " vs " + theirs;
}

uint64_t ulp_distance(float a, float b) {
  const auto bits_a = std::bit_cast<uint32_t>(a);
  const auto bits_b = std::bit_cast<uint32_t>(b);
  if (bits_a == bits_b) return 0;
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<uint64_t>::max();
  const int64_t delta = ordered_int(bits_a) - ordered_int(bits_b);
  return static_cast<uint64_t>(delta < 0 ? -delta : delta);
}

std::string hex_bits(uint32_t bits) { return fmt::format("0x{:08x}", bits); }

Comparison compare(const Generation& a, const Generation& b, std::string kind,
                   size_t max_divergences, const CompareSpec& asked) {
  const auto& kinds = comparison_kinds();
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
    throw std::invalid_argument(
        "compare: kind must be batch, repeat, fresh, cache, config or prefill, not \"" + kind +
        "\"");
  }
  if (a.sequences.size() != b.sequences.size()) {
    throw InputError(pair_name(a, b), "/sequences",
                     fmt::format("both generations must hold the same prompts; \"{}\" has {}, "
                                 "\"{}\" has {}",
                                 a.label, a.sequences.size(), b.label, b.sequences.size()));
  }
  Comparison c;
  c.kind = std::move(kind);
  c.a_label = a.label;
  c.b_label = b.label;
  std::vector<Divergence> firsts;
  int64_t top_k_missing = 0, digests_missing = 0;
  std::string top_k_lacking, digests_lacking;  // a label that lacked them
  for (size_t p = 0; p < a.sequences.size(); ++p) {
    const SequenceOutput& sa = a.sequences[p];
    const SequenceOutput& sb = b.sequences[p];
    const std::string pointer = "/sequences/" + std::to_string(p);
    if (sa.prompt != sb.prompt) {
      throw InputError(pair_name(a, b), pointer + "/prompt",
                       "prompt " + std::to_string(p) +
                           " has different token ids in the two generations; only outputs of the "
                           "same prompts can be compared");
    }
    if (sa.tokens.size() != sb.tokens.size()) {
      throw InputError(pair_name(a, b), pointer + "/tokens",
                       fmt::format("prompt {} generated {} tokens in \"{}\" but {} in \"{}\"; both "
                                   "must run the same max_tokens",
                                   p, sa.tokens.size(), a.label, sb.tokens.size(), b.label));
    }
    if (sa.logprobs.size() != sa.tokens.size() || sb.logprobs.size() != sb.tokens.size()) {
      throw InputError(pair_name(a, b), pointer + "/logprob_bits",
                       "every generated token needs exactly one logprob");
    }
    ++c.sequences_compared;
    bool token_changed = false;
    bool recorded_first = false;
    for (size_t step = 0; step < sa.tokens.size(); ++step) {
      const bool token_differs = sa.tokens[step] != sb.tokens[step];
      const auto bits_a = std::bit_cast<uint32_t>(sa.logprobs[step]);
      const auto bits_b = std::bit_cast<uint32_t>(sb.logprobs[step]);
      const bool logprob_differs = bits_a != bits_b;
      ++c.tokens_compared;
      ++c.logprobs_compared;
      c.tokens_differ += token_differs;
      c.logprobs_differ += logprob_differs;
      token_changed |= token_differs;
      const uint64_t ulp = ulp_distance(sa.logprobs[step], sb.logprobs[step]);
      c.max_ulp = std::max(c.max_ulp, ulp);
      const double delta = std::fabs(static_cast<double>(sa.logprobs[step]) -
                                     static_cast<double>(sb.logprobs[step]));
      if (!std::isnan(delta)) c.max_abs_delta = std::max(c.max_abs_delta, delta);
      if ((token_differs || logprob_differs) && !recorded_first) {
        recorded_first = true;
        firsts.push_back({static_cast<int>(p), static_cast<int>(step), sa.tokens[step],
                          sb.tokens[step], bits_a, bits_b, ulp});
      }
    }
    c.sequences_diverged += token_changed;
    // Top-k and digests: compared only where both sides carry one entry per token.
    const size_t n = sa.tokens.size();
    const bool top_a = sa.top_k_ids.size() == n && sa.top_k_values.size() == n;
    const bool top_b = sb.top_k_ids.size() == n && sb.top_k_values.size() == n;
    if (top_a && top_b) {
      for (size_t step = 0; step < n; ++step) {
        bool same = sa.top_k_ids[step] == sb.top_k_ids[step] &&
                    sa.top_k_values[step].size() == sb.top_k_values[step].size();
        for (size_t k = 0; same && k < sa.top_k_values[step].size(); ++k) {
          same = std::bit_cast<uint32_t>(sa.top_k_values[step][k]) ==
                 std::bit_cast<uint32_t>(sb.top_k_values[step][k]);
        }
        ++c.top_k_compared;
        c.top_k_differ += !same;
      }
    } else if (asked.top_k > 0 && n > 0) {
      top_k_missing += static_cast<int64_t>(n);
      if (top_k_lacking.empty()) top_k_lacking = top_a ? b.label : a.label;
    }
    const bool digest_a = sa.row_digests.size() == n;
    const bool digest_b = sb.row_digests.size() == n;
    if (digest_a && digest_b && n > 0) {
      for (size_t step = 0; step < n; ++step) {
        ++c.row_digests_compared;
        c.row_digests_differ += sa.row_digests[step] != sb.row_digests[step];
      }
    } else if (asked.row_digest && n > 0) {
      digests_missing += static_cast<int64_t>(n);
      if (digests_lacking.empty()) digests_lacking = digest_a ? b.label : a.label;
    }
  }
  if (top_k_missing > 0) {
    c.notes.push_back(
        fmt::format("top_k: {} position(s) not compared: \"{}\" has no top-k (the "
                    "engine did not report it)",
                    top_k_missing, top_k_lacking));
  }
  if (digests_missing > 0) {
    c.notes.push_back(
        fmt::format("row_digest: {} position(s) not compared: \"{}\" has no row "
                    "digests (the engine did not report them)",
                    digests_missing, digests_lacking));
  }
  std::sort(firsts.begin(), firsts.end(), [](const Divergence& x, const Divergence& y) {
    return x.step != y.step ? x.step < y.step : x.prompt < y.prompt;
  });
  if (firsts.size() > max_divergences) firsts.resize(max_divergences);
  c.first_divergences = std::move(firsts);
  return c;
}

Comparison unsupported_comparison(std::string kind, std::string a_label, std::string b_label,
                                  std::string why) {
  Comparison c;
  c.kind = std::move(kind);
  c.a_label = std::move(a_label);
  c.b_label = std::move(b_label);
  c.unsupported = why.empty() ? std::string("the engine cannot run it") : std::move(why);
  return c;
}

std::string summarize(const Comparison& c) {
  if (!c.unsupported.empty()) return "not compared: " + c.unsupported;
  std::string s;
  if (c.kind == "config") s = knob_change_text(c.knob_changes) + ": ";
  s += fmt::format("{}/{} logprobs differ, {}/{} greedy sequences changed", c.logprobs_differ,
                   c.logprobs_compared, c.sequences_diverged, c.sequences_compared);
  if (c.tokens_differ != 0 || c.logprobs_differ != 0) {
    s += fmt::format(", max |Δ| {:.3g}", c.max_abs_delta);
    if (c.max_ulp == std::numeric_limits<uint64_t>::max()) {
      s += ", NaN involved";
    } else {
      s += fmt::format(", max {} ulp", c.max_ulp);
    }
  }
  // Only what was compared: reports and tables of plain scenarios read as before.
  if (c.top_k_compared > 0) {
    s += fmt::format("; top-k {}/{} differ", c.top_k_differ, c.top_k_compared);
  }
  if (c.row_digests_compared > 0) {
    s += fmt::format("; row digests {}/{} differ", c.row_digests_differ, c.row_digests_compared);
  }
  return s;
}

Verdict decide_verdict(const std::vector<Comparison>& comparisons) {
  if (comparisons.empty()) {
    throw std::invalid_argument("decide_verdict: no comparisons; a plan must compare something");
  }
  bool batch_differs = false;
  bool config_differs = false;
  bool prefill_differs = false;
  bool any_ran = false;
  for (const Comparison& c : comparisons) {
    if (!c.unsupported.empty()) continue;  // it says why; the others decide
    any_ran = true;
    if (c.identical()) continue;
    if (c.kind == "repeat" || c.kind == "fresh") return Verdict::nondeterministic;
    if (c.kind == "batch" || c.kind == "cache") {
      batch_differs = true;
    } else if (c.kind == "config") {
      config_differs = true;
    } else if (c.kind == "prefill") {
      prefill_differs = true;
    } else {
      throw std::invalid_argument("decide_verdict: unknown comparison kind \"" + c.kind + "\"");
    }
  }
  if (!any_ran) return Verdict::unsupported;
  if (batch_differs) return Verdict::batch_variant;
  if (prefill_differs) return Verdict::prefill_variant;
  return config_differs ? Verdict::config_variant : Verdict::invariant;
}

}  // namespace bih
