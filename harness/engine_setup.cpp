#include "harness/engine_setup.hpp"

#include "harness/errors.hpp"

namespace bih {

std::shared_ptr<const ModelWeights> build_model(const Scenario& s) {
  if (!s.model.path.empty()) return std::make_shared<ModelWeights>(load_checkpoint(s.model.path));
  auto config = preset_config(s.model.preset);
  if (!config) throw InputError(s.source_file, "/model/preset", "unknown preset " + s.model.preset);
  return std::make_shared<ModelWeights>(synthetic_weights(*config, s.model.seed));
}

EngineOptions engine_options(const Scenario& s) {
  EngineOptions o;
  o.kernels = s.kernels;
  o.tp = s.tp;
  o.sp_enabled = s.sp_enabled;
  o.sp_min_tokens = s.sp_min_tokens;
  o.graph_mode = s.graph_mode;
  o.capture_sizes = s.capture_sizes;
  o.prefix_caching = s.prefix_caching;
  o.block_size = s.block_size;
  o.chunked_prefill_max_tokens = s.chunked_prefill_max_tokens;
  o.max_model_len = s.plan.max_model_len;
  o.max_num_seqs = s.plan.max_num_seqs;
  return o;
}

EngineBundle make_engine(const Scenario& s, std::shared_ptr<const ModelWeights> weights) {
  EngineBundle b;
  b.group = std::make_unique<EmulatedGroup>(
      s.tp, CollectiveOrders{s.all_reduce, s.reduce_scatter, s.all_gather}, s.ring_order);
  std::vector<Communicator*> comms;
  for (int r = 0; r < s.tp; ++r) comms.push_back(&b.group->rank(r));
  b.engine = std::make_unique<Engine>(std::move(weights), engine_options(s), comms);
  return b;
}

}  // namespace bih
