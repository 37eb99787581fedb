// engine_setup.hpp: a scenario's model, communicators and engine, built the same way everywhere
// (the worker's generations and explain's re-runs must see the same engine).
//
// The CPU backend is built here. The CUDA backend lives in the CUDA leaf (models/cuda/), which
// registers its hooks at startup (set_cuda_backend); a build or machine without it answers
// `unsupported` for backend cuda, never a silent CPU run.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/scenario.hpp"
#include "models/engine.hpp"
#include "models/weights.hpp"

namespace bih {

// Synthetic weights for a preset, or the checkpoint at model.path, on the host. Throws InputError.
std::shared_ptr<const ModelWeights> build_model(const Scenario& s);

// The preset's or the checkpoint's config.json, without building the weights. Throws InputError.
ModelConfig model_config(const Scenario& s);

EngineOptions engine_options(const Scenario& s);

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

// What the CUDA leaf offers, registered at startup by a build with CUDA.
struct CudaBackendHooks {
  std::function<int()> gpu_count;               // visible GPUs
  std::function<std::string()> nccl_unique_id;  // empty when built without NCCL
  std::function<EngineBundle(const Scenario&, std::shared_ptr<const ModelWeights>,
                             const RankAssignment&)>
      make_engine;
};
void set_cuda_backend(CudaBackendHooks hooks);
const CudaBackendHooks* cuda_backend();  // null when none is registered

// Why this build or machine cannot run the scenario (backend cuda without the CUDA backend or a
// GPU; nccl ranks without NCCL or with fewer GPUs than tp); empty when it can.
std::string unsupported_reason(const Scenario& s);

}  // namespace bih
