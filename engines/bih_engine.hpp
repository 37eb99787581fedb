// bih_engine.hpp: bih's own Qwen3 engine as an engine under test (engine.kind "bih"): a scenario's
// model, communicators and engine, built the same way everywhere (the worker's generations and
// explain's re-runs must see the same engine).
//
// The CPU backend is built here. The CUDA backend lives in the CUDA leaf (engines/cuda/), which
// registers itself in the registry at startup; a build or machine without it answers
// `unsupported` for backend cuda, never a silent CPU run.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engines/engine.hpp"
#include "models/engine.hpp"
#include "models/weights.hpp"
#include "spec/engine_options.hpp"
#include "spec/scenario.hpp"

namespace bih {

// Synthetic weights for a preset, or the checkpoint at model.path, on the host. Throws InputError.
std::shared_ptr<const ModelWeights> build_model(const Scenario& s);

// The preset's or the checkpoint's config.json, without building the weights. Throws InputError.
ModelConfig model_config(const Scenario& s);

// Which TP rank this process is, for ranks: nccl (one process per GPU); rank -1: every rank of
// the scenario runs in this process (emulated ranks).
struct RankAssignment {
  int rank = -1;
  std::string nccl_unique_id;  // hex, from the driver
};

// An engine and everything its backend points into. `resources` is declared first so that it
// outlives the engine.
struct EngineBundle {
  std::shared_ptr<void> resources;  // communicators, device weights
  std::unique_ptr<Engine> engine;
  ModelConfig config;
  std::string communicator;  // "emulated(ar=tree,rs=ring,ag=ring)", "nccl(...)"
  std::string backend;       // "cpu", "cuda(NVIDIA H200, device 0)"
  // Digest of the weights (weights_hash's): computed on demand, it can take seconds at scale.
  std::function<std::string()> weights_hash;
};

// host_weights: reuse weights already built on the host (else built as needed). Backend auto
// runs cuda where the CUDA backend is registered and sees a GPU, else cpu.
EngineBundle make_engine(const Scenario& s,
                         std::shared_ptr<const ModelWeights> host_weights = nullptr,
                         const RankAssignment& assignment = {});

// The backend a scenario runs on here: cpu or cuda (auto resolved).
Backend resolved_backend(const Scenario& s);

// Why this build or machine cannot run the scenario (backend cuda without the CUDA backend or a
// GPU; nccl ranks without NCCL or with fewer GPUs than tp); empty when it can.
std::string bih_unsupported_reason(const Scenario& s);

// The GPUs the CUDA leaf sees (0 without one) and a fresh NCCL unique id (hex) for ranks: nccl.
int bih_gpu_count();
std::string bih_nccl_unique_id();

struct EngineKind;
EngineKind bih_engine_kind();

// bih's engine behind the seam; traceable (bundle() serves bih explain).
class BihTestedEngine : public TestedEngine {
 public:
  explicit BihTestedEngine(EngineBundle bundle);
  const EngineIdentity& identity() const override { return identity_; }
  EngineCapabilities capabilities() const override { return {true, true, true}; }
  int vocab_size() const override { return bundle_.config.vocab_size; }
  std::string model_hash() override { return bundle_.weights_hash(); }
  std::vector<SequenceResult> generate(const std::vector<std::vector<int32_t>>& prompts,
                                       int max_tokens, GenerateStats* stats,
                                       const ProgressFn& progress) override;
  bool reset_prefix_cache() override {
    bundle_.engine->reset_prefix_cache();
    return true;
  }
  void set_row_extras(const RowExtras& extras) override { bundle_.engine->set_row_extras(extras); }
  std::string score_unsupported_reason() const override { return ""; }
  std::vector<SequenceResult> score(const std::vector<ScoreRequest>& requests) override {
    return bundle_.engine->score(requests);
  }
  EngineBundle& bundle() { return bundle_; }

 private:
  EngineBundle bundle_;
  EngineIdentity identity_;
};

}  // namespace bih
