// cuda_forward.cpp: the CUDA backend's forward step (cuda_forward.hpp): construction and
// teardown, the activation and input buffers, the step inputs' staging and upload, and run(),
// which decides each piece's graph action and runs every local rank's step on its own thread.
//
// The rest of CudaForward::Impl is in cuda_forward_layers.cpp (the decoder's pieces, attention,
// logits and sampling) and cuda_forward_graphs.cpp (eager, capture and replay of a piece; a
// rank's step); the state they share is cuda_forward_impl.hpp.
#include "models/cuda/cuda_forward.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/cuda/cuda_forward_impl.hpp"

namespace bih::cuda {
CudaForward::CudaForward(std::shared_ptr<const DeviceModel> model, EngineOptions options,
                         std::vector<LocalRank> ranks, int device, CudaGemmOptions gemm_options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.model = std::move(model);
  m.options = std::move(options);
  m.device = device;
  if (ranks.empty()) throw std::invalid_argument("CudaForward: no local ranks");
  if (m.options.kernels == KernelFamily::tp_invariant) {
    check_tp_invariant_model(m.model->config(), m.options.tp);
  }
  cudaCheck(cudaSetDevice(device));
  cudaDeviceProp prop{};
  cudaCheck(cudaGetDeviceProperties(&prop, device));
  m.device_name = prop.name;
  const ModelConfig& c = m.model->config();
  m.rope =
      upload_rope_table(cpu::RopeTable::make(c.head_dim, c.rope_theta, m.options.max_model_len));
  cudaCheck(cudaStreamCreateWithFlags(&m.origin, cudaStreamNonBlocking));
  cudaCheck(cudaEventCreateWithFlags(&m.fork, cudaEventDisableTiming));
  cudaCheck(cudaEventCreateWithFlags(&m.launched, cudaEventDisableTiming));
  cudaCheck(cudaEventCreate(&m.step_start));
  cudaCheck(cudaEventCreate(&m.step_end));
  const int num_blocks = kv_pool_blocks(m.options);
  for (const LocalRank& local : ranks) {
    if (local.comm == nullptr || local.stream == nullptr || local.comm->size() != m.options.tp) {
      throw std::invalid_argument("CudaForward: rank " + std::to_string(local.rank) +
                                  " needs a communicator of size tp and its stream");
    }
    auto r = std::make_unique<Impl::Rank>();
    r->local = local;
    r->w = &m.model->rank(local.rank);
    r->gemm = std::make_unique<CudaGemm>(gemm_options);
    const size_t pool =
        static_cast<size_t>(num_blocks) * m.options.block_size * r->w->kv_heads_local * c.head_dim;
    r->kv.reserve(static_cast<size_t>(c.num_layers) * 2 * pool);
    for (int l = 0; l < c.num_layers; ++l) {
      bf16* base = r->kv.get() + static_cast<size_t>(l) * 2 * pool;
      r->pools.push_back(KvPool{base, base + pool, num_blocks, m.options.block_size,
                                r->w->kv_heads_local, c.head_dim});
    }
    r->attention_split_bytes = attention_split_scratch_bytes(
        c.head_dim, max_blocks_per_sequence(m.options) * m.options.block_size);
    r->attention_split.reserve(r->attention_split_bytes);
    // Its arrival counters start at zero; every split launch leaves them so (kernels.hpp). On the
    // rank's own stream: a non-blocking stream is not ordered after the legacy default stream.
    cudaCheck(cudaMemsetAsync(r->attention_split.get(), 0, r->attention_split_bytes, local.stream));
    cudaCheck(cudaEventCreateWithFlags(&r->ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&r->joined, cudaEventDisableTiming));
    m.ranks.push_back(std::move(r));
  }
}

CudaForward::~CudaForward() {
  Impl& m = *impl_;
  if (const std::string report = m.profiler.report(); !report.empty()) {
    std::fprintf(stderr, "%s", report.c_str());
  }
  cudaSetDevice(m.device);
  for (auto& r : m.ranks) cudaStreamSynchronize(r->local.stream);
  m.drop_graphs();
  for (auto& r : m.ranks) {
    cudaEventDestroy(r->ready);
    cudaEventDestroy(r->joined);
  }
  cudaEventDestroy(m.fork);
  cudaEventDestroy(m.launched);
  cudaEventDestroy(m.step_start);
  cudaEventDestroy(m.step_end);
  cudaStreamDestroy(m.origin);
  cudaGetLastError();
}

std::string CudaForward::describe() const {
  return "cuda(" + impl_->device_name + ", device " + std::to_string(impl_->device) + ")";
}

GraphStats CudaForward::graph_stats() const { return impl_->stats; }

void CudaForward::Impl::reserve(const StepBatch& step) {
  const ModelConfig& c = model->config();
  const size_t rows = static_cast<size_t>(step.rows_padded);
  const size_t logit_rows = std::max<size_t>(step.logit_rows.size(), 1);
  const size_t stride = max_blocks_per_sequence(options);
  bool moved = false;
  if (rows > row_capacity) {
    // Room for growth: the next large prefill should not move every graph's buffers again.
    row_capacity = std::max(rows, 2 * row_capacity);
    const size_t R = row_capacity;
    const size_t H = c.hidden_size;
    for (auto& r : ranks) {
      const size_t q_cols = static_cast<size_t>(r->w->heads_local) * c.head_dim;
      const size_t kv_cols = static_cast<size_t>(r->w->kv_heads_local) * c.head_dim;
      const size_t I = r->w->intermediate_local;
      for (DeviceArray<bf16>* a :
           {&r->residual, &r->h_local, &r->h_full, &r->partial, &r->reduced}) {
        a->reserve(R * H);
      }
      if (options.kernels == KernelFamily::tp_invariant) r->partial32.reserve(R * H);
      r->qkv.reserve(R * (q_cols + 2 * kv_cols));
      r->q.reserve(R * q_cols);
      r->attn.reserve(R * q_cols);
      r->k.reserve(R * kv_cols);
      r->gate_up.reserve(R * 2 * I);
      r->act.reserve(R * I);
    }
    moved = true;
  }
  if (logit_rows > logit_capacity) {
    logit_capacity = std::max(logit_rows, 2 * logit_capacity);
    const size_t L = logit_capacity;
    host_sampled.reserve(L);
    host_logprobs.reserve(L);
    for (auto& r : ranks) {
      r->selected.reserve(L * c.hidden_size);
      r->logits_local.reserve(L * r->w->vocab_local);
      r->gathered.reserve(L * static_cast<size_t>(c.vocab_size));
      r->logits.reserve(L * static_cast<size_t>(c.vocab_size));
      r->sampled.reserve(L);
      r->logprobs.reserve(L);
      r->sample_scratch.reserve(greedy_sample_scratch_bytes(static_cast<int>(L)));
    }
  }
  const size_t input_bytes = input_offsets(row_capacity, stride, logit_capacity).end;
  staging.reserve(input_bytes);
  for (auto& r : ranks) moved = r->inputs.reserve(input_bytes) || moved;
  if (moved) drop_graphs();
}

void CudaForward::Impl::stage_inputs(const StepBatch& step) {
  const size_t M = step.rows_padded;
  staged = input_offsets(M, max_blocks_per_sequence(options), step.logit_rows.size());
  uint8_t* base = staging.get();
  auto put = [&](size_t offset, const void* src, size_t bytes) {
    if (bytes > 0) std::memcpy(base + offset, src, bytes);
  };
  put(staged.tokens, step.tokens.data(), M * sizeof(int32_t));
  put(staged.positions, step.positions.data(), M * sizeof(int32_t));
  put(staged.context_lens, host_context_lens.data(), M * sizeof(int32_t));
  put(staged.slots, step.slots.data(), M * sizeof(int64_t));
  put(staged.decode, host_decode.data(), M);
  put(staged.block_tables, host_block_tables.data(), host_block_tables.size() * sizeof(int32_t));
  put(staged.logit_rows, step.logit_rows.data(), step.logit_rows.size() * sizeof(int32_t));
}

void CudaForward::Impl::upload_inputs(Rank& r) {
  cudaCheck(cudaMemcpyAsync(r.inputs.get(), staging.get(), staged.end, cudaMemcpyHostToDevice,
                            r.local.stream));
  uint8_t* base = r.inputs.get();
  r.tokens.p = reinterpret_cast<int32_t*>(base + staged.tokens);
  r.positions.p = reinterpret_cast<int32_t*>(base + staged.positions);
  r.context_lens.p = reinterpret_cast<int32_t*>(base + staged.context_lens);
  r.slots.p = reinterpret_cast<int64_t*>(base + staged.slots);
  r.decode.p = base + staged.decode;
  r.block_tables.p = reinterpret_cast<int32_t*>(base + staged.block_tables);
  r.logit_rows.p = reinterpret_cast<int32_t*>(base + staged.logit_rows);
}

void CudaForward::run(StepBatch& step) {
  Impl& m = *impl_;
  cudaCheck(cudaSetDevice(m.device));
  const int L = m.model->config().num_layers;
  const int M = step.rows_padded;
  m.reserve(step);

  // Inputs every rank uploads: block tables [M, stride] (padding rows: context 0, table zeros).
  const int stride = max_blocks_per_sequence(m.options);
  m.host_block_tables.assign(static_cast<size_t>(M) * stride, 0);
  m.host_context_lens.assign(M, 0);
  m.host_decode.assign(M, 0);
  for (int row = 0; row < step.rows_real; ++row) {
    const cpu::AttentionQuery& q = step.queries[row];
    const int blocks = (q.context_len + m.options.block_size - 1) / m.options.block_size;
    if (blocks > stride) throw std::invalid_argument("CudaForward: context beyond max_model_len");
    std::copy(q.block_table, q.block_table + blocks,
              m.host_block_tables.begin() + static_cast<size_t>(row) * stride);
    m.host_context_lens[row] = q.context_len;
    m.host_decode[row] = q.decode ? 1 : 0;
  }
  m.stage_inputs(step);

  // Which pieces run as graphs, decided once for all ranks.
  const bool graphs =
      m.options.graph_mode != GraphMode::none && step.graph_padded && step.trace == nullptr;
  const int splits =
      m.options.kernels == KernelFamily::vendor ? cpu::vendor_decode_splits(step.num_decode) : 0;
  std::vector<GraphKey> keys;
  if (m.options.graph_mode == GraphMode::full) {
    keys.push_back(GraphKey{M, -1, splits, step.sp});
  } else {
    for (int p = 0; p <= L; ++p) keys.push_back(GraphKey{M, p, 0, step.sp});
  }
  std::vector<GraphAction> actions(m.options.graph_mode == GraphMode::full ? 1 : L + 1,
                                   GraphAction::eager);
  if (graphs) {
    for (size_t i = 0; i < keys.size(); ++i) {
      GraphEntry& entry = m.graphs[keys[i]];
      actions[i] = entry.exec != nullptr ? GraphAction::replay
                   : entry.seen > 0      ? GraphAction::capture
                                         : GraphAction::eager;
      ++entry.seen;
    }
  }
  const bool eager = !graphs || actions[0] == GraphAction::eager;
  if (eager) ++m.stats.eager_steps;
  m.profiling_step = m.profiler.enabled() && eager && step.trace == nullptr;

  const int n = static_cast<int>(m.ranks.size());
  RankBarrier barrier(n);
  run_ranks(
      n, [&](int i) { m.run_rank(i, step, keys, actions, barrier); },
      [&](int i) {
        barrier.break_barrier();
        m.ranks[i]->local.comm->abort("rank " + std::to_string(m.ranks[i]->local.rank) +
                                      " failed during a forward step");
      });
}

}  // namespace bih::cuda
