// plan.hpp: which generations a scenario runs and which pairs of them are compared.
//
// With batch_sizes [1, 64], repeats 2 and a fresh process: "bs=1" (each prompt alone), "bs=64"
// (all prompts in one batch), "bs=64#2" (the batch again, same process) and "bs=64(fresh)" (the
// batch in a new process). Comparisons: batch ("bs=1" vs "bs=64"), repeat ("bs=64" vs "bs=64#2")
// and fresh ("bs=64" vs "bs=64(fresh)").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/scenario.hpp"

namespace bih {

struct GenerationSpec {
  std::string label;
  int batch_size = 1;
  int repeat = 0;
  bool fresh_process = false;
};

struct ComparisonSpec {
  std::string kind;  // "batch" | "repeat" | "fresh"
  std::string a;     // labels
  std::string b;
};

struct Plan {
  std::vector<GenerationSpec> in_process;  // run by one worker, in order
  std::vector<GenerationSpec> fresh;       // run by a second worker
  std::vector<ComparisonSpec> comparisons;
};

Plan make_plan(const PlanSpec& spec);

// The prompts of a plan: read from prompts.file (resolved against the scenario file's folder), or
// synthetic: lengths uniform in [min_len, max_len], ids uniform in [0, vocab_size), from the seed.
std::vector<std::vector<int32_t>> make_prompts(const PromptSpec& spec, int vocab_size,
                                               const std::string& scenario_file);

}  // namespace bih
