// engine.hpp: the seam every engine under test sits behind.
//
// The plan, diff, verdicts, reports, matrix, gate and bisect never know which engine ran: they see
// a TestedEngine that turns one batch of token-id prompts into greedy tokens and the value the
// engine reports for each sampled token, plus who it is (identity) and what else it can do
// (capabilities). bih's own Qwen3 engine (bih_engine.hpp) and adapters speaking the engine protocol
// (command_engine.hpp) are implementations; registry.hpp makes the one a scenario names.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/engine.hpp"

namespace bih {

struct EngineIdentity {
  std::string kind;     // "bih" | "command"
  std::string name;     // "bih", "llama.cpp", "transformers", ...
  std::string version;  // as the engine reports it
  // What each sequence's values are for the sampled token: "logprob" (natural log, fp32) or
  // "probability"; comparisons are always within one engine.
  std::string value = "logprob";
  nlohmann::json settings = nlohmann::json::object();  // what the engine actually applied
  nlohmann::json details = nlohmann::json::object();   // backend, communicator, command line
};

struct EngineCapabilities {
  bool traceable = false;   // bih explain can re-run a token with every op captured
  bool restartable = true;  // a fresh process gives a cold engine (the fresh-process comparison)
  bool step_stats = false;  // generate() fills GenerateStats
};

// Progress text for the run's progress line ("bs=64: step 5, 3/64 sequences done").
using ProgressFn = std::function<void(const std::string&)>;

class TestedEngine {
 public:
  virtual ~TestedEngine() = default;
  virtual const EngineIdentity& identity() const = 0;
  virtual EngineCapabilities capabilities() const = 0;
  // Token ids of prompts must lie in 0..vocab_size()-1.
  virtual int vocab_size() const = 0;
  // The model's identity as this engine loaded it (a digest of the weights): seconds at scale,
  // so asked for once, by the process that writes the results.
  virtual std::string model_hash() = 0;
  // One batch: every prompt in flight together (prompts.size() is the batch size). Returns, per
  // prompt, max_tokens greedy tokens and the values. Throws InfraError when the engine fails.
  virtual std::vector<SequenceResult> generate(const std::vector<std::vector<int32_t>>& prompts,
                                               int max_tokens, GenerateStats* stats,
                                               const ProgressFn& progress) = 0;
  // Empties the engine's prefix cache (KV kept across generate() calls), so that the next
  // generation runs cold, as a fresh process would. Returns false when the engine cannot: the
  // worker then declines a prefix-caching scenario rather than compare mixed cache states.
  virtual bool reset_prefix_cache() { return false; }

  // compare.top_k / compare.row_digest (models/row_extras.hpp): what later generate() and score()
  // calls add per step. An engine that cannot leaves those fields of its results empty, and the
  // comparisons then say that part was not compared (never a fake equality).
  virtual void set_row_extras(const RowExtras& /*extras*/) {}
  // compare.prefill: why this engine cannot score sequences in one prefill (Engine::score's
  // contract); empty when it can.
  virtual std::string score_unsupported_reason() const {
    return "engine " + identity().name + " cannot score a sequence in one prefill";
  }
  // Scores every request (prompt + forced tokens) in one prefill; requests.size() is the batch.
  // Per forced token: the prefill's argmax, the forced token's value, extras. Only called when
  // score_unsupported_reason() is empty. Throws InfraError when the engine fails.
  virtual std::vector<SequenceResult> score(const std::vector<ScoreRequest>& /*requests*/) {
    throw std::logic_error(score_unsupported_reason());
  }

  // Stops the engine (a command engine asks its adapter to exit); safe to call twice.
  virtual void shutdown() {}
};

}  // namespace bih
