// cuda_forward_layers.cpp: the work the CUDA forward enqueues on a rank's stream
// (cuda_forward_impl.hpp): the decoder's pieces between two attentions, attention, and the
// logits and greedy sampling after the forward, with the trace entries of steps that trace.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "models/cuda/cuda_forward_impl.hpp"
#include "models/tree_sum.hpp"

namespace bih::cuda {
namespace {

// The traced rows `rows` of a device tensor [rows, cols] of T (bf16 or float), as bit patterns,
// with one wait for all of them: a wait per row made a traced TP=4 prefill of 48 rows take 0.9 s
// on an H200 (some 30k waits). `staging` is pinned, so the copies are truly asynchronous.
template <class T>
std::vector<std::vector<uint32_t>> download_rows(const T* tensor, const std::vector<int>& rows,
                                                 int cols, cudaStream_t stream,
                                                 PinnedArray<uint8_t>& staging) {
  const size_t row_bytes = static_cast<size_t>(cols) * sizeof(T);
  staging.reserve(rows.size() * row_bytes);
  for (size_t i = 0; i < rows.size(); ++i) {
    cudaCheck(cudaMemcpyAsync(staging.get() + i * row_bytes,
                              tensor + static_cast<size_t>(rows[i]) * cols, row_bytes,
                              cudaMemcpyDeviceToHost, stream));
  }
  cudaCheck(cudaStreamSynchronize(stream));
  std::vector<std::vector<uint32_t>> out(rows.size(), std::vector<uint32_t>(cols));
  for (size_t i = 0; i < rows.size(); ++i) {
    const T* host = reinterpret_cast<const T*>(staging.get() + i * row_bytes);
    for (int c = 0; c < cols; ++c) {
      if constexpr (std::is_same_v<T, float>) {
        out[i][c] = std::bit_cast<uint32_t>(host[c]);
      } else {
        out[i][c] = host[c].bits;
      }
    }
  }
  return out;
}

std::vector<uint32_t> download_bits(const bf16* device_row, int cols, cudaStream_t stream,
                                    PinnedArray<uint8_t>& staging) {
  return std::move(download_rows(device_row, {0}, cols, stream, staging)[0]);
}

}  // namespace

std::string CudaForward::Impl::gemm_detail(Rank& r, int M, int N, int K) const {
  const std::string d =
      "gemm M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
  if (options.kernels == KernelFamily::tp_invariant) return tp_invariant_gemm_detail(M, N, K);
  if (options.kernels == KernelFamily::invariant) {
    return d + " (invariant, pinned: " + r.gemm->invariant_config(N, K).describe() + ")";
  }
  return d + " (vendor heuristic at this M: " + r.gemm->vendor_config(M, N, K).describe() + ")";
}

// Pieces: piece 0 is the embedding, the first norm and layer 0 up to its attention; piece p in
// 1..L-1 is layer p-1 after its attention and layer p up to its attention; piece L is the last
// layer after its attention and the final norm. Attention of layer l runs between piece l and l+1.
void CudaForward::Impl::enqueue_piece(Rank& r, StepBatch& step, int piece) {
  const ModelConfig& c = model->config();
  const DeviceRankWeights& w = *r.w;
  Communicator& comm = *r.local.comm;
  const cudaStream_t s = r.local.stream;
  const KernelFamily family = options.kernels;
  const int rank = r.local.rank;
  const int H = c.hidden_size;
  const int hd = c.head_dim;
  const int tp = options.tp;
  const int Mp = step.rows_padded;
  const int S = step.sp ? Mp / tp : Mp;
  const int row0 = step.sp ? rank * S : 0;
  const int q_cols = w.heads_local * hd;
  const int kv_cols = w.kv_heads_local * hd;
  const int qkv_cols = q_cols + 2 * kv_cols;
  const int I = w.intermediate_local;
  const float eps = c.rms_norm_eps;
  const int L = c.num_layers;
  const bool tracing = step.trace != nullptr;
  auto mark = [&](const char* op) { this->mark(r, step, op); };

  // Without SP every rank holds every row: the normed rows are read where they were written,
  // and the all_reduce combines in place.
  bf16* const full_rows = step.sp ? r.h_full.get() : r.h_local.get();  // [Mp, H] normed
  bf16* const reduced = step.sp ? r.reduced.get() : r.partial.get();   // [S, H] combined
  auto gather = [&] {
    mark("all_gather");
    if (step.sp) comm.all_gather(r.h_local.get(), r.h_full.get(), static_cast<size_t>(S) * H);
  };
  const bool tp_inv = family == KernelFamily::tp_invariant;
  auto reduce = [&] {
    mark(step.sp ? "reduce_scatter" : "all_reduce");
    if (tp_inv) {
      if (step.sp) {
        comm.reduce_scatter_tree_f32(r.partial32.get(), r.reduced.get(),
                                     static_cast<size_t>(S) * H);
      } else {
        comm.all_reduce_tree_f32(r.partial32.get(), r.partial.get(), static_cast<size_t>(Mp) * H);
      }
      return;
    }
    if (step.sp) {
      comm.reduce_scatter(r.partial.get(), r.reduced.get(), static_cast<size_t>(S) * H);
    } else {
      comm.all_reduce(r.partial.get(), static_cast<size_t>(Mp) * H);
    }
  };
  auto reduce_detail = [&](int row) {
    if (tp_inv) return tp_invariant_reduce_detail(step.sp, tp);
    return step.sp ? "reduce_scatter(" + comm.describe() + "), row " + std::to_string(row) +
                         " owned by rank " + std::to_string(row / S) + " of " + std::to_string(tp) +
                         ", " + std::to_string(Mp) + " padded rows"
                   : "all_reduce(" + comm.describe() + ") of " + std::to_string(Mp) + " rows";
  };
  // Trace capture, as on the CPU backend: sharded tensors [Mp, cols] by every rank, residual
  // stream rows by the rank that holds them.
  auto record_sharded = [&](int layer, const char* op, const bf16* tensor, int cols,
                            const std::string& detail) {
    if (!tracing) return;
    auto bits = download_rows(tensor, step.trace_rows, cols, s, r.trace_staging);
    for (size_t i = 0; i < step.trace_rows.size(); ++i) {
      step.trace->record(
          TraceEntry{layer, op, rank, step.trace_positions[i], detail, std::move(bits[i])});
    }
  };
  auto record_stream = [&](int layer, const char* op, const bf16* local_tensor,
                           const std::function<std::string(int)>& detail) {
    if (!tracing) return;
    std::vector<int> held, local_rows;  // indices into trace_rows; rows of local_tensor
    for (size_t i = 0; i < step.trace_rows.size(); ++i) {
      const int row = step.trace_rows[i];
      if (step.sp ? row / S != rank : rank != 0) continue;
      held.push_back(static_cast<int>(i));
      local_rows.push_back(row - row0);
    }
    if (held.empty()) return;
    auto bits = download_rows(local_tensor, local_rows, H, s, r.trace_staging);
    for (size_t j = 0; j < held.size(); ++j) {
      const int row = step.trace_rows[held[j]];
      step.trace->record(TraceEntry{layer, op, -1, step.trace_positions[held[j]], detail(row),
                                    std::move(bits[j])});
    }
  };
  // Row-parallel GEMM into r.partial (bf16 partial sums) or, for tp_invariant, into r.partial32
  // (this rank's unrounded subtree of the chunk tree), traced as the CPU backend traces it.
  auto row_parallel = [&](int layer, const char* op, const bf16* x, const bf16* wt, int K_local) {
    if (tp_inv) {
      r.gemm->gemm_tp_invariant_partial(x, wt, r.partial32.get(), Mp, H, K_local,
                                        kTpInvariantChunks / tp, s);
      if (!tracing) return;
      auto bits = download_rows(r.partial32.get(), step.trace_rows, H, s, r.trace_staging);
      for (size_t i = 0; i < step.trace_rows.size(); ++i) {
        step.trace->record(TraceEntry{layer, op, rank, step.trace_positions[i],
                                      tp_invariant_partial_detail(Mp, H, K_local, tp),
                                      std::move(bits[i]), true});
      }
      return;
    }
    r.gemm->gemm(family, x, wt, r.partial.get(), Mp, H, K_local, s);
    if (tracing) record_sharded(layer, op, r.partial.get(), H, gemm_detail(r, Mp, H, K_local));
  };
  auto fixed = [](const char* text) { return [text](int) { return std::string(text); }; };

  if (piece == 0) {
    mark("embedding");
    embedding(w.embed_tokens, c.vocab_size, r.tokens.get() + row0, r.residual.get(), S, H, s);
    record_stream(-1, "embedding", r.residual.get(), fixed("embedding lookup"));
    mark("rms_norm");
    rms_norm(r.residual.get(), w.layers[0].input_layernorm, r.h_local.get(), S, H, eps, s);
    record_stream(0, "attn_norm", r.h_local.get(), fixed("rms_norm"));
    gather();
  } else {
    const int l = piece - 1;
    const DeviceLayerWeights& lw = w.layers[l];
    mark("gemm o_proj");
    row_parallel(l, "o_proj", r.attn.get(), lw.o_proj, q_cols);
    reduce();
    record_stream(l, "attn_reduce", reduced, reduce_detail);
    mark("add_rms_norm");
    add_rms_norm(r.residual.get(), reduced, lw.post_attention_layernorm, r.h_local.get(), S, H, eps,
                 s);
    record_stream(l, "attn_residual", r.residual.get(), fixed("residual add"));
    record_stream(l, "mlp_norm", r.h_local.get(), fixed("rms_norm"));
    gather();
    mark("gemm gate_up");
    // At decode sizes the invariant family's skinny kernel takes SiLU-mul into its epilogue (the
    // same bits, one kernel fewer); a trace wants the [M, 2I] product, which that never writes.
    const bool fused =
        !tracing && r.gemm->gemm_silu_mul(family, full_rows, lw.gate_up, r.act.get(), Mp, I, H, s);
    if (!fused) {
      r.gemm->gemm(family, full_rows, lw.gate_up, r.gate_up.get(), Mp, 2 * I, H, s);
      mark("silu_mul");
      silu_mul(r.gate_up.get(), r.act.get(), Mp, I, s);
    }
    if (tracing) {
      record_sharded(l, "gate_up", r.gate_up.get(), 2 * I, gemm_detail(r, Mp, 2 * I, H));
      record_sharded(l, "act", r.act.get(), I, "silu(gate) * up");
    }
    mark("gemm down");
    row_parallel(l, "down", r.act.get(), lw.down, I);
    reduce();
    record_stream(l, "mlp_reduce", reduced, reduce_detail);
    const bool last = l + 1 == L;
    const bf16* next_norm = last ? w.final_norm : w.layers[l + 1].input_layernorm;
    mark("add_rms_norm");
    add_rms_norm(r.residual.get(), reduced, next_norm, r.h_local.get(), S, H, eps, s);
    record_stream(l, "mlp_residual", r.residual.get(), fixed("residual add"));
    record_stream(last ? -1 : l + 1, last ? "final_norm" : "attn_norm", r.h_local.get(),
                  fixed("rms_norm"));
    gather();
  }
  if (piece == L) return;

  const int l = piece;
  const DeviceLayerWeights& lw = w.layers[l];
  mark("gemm qkv");
  r.gemm->gemm(family, full_rows, lw.qkv, r.qkv.get(), Mp, qkv_cols, H, s);
  if (tracing) record_sharded(l, "qkv", r.qkv.get(), qkv_cols, gemm_detail(r, Mp, qkv_cols, H));
  // One launch splits [Mp, q | k | v], norms and ropes q and k into r.q, r.k, and writes k and v
  // into this layer's pool (bit for bit the split, head_norm_rope and write_kv).
  mark("qkv_norm_rope_write_kv");
  qkv_norm_rope_write_kv(r.qkv.get(), lw.q_norm, lw.k_norm, r.positions.get(), r.slots.get(), Mp,
                         w.heads_local, w.kv_heads_local, hd, eps, rope, r.pools[l], r.q.get(),
                         r.k.get(), s);
  if (tracing) {
    record_sharded(l, "q_norm_rope", r.q.get(), q_cols, "q rms_norm + rope");
    record_sharded(l, "k_norm_rope", r.k.get(), kv_cols, "k rms_norm + rope");
  }
}

void CudaForward::Impl::enqueue_attention(Rank& r, StepBatch& step, int layer) {
  const ModelConfig& c = model->config();
  const cudaStream_t s = r.local.stream;
  const int q_cols = r.w->heads_local * c.head_dim;
  const AttentionBatch batch{r.block_tables.get(), max_blocks_per_sequence(options),
                             r.context_lens.get(), r.decode.get()};
  mark(r, step, "attention");
  attention(options.kernels, r.q.get(), r.pools[layer], batch, step.rows_padded, r.w->heads_local,
            step.num_decode, r.attn.get(), s, r.attention_split.get(), r.attention_split_bytes);
  if (step.trace == nullptr) return;
  // The context each traced query attends to, hashed as the CPU backend hashes it (through its
  // block table, so only the rows' contents count): the traced queries' KV blocks come to the
  // host once, in a pool of their own, and each query's table points into it.
  const KvPool& pool = r.pools[layer];
  const size_t block_elems =
      static_cast<size_t>(pool.block_size) * pool.num_kv_heads * pool.head_dim;
  std::vector<int32_t> needed;  // device block ids; a block's index here is its host block
  std::vector<std::vector<int32_t>> tables(step.trace_rows.size());
  for (size_t i = 0; i < step.trace_rows.size(); ++i) {
    const cpu::AttentionQuery& query = step.queries[step.trace_rows[i]];
    const int blocks = (query.context_len + pool.block_size - 1) / pool.block_size;
    for (int b = 0; b < blocks; ++b) {
      auto at = std::find(needed.begin(), needed.end(), query.block_table[b]);
      if (at == needed.end()) at = needed.insert(needed.end(), query.block_table[b]);
      tables[i].push_back(static_cast<int32_t>(at - needed.begin()));
    }
  }
  std::vector<bf16> k(needed.size() * block_elems), v(needed.size() * block_elems);
  for (size_t b = 0; b < needed.size(); ++b) {
    const size_t offset = static_cast<size_t>(needed[b]) * block_elems;
    cudaCheck(cudaMemcpyAsync(k.data() + b * block_elems, pool.k + offset,
                              block_elems * sizeof(bf16), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaMemcpyAsync(v.data() + b * block_elems, pool.v + offset,
                              block_elems * sizeof(bf16), cudaMemcpyDeviceToHost, s));
  }
  auto outputs = download_rows(r.attn.get(), step.trace_rows, q_cols, s, r.trace_staging);
  const cpu::KvPool host{k.data(),        v.data(),          static_cast<int>(needed.size()),
                         pool.block_size, pool.num_kv_heads, pool.head_dim};
  for (size_t i = 0; i < step.trace_rows.size(); ++i) {
    const cpu::AttentionQuery& query = step.queries[step.trace_rows[i]];
    const std::string detail = attention_trace_detail(options.kernels, query, step.num_decode);
    step.trace->record(TraceEntry{
        layer, "attention", r.local.rank, step.trace_positions[i], detail, std::move(outputs[i]),
        false,
        kv_context_hash(host,
                        cpu::AttentionQuery{tables[i].data(), query.context_len, query.decode})});
  }
}

void CudaForward::Impl::logits_and_sample(int index, StepBatch& step) {
  Rank& r = *ranks[index];
  const ModelConfig& c = model->config();
  const cudaStream_t s = r.local.stream;
  const int H = c.hidden_size;
  const int V = c.vocab_size;
  const int Vl = r.w->vocab_local;
  const int Ms = static_cast<int>(step.logit_rows.size());
  const int tp = options.tp;
  if (Ms == 0) return;
  // The sampling rows of the gathered hidden states: an embedding lookup is a row gather.
  const bf16* full_rows = step.sp ? r.h_full.get() : r.h_local.get();  // [Mp, H] final-normed
  mark(r, step, "lm_head rows gather");
  embedding(full_rows, step.rows_padded, r.logit_rows.get(), r.selected.get(), Ms, H, s);
  mark(r, step, "gemm lm_head");
  r.gemm->gemm(options.kernels, r.selected.get(), r.w->lm_head, r.logits_local.get(), Ms, Vl, H, s);
  const bool tracing = step.trace != nullptr;
  const long traced =
      tracing ? std::find(step.logit_rows.begin(), step.logit_rows.end(), step.trace_rows.back()) -
                    step.logit_rows.begin()
              : Ms;
  if (traced < Ms) {
    step.trace->record(TraceEntry{
        -1, "lm_head", r.local.rank, step.trace_positions.back(), gemm_detail(r, Ms, Vl, H),
        download_bits(r.logits_local.get() + static_cast<size_t>(traced) * Vl, Vl, s,
                      r.trace_staging)});
  }
  // One rank holds the whole vocabulary: its logits are the step's, with nothing to gather.
  const bool whole_vocabulary = tp == 1 && Vl == V;
  const bf16* logits = whole_vocabulary ? r.logits_local.get() : r.logits.get();  // [Ms, V]
  if (!whole_vocabulary) {
    mark(r, step, "logits all_gather");
    r.local.comm->all_gather(r.logits_local.get(), r.gathered.get(), static_cast<size_t>(Ms) * Vl);
    wait_for(r);  // every collective of the step has completed (or the watchdog fired)
    if (index != 0) return;
    mark(r, step, "logits assemble");
    // [tp, Ms, Vl] -> [Ms, V]: rank q's slice is columns [q*Vl, (q+1)*Vl) of every row.
    for (int q = 0; q < tp; ++q) {
      cudaCheck(cudaMemcpy2DAsync(r.logits.get() + static_cast<size_t>(q) * Vl, V * sizeof(bf16),
                                  r.gathered.get() + static_cast<size_t>(q) * Ms * Vl,
                                  Vl * sizeof(bf16), Vl * sizeof(bf16), Ms,
                                  cudaMemcpyDeviceToDevice, s));
    }
  }
  // keep_logits: the rows also come back when sampling (compare.top_k / row_digest, scoring).
  if (!step.sample || step.keep_logits) {
    step.logits.resize(static_cast<size_t>(Ms) * V);
    cudaCheck(cudaMemcpyAsync(step.logits.data(), logits, step.logits.size() * sizeof(bf16),
                              cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    if (!step.sample) return;
  }
  mark(r, step, "greedy_sample");
  greedy_sample(logits, Ms, V, r.sampled.get(), r.logprobs.get(), r.sample_scratch.get(), s);
  mark(r, step, "sample download");
  cudaCheck(cudaMemcpyAsync(host_sampled.get(), r.sampled.get(), Ms * sizeof(int32_t),
                            cudaMemcpyDeviceToHost, s));
  cudaCheck(cudaMemcpyAsync(host_logprobs.get(), r.logprobs.get(), Ms * sizeof(float),
                            cudaMemcpyDeviceToHost, s));
  cudaCheck(cudaStreamSynchronize(s));
  step.sampled.assign(host_sampled.get(), host_sampled.get() + Ms);
  step.sampled_logprob.assign(host_logprobs.get(), host_logprobs.get() + Ms);
  if (traced < Ms) trace_sampled_token(step, traced, V);
}

}  // namespace bih::cuda
