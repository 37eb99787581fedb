// bf16_bits.cuh: bf16 <-> fp32 on the device, bit for bit the host's models/bf16.hpp.
//
// Shared by the CUDA kernels whose results must equal the CPU's: widening is exact (the bf16 bits
// are the top half of the float); narrowing rounds to nearest, ties to even, and keeps a NaN a
// quiet NaN with its sign and payload top bits, as bih::to_bf16 does (__float2bfloat16_rn
// canonicalizes NaNs instead).
#pragma once

#include <cstdint>

namespace bih::cuda::bits {

__device__ __forceinline__ float widen(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ uint16_t narrow(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

}  // namespace bih::cuda::bits
