// kernels.hpp: the CUDA backend's non-GEMM kernels, device twins of models/cpu/kernels.hpp.
//
// Same math as the CPU kernels (bf16 storage, fp32 arithmetic, HF rounding points, no fused
// multiply-add anywhere), launched so that every output row is computed by one CUDA block (the
// sampler: a fixed number of blocks per row) with a reduction order fixed by the row's own data and
// absolute positions: never by M, the row's index in the batch, decode vs prefill, or which
// physical KV blocks hold its keys. All tensor pointers are device pointers; every function
// enqueues on `stream` and returns without synchronizing.
// Plain C++ header: callers include no CUDA header (Stream is cudaStream_t's own type).
//
// nvcc compiles this project's .cu files as C++17, and models/bf16.hpp needs C++20: so the core of
// this header names bf16 only through pointers, and the part that needs the CPU header (RoPE table
// upload, the vendor split heuristic) sits at the end, seen by C++ translation units only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "models/knobs.hpp"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace bih {
struct bf16;  // models/bf16.hpp: a bfloat16 bit pattern
}  // namespace bih

namespace bih::cuda {

using Stream = CUstream_st*;  // a cudaStream_t; nullptr is the default stream

// ---- device memory for plain C++ callers (tests, the engine's host side) -----------------------
void* device_alloc(size_t bytes);  // cudaMalloc; throws std::runtime_error on failure
void device_free(void* ptr) noexcept;
void copy_to_device(void* dst, const void* src, size_t bytes, Stream stream);
void copy_to_host(void* dst, const void* src, size_t bytes, Stream stream);
void copy_device(void* dst, const void* src, size_t bytes, Stream stream);
void synchronize(Stream stream);

// ---- norms ----------------------------------------------------------------------------------
// Threads per block of the norm kernels: fixed, so the reduction tree depends on H only.
inline constexpr int kNormThreads = 256;

// y[M,H] = bf16(bf16(x * rsqrt(mean(x^2) + eps)) * w). sum(x^2): thread t adds columns t,
// t+256, ... in order, then a fixed warp butterfly, then the 8 warp sums in warp order.
void rms_norm(const bf16* x, const bf16* w, bf16* y, int M, int H, float eps, Stream stream);

// residual[M,H] = bf16(residual + x); y[M,H] = rms_norm(residual) (same tree as rms_norm).
void add_rms_norm(bf16* residual, const bf16* x, const bf16* w, bf16* y, int M, int H, float eps,
                  Stream stream);

// ---- RoPE -----------------------------------------------------------------------------------
// A device copy of cpu::RopeTable: cos/sin [max_pos, head_dim/2] fp32, the CPU's values bit for
// bit (computed once on the host in double, uploaded; see upload_rope_table below).
class DeviceRopeTable {
 public:
  DeviceRopeTable() = default;
  // host_cos, host_sin: [max_pos, head_dim/2] host arrays, copied to the device.
  DeviceRopeTable(const float* host_cos, const float* host_sin, int head_dim, int max_pos);
  ~DeviceRopeTable();
  DeviceRopeTable(const DeviceRopeTable&) = delete;
  DeviceRopeTable& operator=(const DeviceRopeTable&) = delete;
  DeviceRopeTable(DeviceRopeTable&& other) noexcept;
  DeviceRopeTable& operator=(DeviceRopeTable&& other) noexcept;

  const float* cos() const { return cos_; }  // device [max_pos, head_dim/2]
  const float* sin() const { return sin_; }  // device [max_pos, head_dim/2]
  int head_dim() const { return head_dim_; }
  int max_pos() const { return max_pos_; }

 private:
  float* cos_ = nullptr;
  float* sin_ = nullptr;
  int head_dim_ = 0;
  int max_pos_ = 0;
};

// Largest head_dim the per-head kernels (head_norm_rope, qkv_norm_rope_write_kv, attention) accept.
inline constexpr int kMaxHeadDim = 256;

// x[M, n_heads, head_dim] in place: per (row, head) rms_norm with w[head_dim] (sum of squares in
// index order, as on the CPU), then half-split RoPE at positions[M] (device). A row whose
// position lies outside [0, max_pos) is filled with NaN (callers validate positions on the host;
// the NaN makes a missed check visible instead of reading out of bounds). Throws
// std::invalid_argument when head_dim does not match the table or exceeds kMaxHeadDim.
void head_norm_rope(bf16* x, const bf16* w, const int32_t* positions, int M, int n_heads,
                    int head_dim, float eps, const DeviceRopeTable& rope, Stream stream);

struct KvPool;  // below

// The attention input of a step in one launch: splits qkv[M, (n_heads + 2*kv_heads) * head_dim]
// (q | k | v columns), applies head_norm_rope to its q heads (q_norm) and k heads (k_norm), and
// writes the step's keys and values into the pool as write_kv does. Outputs q[M, n_heads*head_dim]
// and k[M, kv_heads*head_dim] normed and roped; the pool gets k's bits and v's unchanged at
// slots[M] (a negative slot or one past the pool's end skips the pool write). Each (row, head) is
// head_norm_rope's own per-head code, so every output is bit for bit head_norm_rope after the
// split, then write_kv; a position outside the table gives a NaN q or k head (also in the pool).
// One warp per (row, q or k head); the k head's warp also copies the matching v head. qkv must
// not overlap q, k or the pool. Throws std::invalid_argument when head_dim does not match the
// table or exceeds kMaxHeadDim, or the pool is not [.., kv_heads, head_dim].
void qkv_norm_rope_write_kv(const bf16* qkv, const bf16* q_norm, const bf16* k_norm,
                            const int32_t* positions, const int64_t* slots, int M, int n_heads,
                            int kv_heads, int head_dim, float eps, const DeviceRopeTable& rope,
                            const KvPool& kv, bf16* q, bf16* k, Stream stream);

// ---- elementwise ----------------------------------------------------------------------------
// y[M,I] = bf16(bf16(silu(gate)) * up), gate_up[M, 2I] with gate in the first I columns.
void silu_mul(const bf16* gate_up, bf16* y, int M, int I, Stream stream);

// y[M,H] = table[ids[m], :], table [vocab, H]; an id outside [0, vocab) gives a NaN row.
void embedding(const bf16* table, int vocab, const int32_t* ids, bf16* y, int M, int H,
               Stream stream);

// ---- KV cache and attention -----------------------------------------------------------------
// Invariant attention reduces the KV sequence in tiles of this many absolute positions
// (cpu::kAttentionTile; checked equal below).
inline constexpr int kAttentionTile = 16;

// Paged KV cache of one rank in device memory: k, v [num_blocks, block_size, num_kv_heads,
// head_dim] (the layout of cpu::KvPool).
struct KvPool {
  bf16* k = nullptr;
  bf16* v = nullptr;
  int num_blocks = 0;
  int block_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};

// Writes k[M, kv_heads*head_dim], v[...] into the pool at slots[M] (device; block*block_size +
// offset). A negative slot (a padding row) is skipped, and so is a slot past the pool's end
// (callers validate slots on the host; the device cannot throw).
void write_kv(const KvPool& kv, const bf16* k, const bf16* v, const int64_t* slots, int M,
              Stream stream);

// The per-row view of a step's sequences, all device arrays: row m attends to positions
// [0, context_lens[m]) found through block_tables[m * block_table_stride + pos / block_size];
// decode[m] != 0 marks a decode step (one new token of a running sequence).
struct AttentionBatch {
  const int32_t* block_tables = nullptr;  // [M, block_table_stride]
  int block_table_stride = 0;
  const int32_t* context_lens = nullptr;  // [M]
  const uint8_t* decode = nullptr;        // [M]
};

// q[M, n_heads, head_dim] -> out[M, n_heads*head_dim], causal GQA, scale 1/sqrt(head_dim); one
// CUDA block per (row, head). invariant: KV in tiles of kAttentionTile absolute positions, each
// tile's scores, max, exp-sum and weighted V in key order, tiles folded in increasing order with
// the online-softmax rescaling. vendor: decode rows split their context into vendor_splits
// contiguous parts reduced in parallel key by key, then combined in order (flash-decoding);
// prefill rows as invariant. Most callers want attention() below, which picks vendor_splits.
// Each pass of up to keys_per_pass keys is staged in shared memory (at 128 keys 67 KiB at
// head_dim 128, 150 KiB at 256; past the 48 KiB default it is opted in once per device). The pass
// length changes no bit of the output: 0 lets the launcher pick, from M * n_heads, the longest of
// 128, 64 and 32 keys whose blocks all fit on the GPU at once (a decode step at bs=1 takes 128, at
// bs=64 32); tests pass 32, 64 or 128 (any multiple of kAttentionTile from 32 to 128).
// split_scratch (invariant family only): device memory of split_scratch_bytes >=
// attention_split_scratch_bytes(head_dim, block_table_stride * block_size), zero-filled before
// its first launch (every launch leaves it so), used by one stream at a time. Given, a launch of
// at most half as many (row, head) blocks as the GPU has multiprocessors, whose block tables reach
// past 128 keys, splits each context into segments of 128 keys, one block each, the last of which
// to finish folds the segments' tiles in order: the same bits (attention_split_fold.cuh), a long
// context at bs=1 spread over the GPU in one launch. attention_reference.hpp
// keeps the previous, unstaged kernel as the bitwise reference of this one (tests only).
void attention_with_splits(KernelFamily family, const bf16* q, const KvPool& kv,
                           const AttentionBatch& batch, int M, int n_heads, int vendor_splits,
                           bf16* out, Stream stream, int keys_per_pass = 0,
                           void* split_scratch = nullptr, size_t split_scratch_bytes = 0);

// Bytes of split_scratch a launch with this head_dim and longest context (its block table's
// stride times the pool's block size) needs on the current GPU.
size_t attention_split_scratch_bytes(int head_dim, int max_context);

// ---- sampling -------------------------------------------------------------------------------
// Greedy sampling over logits[M,V]: tokens[M] the argmax (ties to the lowest id; the CPU's scan,
// NaN included: a NaN logit is never chosen unless it is logit 0, which then is) and logprobs[M]
// its fp32 log-softmax x[best] - (x[best] + log(sum_j exp(x[j] - x[best]))), each exp term as the
// CPU computes it, summed in a fixed tree that depends on V only (not the CPU's sequential chain,
// so the logprob agrees with the CPU's within rounding, not bitwise).
//
// Three launches, so that even one row (a decode step at bs=1) spreads over the whole GPU: each row
// is cut into kSampleBlocks slices of greedy_sample_slice_length(V) ids (whole chunks of
// kSampleChunk ids; the last slices may be shorter or empty), and
//   1. grid [M, kSampleBlocks]: each slice's best (value, id);
//   2. grid [M, kSampleBlocks]: each block combines its row's slice winners into the row's, then
//      sums its slice's exp(x - x[best]);
//   3. grid [M]: the row's slice sums in a fixed tree, then the token and logprob.
// The slice count is a constant, never a function of M, so a row's reduction tree is one function
// of V, and rows are independent: bitwise the same at every M and row position.
inline constexpr int kSampleBlocks = 128;   // slices per row: a block each in launches 1 and 2
inline constexpr int kSampleThreads = 160;  // per block of launches 1 and 2
inline constexpr int kSampleChunk = 8;      // ids per 16-byte load of bf16
inline constexpr int kSampleLaunches = 3;   // kernel launches (graph nodes) per greedy_sample

// Ids per slice: ceil(ceil(V / kSampleChunk) / kSampleBlocks) whole chunks. Slice b of a row holds
// ids [b * length, min(V, (b + 1) * length)). At V = 151936: 149 chunks, one 16-byte load per
// thread of a 160-thread block.
inline constexpr int greedy_sample_slice_length(int V) {
  const int64_t chunks = (int64_t{V} + kSampleChunk - 1) / kSampleChunk;
  return static_cast<int>((chunks + kSampleBlocks - 1) / kSampleBlocks * kSampleChunk);
}

// Device scratch one greedy_sample over M rows needs (the slices' partial results): a function of
// M alone. The caller owns it; it must not be shared with a greedy_sample that may run
// concurrently (another stream or rank), and must be 8-byte aligned (cudaMalloc's is).
size_t greedy_sample_scratch_bytes(int M);

// logits: [M, V]; tokens, logprobs: [M]; scratch: greedy_sample_scratch_bytes(M) bytes. Any V >= 1
// and any logits address with 2-byte alignment: rows that are 16-byte aligned are read with
// 16-byte loads, others element by element, with the same arithmetic in the same order.
void greedy_sample(const bf16* logits, int M, int V, int32_t* tokens, float* logprobs,
                   void* scratch, Stream stream);

}  // namespace bih::cuda

#if !defined(__CUDACC__)
#include "models/cpu/kernels.hpp"

namespace bih::cuda {

static_assert(kAttentionTile == cpu::kAttentionTile, "GPU and CPU attention tiles must agree");

// The CPU's RoPE table on the device, bit for bit.
inline DeviceRopeTable upload_rope_table(const cpu::RopeTable& table) {
  return DeviceRopeTable(table.cos.data(), table.sin.data(), table.head_dim, table.max_pos);
}

// attention_with_splits with the CPU vendor family's heuristic: the split count of decode rows
// follows num_decode_queries (the decode rows in this step), cpu::vendor_decode_splits.
inline void attention(KernelFamily family, const bf16* q, const KvPool& kv,
                      const AttentionBatch& batch, int M, int n_heads, int num_decode_queries,
                      bf16* out, Stream stream, void* split_scratch = nullptr,
                      size_t split_scratch_bytes = 0) {
  attention_with_splits(family, q, kv, batch, M, n_heads,
                        cpu::vendor_decode_splits(num_decode_queries), out, stream, 0,
                        split_scratch, split_scratch_bytes);
}

}  // namespace bih::cuda
#endif
