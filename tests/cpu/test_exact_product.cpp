// Tests of models/exact_product.hpp: the band in which one fma is bitwise a rounded multiply and a
// rounded add of two bf16 operands (the CUDA tp_invariant kernels take the fused form there).
//
// - The packed two-halves test agrees with the definition on every one of the 65536 bf16 values,
//   in either half of the word.
// - The band's edges: zeros in, subnormals out, exponent fields 63 / 64 and 190 / 191, infinity,
// NaN.
// - In band, fma(x, w, acc) has the bits of acc + fl(x * w) for every sign and mantissa at the edge
//   exponents and an accumulator that is zero, subnormal, large, the product's negation (exact
//   cancellation) or infinite.
// - Out of band the identity fails: a crafted pair whose product rounds to a tie of the sum, so the
//   band is what makes the fused form exact, not a formality.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "models/exact_product.hpp"

namespace bih::test_exact_product {
namespace {

float from_bf16(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t bf16_of(int sign, int exponent_field, int mantissa) {
  return static_cast<uint16_t>((sign << 15) | (exponent_field << 7) | mantissa);
}

// acc + fl(x * w), each operation rounded on its own (what the CPU family computes).
float multiply_then_add(float x, float w, float acc) {
  volatile float product = x * w;  // volatile: no contraction into an fma
  return acc + product;
}

TEST(ExactProduct, PackedTestAgreesWithTheDefinitionOnEveryBf16) {
  int disagree = 0;
  for (uint32_t v = 0; v <= 0xffff; ++v) {
    const bool out = !exact_product::in_band(static_cast<uint16_t>(v));
    for (uint16_t partner : {uint16_t{0x3f80}, uint16_t{0x0001}, uint16_t{0xff80}}) {
      const bool partner_out = !exact_product::in_band(partner);
      const uint32_t low = exact_product::out_of_band_pair(v | (uint32_t{partner} << 16));
      const uint32_t high = exact_product::out_of_band_pair(partner | (v << 16));
      disagree += ((low & 0x8000u) != 0) != out || ((low & 0x80000000u) != 0) != partner_out;
      disagree += ((high & 0x80000000u) != 0) != out || ((high & 0x8000u) != 0) != partner_out;
      disagree += (low & ~0x80008000u) != 0 || (high & ~0x80008000u) != 0;
    }
  }
  EXPECT_EQ(disagree, 0);
}

TEST(ExactProduct, BandEdges) {
  EXPECT_TRUE(exact_product::in_band(0x0000));   // +0
  EXPECT_TRUE(exact_product::in_band(0x8000));   // -0
  EXPECT_FALSE(exact_product::in_band(0x0001));  // the smallest subnormal
  EXPECT_FALSE(exact_product::in_band(bf16_of(0, 63, 127)));
  EXPECT_TRUE(exact_product::in_band(bf16_of(1, 64, 0)));  // -2^-63
  EXPECT_TRUE(exact_product::in_band(bf16_of(0, 190, 127)));
  EXPECT_FALSE(exact_product::in_band(bf16_of(1, 191, 0)));  // -2^64
  EXPECT_FALSE(exact_product::in_band(0x7f80));              // +inf
  EXPECT_FALSE(exact_product::in_band(0xffc0));              // a NaN
  EXPECT_NE(exact_product::out_of_band_pair(0x3f800001u), 0u);
  EXPECT_EQ(exact_product::out_of_band_pair(0x3f80bf80u), 0u);
}

TEST(ExactProduct, FusedEqualsRoundedMultiplyAndAddInBand) {
  std::vector<float> values;
  for (int exponent : {64, 65, 127, 189, 190}) {
    for (int mantissa = 0; mantissa < 128; ++mantissa) {
      for (int sign : {0, 1}) {
        const uint16_t bits = bf16_of(sign, exponent, mantissa);
        ASSERT_TRUE(exact_product::in_band(bits));
        values.push_back(from_bf16(bits));
      }
    }
  }
  values.push_back(0.0f);
  values.push_back(-0.0f);
  const float max = std::numeric_limits<float>::max();
  const float sub = std::numeric_limits<float>::denorm_min() * 3;
  int differ = 0;
  long long compared = 0;
  for (float x : values) {
    for (float w : values) {
      const float product = x * w;
      for (float acc : {0.0f, -0.0f, sub, 1.5f, max, -max, -product, product * 0.75f,
                        std::numeric_limits<float>::infinity()}) {
        const uint32_t fused = std::bit_cast<uint32_t>(std::fma(x, w, acc));
        const uint32_t apart = std::bit_cast<uint32_t>(multiply_then_add(x, w, acc));
        differ += fused != apart;
        ++compared;
      }
    }
  }
  EXPECT_EQ(differ, 0) << "of " << compared;
}

TEST(ExactProduct, OutOfBandOperandsCanBreakTheIdentity) {
  // x * w = (1 + 2^-7) 2^-149: a subnormal product that rounds to 2^-149, exactly half the spacing
  // of fp32 at 2^-125. acc + fl(x * w) is then a tie and stays at the even 2^-125; the fused sum
  // sees the 2^-156 beyond the tie and rounds up.
  const uint16_t x_bits = bf16_of(0, 127 - 75, 1);  // (1 + 2^-7) 2^-75
  const uint16_t w_bits = bf16_of(0, 127 - 74, 0);  // 2^-74
  EXPECT_FALSE(exact_product::in_band(x_bits));
  EXPECT_FALSE(exact_product::in_band(w_bits));
  EXPECT_NE(exact_product::out_of_band_pair(x_bits | (uint32_t{w_bits} << 16)), 0u);
  const float acc = std::ldexp(1.0f, -125);
  const float x = from_bf16(x_bits), w = from_bf16(w_bits);
  EXPECT_EQ(multiply_then_add(x, w, acc), acc);
  EXPECT_EQ(std::fma(x, w, acc), acc + std::ldexp(1.0f, -148));
}

}  // namespace
}  // namespace bih::test_exact_product
