// bench_cuda_kernels.cpp: the CUDA backend's non-GEMM kernels at decode shapes, timed as graph
// nodes, each beside an empty kernel captured the same way.
//
// What is measured: for each kernel of models/cuda/kernels.hpp that a decode step runs, at
// qwen3-1.7b TP=1 shapes and M (rows) in {1, 64}, kLaunchesPerGraph back-to-back launches of the
// kernel on one stream captured into one CUDA graph. One replay warms up; then each iteration
// replays the graph once as a lead-in and once between two CUDA events (the lead-in keeps the GPU
// busy while the timed replay is submitted, so no host latency sits inside the window).
// us_per_launch = window / kLaunchesPerGraph: the time a graph replay spends on one such node.
// In the same iteration the peer, a graph of kLaunchesPerGraph empty kernels (grid 1, block 32,
// bench/cuda/empty_kernel.cu), is timed the same way: empty_us is the per-node floor and
// x_empty = us_per_launch / empty_us (near 1: the kernel costs what a launch costs).
// bytes_per_launch counts each distinct byte a launch reads or writes once, and GBps divides it
// by us_per_launch. Every launch of a graph reads the same addresses, so after the first one the
// inputs are warm in L2 (all but attention's KV at M=64, ctx=512: 134 MB), and GBps can exceed
// HBM bandwidth; in a real step the KV and embedding rows come from HBM.
// Inputs are seeded random bf16 (uniform; norm weights in [0.5, 1.5)), valid positions and slots,
// contiguous block tables; in-place kernels (add_rms_norm, head_norm_rope) stay finite when
// repeated.
//
// Benchmarks (Kernel/<kernel>/M=<rows>): rms_norm, add_rms_norm, head_norm_rope_q/_k (16 and 8
// heads), silu_mul, write_kv, qkv_norm_rope_write_kv (the fused attention input the engine runs:
// split, both head norms and RoPE, and the KV write in one launch), embedding (token lookup in the
// [vocab, hidden] table; the lm_head row gather is the same kernel over a [M, hidden] table),
// attention_long/invariant/ctx=<256|512|4096>/<whole|split_kv> at M=1 (block tables sized for the
// context; split_kv gives the scratch, as the engine does: each 128 keys get a block of their own),
// attention/<family>/ctx=<64|512> (decode rows, one sequence per row; vendor splits as the engine
// picks them for M decode rows), greedy_sample (its three kernels as one launch: nodes_per_launch
// 3), qkv_split_copies (the three cudaMemcpy2DAsync of cuda_forward_layers.cpp's enqueue_piece as
// one launch: nodes_per_launch 3), and Kernel/empty/blocks=<1|1024> alone. Last,
// Kernel/step_sum/<family>/ctx=<c>/M=<rows>: the non-GEMM kernels of one decode step (num_layers x
// (qkv_norm_rope_write_kv, attention, 2 add_rms_norm, silu_mul) + embedding, rms_norm, lm_head row
// gather, greedy_sample) summed from the times measured above in the same run: us_per_step, nodes
// and launch_floor_us = nodes x empty_us (x_empty there is us_per_step / launch_floor_us; for
// qkv_split_copies alone it compares 3 nodes with 1).
//
// Run: bih_cuda_bench --benchmark_filter=Kernel (without a GPU every benchmark is skipped).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/cuda/empty_kernel.hpp"
#include "models/bf16.hpp"
#include "models/config.hpp"
#include "models/cuda/check.hpp"
#include "models/cuda/cuda_handles.hpp"
#include "models/cuda/kernels.hpp"
#include "models/knobs.hpp"

namespace {

namespace cu = bih::cuda;
using bih::bf16;
using bih::KernelFamily;

constexpr int kLaunchesPerGraph = 200;
constexpr int kIterations = 30;
constexpr int kMaxModelLen = 512;  // the engine's default: block tables of 512 / 16 entries
constexpr int kBlockSize = 16;
constexpr int kEmptyBlocks = 1;    // the peer: the smallest launch there is
constexpr int kEmptyThreads = 32;  // one warp
const bih::ModelConfig kConfig = *bih::preset_config("qwen3-1.7b");
const std::vector<int> kRows = {1, 64};
const std::vector<int> kContexts = {64, 512};

// Seconds per launch of a kernel and of its empty peer, by benchmark name without "Kernel/".
std::map<std::string, std::pair<double, double>> g_seconds;

bool gpu_visible() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// ---- device resources (RAII) --------------------------------------------------------------

// count elements of T from cuda::device_alloc.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count)
      : data_(static_cast<T*>(cu::device_alloc(std::max<size_t>(count, 1) * sizeof(T)))) {}
  ~DeviceBuffer() { cu::device_free(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
};

// Shared so that a launch lambda that captures it keeps it alive.
template <class T>
using Buffer = std::shared_ptr<DeviceBuffer<T>>;

template <class T>
Buffer<T> upload(const std::vector<T>& host) {
  auto buffer = std::make_shared<DeviceBuffer<T>>(host.size());
  cu::copy_to_device(buffer->get(), host.data(), host.size() * sizeof(T), nullptr);
  cu::synchronize(nullptr);  // the host vector dies with the caller; the bench stream is separate
  return buffer;
}

// count bf16 values uniform in [lo, hi) from `seed`. Tensors past 1 Mi elements repeat a random
// tile of that size (only finiteness matters to the timing, and the embedding table is 311 M).
Buffer<bf16> random_bf16(size_t count, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<bf16> tile(std::min<size_t>(count, size_t{1} << 20));
  for (bf16& v : tile) v = bih::to_bf16(uniform(rng));
  auto buffer = std::make_shared<DeviceBuffer<bf16>>(count);
  for (size_t offset = 0; offset < count; offset += tile.size()) {
    const size_t n = std::min(tile.size(), count - offset);
    cu::copy_to_device(buffer->get() + offset, tile.data(), n * sizeof(bf16), nullptr);
  }
  cu::synchronize(nullptr);
  return buffer;
}

using bih::cuda::OwnedEvent;
using bih::cuda::OwnedStream;

using Launch = std::function<void(cudaStream_t)>;

// An instantiated graph of `launches` back-to-back calls of `launch` on `stream`.
class CapturedGraph {
 public:
  CapturedGraph(cudaStream_t stream, int launches, const Launch& launch) {
    cudaCheck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      for (int i = 0; i < launches; ++i) launch(stream);
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);  // ends the (invalidated) capture: the stream is usable
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      throw;
    }
    cudaCheck(cudaStreamEndCapture(stream, &graph));
    const cudaError_t instantiated = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    cudaCheck(instantiated);
  }
  ~CapturedGraph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void replay(cudaStream_t stream) const { cudaCheck(cudaGraphLaunch(exec_, stream)); }

  // Seconds of one replay: a lead-in replay, then the timed one between events, so the window
  // opens with the GPU still busy and holds no host submission latency.
  double timed_replay(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop) const {
    replay(stream);
    cudaCheck(cudaEventRecord(start, stream));
    replay(stream);
    cudaCheck(cudaEventRecord(stop, stream));
    cudaCheck(cudaEventSynchronize(stop));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, start, stop));
    return ms * 1e-3;
  }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

// ---- the kernels under test -----------------------------------------------------------------

// One launch of the kernel under test; the lambda holds the buffers it uses.
struct KernelCase {
  Launch launch;
  double bytes = 0.0;  // distinct bytes one launch reads + writes; 0: not meaningful
  int nodes = 1;       // graph nodes one launch adds
  std::string label;   // shapes
};

using MakeCase = std::function<KernelCase(int M)>;

std::string dims(std::initializer_list<long> sizes) {
  std::string text = "[";
  for (long s : sizes) text += (text.size() > 1 ? "," : "") + std::to_string(s);
  return text + "]";
}

constexpr double kBf16Bytes = sizeof(bf16);

KernelCase empty_case(int blocks, int threads) {
  return {
      [blocks, threads](cudaStream_t s) { bih::bench::launch_empty_kernel(s, blocks, threads); },
      0.0, 1, "grid " + std::to_string(blocks) + " x " + std::to_string(threads)};
}

KernelCase rms_norm_case(int M) {
  const int H = kConfig.hidden_size;
  auto x = random_bf16(size_t{1} * M * H, 1);  // [M, H]
  auto w = random_bf16(H, 2, 0.5f, 1.5f);      // [H]
  auto y = random_bf16(size_t{1} * M * H, 3);  // [M, H]
  const float eps = kConfig.rms_norm_eps;
  return {[=](cudaStream_t s) { cu::rms_norm(x->get(), w->get(), y->get(), M, H, eps, s); },
          kBf16Bytes * (2.0 * M * H + H), 1, "x " + dims({M, H})};
}

KernelCase add_rms_norm_case(int M) {
  const int H = kConfig.hidden_size;
  auto residual = random_bf16(size_t{1} * M * H, 4);  // [M, H] in place
  auto x = random_bf16(size_t{1} * M * H, 5);         // [M, H]
  auto w = random_bf16(H, 6, 0.5f, 1.5f);             // [H]
  auto y = random_bf16(size_t{1} * M * H, 7);         // [M, H]
  const float eps = kConfig.rms_norm_eps;
  return {[=](cudaStream_t s) {
            cu::add_rms_norm(residual->get(), x->get(), w->get(), y->get(), M, H, eps, s);
          },
          kBf16Bytes * (4.0 * M * H + H), 1, "residual, x " + dims({M, H})};
}

// q (n_heads = num_heads) or k (num_kv_heads) of one layer, at positions in [0, kMaxModelLen).
KernelCase head_norm_rope_case(int M, int n_heads) {
  const int hd = kConfig.head_dim;
  auto x = random_bf16(size_t{1} * M * n_heads * hd, 8);  // [M, n_heads, hd] in place
  auto w = random_bf16(hd, 9, 0.5f, 1.5f);                // [hd]
  std::vector<int32_t> host_positions(M);                 // [M]
  for (int m = 0; m < M; ++m) host_positions[m] = (m * 37 + 11) % kMaxModelLen;
  auto positions = upload(host_positions);
  auto rope = std::make_shared<cu::DeviceRopeTable>(
      cu::upload_rope_table(bih::cpu::RopeTable::make(hd, kConfig.rope_theta, kMaxModelLen)));
  const float eps = kConfig.rms_norm_eps;
  // The head in and out, the weight, the position, one cos and one sin row per row.
  const double bytes = kBf16Bytes * (2.0 * M * n_heads * hd + hd) + 4.0 * M + 4.0 * M * hd;
  return {[=](cudaStream_t s) {
            cu::head_norm_rope(x->get(), w->get(), positions->get(), M, n_heads, hd, eps, *rope, s);
          },
          bytes, 1, "x " + dims({M, n_heads, hd})};
}

KernelCase silu_mul_case(int M) {
  const int I = kConfig.intermediate_size;
  auto gate_up = random_bf16(size_t{1} * M * 2 * I, 10);  // [M, 2I]
  auto y = random_bf16(size_t{1} * M * I, 11);            // [M, I]
  return {[=](cudaStream_t s) { cu::silu_mul(gate_up->get(), y->get(), M, I, s); },
          kBf16Bytes * 3.0 * M * I, 1, "gate_up " + dims({M, 2 * I})};
}

KernelCase embedding_case(int M) {
  const int H = kConfig.hidden_size;
  const int V = kConfig.vocab_size;
  auto table = random_bf16(size_t{1} * V * H, 12);  // [V, H]
  std::vector<int32_t> host_ids(M);                 // [M]
  std::mt19937 rng(13);
  for (int32_t& id : host_ids) id = static_cast<int32_t>(rng() % V);
  auto ids = upload(host_ids);
  auto y = random_bf16(size_t{1} * M * H, 14);  // [M, H]
  return {[=](cudaStream_t s) { cu::embedding(table->get(), V, ids->get(), y->get(), M, H, s); },
          kBf16Bytes * 2.0 * M * H + 4.0 * M, 1, "table " + dims({V, H})};
}

// A paged KV pool holding M sequences of `context` tokens each, in contiguous blocks (sequence m
// owns blocks [m * blocks_per_seq, (m + 1) * blocks_per_seq)), with their block tables.
struct DecodeContexts {
  Buffer<bf16> k, v;             // [num_blocks, block_size, kv_heads, head_dim]
  Buffer<int32_t> block_tables;  // [M, stride]
  Buffer<int32_t> context_lens;  // [M]
  Buffer<uint8_t> decode;        // [M], all 1
  cu::KvPool pool;
  int stride = 0;
  int blocks_per_seq = 0;
};

DecodeContexts decode_contexts(int M, int context, int max_model_len = kMaxModelLen) {
  DecodeContexts c;
  c.stride = (max_model_len + kBlockSize - 1) / kBlockSize;
  c.blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
  const int num_blocks = M * c.blocks_per_seq;
  const size_t pool_elems =
      size_t{1} * num_blocks * kBlockSize * kConfig.num_kv_heads * kConfig.head_dim;
  c.k = random_bf16(pool_elems, 15);
  c.v = random_bf16(pool_elems, 16);
  std::vector<int32_t> tables(size_t{1} * M * c.stride, 0);
  for (int m = 0; m < M; ++m) {
    for (int b = 0; b < c.blocks_per_seq; ++b)
      tables[size_t{1} * m * c.stride + b] = m * c.blocks_per_seq + b;
  }
  c.block_tables = upload(tables);
  c.context_lens = upload(std::vector<int32_t>(M, context));
  c.decode = upload(std::vector<uint8_t>(M, 1));
  c.pool = cu::KvPool{c.k->get(), c.v->get(),           num_blocks,
                      kBlockSize, kConfig.num_kv_heads, kConfig.head_dim};
  return c;
}

// Each row writes the KV of its sequence's newest token (position kMaxModelLen - 1).
KernelCase write_kv_case(int M) {
  const int kv_cols = kConfig.num_kv_heads * kConfig.head_dim;
  auto contexts = std::make_shared<DecodeContexts>(decode_contexts(M, kMaxModelLen));
  auto k = random_bf16(size_t{1} * M * kv_cols, 17);  // [M, kv_cols]
  auto v = random_bf16(size_t{1} * M * kv_cols, 18);  // [M, kv_cols]
  std::vector<int64_t> host_slots(M);                 // [M]
  const int pos = kMaxModelLen - 1;
  for (int m = 0; m < M; ++m) {
    host_slots[m] =
        int64_t{m * contexts->blocks_per_seq + pos / kBlockSize} * kBlockSize + pos % kBlockSize;
  }
  auto slots = upload(host_slots);
  return {
      [=](cudaStream_t s) { cu::write_kv(contexts->pool, k->get(), v->get(), slots->get(), M, s); },
      kBf16Bytes * 4.0 * M * kv_cols + 8.0 * M, 1, "k, v " + dims({M, kv_cols})};
}

// The fused attention input the engine runs per layer: [M, q | k | v] split, q and k heads normed
// and roped, and each row's k and v written to its sequence's newest slot (position
// kMaxModelLen - 1, as write_kv_case), at that position.
KernelCase qkv_norm_rope_write_kv_case(int M) {
  const int hd = kConfig.head_dim;
  const int q_cols = kConfig.num_heads * hd;
  const int kv_cols = kConfig.num_kv_heads * hd;
  const int qkv_cols = q_cols + 2 * kv_cols;
  auto contexts = std::make_shared<DecodeContexts>(decode_contexts(M, kMaxModelLen));
  auto qkv = random_bf16(size_t{1} * M * qkv_cols, 26);  // [M, qkv_cols]
  auto q_norm = random_bf16(hd, 27, 0.5f, 1.5f);         // [hd]
  auto k_norm = random_bf16(hd, 28, 0.5f, 1.5f);         // [hd]
  auto q = random_bf16(size_t{1} * M * q_cols, 29);      // [M, q_cols]
  auto k = random_bf16(size_t{1} * M * kv_cols, 30);     // [M, kv_cols]
  const int pos = kMaxModelLen - 1;
  auto positions = upload(std::vector<int32_t>(M, pos));  // [M]
  std::vector<int64_t> host_slots(M);                     // [M]
  for (int m = 0; m < M; ++m) {
    host_slots[m] =
        int64_t{m * contexts->blocks_per_seq + pos / kBlockSize} * kBlockSize + pos % kBlockSize;
  }
  auto slots = upload(host_slots);
  auto rope = std::make_shared<cu::DeviceRopeTable>(
      cu::upload_rope_table(bih::cpu::RopeTable::make(hd, kConfig.rope_theta, kMaxModelLen)));
  const float eps = kConfig.rms_norm_eps;
  // qkv in; q, k out; k and v into the pool; both norm weights; position, slot, one cos and one
  // sin row per row.
  const double bytes = kBf16Bytes * (1.0 * M * qkv_cols + 1.0 * M * (q_cols + kv_cols) +
                                     2.0 * M * kv_cols + 2.0 * hd) +
                       12.0 * M + 4.0 * M * hd;
  return {[=](cudaStream_t s) {
            cu::qkv_norm_rope_write_kv(qkv->get(), q_norm->get(), k_norm->get(), positions->get(),
                                       slots->get(), M, kConfig.num_heads, kConfig.num_kv_heads, hd,
                                       eps, *rope, contexts->pool, q->get(), k->get(), s);
          },
          bytes, 1, "qkv " + dims({M, qkv_cols})};
}

KernelCase attention_case(int M, KernelFamily family, int context) {
  const int n_heads = kConfig.num_heads;
  const int hd = kConfig.head_dim;
  auto contexts = std::make_shared<DecodeContexts>(decode_contexts(M, context));
  auto q = random_bf16(size_t{1} * M * n_heads * hd, 19);    // [M, n_heads, hd]
  auto out = random_bf16(size_t{1} * M * n_heads * hd, 20);  // [M, n_heads * hd]
  const cu::AttentionBatch batch{contexts->block_tables->get(), contexts->stride,
                                 contexts->context_lens->get(), contexts->decode->get()};
  // q and out, each row's K and V once (a KV head serves its whole query group), the block
  // table entries in use, the context length and the decode flag.
  const double bytes =
      kBf16Bytes * (2.0 * M * n_heads * hd + 2.0 * M * context * kConfig.num_kv_heads * hd) +
      4.0 * M * contexts->blocks_per_seq + 5.0 * M;
  std::string label = "q " + dims({M, n_heads, hd}) + " ctx " + std::to_string(context);
  if (family == KernelFamily::vendor) {
    label += " splits " + std::to_string(bih::cpu::vendor_decode_splits(M));
  }
  return {[=](cudaStream_t s) {
            cu::attention(family, q->get(), contexts->pool, batch, M, n_heads, M, out->get(), s);
          },
          bytes, 1, label};
}

// The invariant family's decode attention at long contexts (the block tables sized for exactly
// `context`), with split KV (the engine's way: the scratch given) or without it.
KernelCase attention_long_case(int M, int context, bool split) {
  const int n_heads = kConfig.num_heads;
  const int hd = kConfig.head_dim;
  auto contexts = std::make_shared<DecodeContexts>(decode_contexts(M, context, context));
  auto q = random_bf16(size_t{1} * M * n_heads * hd, 19);    // [M, n_heads, hd]
  auto out = random_bf16(size_t{1} * M * n_heads * hd, 20);  // [M, n_heads * hd]
  const size_t scratch_bytes = split ? cu::attention_split_scratch_bytes(hd, context) : 0;
  auto scratch = std::make_shared<DeviceBuffer<uint8_t>>(std::max<size_t>(scratch_bytes, 1));
  cudaCheck(cudaMemset(scratch->get(), 0, scratch_bytes));  // the arrival counters start at zero
  cudaCheck(cudaDeviceSynchronize());  // before the case's own (non-blocking) stream uses it
  const cu::AttentionBatch batch{contexts->block_tables->get(), contexts->stride,
                                 contexts->context_lens->get(), contexts->decode->get()};
  const double bytes =
      kBf16Bytes * (2.0 * M * n_heads * hd + 2.0 * M * context * kConfig.num_kv_heads * hd) +
      4.0 * M * contexts->blocks_per_seq + 5.0 * M;
  return {[=](cudaStream_t s) {
            cu::attention(KernelFamily::invariant, q->get(), contexts->pool, batch, M, n_heads, M,
                          out->get(), s, split ? scratch->get() : nullptr, scratch_bytes);
          },
          bytes, 1,
          "q " + dims({M, n_heads, hd}) + " ctx " + std::to_string(context) +
              (split ? " split KV" : " whole context per block")};
}

KernelCase greedy_sample_case(int M) {
  const int V = kConfig.vocab_size;
  auto logits = random_bf16(size_t{1} * M * V, 21);  // [M, V]
  auto tokens = std::make_shared<DeviceBuffer<int32_t>>(M);
  auto logprobs = std::make_shared<DeviceBuffer<float>>(M);
  auto scratch = std::make_shared<DeviceBuffer<uint8_t>>(cu::greedy_sample_scratch_bytes(M));
  return {[=](cudaStream_t s) {
            cu::greedy_sample(logits->get(), M, V, tokens->get(), logprobs->get(), scratch->get(),
                              s);
          },
          kBf16Bytes * M * V + 8.0 * M, cu::kSampleLaunches, "logits " + dims({M, V})};
}

// [M, q | k | v] -> q [M, q_cols], k, v [M, kv_cols], as enqueue_piece splits the qkv GEMM.
KernelCase qkv_split_case(int M) {
  const int q_cols = kConfig.num_heads * kConfig.head_dim;
  const int kv_cols = kConfig.num_kv_heads * kConfig.head_dim;
  const int qkv_cols = q_cols + 2 * kv_cols;
  auto qkv = random_bf16(size_t{1} * M * qkv_cols, 22);  // [M, qkv_cols]
  auto q = random_bf16(size_t{1} * M * q_cols, 23);      // [M, q_cols]
  auto k = random_bf16(size_t{1} * M * kv_cols, 24);     // [M, kv_cols]
  auto v = random_bf16(size_t{1} * M * kv_cols, 25);     // [M, kv_cols]
  const size_t pitch = qkv_cols * sizeof(bf16);
  return {
      [=](cudaStream_t s) {
        cudaCheck(cudaMemcpy2DAsync(q->get(), q_cols * sizeof(bf16), qkv->get(), pitch,
                                    q_cols * sizeof(bf16), M, cudaMemcpyDeviceToDevice, s));
        cudaCheck(cudaMemcpy2DAsync(k->get(), kv_cols * sizeof(bf16), qkv->get() + q_cols, pitch,
                                    kv_cols * sizeof(bf16), M, cudaMemcpyDeviceToDevice, s));
        cudaCheck(cudaMemcpy2DAsync(v->get(), kv_cols * sizeof(bf16), qkv->get() + q_cols + kv_cols,
                                    pitch, kv_cols * sizeof(bf16), M, cudaMemcpyDeviceToDevice, s));
      },
      kBf16Bytes * 2.0 * M * qkv_cols, 3, "qkv " + dims({M, qkv_cols})};
}

// ---- the benchmarks -------------------------------------------------------------------------

void time_kernel(benchmark::State& state, const KernelCase& kernel, const std::string& key) {
  const OwnedStream stream;
  const OwnedEvent start(cudaEventDefault);
  const OwnedEvent stop(cudaEventDefault);
  const CapturedGraph kernel_graph(stream.get(), kLaunchesPerGraph, kernel.launch);
  const CapturedGraph empty_graph(stream.get(), kLaunchesPerGraph, [](cudaStream_t s) {
    bih::bench::launch_empty_kernel(s, kEmptyBlocks, kEmptyThreads);
  });
  kernel_graph.replay(stream.get());  // warm-up: loads the modules, fills the caches
  empty_graph.replay(stream.get());
  cu::synchronize(stream.get());

  double kernel_seconds = 0.0;
  double empty_seconds = 0.0;
  for (auto _ : state) {
    const double kernel_s =
        kernel_graph.timed_replay(stream.get(), start.get(), stop.get()) / kLaunchesPerGraph;
    const double empty_s =
        empty_graph.timed_replay(stream.get(), start.get(), stop.get()) / kLaunchesPerGraph;
    kernel_seconds += kernel_s;
    empty_seconds += empty_s;
    state.SetIterationTime(kernel_s);
  }
  const double iterations = static_cast<double>(state.iterations());
  const double per_launch = kernel_seconds / iterations;
  const double empty = empty_seconds / iterations;
  g_seconds[key] = {per_launch, empty};
  state.counters["us_per_launch"] = per_launch * 1e6;
  state.counters["empty_us"] = empty * 1e6;
  state.counters["x_empty"] = per_launch / empty;
  if (kernel.nodes != 1) state.counters["nodes_per_launch"] = kernel.nodes;
  if (kernel.bytes > 0) {
    state.counters["bytes_per_launch"] = kernel.bytes;
    state.counters["GBps"] = kernel.bytes / per_launch * 1e-9;
  }
  state.SetLabel(kernel.label);
}

void BM_Kernel(benchmark::State& state, const MakeCase& make, int M, const std::string& key) {
  if (!gpu_visible()) {
    state.SkipWithError("no CUDA GPU visible");
    return;
  }
  try {
    time_kernel(state, make(M), key);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// The non-GEMM kernels of one decode step, from the times g_seconds holds.
void BM_StepSum(benchmark::State& state, KernelFamily family, int context, int M) {
  if (!gpu_visible()) {
    state.SkipWithError("no CUDA GPU visible");
    return;
  }
  const std::string rows = "/M=" + std::to_string(M);
  const double L = kConfig.num_layers;
  // (benchmark key, launches per step, graph nodes per launch)
  const std::vector<std::tuple<std::string, double, int>> parts = {
      {"add_rms_norm", 2 * L, 1},
      {"silu_mul", L, 1},
      {"qkv_norm_rope_write_kv", L, 1},
      {"attention/" + bih::to_string(family) + "/ctx=" + std::to_string(context), L, 1},
      {"embedding", 2, 1},  // the token lookup and the lm_head row gather
      {"rms_norm", 1, 1},
      {"greedy_sample", 1, cu::kSampleLaunches},
  };
  double step_seconds = 0.0;
  double floor_seconds = 0.0;
  double nodes = 0.0;
  for (const auto& [name, launches, nodes_per_launch] : parts) {
    const auto it = g_seconds.find(name + rows);
    if (it == g_seconds.end()) {
      state.SkipWithError(
          ("sums times measured in the same run: Kernel/" + name + rows + " did not run").c_str());
      return;
    }
    step_seconds += launches * it->second.first;
    floor_seconds += launches * nodes_per_launch * it->second.second;
    nodes += launches * nodes_per_launch;
  }
  for (auto _ : state) state.SetIterationTime(step_seconds);
  state.counters["us_per_step"] = step_seconds * 1e6;
  state.counters["launch_floor_us"] = floor_seconds * 1e6;
  state.counters["nodes"] = nodes;
  state.counters["x_empty"] = step_seconds / floor_seconds;
}

void register_kernel(const std::string& name, MakeCase make, int M) {
  const std::string key = name + "/M=" + std::to_string(M);
  benchmark::RegisterBenchmark(
      ("Kernel/" + key).c_str(),
      [make, M, key](benchmark::State& state) { BM_Kernel(state, make, M, key); })
      ->UseManualTime()
      ->Iterations(kIterations)
      ->Unit(benchmark::kMicrosecond);
}

void register_kernel_benchmarks() {
  for (int blocks : {kEmptyBlocks, 1024}) {
    const std::string name = "Kernel/empty/blocks=" + std::to_string(blocks);
    const int threads = blocks == kEmptyBlocks ? kEmptyThreads : 256;
    benchmark::RegisterBenchmark(name.c_str(),
                                 [blocks, threads, name](benchmark::State& state) {
                                   BM_Kernel(
                                       state, [=](int) { return empty_case(blocks, threads); }, 0,
                                       name.substr(7));
                                 })
        ->UseManualTime()
        ->Iterations(kIterations)
        ->Unit(benchmark::kMicrosecond);
  }
  for (int M : kRows) {
    register_kernel("rms_norm", rms_norm_case, M);
    register_kernel("add_rms_norm", add_rms_norm_case, M);
    register_kernel(
        "head_norm_rope_q", [](int m) { return head_norm_rope_case(m, kConfig.num_heads); }, M);
    register_kernel(
        "head_norm_rope_k", [](int m) { return head_norm_rope_case(m, kConfig.num_kv_heads); }, M);
    register_kernel("silu_mul", silu_mul_case, M);
    register_kernel("write_kv", write_kv_case, M);
    register_kernel("qkv_norm_rope_write_kv", qkv_norm_rope_write_kv_case, M);
    register_kernel("embedding", embedding_case, M);
    for (KernelFamily family : {KernelFamily::invariant, KernelFamily::vendor}) {
      for (int context : kContexts) {
        register_kernel(
            "attention/" + bih::to_string(family) + "/ctx=" + std::to_string(context),
            [family, context](int m) { return attention_case(m, family, context); }, M);
      }
    }
    for (int context : {256, 512, 4096}) {
      for (bool split : {false, true}) {
        if (M != 1) continue;  // split KV serves few blocks; at M=64 the pool would be 1 GiB
        register_kernel(
            "attention_long/invariant/ctx=" + std::to_string(context) +
                (split ? "/split_kv" : "/whole"),
            [context, split](int m) { return attention_long_case(m, context, split); }, M);
      }
    }
    register_kernel("greedy_sample", greedy_sample_case, M);
    register_kernel("qkv_split_copies", qkv_split_case, M);
  }
  for (int M : kRows) {
    for (KernelFamily family : {KernelFamily::invariant, KernelFamily::vendor}) {
      for (int context : kContexts) {
        const std::string name = "Kernel/step_sum/" + bih::to_string(family) +
                                 "/ctx=" + std::to_string(context) + "/M=" + std::to_string(M);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [family, context, M](benchmark::State& state) {
                                       BM_StepSum(state, family, context, M);
                                     })
            ->UseManualTime()
            ->Iterations(1)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

const bool kRegistered = (register_kernel_benchmarks(), true);

}  // namespace
