#include "spec/plan.hpp"

#include <filesystem>
#include <fstream>

#include "base/errors.hpp"
#include "base/json_file.hpp"
#include "base/mix64.hpp"

namespace bih {
namespace {

std::string label_for(int batch_size, int repeat, bool fresh) {
  std::string label = "bs=" + std::to_string(batch_size);
  if (repeat > 0) label += "#" + std::to_string(repeat + 1);
  if (fresh) label += "(fresh)";
  return label;
}

// splitmix64: a documented, portable stream so prompts are the same on every machine.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() { return mix64(state += 0x9e3779b97f4a7c15ull); }
  // Uniform in [0, n) (the modulo bias is irrelevant for n << 2^64).
  uint64_t below(uint64_t n) { return next() % n; }
};

}  // namespace

Plan make_plan(const PlanSpec& spec, bool prefix_caching, const CompareSpec& compare) {
  Plan plan;
  const int last = spec.batch_sizes.back();
  for (size_t i = 0; i + 1 < spec.batch_sizes.size(); ++i) {
    plan.in_process.push_back(
        {label_for(spec.batch_sizes[i], 0, false), spec.batch_sizes[i], 0, false, ""});
  }
  for (int r = 0; r < spec.repeats; ++r) {
    plan.in_process.push_back({label_for(last, r, false), last, r, false, ""});
  }
  const std::string reference = label_for(spec.batch_sizes.front(), 0, false);
  const std::string batch = label_for(last, 0, false);
  for (size_t i = 1; i < spec.batch_sizes.size(); ++i) {
    plan.comparisons.push_back({"batch", reference, label_for(spec.batch_sizes[i], 0, false)});
  }
  for (int r = 1; r < spec.repeats; ++r) {
    plan.comparisons.push_back({"repeat", batch, label_for(last, r, false)});
  }
  if (spec.fresh_process) {
    plan.fresh.push_back({label_for(last, 0, true), last, 0, true, ""});
    plan.comparisons.push_back({"fresh", batch, plan.fresh.back().label});
  }
  if (prefix_caching) {
    for (auto* list : {&plan.in_process, &plan.fresh}) {
      for (GenerationSpec& g : *list) g.cache = "cold";
    }
    // Right after the last cold run of the same batch: every full prompt block is cached.
    GenerationSpec warm{label_for(last, 0, false) + "(warm)", last, 0, false, "warm"};
    plan.in_process.push_back(warm);
    plan.comparisons.push_back({"cache", batch, warm.label});
  }
  if (compare.prefill) {
    const auto add_scoring = [&plan](const std::string& of, int batch_size) {
      plan.scorings.push_back({of + "(prefill)", of, batch_size});
      plan.comparisons.push_back({"prefill", of, plan.scorings.back().label});
    };
    add_scoring(reference, spec.batch_sizes.front());
    if (last != spec.batch_sizes.front()) add_scoring(batch, last);
  }
  return plan;
}

std::vector<std::vector<int32_t>> make_prompts(const PromptSpec& spec, int vocab_size,
                                               const std::string& scenario_file) {
  std::vector<std::vector<int32_t>> prompts;
  if (!spec.file.empty()) {
    std::filesystem::path path = spec.file;
    if (path.is_relative() && !scenario_file.empty()) {
      path = std::filesystem::path(scenario_file).parent_path() / path;
    }
    const nlohmann::json j = read_json_file(path.string());
    if (!j.is_array() || j.empty()) {
      throw InputError(path.string(), "", "expected a non-empty array of token-id arrays");
    }
    for (size_t i = 0; i < j.size(); ++i) {
      const std::string ptr = "/" + std::to_string(i);
      if (!j[i].is_array() || j[i].empty()) {
        throw InputError(path.string(), ptr, "expected a non-empty array of token ids");
      }
      std::vector<int32_t> prompt;
      for (size_t t = 0; t < j[i].size(); ++t) {
        const auto& v = j[i][t];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_size) {
          throw InputError(path.string(), ptr + "/" + std::to_string(t),
                           "token ids must be integers in [0, " + std::to_string(vocab_size) + ")");
        }
        prompt.push_back(v.get<int32_t>());
      }
      prompts.push_back(std::move(prompt));
    }
    return prompts;
  }
  SplitMix64 rng{spec.seed};
  for (int i = 0; i < spec.count; ++i) {
    const int len = spec.min_len + static_cast<int>(rng.below(spec.max_len - spec.min_len + 1));
    std::vector<int32_t> prompt(len);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng.below(vocab_size));
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

}  // namespace bih
