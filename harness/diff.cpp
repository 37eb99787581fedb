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
                   size_t max_divergences) {
  const auto& kinds = comparison_kinds();
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
    throw std::invalid_argument(
        "compare: kind must be batch, repeat, fresh, cache or config, not \"" + kind + "\"");
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
  }
  std::sort(firsts.begin(), firsts.end(), [](const Divergence& x, const Divergence& y) {
    return x.step != y.step ? x.step < y.step : x.prompt < y.prompt;
  });
  if (firsts.size() > max_divergences) firsts.resize(max_divergences);
  c.first_divergences = std::move(firsts);
  return c;
}

std::string summarize(const Comparison& c) {
  std::string s;
  if (c.kind == "config") s = knob_change_text(c.knob_changes) + ": ";
  s += fmt::format("{}/{} logprobs differ, {}/{} greedy sequences changed", c.logprobs_differ,
                   c.logprobs_compared, c.sequences_diverged, c.sequences_compared);
  if (c.identical()) return s;
  s += fmt::format(", max |Δ| {:.3g}", c.max_abs_delta);
  if (c.max_ulp == std::numeric_limits<uint64_t>::max()) {
    s += ", NaN involved";
  } else {
    s += fmt::format(", max {} ulp", c.max_ulp);
  }
  return s;
}

Verdict decide_verdict(const std::vector<Comparison>& comparisons) {
  if (comparisons.empty()) {
    throw std::invalid_argument("decide_verdict: no comparisons; a plan must compare something");
  }
  bool batch_differs = false;
  bool config_differs = false;
  for (const Comparison& c : comparisons) {
    if (c.identical()) continue;
    if (c.kind == "repeat" || c.kind == "fresh") return Verdict::nondeterministic;
    if (c.kind == "batch" || c.kind == "cache") {
      batch_differs = true;
    } else if (c.kind == "config") {
      config_differs = true;
    } else {
      throw std::invalid_argument("decide_verdict: unknown comparison kind \"" + c.kind + "\"");
    }
  }
  if (batch_differs) return Verdict::batch_variant;
  return config_differs ? Verdict::config_variant : Verdict::invariant;
}

}  // namespace bih
