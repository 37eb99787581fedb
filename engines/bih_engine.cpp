#include "engines/bih_engine.hpp"

#include <fmt/core.h>

#include <filesystem>

#include "base/errors.hpp"
#include "engines/registry.hpp"
#include "models/comm/emulated.hpp"

namespace bih {
std::shared_ptr<const ModelWeights> build_model(const Scenario& s) {
  if (!s.model.path.empty()) return std::make_shared<ModelWeights>(load_checkpoint(s.model.path));
  return std::make_shared<ModelWeights>(synthetic_weights(model_config(s), s.model.seed));
}

ModelConfig model_config(const Scenario& s) {
  if (!s.model.path.empty()) {
    return load_config_json((std::filesystem::path(s.model.path) / "config.json").string());
  }
  auto config = preset_config(s.model.preset);
  if (!config) throw InputError(s.source_file, "/model/preset", "unknown preset " + s.model.preset);
  return *config;
}

int bih_gpu_count() {
  const BihCudaBackend* cuda = EngineRegistry::instance().bih_cuda();
  return cuda != nullptr ? cuda->gpu_count() : 0;
}

std::string bih_nccl_unique_id() {
  const BihCudaBackend* cuda = EngineRegistry::instance().bih_cuda();
  if (cuda == nullptr || !cuda->nccl_unique_id) throw InfraError("this bih has no NCCL");
  return cuda->nccl_unique_id();
}

Backend resolved_backend(const Scenario& s) {
  if (s.backend != Backend::automatic) return s.backend;
  return bih_gpu_count() > 0 ? Backend::cuda : Backend::cpu;
}

std::string bih_unsupported_reason(const Scenario& s) {
  const BihCudaBackend* cuda = EngineRegistry::instance().bih_cuda();
  const bool wants_gpu = s.backend == Backend::cuda || s.ranks == RankKind::nccl;
  if (std::string why = tp_invariant_collectives_refusal(s); !why.empty()) return why;
  if (!wants_gpu) return "";
  if (cuda == nullptr) {
    return "backend cuda: this bih was built without CUDA (rebuild where nvcc is found, or "
           "-DBIH_CUDA=ON); it is never run on the CPU instead";
  }
  const int gpus = cuda->gpu_count();
  if (gpus == 0) return "backend cuda: no CUDA GPU is visible on this machine";
  if (s.ranks == RankKind::nccl) {
    if (!cuda->nccl_unique_id) return "ranks nccl: this bih was built without NCCL";
    if (gpus < s.tp) {
      return fmt::format(
          "ranks nccl at tp={} needs {} GPUs, this machine has {}; NCCL ranks are never "
          "emulated silently (use parallel.ranks=emulated)",
          s.tp, s.tp, gpus);
    }
  }
  return "";
}

EngineBundle make_engine(const Scenario& s, std::shared_ptr<const ModelWeights> host_weights,
                         const RankAssignment& assignment) {
  if (resolved_backend(s) == Backend::cuda || s.ranks == RankKind::nccl) {
    if (std::string why = bih_unsupported_reason(s); !why.empty()) throw InfraError(why);
    return EngineRegistry::instance().bih_cuda()->make_engine(s, std::move(host_weights),
                                                              assignment);
  }
  auto weights = host_weights ? std::move(host_weights) : build_model(s);
  auto group = std::make_shared<EmulatedGroup>(
      s.tp, CollectiveOrders{s.all_reduce, s.reduce_scatter, s.all_gather}, s.ring_order);
  std::vector<Communicator*> comms;
  for (int r = 0; r < s.tp; ++r) comms.push_back(&group->rank(r));
  EngineBundle b;
  b.resources = group;
  b.engine = std::make_unique<Engine>(weights, engine_options(s), comms);
  b.config = weights->config;
  b.communicator = group->describe();
  b.backend = b.engine->backend().describe();
  b.weights_hash = [weights] { return weights_hash(*weights); };
  return b;
}

BihTestedEngine::BihTestedEngine(EngineBundle bundle) : bundle_(std::move(bundle)) {
  identity_.kind = "bih";
  identity_.name = "bih";
  identity_.version = BIH_VERSION;
  identity_.value = "logprob";
  identity_.details = {{"backend", bundle_.backend}, {"communicator", bundle_.communicator}};
}

std::vector<SequenceResult> BihTestedEngine::generate(
    const std::vector<std::vector<int32_t>>& prompts, int max_tokens, GenerateStats* stats,
    const ProgressFn& progress) {
  const int total = static_cast<int>(prompts.size());
  return bundle_.engine->generate(
      prompts, max_tokens, stats, [&](int64_t step, int finished, int /*in_batch*/) {
        if (progress && total > 1) {
          progress(fmt::format("step {}, {}/{} sequences done", step, finished, total));
        }
      });
}

EngineKind bih_engine_kind() {
  EngineKind kind;
  kind.name = "bih";
  kind.unsupported_reason = bih_unsupported_reason;
  kind.make = [](const Scenario& s, const EngineContext& context) {
    return std::make_unique<BihTestedEngine>(make_engine(s, nullptr, context.assignment));
  };
  return kind;
}

}  // namespace bih
