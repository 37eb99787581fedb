// bih_cuda_engine.cpp: the CUDA backend of bih's engine, registered in the engine registry.
#include "engines/cuda/bih_cuda_engine.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

#include "base/errors.hpp"
#include "engines/bih_engine.hpp"
#include "engines/registry.hpp"
#include "models/cuda/cuda_forward.hpp"
#include "models/cuda/device_info.hpp"
#include "models/cuda/device_weights.hpp"
#include "models/cuda/emulated_gpu.hpp"
#include "models/cuda/nccl_comm.hpp"

namespace bih::cuda {
namespace {

// What the engine's backend points into; destroyed after the engine (EngineBundle's order).
struct CudaResources {
  std::unique_ptr<EmulatedGpuGroup> group;
  std::unique_ptr<NcclCommunicator> nccl;
  std::shared_ptr<const DeviceModel> model;
  std::shared_ptr<const ModelWeights> host_weights;
};

// A collective that waits longer than this is hung (a dead peer): the watchdog aborts it.
std::chrono::milliseconds collective_watchdog(const Scenario& s) {
  const double seconds = std::clamp(s.timeout_s / 2, 10.0, 300.0);
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

EngineBundle make_cuda_engine(const Scenario& s, std::shared_ptr<const ModelWeights> host_weights,
                              const RankAssignment& assignment) {
  const bool nccl = s.ranks == RankKind::nccl;
  if (nccl && (assignment.rank < 0 || assignment.rank >= s.tp)) {
    throw InputError(s.source_file, "/parallel/ranks",
                     "ranks nccl: this process has no rank in 0.." + std::to_string(s.tp - 1));
  }
  const int device = nccl ? assignment.rank : 0;
  std::vector<int> ranks;
  if (nccl) {
    ranks.push_back(assignment.rank);
  } else {
    for (int r = 0; r < s.tp; ++r) ranks.push_back(r);
  }
  auto res = std::make_shared<CudaResources>();
  EngineBundle b;
  if (!s.model.path.empty()) {
    res->host_weights = host_weights ? std::move(host_weights) : build_model(s);
    res->model = std::make_shared<const DeviceModel>(
        DeviceModel::from_host(*res->host_weights, s.tp, ranks, device));
    b.weights_hash = [w = res->host_weights] { return weights_hash(*w); };
  } else {
    const ModelConfig config = model_config(s);
    res->model = std::make_shared<const DeviceModel>(
        DeviceModel::synthetic(config, s.model.seed, s.tp, ranks, device));
    b.weights_hash = [config, seed = s.model.seed, device] {
      return synthetic_weights_hash_on_gpu(config, seed, device);
    };
  }
  const CollectiveOrders orders{s.all_reduce, s.reduce_scatter, s.all_gather};
  std::vector<LocalRank> locals;
  if (nccl) {
    NcclCommunicator::Options options;
    options.orders = orders;
    options.watchdog = collective_watchdog(s);
    // Blocking NCCL calls: the engine captures collectives into CUDA graphs, and a nonblocking
    // communicator enqueues from NCCL's own thread. GPU-side hangs are still caught by the
    // watchdog (synchronize), and the driver stops the peers of a rank process that fails.
    options.nonblocking = false;
    res->nccl = std::make_unique<NcclCommunicator>(
        assignment.rank, s.tp, parse_nccl_unique_id_hex(assignment.nccl_unique_id), device,
        options);
    NcclCommunicator* comm = res->nccl.get();
    locals.push_back(
        LocalRank{assignment.rank, comm, comm->stream(), [comm] { comm->synchronize(); }});
    b.communicator = comm->describe();
  } else {
    res->group = std::make_unique<EmulatedGpuGroup>(s.tp, orders, s.ring_order, device,
                                                    collective_watchdog(s));
    for (int r = 0; r < s.tp; ++r) {
      EmulatedGpuRank& rank = res->group->rank(r);
      locals.push_back(LocalRank{r, &rank, rank.stream(), {}});
    }
    b.communicator = res->group->describe();
  }
  b.config = res->model->config();
  const EngineOptions options = engine_options(s);
  auto forward = std::make_unique<CudaForward>(res->model, options, std::move(locals), device);
  b.backend = forward->describe();
  b.engine = std::make_unique<Engine>(b.config.vocab_size, options, std::move(forward));
  b.resources = std::move(res);
  return b;
}

}  // namespace

void register_cuda_backend() {
  BihCudaBackend backend;
  backend.gpu_count = device_count;
  if (nccl_available()) backend.nccl_unique_id = [] { return nccl_unique_id_hex(); };
  backend.make_engine = make_cuda_engine;
  EngineRegistry::instance().set_bih_cuda(std::move(backend));
}

}  // namespace bih::cuda
