// exact_product.hpp: when one fused multiply-add gives the bits of a rounded multiply, then a
// rounded add.
//
// The tp_invariant family's chains add products rounded on their own: acc <- fl(acc + fl(x * w))
// (models/cpu/gemm.cpp, built with -ffp-contract=off). For bf16 x and w the exact product has at
// most 16 significant bits, so fl(x * w) is the product itself whenever that is zero or a normal,
// finite fp32; then fma(x, w, acc) = fl(acc + x * w) = fl(acc + fl(x * w)), bit for bit, for every
// acc (an infinite or NaN acc included). A bf16 is *in band* when it is +-0 or normal with an
// exponent field of 64..190 (2^-63 <= |v| < 2^64): the product of two in-band values is zero or
// lies in [2^-126, 2^128) with at most 16 significant bits, a normal finite fp32. Subnormals,
// values outside the band, infinities and NaNs are out of band, and a kernel that finds one among
// its operands adds those products the long way. The CUDA tp_invariant kernels use the fused form
// only where every operand is in band, which halves their floating-point instructions without
// moving a bit (tests/cpu/test_exact_product.cpp checks the band and the identity; the GPU tests
// compare the kernels with the CPU on in-band and out-of-band operands).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define BIH_HOST_DEVICE __host__ __device__
#else
#define BIH_HOST_DEVICE
#endif

namespace bih::exact_product {

// The two bf16 halves of `word` (any order), each reported in bit 15 of its half: set where that
// half is out of band. No carry crosses from one half into the other: every half's magnitude is at
// most 0x7fff, and 0x7fff plus the largest constant below stays under 0x10000.
BIH_HOST_DEVICE inline uint32_t out_of_band_pair(uint32_t word) {
  const uint32_t magnitude = word & 0x7fff7fffu;
  const uint32_t too_large =
      magnitude + 0x20802080u;                       // bit 15: magnitude >= 0x5f80 (exponent 191+)
  const uint32_t normal = magnitude + 0x60006000u;   // bit 15: magnitude >= 0x2000 (exponent 64+)
  const uint32_t nonzero = magnitude + 0x7fff7fffu;  // bit 15: magnitude >= 1
  return (too_large | (~normal & nonzero)) & 0x80008000u;
}

// True when the bf16 with these bits is in band (the definition the packed test must agree with).
BIH_HOST_DEVICE inline bool in_band(uint16_t bits) {
  const int exponent = (bits >> 7) & 0xff;
  return (bits & 0x7fffu) == 0 || (exponent >= 64 && exponent <= 190);
}

}  // namespace bih::exact_product
