// health.cpp: the sanity checks every generation passes before its comparisons count.
#include "harness/health.hpp"

#include <fmt/format.h>

#include <cmath>
#include <set>

namespace bih {
namespace {

// Below this much output a run of one token id can be chance (a short test plan on a tiny
// model); a real model over this many tokens of different prompts never emits one id only.
constexpr int64_t kMinTokensForDegenerate = 8;

}  // namespace

Health check_health(const std::vector<const Generation*>& generations, const std::string& value) {
  Health h;
  const bool probability = value == "probability";
  const char* what = probability ? "values (probabilities)" : "logprobs";
  for (const Generation* g : generations) {
    GenerationHealth gh;
    gh.label = g->label;
    std::set<int32_t> ids;
    for (size_t p = 0; p < g->sequences.size(); ++p) {
      const SequenceOutput& s = g->sequences[p];
      ids.insert(s.tokens.begin(), s.tokens.end());
      gh.tokens += static_cast<int64_t>(s.tokens.size());
      for (size_t step = 0; step < s.logprobs.size(); ++step) {
        const float v = s.logprobs[step];
        const bool non_finite = !std::isfinite(v);
        const bool out_of_range = probability && !non_finite && (v < 0.0f || v > 1.0f);
        gh.non_finite += non_finite;
        gh.out_of_range += out_of_range;
        if ((non_finite || out_of_range) && !gh.first_bad) {
          gh.first_bad = {static_cast<int>(p), static_cast<int>(step)};
        }
      }
    }
    gh.distinct_tokens = static_cast<int64_t>(ids.size());
    gh.degenerate =
        g->sequences.size() >= 2 && gh.tokens >= kMinTokensForDegenerate && gh.distinct_tokens == 1;
    const std::string first = gh.first_bad ? fmt::format(" (first: prompt {} step {})",
                                                         gh.first_bad->first, gh.first_bad->second)
                                           : "";
    if (gh.non_finite > 0) {
      h.problems.push_back(fmt::format("{}: non-finite {} in {} of {} tokens{}", gh.label, what,
                                       gh.non_finite, gh.tokens, first));
    }
    if (gh.out_of_range > 0) {
      h.problems.push_back(fmt::format("{}: probabilities outside [0, 1] in {} of {} tokens{}",
                                       gh.label, gh.out_of_range, gh.tokens, first));
    }
    if (gh.degenerate) {
      h.problems.push_back(fmt::format(
          "{}: degenerate greedy output: all {} tokens of all {} sequences are token {}", gh.label,
          gh.tokens, g->sequences.size(), *ids.begin()));
    }
    h.generations.push_back(std::move(gh));
  }
  return h;
}

nlohmann::json to_json(const Health& h) {
  nlohmann::json gens = nlohmann::json::array();
  for (const GenerationHealth& g : h.generations) {
    gens.push_back({{"label", g.label},
                    {"tokens", g.tokens},
                    {"non_finite", g.non_finite},
                    {"out_of_range", g.out_of_range},
                    {"first_bad", g.first_bad ? nlohmann::json{{"prompt", g.first_bad->first},
                                                               {"step", g.first_bad->second}}
                                              : nlohmann::json()},
                    {"distinct_tokens", g.distinct_tokens},
                    {"degenerate", g.degenerate}});
  }
  return {{"healthy", h.healthy()}, {"problems", h.problems}, {"generations", std::move(gens)}};
}

}  // namespace bih
