// engine_options.cpp: a scenario's engine options (engine_options.hpp).
#include "spec/engine_options.hpp"

namespace bih {

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

}  // namespace bih
