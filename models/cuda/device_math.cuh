// device_math.cuh: the arithmetic and launcher plumbing shared by the non-GEMM kernels
// (norm_kernels.cu, elementwise_kernels.cu, attention_kernel.cu, attention_reference_kernel.cu,
// sampling_kernels.cu; kernels.hpp is their contract), one copy so that every kernel rounds alike.
//
// Numerics mirror models/cpu/kernels.cpp and attention.cpp operation for operation:
// - every float op is an explicitly rounded intrinsic (__fmul_rn, __fadd_rn, ...), which nvcc never
//   contracts into an FMA, so bits do not depend on compiler flags and match the CPU build
//   (-ffp-contract=off) wherever the reduction order is the same;
// - exp and log are evaluated in double and rounded once to float: correctly rounded in all but
//   vanishingly rare cases, as glibc's expf/logf are, so the CPU's values come out;
// - bf16 rounding is the host's bit recipe (round to nearest even, quiet NaN: bf16_bits.cuh).
// Reduction orders: attention, head norm and RoPE follow the CPU's order exactly; rms_norm's sum
// and the sampler's sum of exp use fixed trees (a block's, and for the sampler then one over the
// row's slices; they depend on H or V only), so they agree with the CPU within rounding, not
// bitwise.
//
// Several .cu files include this header, so everything in it is inline, in a named namespace that
// each file takes its helpers from with using-declarations.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "models/cuda/bf16_bits.cuh"
#include "models/cuda/check.hpp"

namespace bih {
struct bf16;  // models/bf16.hpp: a bfloat16 bit pattern
}  // namespace bih

namespace bih::cuda::device {

using u16 = uint16_t;

inline constexpr u16 kBf16QuietNan = 0x7fc0;

// ---- scalar helpers: one IEEE rounding each, never fused -------------------------------------
using bits::narrow;
using bits::widen;

__device__ __forceinline__ float round_bf16(float f) { return widen(narrow(f)); }
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float divide(float a, float b) { return __fdiv_rn(a, b); }
// std::max(a, b) exactly (b only when a < b).
__device__ __forceinline__ float max_of(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float exp_f(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}
__device__ __forceinline__ float log_f(float x) {
  return static_cast<float>(log(static_cast<double>(x)));
}

// silu(gate) * up of one element as the CPU's silu_mul: silu rounded to bf16, then the product
// rounded once. Both silu_mul (elementwise_kernels.cu) and the gate_up GEMM that fuses it
// (gemm_skinny_stream.cu) call this, so the two give the same bits.
__device__ __forceinline__ u16 silu_mul_bits(u16 gate, u16 up) {
  const float g = widen(gate);
  const float silu = round_bf16(divide(g, add(1.0f, exp_f(-g))));
  return narrow(mul(silu, widen(up)));
}

// 1 / sqrt(sum_sq / n + eps), the CPU's inverse_rms after its sum.
__device__ __forceinline__ float inverse_rms_from_sum(float sum_sq, int n, float eps) {
  const float variance = divide(sum_sq, static_cast<float>(n));
  return divide(1.0f, __fsqrt_rn(add(variance, eps)));
}

// Sum over the block: a fixed xor butterfly in each warp, then the warp sums in warp order. The
// tree depends on blockDim.x only. warp_sums: shared [blockDim.x / 32]. Every thread gets the sum.
__device__ inline float block_sum(float value, float* warp_sums) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = add(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = value;
  __syncthreads();
  float total = warp_sums[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) total = add(total, warp_sums[w]);
  __syncthreads();  // warp_sums may be reused by the caller
  return total;
}

// ---- host side of the launchers -------------------------------------------------------------
inline void check_launch() { cudaCheck(cudaGetLastError()); }

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// The kernels take bf16 tensors as their bit patterns.
inline const u16* bits_of(const bf16* p) { return reinterpret_cast<const u16*>(p); }
inline u16* bits_of(bf16* p) { return reinterpret_cast<u16*>(p); }

}  // namespace bih::cuda::device
