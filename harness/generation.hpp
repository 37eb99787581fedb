// generation.hpp: one generation's output (every prompt's greedy tokens and their logprobs).
//
// A generation dump is what a worker hands back to the driver and what `bih diff A B` compares.
// Logprobs travel as their float32 bit patterns so that nothing is lost in decimal. A scoring dump
// (compare.prefill, "bs=1(prefill)") has the same shape: per generated position the prefill's
// argmax as the token and its logprob of the decoded token as the logprob.
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
  // compare.top_k / row_digest (docs/prefill-and-top-k.md); empty when not asked for or when the
  // engine did not report them. Otherwise one entry per generated token.
  std::vector<std::vector<int32_t>> top_k_ids;   // [max_tokens][k], value descending
  std::vector<std::vector<float>> top_k_values;  // [max_tokens][k], their logprobs
  std::vector<uint64_t> row_digests;             // [max_tokens]
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
  int solo_lanes = 1;                     // engines it ran on at once (plan.solo_lanes)
  std::string scores;                     // a scoring dump: the label of the generation scored
  std::vector<SequenceOutput> sequences;  // indexed by prompt
};

// A row digest as text: 16 lower-case hex digits (JSON numbers lose 64-bit integers in many
// readers); parse_digest reads exactly that form back, false for anything else.
std::string digest_hex(uint64_t digest);
bool parse_digest(const std::string& text, uint64_t& out);

nlohmann::json to_json(const Generation& g);
Generation generation_from_json(const nlohmann::json& j, const std::string& file);

}  // namespace bih
