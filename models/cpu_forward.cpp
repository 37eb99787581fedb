// cpu_forward.cpp: the CPU backend's forward step (cpu_forward.hpp).
#include "models/cpu_forward.hpp"

#include <algorithm>
#include <bit>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "models/tree_sum.hpp"

namespace bih {

struct CpuForward::RankState {
  RankWeights weights;
  std::vector<std::vector<bf16>> k_cache;  // per layer [num_blocks, block_size, kv_local, hd]
  std::vector<std::vector<bf16>> v_cache;
  std::vector<cpu::KvPool> pools;  // per layer
};

namespace {

std::vector<uint32_t> widen_bits(const bf16* row, int n) {
  std::vector<uint32_t> out(n);
  for (int i = 0; i < n; ++i) out[i] = row[i].bits;
  return out;
}

std::string gemm_detail(KernelFamily family, int M, int N, int K) {
  std::string d =
      "gemm M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
  if (family == KernelFamily::invariant) return d + " (invariant: one K order for every M)";
  if (family == KernelFamily::tp_invariant) return tp_invariant_gemm_detail(M, N, K);
  if (M < cpu::kVendorSplitKMaxM) {
    return d + " (vendor: split-K " + std::to_string(cpu::kVendorSplitK) + " because M < " +
           std::to_string(cpu::kVendorSplitKMaxM) + ")";
  }
  return d + " (vendor: no split-K at this M)";
}

}  // namespace

CpuForward::CpuForward(std::shared_ptr<const ModelWeights> weights, EngineOptions options,
                       std::vector<Communicator*> comms)
    : weights_(std::move(weights)),
      options_(std::move(options)),
      comms_(std::move(comms)),
      rope_(cpu::RopeTable::make(weights_->config.head_dim, weights_->config.rope_theta,
                                 options_.max_model_len)),
      num_blocks_(kv_pool_blocks(options_)) {
  if (static_cast<int>(comms_.size()) != options_.tp) {
    throw std::invalid_argument("CpuForward: " + std::to_string(comms_.size()) +
                                " communicators for tp=" + std::to_string(options_.tp));
  }
  const ModelConfig& c = weights_->config;
  if (options_.kernels == KernelFamily::tp_invariant) check_tp_invariant_model(c, options_.tp);
  for (int r = 0; r < options_.tp; ++r) {
    auto state = std::make_unique<RankState>();
    state->weights = shard_for_rank(*weights_, r, options_.tp);
    const size_t pool_elems = static_cast<size_t>(num_blocks_) * options_.block_size *
                              state->weights.kv_heads_local * c.head_dim;
    for (int l = 0; l < c.num_layers; ++l) {
      state->k_cache.emplace_back(pool_elems);
      state->v_cache.emplace_back(pool_elems);
    }
    for (int l = 0; l < c.num_layers; ++l) {
      state->pools.push_back(cpu::KvPool{state->k_cache[l].data(), state->v_cache[l].data(),
                                         num_blocks_, options_.block_size,
                                         state->weights.kv_heads_local, c.head_dim});
    }
    ranks_.push_back(std::move(state));
  }
}

CpuForward::~CpuForward() = default;

void CpuForward::forward_rank(int rank, StepBatch& step) {
  const ModelConfig& c = weights_->config;
  const RankWeights& w = ranks_[rank]->weights;
  Communicator& comm = *comms_[rank];
  const KernelFamily family = options_.kernels;
  const int H = c.hidden_size;
  const int hd = c.head_dim;
  const int tp = options_.tp;
  const int Mp = step.rows_padded;
  const int S = step.sp ? Mp / tp : Mp;  // rows of the residual stream this rank holds
  const int row0 = step.sp ? rank * S : 0;
  const int q_cols = w.heads_local * hd;
  const int kv_cols = w.kv_heads_local * hd;
  const int qkv_cols = q_cols + 2 * kv_cols;
  const int I = w.intermediate_local;
  const float eps = c.rms_norm_eps;

  std::vector<bf16> residual(static_cast<size_t>(S) * H);  // [S, H]
  std::vector<bf16> h_local(static_cast<size_t>(S) * H);   // [S, H] normed
  std::vector<bf16> h_full(static_cast<size_t>(Mp) * H);   // [Mp, H] normed, every row
  std::vector<bf16> partial(static_cast<size_t>(Mp) * H);  // [Mp, H] row-parallel GEMM output
  std::vector<bf16> reduced(static_cast<size_t>(S) * H);   // [S, H]
  std::vector<bf16> qkv(static_cast<size_t>(Mp) * qkv_cols);
  std::vector<bf16> q(static_cast<size_t>(Mp) * q_cols);   // [Mp, heads_local, hd]
  std::vector<bf16> k(static_cast<size_t>(Mp) * kv_cols);  // [Mp, kv_local, hd]
  std::vector<bf16> v(static_cast<size_t>(Mp) * kv_cols);
  std::vector<bf16> attn(static_cast<size_t>(Mp) * q_cols);
  std::vector<bf16> gate_up(static_cast<size_t>(Mp) * 2 * I);
  std::vector<bf16> act(static_cast<size_t>(Mp) * I);

  auto gather = [&] {
    if (step.sp) {
      comm.all_gather(h_local.data(), h_full.data(), h_local.size());
    } else {
      std::copy(h_local.begin(), h_local.end(), h_full.begin());
    }
  };
  // tp_invariant: the row-parallel GEMMs leave fp32 subtree sums here, which the tree collective
  // finishes and rounds (models/tree_sum.hpp); the bf16 `partial` is then unused until it
  // receives the all_reduce result.
  const bool tp_inv = family == KernelFamily::tp_invariant;
  std::vector<float> partial32(tp_inv ? static_cast<size_t>(Mp) * H : 0);  // [Mp, H]
  // Combines the row-parallel partial sums into this rank's rows of the residual stream.
  auto reduce = [&] {
    if (tp_inv) {
      if (step.sp) {
        comm.reduce_scatter_tree_f32(partial32.data(), reduced.data(), reduced.size());
      } else {
        comm.all_reduce_tree_f32(partial32.data(), reduced.data(), reduced.size());
      }
      return;
    }
    if (step.sp) {
      comm.reduce_scatter(partial.data(), reduced.data(), reduced.size());
    } else {
      comm.all_reduce(partial.data(), partial.size());
      std::copy(partial.begin(), partial.end(), reduced.begin());
    }
  };

  // Capture of the traced rows: sharded tensors [Mp, cols] are recorded by every rank, residual
  // stream rows by the rank that holds them (the owner under SP, rank 0 otherwise).
  const bool tracing = step.trace != nullptr;
  auto reduce_detail = [&](int row) {
    if (tp_inv) return tp_invariant_reduce_detail(step.sp, tp);
    return step.sp ? "reduce_scatter(" + comm.describe() + "), row " + std::to_string(row) +
                         " owned by rank " + std::to_string(row / S) + " of " + std::to_string(tp) +
                         ", " + std::to_string(Mp) + " padded rows"
                   : "all_reduce(" + comm.describe() + ") of " + std::to_string(Mp) + " rows";
  };
  auto record_sharded = [&](int layer, const char* op, const std::vector<bf16>& tensor, int cols,
                            const std::string& detail) {
    for (size_t i = 0; tracing && i < step.trace_rows.size(); ++i) {
      const bf16* row = tensor.data() + static_cast<size_t>(step.trace_rows[i]) * cols;
      step.trace->record(
          TraceEntry{layer, op, rank, step.trace_positions[i], detail, widen_bits(row, cols)});
    }
  };
  auto record_stream = [&](int layer, const char* op, const std::vector<bf16>& local_tensor,
                           const std::function<std::string(int)>& detail) {
    for (size_t i = 0; tracing && i < step.trace_rows.size(); ++i) {
      const int row = step.trace_rows[i];
      if (step.sp ? row / S != rank : rank != 0) continue;
      const bf16* src = local_tensor.data() + static_cast<size_t>(row - row0) * H;
      step.trace->record(
          TraceEntry{layer, op, -1, step.trace_positions[i], detail(row), widen_bits(src, H)});
    }
  };
  // A row-parallel rank's fp32 partial, recorded as float32 patterns.
  auto record_partial32 = [&](int layer, const char* op, const std::string& detail) {
    for (size_t i = 0; tracing && i < step.trace_rows.size(); ++i) {
      const float* row = partial32.data() + static_cast<size_t>(step.trace_rows[i]) * H;
      std::vector<uint32_t> bits(H);
      for (int j = 0; j < H; ++j) bits[j] = std::bit_cast<uint32_t>(row[j]);
      step.trace->record(
          TraceEntry{layer, op, rank, step.trace_positions[i], detail, std::move(bits), true});
    }
  };
  // Row-parallel GEMM: y = x[Mp, K_local] . w[H, K_local]^T into `partial` (bf16 partial sums) or,
  // for tp_invariant, into partial32 (this rank's unrounded subtree).
  auto row_parallel = [&](int layer, const char* op, const bf16* x, const std::vector<bf16>& wt,
                          int K_local) {
    if (tp_inv) {
      cpu::gemm_tp_invariant_partial(x, wt.data(), partial32.data(), Mp, H, K_local,
                                     kTpInvariantChunks / tp);
      if (tracing) record_partial32(layer, op, tp_invariant_partial_detail(Mp, H, K_local, tp));
      return;
    }
    cpu::gemm(family, x, wt.data(), partial.data(), Mp, H, K_local);
    if (tracing) record_sharded(layer, op, partial, H, gemm_detail(family, Mp, H, K_local));
  };
  auto fixed = [](const char* text) { return [text](int) { return std::string(text); }; };

  cpu::embedding(w.embed_tokens, step.tokens.data() + row0, residual.data(), S, H);
  record_stream(-1, "embedding", residual, fixed("embedding lookup"));
  cpu::rms_norm(residual.data(), w.layers[0].input_layernorm, h_local.data(), S, H, eps);
  record_stream(0, "attn_norm", h_local, fixed("rms_norm"));
  gather();

  for (size_t l = 0; l < w.layers.size(); ++l) {
    const RankLayerWeights& lw = w.layers[l];
    const int L = static_cast<int>(l);
    cpu::gemm(family, h_full.data(), lw.qkv.data(), qkv.data(), Mp, qkv_cols, H);
    if (tracing) record_sharded(L, "qkv", qkv, qkv_cols, gemm_detail(family, Mp, qkv_cols, H));
    for (int m = 0; m < Mp; ++m) {
      const bf16* row = qkv.data() + static_cast<size_t>(m) * qkv_cols;
      std::copy(row, row + q_cols, q.data() + static_cast<size_t>(m) * q_cols);
      std::copy(row + q_cols, row + q_cols + kv_cols, k.data() + static_cast<size_t>(m) * kv_cols);
      std::copy(row + q_cols + kv_cols, row + qkv_cols,
                v.data() + static_cast<size_t>(m) * kv_cols);
    }
    cpu::head_norm_rope(q.data(), lw.q_norm, step.positions.data(), Mp, w.heads_local, hd, eps,
                        rope_);
    cpu::head_norm_rope(k.data(), lw.k_norm, step.positions.data(), Mp, w.kv_heads_local, hd, eps,
                        rope_);
    if (tracing) {
      record_sharded(L, "q_norm_rope", q, q_cols, "q rms_norm + rope");
      record_sharded(L, "k_norm_rope", k, kv_cols, "k rms_norm + rope");
    }
    const cpu::KvPool& pool = ranks_[rank]->pools[l];
    cpu::write_kv(pool, k.data(), v.data(), step.slots.data(), Mp);
    std::fill(attn.begin(), attn.end(), bf16{});
    cpu::attention(family, q.data(), pool, step.queries.data(), step.rows_real, w.heads_local,
                   step.num_decode, attn.data());
    for (size_t i = 0; tracing && i < step.trace_rows.size(); ++i) {
      const int row = step.trace_rows[i];
      const cpu::AttentionQuery& query = step.queries[row];
      const std::string detail = attention_trace_detail(family, query, step.num_decode);
      step.trace->record(
          TraceEntry{L, "attention", rank, step.trace_positions[i], detail,
                     widen_bits(attn.data() + static_cast<size_t>(row) * q_cols, q_cols), false,
                     kv_context_hash(pool, query)});
    }
    row_parallel(L, "o_proj", attn.data(), lw.o_proj, q_cols);
    reduce();
    record_stream(L, "attn_reduce", reduced, reduce_detail);
    cpu::add_rms_norm(residual.data(), reduced.data(), lw.post_attention_layernorm, h_local.data(),
                      S, H, eps);
    record_stream(L, "attn_residual", residual, fixed("residual add"));
    record_stream(L, "mlp_norm", h_local, fixed("rms_norm"));
    gather();

    cpu::gemm(family, h_full.data(), lw.gate_up.data(), gate_up.data(), Mp, 2 * I, H);
    cpu::silu_mul(gate_up.data(), act.data(), Mp, I);
    if (tracing) {
      record_sharded(L, "gate_up", gate_up, 2 * I, gemm_detail(family, Mp, 2 * I, H));
      record_sharded(L, "act", act, I, "silu(gate) * up");
    }
    row_parallel(L, "down", act.data(), lw.down, I);
    reduce();
    record_stream(L, "mlp_reduce", reduced, reduce_detail);
    const bool last = l + 1 == w.layers.size();
    const bf16* next_norm = last ? w.final_norm : w.layers[l + 1].input_layernorm;
    cpu::add_rms_norm(residual.data(), reduced.data(), next_norm, h_local.data(), S, H, eps);
    record_stream(L, "mlp_residual", residual, fixed("residual add"));
    record_stream(last ? -1 : L + 1, last ? "final_norm" : "attn_norm", h_local, fixed("rms_norm"));
    gather();
  }

  // Vocab-parallel lm_head on the rows that need logits, gathered to full rows.
  const int Ms = static_cast<int>(step.logit_rows.size());
  const int Vl = w.vocab_local;
  std::vector<bf16> selected(static_cast<size_t>(Ms) * H);  // [Ms, H]
  for (int i = 0; i < Ms; ++i) {
    const bf16* src = h_full.data() + static_cast<size_t>(step.logit_rows[i]) * H;
    std::copy(src, src + H, selected.data() + static_cast<size_t>(i) * H);
  }
  std::vector<bf16> logits_local(static_cast<size_t>(Ms) * Vl);  // [Ms, Vl]
  cpu::gemm(family, selected.data(), w.lm_head.data(), logits_local.data(), Ms, Vl, H);
  // The traced sequence's sampled row is its last traced row, when it samples in this step.
  const long traced_logit =
      tracing ? std::find(step.logit_rows.begin(), step.logit_rows.end(), step.trace_rows.back()) -
                    step.logit_rows.begin()
              : Ms;
  if (traced_logit < Ms) {
    step.trace->record(
        TraceEntry{-1, "lm_head", rank, step.trace_positions.back(), gemm_detail(family, Ms, Vl, H),
                   widen_bits(logits_local.data() + static_cast<size_t>(traced_logit) * Vl, Vl)});
  }
  std::vector<bf16> gathered(static_cast<size_t>(tp) * Ms * Vl);  // [tp, Ms, Vl]
  comm.all_gather(logits_local.data(), gathered.data(), logits_local.size());
  if (rank != 0) return;
  const int V = c.vocab_size;
  step.logits.resize(static_cast<size_t>(Ms) * V);
  for (int r = 0; r < tp; ++r) {
    for (int i = 0; i < Ms; ++i) {
      const bf16* src = gathered.data() + (static_cast<size_t>(r) * Ms + i) * Vl;
      std::copy(src, src + Vl, step.logits.data() + static_cast<size_t>(i) * V + r * Vl);
    }
  }
  if (step.sample) {
    step.sampled.resize(Ms);
    step.sampled_logprob.resize(Ms);
    cpu::greedy_sample(step.logits.data(), Ms, V, step.sampled.data(), step.sampled_logprob.data());
    if (traced_logit < Ms) trace_sampled_token(step, traced_logit, V);
  }
}

void CpuForward::run(StepBatch& step) {
  run_ranks(
      options_.tp, [&](int r) { forward_rank(r, step); },
      [&](int r) {
        comms_[r]->abort("rank " + std::to_string(r) + " failed during a forward step");
      });
}

}  // namespace bih
