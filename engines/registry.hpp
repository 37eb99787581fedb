// registry.hpp: which engine a scenario names, whether this build and machine can run it, and the
// factory that makes it.
//
// One registry for every engine kind ("bih", "command") and for the backends a leaf adds to bih's
// own engine (the CUDA leaf registers its backend at startup: register_bih_cuda_backend in
// engines/cuda/bih_cuda_engine.hpp). A kind or backend that is not registered answers
// `unsupported` with the reason, never a silent run of something else.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engines/bih_engine.hpp"
#include "engines/engine.hpp"
#include "spec/scenario.hpp"

namespace bih {

// Where an engine is made: which rank this process is, and the scenario's work folder (logs).
struct EngineContext {
  RankAssignment assignment;
  std::string work_dir;
};

struct EngineKind {
  std::string name;  // the scenario's engine.kind
  // Why this build or machine cannot run the scenario with this engine; empty when it can.
  std::function<std::string(const Scenario&)> unsupported_reason;
  std::function<std::unique_ptr<TestedEngine>(const Scenario&, const EngineContext&)> make;
};

// What the CUDA leaf adds to bih's own engine.
struct BihCudaBackend {
  std::function<int()> gpu_count;               // visible GPUs
  std::function<std::string()> nccl_unique_id;  // empty function when built without NCCL
  std::function<EngineBundle(const Scenario&, std::shared_ptr<const ModelWeights>,
                             const RankAssignment&)>
      make_engine;
};

class EngineRegistry {
 public:
  // The process's registry, holding the built-in kinds.
  static EngineRegistry& instance();

  void add_kind(EngineKind kind);  // replaces a kind of the same name
  const EngineKind* kind(const std::string& name) const;
  std::vector<std::string> kind_names() const;

  void set_bih_cuda(BihCudaBackend backend);  // an empty make_engine unregisters
  const BihCudaBackend* bih_cuda() const;     // null when none is registered

  // The scenario's kind's answer; "" when it can run here.
  std::string unsupported_reason(const Scenario& s) const;
  // Throws InfraError when the kind is not registered or cannot run here.
  std::unique_ptr<TestedEngine> make(const Scenario& s, const EngineContext& context) const;

 private:
  EngineRegistry();
  std::vector<EngineKind> kinds_;
  BihCudaBackend cuda_;
};

}  // namespace bih
