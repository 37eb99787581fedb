// cuda_forward.cpp: the CUDA backend's forward step (cuda_forward.hpp).
#include "models/cuda/cuda_forward.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "models/cuda/check.hpp"
#include "models/cuda/device_weights.hpp"
#include "models/cuda/kernels.hpp"
#include "models/cuda/op_profiler.hpp"
#include "models/tree_sum.hpp"

namespace bih::cuda {
namespace {

// Device memory that only grows; growing moves it, so graphs that hold the old address must be
// dropped (reserve says when it moved).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() { device_free(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  bool reserve(size_t count) {
    if (count <= capacity_) return false;
    device_free(data_);
    data_ = nullptr;
    capacity_ = 0;
    data_ = static_cast<T*>(device_alloc(std::max<size_t>(count, 1) * sizeof(T)));
    capacity_ = count;
    return true;
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

// A barrier for the local ranks' threads that a failing rank can break, so that its peers throw
// instead of waiting forever.
class RankBarrier {
 public:
  explicit RankBarrier(int count) : count_(count) {}
  void arrive_and_wait() {
    if (count_ == 1) return;
    std::unique_lock lock(mutex_);
    if (broken_) throw CommAborted("a peer rank failed during the step");
    const uint64_t generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      wake_.notify_all();
      return;
    }
    wake_.wait(lock, [&] { return generation_ != generation || broken_; });
    if (generation_ == generation) throw CommAborted("a peer rank failed during the step");
  }
  void break_barrier() {
    std::lock_guard lock(mutex_);
    broken_ = true;
    wake_.notify_all();
  }

 private:
  const int count_;
  std::mutex mutex_;
  std::condition_variable wake_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

// Host memory the GPU copies to and from asynchronously (pageable memory would stage every small
// copy through a driver buffer, synchronously); grows like DeviceArray.
template <class T>
class PinnedArray {
 public:
  PinnedArray() = default;
  ~PinnedArray() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;

  void reserve(size_t count) {
    if (count <= capacity_) return;
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    capacity_ = 0;
    cudaCheck(
        cudaMallocHost(reinterpret_cast<void**>(&data_), std::max<size_t>(count, 1) * sizeof(T)));
    capacity_ = count;
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

// A step input's place in the one buffer every step's inputs travel in.
template <class T>
struct InputSlice {
  T* p = nullptr;
  T* get() const { return p; }
};

// Where each input of a step with M rows (padded) and Ms sampling rows sits in that buffer, in
// bytes: a function of (M, Ms) only, so a graph captured for M finds its inputs at the same
// addresses on every replay. The sampling rows come last (read eagerly, outside graphs).
struct InputOffsets {
  size_t tokens = 0, positions = 0, context_lens = 0, slots = 0, decode = 0, block_tables = 0,
         logit_rows = 0, end = 0;
};

InputOffsets input_offsets(size_t M, size_t stride, size_t Ms) {
  auto next = [](size_t at) { return (at + 15) / 16 * 16; };
  InputOffsets o;
  o.tokens = 0;
  o.positions = next(o.tokens + M * sizeof(int32_t));
  o.context_lens = next(o.positions + M * sizeof(int32_t));
  o.slots = next(o.context_lens + M * sizeof(int32_t));
  o.decode = next(o.slots + M * sizeof(int64_t));
  o.block_tables = next(o.decode + M * sizeof(uint8_t));
  o.logit_rows = next(o.block_tables + M * stride * sizeof(int32_t));
  o.end = next(o.logit_rows + Ms * sizeof(int32_t));
  return o;
}

// A row-parallel tp_invariant rank's fp32 partial row, as float32 patterns.
std::vector<uint32_t> download_f32_bits(const float* device_row, int cols, cudaStream_t stream) {
  std::vector<uint32_t> bits(cols);
  cudaCheck(cudaMemcpyAsync(bits.data(), device_row, cols * sizeof(float), cudaMemcpyDeviceToHost,
                            stream));
  cudaCheck(cudaStreamSynchronize(stream));
  return bits;
}

std::vector<uint32_t> download_bits(const bf16* device_row, int cols, cudaStream_t stream) {
  std::vector<bf16> host(cols);
  cudaCheck(cudaMemcpyAsync(host.data(), device_row, cols * sizeof(bf16), cudaMemcpyDeviceToHost,
                            stream));
  cudaCheck(cudaStreamSynchronize(stream));
  std::vector<uint32_t> bits(cols);
  for (int i = 0; i < cols; ++i) bits[i] = host[i].bits;
  return bits;
}

// What a step does with one graph key: the first sight runs eagerly (warm-up), the second
// captures, later ones replay.
enum class GraphAction { eager, capture, replay };

// (padded rows, piece, vendor decode splits, SP): piece -1 is the whole forward (mode full).
using GraphKey = std::tuple<int, int, int, bool>;

struct GraphEntry {
  int seen = 0;
  cudaGraphExec_t exec = nullptr;
};

}  // namespace

struct CudaForward::Impl {
  struct Rank {
    LocalRank local;
    const DeviceRankWeights* w = nullptr;
    std::unique_ptr<CudaGemm> gemm;  // per rank: the vendor family's workspace is not shareable
    DeviceArray<bf16> kv;            // [layers, 2, pool elements]
    std::vector<KvPool> pools;       // per layer
    // Activations, [capacity rows, cols].
    DeviceArray<bf16> residual, h_local, h_full, partial, reduced, qkv, q, k, attn, gate_up, act;
    // kernels tp_invariant: the row-parallel GEMMs' unrounded fp32 subtrees [capacity rows, H],
    // which the tree collectives finish (models/tree_sum.hpp).
    DeviceArray<float> partial32;
    // Step inputs: one upload per step into `inputs`, laid out by input_offsets.
    DeviceArray<uint8_t> inputs;
    InputSlice<int32_t> tokens, positions, block_tables, context_lens, logit_rows;
    InputSlice<int64_t> slots;
    InputSlice<uint8_t> decode;
    // Logits and sampling.
    DeviceArray<bf16> selected, logits_local, gathered, logits;
    DeviceArray<int32_t> sampled;
    DeviceArray<float> logprobs;
    DeviceArray<uint8_t> sample_scratch;  // greedy_sample_scratch_bytes(logit rows)
    cudaEvent_t ready = nullptr;          // the rank's work before a graph launch
    cudaEvent_t joined = nullptr;  // the rank's captured work, joined back to the origin stream
  };

  std::shared_ptr<const DeviceModel> model;
  EngineOptions options;
  int device = 0;
  std::string device_name;
  DeviceRopeTable rope;
  std::vector<std::unique_ptr<Rank>> ranks;
  size_t row_capacity = 0;
  size_t logit_capacity = 0;
  // Graphs span every local rank's stream, launched from an origin stream.
  cudaStream_t origin = nullptr;
  cudaEvent_t fork = nullptr;
  cudaEvent_t launched = nullptr;
  cudaEvent_t step_start = nullptr;  // timing events on rank index 0's stream
  cudaEvent_t step_end = nullptr;
  std::map<GraphKey, GraphEntry> graphs;
  GraphStats stats;
  OpProfiler profiler;          // rank index 0's eager steps, when BIH_CUDA_PROFILE is set
  bool profiling_step = false;  // this step runs eagerly and is profiled

  // Per-step host copies of the inputs (identical for every rank), and the pinned staging buffer
  // every rank uploads from (input_offsets layout); the sampled tokens and logprobs come back to
  // pinned memory too.
  std::vector<int32_t> host_block_tables, host_context_lens;
  std::vector<uint8_t> host_decode;
  InputOffsets staged;
  PinnedArray<uint8_t> staging;
  PinnedArray<int32_t> host_sampled;
  PinnedArray<float> host_logprobs;

  void drop_graphs() {
    for (auto& [key, entry] : graphs) {
      if (entry.exec != nullptr) cudaGraphExecDestroy(entry.exec);
    }
    graphs.clear();
  }
  void reserve(const StepBatch& step);
  void stage_inputs(const StepBatch& step);  // into `staging`; sets `staged`
  void upload_inputs(Rank& r);
  void run_rank(int index, StepBatch& step, const std::vector<GraphKey>& keys,
                const std::vector<GraphAction>& actions, RankBarrier& barrier);
  void run_piece(int index, GraphAction action, const GraphKey& key, RankBarrier& barrier,
                 const std::function<void()>& enqueue);
  void enqueue_piece(Rank& r, StepBatch& step, int piece);
  void enqueue_attention(Rank& r, StepBatch& step, int layer);
  void logits_and_sample(int index, StepBatch& step);
  void mark(const Rank& r, const StepBatch& step, const char* op) {
    if (profiling_step && &r == ranks[0].get() && step.trace == nullptr) {
      profiler.mark(op, r.local.stream);
    }
  }
  static void wait_for(const Rank& r) {
    if (r.local.wait) {
      r.local.wait();
    } else {
      cudaCheck(cudaStreamSynchronize(r.local.stream));
    }
  }
  std::string gemm_detail(Rank& r, int M, int N, int K) const;
};

namespace {

int round_up(int x, int m) { return (x + m - 1) / m * m; }

}  // namespace

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
    for (size_t i = 0; tracing && i < step.trace_rows.size(); ++i) {
      const bf16* row = tensor + static_cast<size_t>(step.trace_rows[i]) * cols;
      step.trace->record(TraceEntry{layer, op, rank, step.trace_positions[i], detail,
                                    download_bits(row, cols, s)});
    }
  };
  auto record_stream = [&](int layer, const char* op, const bf16* local_tensor,
                           const std::function<std::string(int)>& detail) {
    for (size_t i = 0; tracing && i < step.trace_rows.size(); ++i) {
      const int row = step.trace_rows[i];
      if (step.sp ? row / S != rank : rank != 0) continue;
      const bf16* src = local_tensor + static_cast<size_t>(row - row0) * H;
      step.trace->record(TraceEntry{layer, op, -1, step.trace_positions[i], detail(row),
                                    download_bits(src, H, s)});
    }
  };
  // Row-parallel GEMM into r.partial (bf16 partial sums) or, for tp_invariant, into r.partial32
  // (this rank's unrounded subtree of the chunk tree), traced as the CPU backend traces it.
  auto row_parallel = [&](int layer, const char* op, const bf16* x, const bf16* wt, int K_local) {
    if (tp_inv) {
      r.gemm->gemm_tp_invariant_partial(x, wt, r.partial32.get(), Mp, H, K_local,
                                        kTpInvariantChunks / tp, s);
      for (size_t i = 0; tracing && i < step.trace_rows.size(); ++i) {
        const float* row = r.partial32.get() + static_cast<size_t>(step.trace_rows[i]) * H;
        step.trace->record(TraceEntry{layer, op, rank, step.trace_positions[i],
                                      tp_invariant_partial_detail(Mp, H, K_local, tp),
                                      download_f32_bits(row, H, s), true});
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
    r.gemm->gemm(family, full_rows, lw.gate_up, r.gate_up.get(), Mp, 2 * I, H, s);
    mark("silu_mul");
    silu_mul(r.gate_up.get(), r.act.get(), Mp, I, s);
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
            step.num_decode, r.attn.get(), s);
  if (step.trace == nullptr) return;
  // The context each traced query attends to, hashed as the CPU backend hashes it: copy the
  // query's KV blocks to the host in a pool of their own.
  const KvPool& pool = r.pools[layer];
  const size_t block_elems =
      static_cast<size_t>(pool.block_size) * pool.num_kv_heads * pool.head_dim;
  for (size_t i = 0; i < step.trace_rows.size(); ++i) {
    const int row = step.trace_rows[i];
    const cpu::AttentionQuery& query = step.queries[row];
    const int blocks = (query.context_len + pool.block_size - 1) / pool.block_size;
    std::vector<bf16> k(blocks * block_elems), v(blocks * block_elems);
    std::vector<int32_t> table(blocks);
    for (int b = 0; b < blocks; ++b) {
      const size_t offset = static_cast<size_t>(query.block_table[b]) * block_elems;
      cudaCheck(cudaMemcpyAsync(k.data() + b * block_elems, pool.k + offset,
                                block_elems * sizeof(bf16), cudaMemcpyDeviceToHost, s));
      cudaCheck(cudaMemcpyAsync(v.data() + b * block_elems, pool.v + offset,
                                block_elems * sizeof(bf16), cudaMemcpyDeviceToHost, s));
      table[b] = b;
    }
    cudaCheck(cudaStreamSynchronize(s));
    const cpu::KvPool host{k.data(),        v.data(),          blocks,
                           pool.block_size, pool.num_kv_heads, pool.head_dim};
    const std::string detail = attention_trace_detail(options.kernels, query, step.num_decode);
    step.trace->record(TraceEntry{
        layer, "attention", r.local.rank, step.trace_positions[i], detail,
        download_bits(r.attn.get() + static_cast<size_t>(row) * q_cols, q_cols, s), false,
        kv_context_hash(host, cpu::AttentionQuery{table.data(), query.context_len, query.decode})});
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
        download_bits(r.logits_local.get() + static_cast<size_t>(traced) * Vl, Vl, s)});
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

// One piece on every local rank: eagerly, or as one graph over all their streams. Every local
// rank's thread calls this with the same action and key, in the same order.
void CudaForward::Impl::run_piece(int index, GraphAction action, const GraphKey& key,
                                  RankBarrier& barrier, const std::function<void()>& enqueue) {
  Rank& r = *ranks[index];
  if (action == GraphAction::eager) {
    enqueue();
    return;
  }
  GraphEntry& entry = graphs.at(key);  // created by run() before the threads started
  if (action == GraphAction::capture) {
    barrier.arrive_and_wait();
    if (index == 0) {
      cudaCheck(cudaStreamBeginCapture(origin, cudaStreamCaptureModeRelaxed));
      cudaCheck(cudaEventRecord(fork, origin));
    }
    barrier.arrive_and_wait();
    cudaCheck(cudaStreamWaitEvent(r.local.stream, fork, 0));  // joins the capture
    try {
      enqueue();
      cudaCheck(cudaEventRecord(r.joined, r.local.stream));
    } catch (...) {
      barrier.break_barrier();
      if (index == 0) {
        cudaGraph_t partial = nullptr;
        cudaStreamEndCapture(origin, &partial);
        if (partial != nullptr) cudaGraphDestroy(partial);
        cudaGetLastError();
      }
      throw;
    }
    barrier.arrive_and_wait();
    if (index == 0) {
      for (auto& peer : ranks) cudaCheck(cudaStreamWaitEvent(origin, peer->joined, 0));
      cudaGraph_t graph = nullptr;
      cudaCheck(cudaStreamEndCapture(origin, &graph));
      const cudaError_t instantiated = cudaGraphInstantiate(&entry.exec, graph, 0);
      cudaGraphDestroy(graph);
      cudaCheck(instantiated);
      ++stats.graphs_captured;
    }
    // Until the capture has ended, the ranks' streams still belong to it: nothing may be
    // recorded on them for the replay before that.
    barrier.arrive_and_wait();
  }
  // Replay: after every rank's earlier work, and before its later work.
  cudaCheck(cudaEventRecord(r.ready, r.local.stream));
  barrier.arrive_and_wait();
  if (index == 0) {
    for (auto& peer : ranks) cudaCheck(cudaStreamWaitEvent(origin, peer->ready, 0));
    cudaCheck(cudaGraphLaunch(entry.exec, origin));
    cudaCheck(cudaEventRecord(launched, origin));
    ++stats.graph_launches;
  }
  barrier.arrive_and_wait();
  cudaCheck(cudaStreamWaitEvent(r.local.stream, launched, 0));
}

void CudaForward::Impl::run_rank(int index, StepBatch& step, const std::vector<GraphKey>& keys,
                                 const std::vector<GraphAction>& actions, RankBarrier& barrier) {
  Rank& r = *ranks[index];
  cudaCheck(cudaSetDevice(device));
  if (index == 0) cudaCheck(cudaEventRecord(step_start, r.local.stream));
  upload_inputs(r);
  const int L = model->config().num_layers;
  if (options.graph_mode == GraphMode::full) {
    run_piece(index, actions[0], keys[0], barrier, [&] {
      for (int p = 0; p <= L; ++p) {
        enqueue_piece(r, step, p);
        if (p < L) enqueue_attention(r, step, p);
      }
    });
  } else {
    for (int p = 0; p <= L; ++p) {
      run_piece(index, actions[p], keys[p], barrier, [&] { enqueue_piece(r, step, p); });
      if (p < L) enqueue_attention(r, step, p);
    }
  }
  logits_and_sample(index, step);
  if (index == 0) cudaCheck(cudaEventRecord(step_end, r.local.stream));
  wait_for(r);
  if (index == 0) {
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, step_start, step_end));
    stats.device_span_ms += ms;
    ++stats.steps;
  }
  if (profiling_step && index == 0) profiler.end_step(r.local.stream);
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
