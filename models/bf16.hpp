// bf16.hpp: bfloat16 storage emulated bit-exactly on the host.
//
// A bf16 is the top 16 bits of an IEEE-754 binary32. Conversion from float rounds to nearest,
// ties to even (what CUDA's __float2bfloat16_rn and torch's .to(bfloat16) do); NaN stays a quiet
// NaN. Arithmetic is never done in bf16: values widen to float, compute, and round back once.
#pragma once

#include <bit>
#include <cstdint>

namespace bih {

struct bf16 {
  uint16_t bits = 0;
  friend bool operator==(bf16, bf16) = default;
};

inline float to_float(bf16 v) { return std::bit_cast<float>(static_cast<uint32_t>(v.bits) << 16); }

inline bf16 to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};  // quiet NaN, sign kept
  }
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>((u + rounding_bias) >> 16)};
}

// Round a float to the nearest bf16 value and widen it back: one rounding step of a bf16 pipeline.
inline float round_bf16(float f) { return to_float(to_bf16(f)); }

}  // namespace bih
