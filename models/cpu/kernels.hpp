// kernels.hpp: the CPU backend's kernels, one function per op of the Qwen3 decoder.
//
// Storage is bf16, accumulation fp32. Every `invariant` kernel computes each output row with one
// reduction order that depends only on that row's data and absolute positions, never on M, the
// row's index in the batch or the other rows. The `vendor` family models what engines do by default
// (DESIGN.md, "Kernel families"): the GEMM splits K when M is small, and decode attention picks its
// KV split count from the number of decode queries in the step. The `tp_invariant` family is the
// invariant one with every GEMM's K reduced as 8 fixed chunks combined by one tree
// (models/tree_sum.hpp), so that its bits do not depend on the TP size either.
#pragma once

#include <cstdint>
#include <vector>

#include "models/bf16.hpp"
#include "models/knobs.hpp"

namespace bih::cpu {

// The vendor GEMM splits K into this many contiguous parts when M < kVendorSplitKMaxM.
inline constexpr int kVendorSplitK = 4;
inline constexpr int kVendorSplitKMaxM = 16;
// Invariant attention reduces the KV sequence in tiles of this many absolute positions.
inline constexpr int kAttentionTile = 16;

// The vendor family's KV split count for decode rows: fewer decode queries, more splits (as
// flash-decoding heuristics fill the machine), so a request alone reduces differently than in a
// batch.
inline int vendor_decode_splits(int num_decode_queries) {
  const int q = num_decode_queries > 1 ? num_decode_queries : 1;
  const int splits = 64 / q;
  return splits < 1 ? 1 : (splits > 16 ? 16 : splits);
}

// y[M,N] = x[M,K] . w[N,K]^T. tp_invariant: K must be a multiple of kTpInvariantChunks
// (std::invalid_argument otherwise).
void gemm(KernelFamily family, const bf16* x, const bf16* w, bf16* y, int M, int N, int K);

// A tp_invariant row-parallel rank's share: y[M,N] fp32, unrounded, = the chunk tree's subtree over
// this rank's `chunks` consecutive chunks of the global K (chunks = kTpInvariantChunks / tp; the
// local K splits into `chunks` equal parts). The communicator's *_tree_f32 collective continues the
// tree over the ranks and rounds once. chunks = kTpInvariantChunks gives gemm()'s sums unrounded.
void gemm_tp_invariant_partial(const bf16* x, const bf16* w, float* y, int M, int N, int K,
                               int chunks);

// y[M,H] = bf16(bf16(x * rsqrt(mean(x^2) + eps)) * w)   (HF Qwen3RMSNorm)
void rms_norm(const bf16* x, const bf16* w, bf16* y, int M, int H, float eps);

// residual[M,H] = bf16(residual + x); y[M,H] = rms_norm(residual)
void add_rms_norm(bf16* residual, const bf16* x, const bf16* w, bf16* y, int M, int H, float eps);

// cos/sin of the half-split rotary embedding: [max_pos, head_dim/2], fp32, computed in double.
struct RopeTable {
  int head_dim = 0;
  int max_pos = 0;
  std::vector<float> cos;
  std::vector<float> sin;
  static RopeTable make(int head_dim, double theta, int max_pos);
};

// x[M, n_heads, head_dim] in place: per-head rms_norm with w[head_dim], then RoPE at positions[M].
void head_norm_rope(bf16* x, const bf16* w, const int32_t* positions, int M, int n_heads,
                    int head_dim, float eps, const RopeTable& rope);

// y[M,I] = bf16(bf16(silu(gate)) * up), gate_up[M, 2I] with gate in the first I columns.
void silu_mul(const bf16* gate_up, bf16* y, int M, int I);

// y[M,H] = table[ids[m], :]
void embedding(const bf16* table, const int32_t* ids, bf16* y, int M, int H);

// Paged KV cache of one rank: k and v are [num_blocks, block_size, num_kv_heads, head_dim].
struct KvPool {
  bf16* k = nullptr;
  bf16* v = nullptr;
  int num_blocks = 0;
  int block_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};

// Writes k[M, kv_heads*head_dim], v[...] into the pool at slots[M] (block*block_size + offset);
// a negative slot (a padding row) is skipped.
void write_kv(const KvPool& kv, const bf16* k, const bf16* v, const int64_t* slots, int M);

// One query row's view of its sequence: it attends to the keys at positions [0, context_len),
// found through block_table (block_table[p / block_size]).
struct AttentionQuery {
  const int32_t* block_table = nullptr;
  int context_len = 0;
  bool decode = false;  // the row is a decode step (one new token of a running sequence)
};

// q[M, n_heads, head_dim] -> out[M, n_heads*head_dim], causal GQA, scale 1/sqrt(head_dim).
// num_decode_queries: decode rows in this step (the vendor family's split count follows it).
void attention(KernelFamily family, const bf16* q, const KvPool& kv, const AttentionQuery* queries,
               int M, int n_heads, int num_decode_queries, bf16* out);

// Greedy sampling over logits[M,V]: the argmax (ties to the lowest id) and its fp32 log-softmax.
void greedy_sample(const bf16* logits, int M, int V, int32_t* tokens, float* logprobs);

}  // namespace bih::cpu
