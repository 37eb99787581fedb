// health.hpp: is what an engine returned the output of a working model at all?
//
// A model whose weights are all NaN is perfectly batch invariant: every token is 0 and every
// logprob is NaN, in every context, bit for bit. The diff alone would certify it. So every
// generation, from any engine, is checked before its comparisons count: values must be finite (a
// probability must also lie in [0, 1]), and the greedy output must not be degenerate in a way no
// real model is (every token of every sequence the same id, across all prompts). An unhealthy
// generation makes the scenario's verdict `error` with the problem as its reason; the report's
// `health` section keeps the counts and the first bad position of each generation.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/generation.hpp"

namespace bih {

struct GenerationHealth {
  std::string label;
  int64_t tokens = 0;        // (prompt, step) positions
  int64_t non_finite = 0;    // NaN or infinite values
  int64_t out_of_range = 0;  // finite probabilities outside [0, 1] (value "probability" only)
  std::optional<std::pair<int, int>> first_bad;  // (prompt, step) of the first bad value
  int64_t distinct_tokens = 0;                   // distinct token ids over all sequences
  bool degenerate = false;  // >= 2 sequences, >= 8 tokens, and every token the same id
};

struct Health {
  std::vector<GenerationHealth> generations;
  std::vector<std::string> problems;  // one line each; empty when healthy
  bool healthy() const { return problems.empty(); }
};

// Checks each generation; `value` is the engine's identity.value ("logprob" or "probability").
Health check_health(const std::vector<const Generation*>& generations, const std::string& value);

// {"healthy", "problems", "generations": [{label, tokens, non_finite, out_of_range, first_bad:
// {prompt, step} | null, distinct_tokens, degenerate}]}
nlohmann::json to_json(const Health& h);

}  // namespace bih
