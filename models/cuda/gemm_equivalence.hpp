// gemm_equivalence.hpp: device helpers for proving two GEMM configurations bitwise equal.
//
// CudaGemm (gemm_companion.cpp) lets a faster cuBLASLt configuration serve a range of M in place
// of the pinned one only after both produced the same bits on data built to expose any difference
// in the order of the K accumulation; these are that data and the comparison.
//
// Order-sensitive operands: a quarter of the K positions come in pairs (k1, k2) with
// x[r, k2] = x[r, k1] and w[n, k2] = -w[n, k1], so the two products cancel exactly for every
// (r, n); their magnitudes are 2^1..2^8 (products up to ~2^18). The other positions hold values of
// magnitude 2^-8..2^0. The exact dot product is the sum of the small products alone (~O(1)),
// while a running fp32 sum passes through magnitudes ~2^18, where one ulp is ~2^-5: which small
// products survive depends on when they are added. Two accumulation orders therefore give
// results that differ by far more than one bf16 ulp of the answer in almost every element, where
// plain random data would hide an fp32 reordering behind the bf16 rounding most of the time.
// Values are ±(1 + m/128)·2^e, exact in bf16; the pairs are a seeded random matching of K
// positions, so leader and follower sit at random distances (same k-step, same tile, far apart).
//
// Plain C++ header (no CUDA header); pointers are device pointers; everything enqueues on
// `stream` except count_bit_differences, which waits for its result.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace bih {
struct bf16;  // models/bf16.hpp: a bfloat16 bit pattern
}  // namespace bih

namespace bih::cuda {

// Fills x[x_rows, K] and w[w_rows, K] with the order-sensitive operands above, a pure function
// of (seed, K, row, k). Throws std::invalid_argument for K < 2 or negative rows.
void fill_order_sensitive_operands(bf16* x, int x_rows, bf16* w, int w_rows, int K, uint64_t seed,
                                   CUstream_st* stream);

// Compares a[0, n) with b[0, n) as 16-bit patterns: adds the number of differing elements to
// *count and lowers *first to the smallest differing index (leave it at UINT64_MAX to start).
// count and first are device pointers to one uint64_t each.
void launch_count_bit_differences(const bf16* a, const bf16* b, size_t n, uint64_t* count,
                                  uint64_t* first, CUstream_st* stream);

struct BitDifferences {
  uint64_t count = 0;           // elements whose bits differ
  uint64_t first = UINT64_MAX;  // the smallest differing index; UINT64_MAX when none
};

// The same comparison, waited for: enqueues on `stream`, synchronizes it, returns the result.
BitDifferences count_bit_differences(const bf16* a, const bf16* b, size_t n, CUstream_st* stream);

}  // namespace bih::cuda
