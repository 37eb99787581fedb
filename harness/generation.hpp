// generation.hpp: one generation's output (every prompt's greedy tokens and their logprobs).
//
// A generation dump is what a worker hands back to the driver and what `bih diff A B` compares.
// Logprobs travel as their float32 bit patterns so that nothing is lost in decimal.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bih {

struct SequenceOutput {
  std::vector<int32_t> prompt;  // [prompt_len] token ids
  std::vector<int32_t> tokens;  // [max_tokens] greedy token ids
  std::vector<float> logprobs;  // [max_tokens] log-softmax of the sampled token, fp32
};

struct Generation {
  std::string label;  // "bs=1", "bs=64", "bs=64#2", "bs=64(fresh)"
  int batch_size = 0;
  int repeat = 0;  // 0 for the first run of this batch size
  bool fresh_process = false;
  std::string scenario_id;
  double wall_s = 0;                      // generation wall time
  int64_t steps = 0;                      // engine steps (forward passes)
  int64_t tokens_processed = 0;           // rows through the model, padding included
  int64_t max_in_flight = 0;              // HTTP engine: most requests at once; 0: none
  std::vector<SequenceOutput> sequences;  // indexed by prompt
};

nlohmann::json to_json(const Generation& g);
Generation generation_from_json(const nlohmann::json& j, const std::string& file);

}  // namespace bih
