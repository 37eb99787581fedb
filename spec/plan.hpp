// plan.hpp: which generations a scenario runs and which pairs of them are compared.
//
// With batch_sizes [1, 64], repeats 2 and a fresh process: "bs=1" (each prompt alone), "bs=64"
// (all prompts in one batch), "bs=64#2" (the batch again, same process) and "bs=64(fresh)" (the
// batch in a new process). Comparisons: batch ("bs=1" vs "bs=64"), repeat ("bs=64" vs "bs=64#2")
// and fresh ("bs=64" vs "bs=64(fresh)").
//
// Cache state is part of the plan. With prefix caching on, an engine that keeps its prefix cache
// across generate() calls (a long-lived server does) would run "bs=64" on KV that "bs=1" cached,
// while "bs=64(fresh)" starts cold: the fresh comparison would mix cache states. So with prefix
// caching every generation above is cold (the worker resets the engine's prefix cache before it),
// and one more generation, "bs=64(warm)", runs the batch again right after the last cold one,
// reusing every full prompt block that run cached. Comparison cache ("bs=64" vs "bs=64(warm)")
// says whether a prefix-cache hit moves the bits; it is never run-to-run nondeterminism.
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
  // "" (prefix caching off: no cache to speak of), "cold" (the prefix cache is emptied first) or
  // "warm" (the cache as the previous generation left it).
  std::string cache;
};

// compare.prefill: a generation scored again in one prefill (teacher forcing, Engine::score), in
// batches of that generation's batch size (so "bs=1" scores each sequence alone).
struct ScoringSpec {
  std::string label;  // "bs=1(prefill)"
  std::string of;     // the scored generation's label, "bs=1"
  int batch_size = 1;
};

struct ComparisonSpec {
  std::string kind;  // "batch" | "repeat" | "fresh" | "cache" | "prefill"
  std::string a;     // labels
  std::string b;
};

struct Plan {
  std::vector<GenerationSpec> in_process;  // run by one worker, in order
  std::vector<GenerationSpec> fresh;       // run by a second worker
  std::vector<ScoringSpec> scorings;  // run by the first worker right after the generation scored
  std::vector<ComparisonSpec> comparisons;
};

// `prefix_caching`: the scenario's prefix_caching.enabled (adds the cache states above).
// `compare.prefill`: the reference generation scored ("bs=1(prefill)", comparison prefill "bs=1"
// vs "bs=1(prefill)") and, when the last batch size differs, the batch one ("bs=64(prefill)").
Plan make_plan(const PlanSpec& spec, bool prefix_caching, const CompareSpec& compare = {});

// The prompts of a plan: read from prompts.file (resolved against the scenario file's folder), or
// synthetic: lengths uniform in [min_len, max_len], ids uniform in [0, vocab_size), from the seed.
std::vector<std::vector<int32_t>> make_prompts(const PromptSpec& spec, int vocab_size,
                                               const std::string& scenario_file);

}  // namespace bih
