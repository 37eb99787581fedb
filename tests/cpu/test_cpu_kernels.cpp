// test_cpu_kernels.cpp: the CPU kernels' numerics and their batch invariance.
//
// Invariance is checked bitwise: a row computed alone (M=1) must have the same bits at every
// position of batches of size 1..64 filled with fresh random rows. Accuracy is checked against fp64
// references with the tolerance stated next to each check. The vendor family must be caught
// differing, or the harness could not prove that it detects variance.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <vector>

#include "models/bf16.hpp"
#include "models/cpu/kernels.hpp"

namespace bih::cpu::test_cpu_kernels {
namespace {

constexpr int kMaxBatch = 64;

std::vector<bf16> random_bf16(std::mt19937& rng, size_t n, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<bf16> v(n);
  for (auto& e : v) e = to_bf16(dist(rng));
  return v;
}

int random_int(std::mt19937& rng, int lo, int hi) {  // uniform in [lo, hi]
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// The accuracy bound used for GEMM and attention against fp64: |got - ref| <= 2^-7 |ref| + 1e-3.
// bf16 output rounding alone is up to 2^-9 |ref|; the rest covers fp32 accumulation.
void expect_close_to_reference(float got, double ref, const char* what, size_t index) {
  const double bound = std::ldexp(1.0, -7) * std::fabs(ref) + 1e-3;
  EXPECT_LE(std::fabs(got - ref), bound)
      << what << " element " << index << ": got " << got << ", fp64 reference " << ref;
}

// A row-wise kernel under test: M rows in ([M, in_width] bf16 plus one int per row), bits out
// ([M, out_width] as uint32 so that both bf16 and float outputs fit).
using RowKernel = std::function<std::vector<uint32_t>(const std::vector<bf16>& in,
                                                      const std::vector<int32_t>& aux, int M)>;

// For every batch size 1..64 and every position in it: the row's output bits in the batch equal the
// bits of the same row computed alone. Rows and aux values (in [0, aux_max)) are fresh per batch.
void expect_rows_batch_invariant(const RowKernel& kernel, int in_width, int out_width, int aux_max,
                                 uint32_t seed) {
  std::mt19937 rng(seed);
  int rows_checked = 0;
  for (int batch = 1; batch <= kMaxBatch; ++batch) {
    const std::vector<bf16> in = random_bf16(rng, static_cast<size_t>(batch) * in_width);
    std::vector<int32_t> aux(batch);
    for (auto& a : aux) a = random_int(rng, 0, aux_max - 1);
    const std::vector<uint32_t> batched = kernel(in, aux, batch);
    ASSERT_EQ(batched.size(), static_cast<size_t>(batch) * out_width);
    for (int m = 0; m < batch; ++m) {
      const std::vector<bf16> row(in.begin() + static_cast<size_t>(m) * in_width,
                                  in.begin() + static_cast<size_t>(m + 1) * in_width);
      const std::vector<uint32_t> alone = kernel(row, {aux[m]}, 1);
      for (int j = 0; j < out_width; ++j) {
        ASSERT_EQ(batched[static_cast<size_t>(m) * out_width + j], alone[j])
            << "batch " << batch << ", row " << m << ", column " << j;
      }
      ++rows_checked;
    }
  }
  EXPECT_EQ(rows_checked, kMaxBatch * (kMaxBatch + 1) / 2);
}

std::vector<uint32_t> bits_of(const std::vector<bf16>& v) {
  std::vector<uint32_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = v[i].bits;
  return bits;
}

// ---- bf16 -----------------------------------------------------------------------------------

TEST(CpuKernelsBf16, RoundsToNearestTiesToEven) {
  auto round_bits = [](uint32_t f) { return to_bf16(std::bit_cast<float>(f)).bits; };
  EXPECT_EQ(round_bits(0x3f808000u), 0x3f80u);  // tie, lower neighbour even: down
  EXPECT_EQ(round_bits(0x3f818000u), 0x3f82u);  // tie, lower neighbour odd: up
  EXPECT_EQ(round_bits(0x3f808001u), 0x3f81u);  // just above the tie: up
  EXPECT_EQ(round_bits(0x3f807fffu), 0x3f80u);  // just below the tie: down
  EXPECT_EQ(round_bits(0xbf818000u), 0xbf82u);  // sign does not matter
  EXPECT_EQ(round_bits(0x7f7fffffu), 0x7f80u);  // FLT_MAX rounds to +inf, as torch does
  EXPECT_EQ(round_bits(0x7f800000u), 0x7f80u);  // inf stays inf
}

TEST(CpuKernelsBf16, NanStaysNan) {
  // 0x7f800001 would become inf under plain rounding; 0xffffffff would wrap to +0.
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0xffffffffu}) {
    const bf16 rounded = to_bf16(std::bit_cast<float>(nan_bits));
    EXPECT_TRUE(std::isnan(to_float(rounded))) << std::hex << nan_bits;
    EXPECT_EQ(rounded.bits >> 15, nan_bits >> 31) << "sign kept for " << std::hex << nan_bits;
  }
}

// ---- GEMM -----------------------------------------------------------------------------------

struct GemmShape {
  int N;
  int K;
};

// Shapes with an N tail (N % 4 != 0) and a K tail (K % 8 != 0) as well as the tiny preset's.
const GemmShape kGemmShapes[] = {{67, 61}, {128, 256}, {256, 768}};

TEST(CpuKernelsGemm, InvariantRowIsBitwiseBatchInvariant) {
  for (const GemmShape& shape : kGemmShapes) {
    SCOPED_TRACE(::testing::Message() << "N=" << shape.N << " K=" << shape.K);
    std::mt19937 rng(7);
    const std::vector<bf16> w = random_bf16(rng, static_cast<size_t>(shape.N) * shape.K);
    const RowKernel kernel = [&](const std::vector<bf16>& x, const std::vector<int32_t>&, int M) {
      std::vector<bf16> y(static_cast<size_t>(M) * shape.N);
      gemm(KernelFamily::invariant, x.data(), w.data(), y.data(), M, shape.N, shape.K);
      return bits_of(y);
    };
    expect_rows_batch_invariant(kernel, shape.K, shape.N, 1, 11);
  }
}

TEST(CpuKernelsGemm, VendorDiffersFromItsSoloResultForSomeM) {
  // fp32 reorderings move a bf16 output only when the sum lies near a rounding boundary (about 1e-4
  // of outputs here), so every row of each batch is compared with its own M=1 result, over an
  // lm_head-sized N.
  const int N = 2048, K = 768;
  std::mt19937 rng(3);
  const std::vector<bf16> w = random_bf16(rng, static_cast<size_t>(N) * K, 0.02f);
  int found_m = 0, found_row = -1, found_column = -1;
  for (int M = 1; M <= kMaxBatch && found_m == 0; ++M) {
    const std::vector<bf16> x = random_bf16(rng, static_cast<size_t>(M) * K);
    std::vector<bf16> batched(static_cast<size_t>(M) * N), alone(N);
    gemm(KernelFamily::vendor, x.data(), w.data(), batched.data(), M, N, K);
    for (int m = 0; m < M && found_m == 0; ++m) {
      gemm(KernelFamily::vendor, x.data() + static_cast<size_t>(m) * K, w.data(), alone.data(), 1,
           N, K);
      for (int n = 0; n < N && found_m == 0; ++n) {
        if (batched[static_cast<size_t>(m) * N + n] != alone[n]) {
          found_m = M;
          found_row = m;
          found_column = n;
        }
      }
    }
  }
  ASSERT_NE(found_m, 0) << "vendor GEMM rows equal their M=1 bits for every M in 1..64";
  EXPECT_GE(found_m, kVendorSplitKMaxM) << "below kVendorSplitKMaxM every M takes the same path";
  std::cout << "[ info ] vendor GEMM (N=" << N << ", K=" << K
            << ") first differs from M=1 at M=" << found_m << " (row " << found_row << ", column "
            << found_column << ")\n";
}

TEST(CpuKernelsGemm, BothFamiliesMatchFp64Reference) {
  for (const GemmShape& shape : kGemmShapes) {
    std::mt19937 rng(5);
    const int M = 20;
    const std::vector<bf16> x = random_bf16(rng, static_cast<size_t>(M) * shape.K);
    const std::vector<bf16> w = random_bf16(rng, static_cast<size_t>(shape.N) * shape.K, 0.05f);
    for (KernelFamily family : {KernelFamily::invariant, KernelFamily::vendor}) {
      for (int rows : {1, M}) {  // vendor splits K at M=1, not at M=20
        std::vector<bf16> y(static_cast<size_t>(rows) * shape.N);
        gemm(family, x.data(), w.data(), y.data(), rows, shape.N, shape.K);
        for (int m = 0; m < rows; ++m) {
          for (int n = 0; n < shape.N; ++n) {
            double ref = 0.0;
            for (int k = 0; k < shape.K; ++k) {
              ref += static_cast<double>(to_float(x[static_cast<size_t>(m) * shape.K + k])) *
                     to_float(w[static_cast<size_t>(n) * shape.K + k]);
            }
            expect_close_to_reference(to_float(y[static_cast<size_t>(m) * shape.N + n]), ref,
                                      "gemm", static_cast<size_t>(m) * shape.N + n);
          }
        }
      }
    }
  }
}

// ---- RMSNorm, SiLU, embedding ------------------------------------------------------------------

TEST(CpuKernelsRmsNorm, MatchesFp64ReferenceAndWeightScaling) {
  const int M = 8, H = 256;
  const float eps = 1e-6f;
  std::mt19937 rng(1);
  const std::vector<bf16> x = random_bf16(rng, M * H, 3.0f);
  const std::vector<bf16> w = random_bf16(rng, H);
  std::vector<bf16> y(M * H);
  rms_norm(x.data(), w.data(), y.data(), M, H, eps);
  for (int m = 0; m < M; ++m) {
    double sum_sq = 0.0;
    for (int h = 0; h < H; ++h) sum_sq += std::pow(to_float(x[m * H + h]), 2);
    const double inv_rms = 1.0 / std::sqrt(sum_sq / H + eps);
    for (int h = 0; h < H; ++h) {
      const double ref = to_float(x[m * H + h]) * inv_rms * to_float(w[h]);
      // Two bf16 roundings (normed value, then the product): |err| <= 2^-7 |ref| + 1e-6.
      EXPECT_LE(std::fabs(to_float(y[m * H + h]) - ref), std::ldexp(std::fabs(ref), -7) + 1e-6)
          << "row " << m << " column " << h;
    }
  }
}

TEST(CpuKernelsRmsNorm, RowIsBitwiseBatchInvariant) {
  const int H = 256;
  std::mt19937 rng(2);
  const std::vector<bf16> w = random_bf16(rng, H);
  expect_rows_batch_invariant(
      [&](const std::vector<bf16>& x, const std::vector<int32_t>&, int M) {
        std::vector<bf16> y(static_cast<size_t>(M) * H);
        rms_norm(x.data(), w.data(), y.data(), M, H, 1e-6f);
        return bits_of(y);
      },
      H, H, 1, 21);
}

TEST(CpuKernelsRmsNorm, AddRmsNormUpdatesResidualThenNormalizes) {
  const int M = 4, H = 64;
  std::mt19937 rng(4);
  std::vector<bf16> residual = random_bf16(rng, M * H);
  const std::vector<bf16> x = random_bf16(rng, M * H);
  const std::vector<bf16> w = random_bf16(rng, H);
  std::vector<bf16> expected_residual(M * H);
  for (int i = 0; i < M * H; ++i) {
    // A sum of two bf16 values is exact in fp32, so the reference is one rounding of the exact sum.
    expected_residual[i] =
        to_bf16(static_cast<float>(static_cast<double>(to_float(residual[i])) + to_float(x[i])));
  }
  std::vector<bf16> expected_y(M * H), y(M * H);
  rms_norm(expected_residual.data(), w.data(), expected_y.data(), M, H, 1e-6f);
  add_rms_norm(residual.data(), x.data(), w.data(), y.data(), M, H, 1e-6f);
  EXPECT_EQ(bits_of(residual), bits_of(expected_residual));
  EXPECT_EQ(bits_of(y), bits_of(expected_y));
}

TEST(CpuKernelsRmsNorm, AddRmsNormRowIsBitwiseBatchInvariant) {
  const int H = 256;
  std::mt19937 rng(6);
  const std::vector<bf16> w = random_bf16(rng, H);
  // A row is [residual | x]; the output row is [updated residual | y].
  expect_rows_batch_invariant(
      [&](const std::vector<bf16>& in, const std::vector<int32_t>&, int M) {
        std::vector<bf16> residual(static_cast<size_t>(M) * H), x(residual.size());
        for (int m = 0; m < M; ++m) {
          std::copy_n(in.begin() + 2 * H * m, H, residual.begin() + H * m);
          std::copy_n(in.begin() + 2 * H * m + H, H, x.begin() + H * m);
        }
        std::vector<bf16> y(residual.size());
        add_rms_norm(residual.data(), x.data(), w.data(), y.data(), M, H, 1e-6f);
        std::vector<bf16> out;
        for (int m = 0; m < M; ++m) {
          out.insert(out.end(), residual.begin() + H * m, residual.begin() + H * (m + 1));
          out.insert(out.end(), y.begin() + H * m, y.begin() + H * (m + 1));
        }
        return bits_of(out);
      },
      2 * H, 2 * H, 1, 23);
}

TEST(CpuKernelsSiluMul, MatchesFp64ReferenceAndIsBatchInvariant) {
  const int I = 96;
  std::mt19937 rng(8);
  const std::vector<bf16> gate_up = random_bf16(rng, 2 * I, 4.0f);
  std::vector<bf16> y(I);
  silu_mul(gate_up.data(), y.data(), 1, I);
  for (int i = 0; i < I; ++i) {
    const double g = to_float(gate_up[i]);
    const double ref = g / (1.0 + std::exp(-g)) * to_float(gate_up[I + i]);
    // Two bf16 roundings: |err| <= 2^-7 |ref| + 1e-6.
    EXPECT_LE(std::fabs(to_float(y[i]) - ref), std::ldexp(std::fabs(ref), -7) + 1e-6) << i;
  }
  expect_rows_batch_invariant(
      [&](const std::vector<bf16>& in, const std::vector<int32_t>&, int M) {
        std::vector<bf16> out(static_cast<size_t>(M) * I);
        silu_mul(in.data(), out.data(), M, I);
        return bits_of(out);
      },
      2 * I, I, 1, 25);
}

TEST(CpuKernelsEmbedding, CopiesTableRows) {
  const int V = 50, H = 32;
  std::mt19937 rng(9);
  const std::vector<bf16> table = random_bf16(rng, V * H);
  const std::vector<int32_t> ids = {7, 0, 49, 7};
  std::vector<bf16> y(ids.size() * H);
  embedding(table.data(), ids.data(), y.data(), static_cast<int>(ids.size()), H);
  for (size_t m = 0; m < ids.size(); ++m) {
    for (int h = 0; h < H; ++h) EXPECT_EQ(y[m * H + h], table[ids[m] * H + h]);
  }
}

// ---- RoPE -----------------------------------------------------------------------------------

TEST(CpuKernelsRope, TableHoldsDoublePrecisionAnglesRoundedToFloat) {
  const RopeTable rope = RopeTable::make(16, 10000.0, 40);
  ASSERT_EQ(rope.cos.size(), 40u * 8);
  for (int i = 0; i < 8; ++i) {  // position 0: no rotation
    EXPECT_EQ(rope.cos[i], 1.0f);
    EXPECT_EQ(rope.sin[i], 0.0f);
  }
  EXPECT_EQ(rope.cos[1 * 8 + 0], static_cast<float>(std::cos(1.0)));  // inv_freq[0] = 1
  EXPECT_EQ(rope.sin[39 * 8 + 0], static_cast<float>(std::sin(39.0)));
  // inv_freq[4] = 10000^(-8/16) = 0.01, so position 30 has angle 0.3.
  EXPECT_NEAR(rope.sin[30 * 8 + 4], std::sin(0.3), 1e-7);
  EXPECT_THROW(RopeTable::make(15, 10000.0, 4), std::invalid_argument);
}

TEST(CpuKernelsRope, HeadNormRopeMatchesFp64Reference) {
  const int n_heads = 3, head_dim = 16, M = 5;
  const float eps = 1e-6f;
  const RopeTable rope = RopeTable::make(head_dim, 1e6, 200);
  std::mt19937 rng(10);
  const std::vector<bf16> w = random_bf16(rng, head_dim);
  const std::vector<bf16> x = random_bf16(rng, M * n_heads * head_dim, 2.0f);
  const std::vector<int32_t> positions = {0, 1, 17, 150, 199};
  std::vector<bf16> y = x;
  head_norm_rope(y.data(), w.data(), positions.data(), M, n_heads, head_dim, eps, rope);
  const int half = head_dim / 2;
  for (int m = 0; m < M; ++m) {
    for (int h = 0; h < n_heads; ++h) {
      const size_t base = (static_cast<size_t>(m) * n_heads + h) * head_dim;
      double sum_sq = 0.0;
      for (int d = 0; d < head_dim; ++d) sum_sq += std::pow(to_float(x[base + d]), 2);
      const double inv_rms = 1.0 / std::sqrt(sum_sq / head_dim + eps);
      std::vector<double> normed(head_dim);
      for (int d = 0; d < head_dim; ++d)
        normed[d] = to_float(x[base + d]) * inv_rms * to_float(w[d]);
      for (int i = 0; i < half; ++i) {
        const double angle = positions[m] / std::pow(1e6, 2.0 * i / head_dim);
        const double ref1 = normed[i] * std::cos(angle) - normed[i + half] * std::sin(angle);
        const double ref2 = normed[i + half] * std::cos(angle) + normed[i] * std::sin(angle);
        // Three bf16 roundings on values of size |normed|: |err| <= 2^-7 (|x1| + |x2|) + 1e-6.
        const double bound =
            std::ldexp(std::fabs(normed[i]) + std::fabs(normed[i + half]), -7) + 1e-6;
        EXPECT_LE(std::fabs(to_float(y[base + i]) - ref1), bound) << m << "/" << h << "/" << i;
        EXPECT_LE(std::fabs(to_float(y[base + i + half]) - ref2), bound)
            << m << "/" << h << "/" << i;
      }
    }
  }
}

TEST(CpuKernelsRope, HeadNormRopeRowIsBitwiseBatchInvariant) {
  const int n_heads = 4, head_dim = 16;
  const RopeTable rope = RopeTable::make(head_dim, 10000.0, 512);
  std::mt19937 rng(12);
  const std::vector<bf16> w = random_bf16(rng, head_dim);
  expect_rows_batch_invariant(
      [&](const std::vector<bf16>& in, const std::vector<int32_t>& positions, int M) {
        std::vector<bf16> x = in;
        head_norm_rope(x.data(), w.data(), positions.data(), M, n_heads, head_dim, 1e-6f, rope);
        return bits_of(x);
      },
      n_heads * head_dim, n_heads * head_dim, rope.max_pos, 27);
}

TEST(CpuKernelsRope, PositionPastTheTableThrows) {
  const RopeTable rope = RopeTable::make(16, 10000.0, 8);
  std::vector<bf16> x(16, to_bf16(1.0f));
  const std::vector<bf16> w(16, to_bf16(1.0f));
  for (int32_t bad : {8, 100, -1}) {
    EXPECT_THROW(head_norm_rope(x.data(), w.data(), &bad, 1, 1, 16, 1e-6f, rope), std::out_of_range)
        << bad;
  }
  const int32_t last = 7;
  EXPECT_NO_THROW(head_norm_rope(x.data(), w.data(), &last, 1, 1, 16, 1e-6f, rope));
}

// ---- greedy sampling ------------------------------------------------------------------------

TEST(CpuKernelsGreedy, TieGoesToLowestIdAndLogprobMatchesFp64) {
  const int V = 2048;
  std::mt19937 rng(13);
  std::vector<bf16> logits = random_bf16(rng, 2 * V, 2.0f);
  // Row 0: the maximum appears at ids 900, 37 and 1500; row 1: a unique maximum at the last id.
  for (int id : {900, 37, 1500}) logits[id] = to_bf16(20.0f);
  logits[V + V - 1] = to_bf16(30.0f);
  int32_t tokens[2];
  float logprobs[2];
  greedy_sample(logits.data(), 2, V, tokens, logprobs);
  EXPECT_EQ(tokens[0], 37);
  EXPECT_EQ(tokens[1], V - 1);
  for (int m = 0; m < 2; ++m) {
    double max_logit = -INFINITY;
    for (int j = 0; j < V; ++j)
      max_logit = std::max<double>(max_logit, to_float(logits[m * V + j]));
    double sum = 0.0;
    for (int j = 0; j < V; ++j) sum += std::exp(to_float(logits[m * V + j]) - max_logit);
    const double ref = to_float(logits[m * V + tokens[m]]) - max_logit - std::log(sum);
    EXPECT_NEAR(logprobs[m], ref, 1e-5) << "row " << m;  // stated tolerance: 1e-5 absolute
  }
}

TEST(CpuKernelsGreedy, RowIsBitwiseBatchInvariant) {
  const int V = 512;
  expect_rows_batch_invariant(
      [&](const std::vector<bf16>& logits, const std::vector<int32_t>&, int M) {
        std::vector<int32_t> tokens(M);
        std::vector<float> logprobs(M);
        greedy_sample(logits.data(), M, V, tokens.data(), logprobs.data());
        std::vector<uint32_t> out;
        for (int m = 0; m < M; ++m) {
          out.push_back(static_cast<uint32_t>(tokens[m]));
          out.push_back(std::bit_cast<uint32_t>(logprobs[m]));
        }
        return out;
      },
      V, 2, 1, 29);
}

// ---- KV cache and attention -----------------------------------------------------------------

TEST(CpuKernelsKv, WriteKvPlacesRowsAtSlotsAndSkipsPadding) {
  const int kv_heads = 2, head_dim = 4, block_size = 4, num_blocks = 3;
  const int row = kv_heads * head_dim;
  std::vector<bf16> k_pool(num_blocks * block_size * row), v_pool(k_pool.size());
  const KvPool pool{k_pool.data(), v_pool.data(), num_blocks, block_size, kv_heads, head_dim};
  std::mt19937 rng(14);
  const std::vector<bf16> k = random_bf16(rng, 3 * row), v = random_bf16(rng, 3 * row);
  const int64_t slots[3] = {9, -1, 2};  // block 2 offset 1; padding; block 0 offset 2
  write_kv(pool, k.data(), v.data(), slots, 3);
  for (int j = 0; j < row; ++j) {
    EXPECT_EQ(k_pool[9 * row + j], k[j]);
    EXPECT_EQ(v_pool[9 * row + j], v[j]);
    EXPECT_EQ(k_pool[2 * row + j], k[2 * row + j]);
    EXPECT_EQ(v_pool[2 * row + j], v[2 * row + j]);
  }
  int written = 0;
  for (const bf16& e : k_pool) written += e.bits != 0;
  EXPECT_LE(written, 2 * row) << "the padding row must not be written anywhere";
  const int64_t past_end = num_blocks * block_size;
  EXPECT_THROW(write_kv(pool, k.data(), v.data(), &past_end, 1), std::out_of_range);
}

// A paged pool holding several sequences, one of them twice (the second copy in other physical
// blocks, as after a prefix-cache hit that was materialized elsewhere).
class AttentionFixture {
 public:
  static constexpr int kNumKvHeads = 2;
  static constexpr int kNumHeads = 4;  // GQA: 2 query heads per KV head
  static constexpr int kHeadDim = 16;
  static constexpr int kBlockSize = 8;  // tiles of 16 positions span two blocks
  static constexpr int kSeqLen = 150;
  static constexpr int kNumSeqs = 6;
  static constexpr int kBlocksPerSeq = (kSeqLen + kBlockSize - 1) / kBlockSize;
  static constexpr int kRow = kNumKvHeads * kHeadDim;

  explicit AttentionFixture(uint32_t seed) : rng_(seed) {
    const int num_blocks = (kNumSeqs + 1) * kBlocksPerSeq;
    k_pool_.resize(static_cast<size_t>(num_blocks) * kBlockSize * kRow);
    v_pool_.resize(k_pool_.size());
    pool_ = KvPool{k_pool_.data(), v_pool_.data(), num_blocks, kBlockSize, kNumKvHeads, kHeadDim};
    // Physical blocks are handed out in a shuffled order so tables are not contiguous.
    std::vector<int32_t> free_blocks(num_blocks);
    for (int b = 0; b < num_blocks; ++b) free_blocks[b] = b;
    std::shuffle(free_blocks.begin(), free_blocks.end(), rng_);
    for (int s = 0; s <= kNumSeqs; ++s) {
      tables_.emplace_back(free_blocks.begin() + s * kBlocksPerSeq,
                           free_blocks.begin() + (s + 1) * kBlocksPerSeq);
    }
    for (int s = 0; s < kNumSeqs; ++s) {
      keys_.push_back(random_bf16(rng_, kSeqLen * kRow));
      values_.push_back(random_bf16(rng_, kSeqLen * kRow));
      store(s, tables_[s]);
    }
    store(0, tables_[kNumSeqs]);  // sequence 0 again, in other blocks
  }

  const KvPool& pool() const { return pool_; }
  const int32_t* table(int seq) const { return tables_[seq].data(); }
  const int32_t* copy_of_seq0_table() const { return tables_[kNumSeqs].data(); }
  std::mt19937& rng() { return rng_; }
  const bf16* key(int seq, int pos, int kv_head) const {
    return keys_[seq].data() + pos * kRow + kv_head * kHeadDim;
  }
  const bf16* value(int seq, int pos, int kv_head) const {
    return values_[seq].data() + pos * kRow + kv_head * kHeadDim;
  }

 private:
  void store(int seq, const std::vector<int32_t>& table) {
    std::vector<int64_t> slots(kSeqLen);
    for (int p = 0; p < kSeqLen; ++p) {
      slots[p] = static_cast<int64_t>(table[p / kBlockSize]) * kBlockSize + p % kBlockSize;
    }
    write_kv(pool_, keys_[seq].data(), values_[seq].data(), slots.data(), kSeqLen);
  }

  std::mt19937 rng_;
  std::vector<bf16> k_pool_, v_pool_;
  KvPool pool_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<std::vector<bf16>> keys_, values_;
};

std::vector<bf16> run_attention(KernelFamily family, const AttentionFixture& f,
                                const std::vector<bf16>& q,
                                const std::vector<AttentionQuery>& queries) {
  const int M = static_cast<int>(queries.size());
  int num_decode = 0;
  for (const auto& query : queries) num_decode += query.decode;
  std::vector<bf16> out(static_cast<size_t>(M) * AttentionFixture::kNumHeads *
                        AttentionFixture::kHeadDim);
  attention(family, q.data(), f.pool(), queries.data(), M, AttentionFixture::kNumHeads, num_decode,
            out.data());
  return out;
}

TEST(CpuKernelsAttention, InvariantRowIsBitwiseSameAcrossBatchModeAndBlockTable) {
  AttentionFixture f(15);
  constexpr int kQ = AttentionFixture::kNumHeads * AttentionFixture::kHeadDim;
  int rows_checked = 0;
  for (int batch = 1; batch <= kMaxBatch; ++batch) {
    const std::vector<bf16> q = random_bf16(f.rng(), static_cast<size_t>(batch) * kQ);
    std::vector<AttentionQuery> queries(batch);
    std::vector<int> seqs(batch);
    for (int m = 0; m < batch; ++m) {
      seqs[m] = random_int(f.rng(), 0, AttentionFixture::kNumSeqs - 1);
      queries[m] = {f.table(seqs[m]), random_int(f.rng(), 1, AttentionFixture::kSeqLen),
                    random_int(f.rng(), 0, 1) == 1};
    }
    const std::vector<bf16> batched = run_attention(KernelFamily::invariant, f, q, queries);
    for (int m = 0; m < batch; ++m) {
      const std::vector<bf16> q_row(q.begin() + m * kQ, q.begin() + (m + 1) * kQ);
      std::vector<const int32_t*> tables = {queries[m].block_table};
      if (seqs[m] == 0) tables.push_back(f.copy_of_seq0_table());  // a prefix-cache hit
      for (const int32_t* table : tables) {
        for (bool decode : {false, true}) {  // prefill and decode contexts
          const std::vector<bf16> alone = run_attention(KernelFamily::invariant, f, q_row,
                                                        {{table, queries[m].context_len, decode}});
          for (int j = 0; j < kQ; ++j) {
            ASSERT_EQ(batched[m * kQ + j].bits, alone[j].bits)
                << "batch " << batch << " row " << m << " column " << j << " decode " << decode
                << " context " << queries[m].context_len;
          }
        }
      }
      ++rows_checked;
    }
  }
  EXPECT_EQ(rows_checked, kMaxBatch * (kMaxBatch + 1) / 2);
}

TEST(CpuKernelsAttention, VendorDecodeDiffersBetweenOneAndManyDecodeQueries) {
  // 1 decode query gives 16 KV splits, 64 give 1. The bf16 output moves only when the reordered
  // fp32 result crosses a rounding boundary, so several query vectors are tried per context.
  AttentionFixture f(16);
  constexpr int kQ = AttentionFixture::kNumHeads * AttentionFixture::kHeadDim;
  constexpr int kProbes = 4;
  const std::vector<bf16> probes = random_bf16(f.rng(), kProbes * kQ);
  int differing_context = 0;
  for (int context = 1; context <= AttentionFixture::kSeqLen && differing_context == 0; ++context) {
    for (int probe = 0; probe < kProbes && differing_context == 0; ++probe) {
      const AttentionQuery query{f.table(1), context, true};
      const bf16* q = probes.data() + probe * kQ;
      std::vector<bf16> lone(kQ), crowded(kQ);
      attention(KernelFamily::vendor, q, f.pool(), &query, 1, AttentionFixture::kNumHeads, 1,
                lone.data());
      attention(KernelFamily::vendor, q, f.pool(), &query, 1, AttentionFixture::kNumHeads, 64,
                crowded.data());
      if (bits_of(lone) != bits_of(crowded)) differing_context = context;
    }
  }
  ASSERT_NE(differing_context, 0)
      << "vendor decode attention gave the same bits with 1 and 64 decode queries at every context";
  std::cout << "[ info ] vendor decode attention first differs between 1 and 64 decode queries at "
               "context_len="
            << differing_context << "\n";
}

TEST(CpuKernelsAttention, BothFamiliesMatchFp64Reference) {
  AttentionFixture f(17);
  constexpr int kHeads = AttentionFixture::kNumHeads, kDim = AttentionFixture::kHeadDim;
  const std::vector<bf16> q = random_bf16(f.rng(), kHeads * kDim);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  for (int context : {1, 15, 16, 17, 64, 150}) {
    for (KernelFamily family : {KernelFamily::invariant, KernelFamily::vendor}) {
      for (int num_decode : {1, 64}) {
        const AttentionQuery query{f.table(2), context, true};
        std::vector<bf16> out(kHeads * kDim);
        attention(family, q.data(), f.pool(), &query, 1, kHeads, num_decode, out.data());
        for (int h = 0; h < kHeads; ++h) {
          const int kv_head = h / (kHeads / AttentionFixture::kNumKvHeads);
          std::vector<double> scores(context);
          double max_score = -INFINITY;
          for (int p = 0; p < context; ++p) {
            double dot = 0.0;
            for (int d = 0; d < kDim; ++d) {
              dot += static_cast<double>(to_float(q[h * kDim + d])) *
                     to_float(f.key(2, p, kv_head)[d]);
            }
            scores[p] = dot * scale;
            max_score = std::max(max_score, scores[p]);
          }
          double denom = 0.0;
          std::vector<double> numer(kDim, 0.0);
          for (int p = 0; p < context; ++p) {
            const double weight = std::exp(scores[p] - max_score);
            denom += weight;
            for (int d = 0; d < kDim; ++d) numer[d] += weight * to_float(f.value(2, p, kv_head)[d]);
          }
          for (int d = 0; d < kDim; ++d) {
            expect_close_to_reference(to_float(out[h * kDim + d]), numer[d] / denom, "attention",
                                      h * kDim + d);
          }
        }
      }
    }
  }
}

TEST(CpuKernelsAttention, VendorPrefillRowsUseTheInvariantPath) {
  AttentionFixture f(18);
  constexpr int kQ = AttentionFixture::kNumHeads * AttentionFixture::kHeadDim;
  const std::vector<bf16> q = random_bf16(f.rng(), kQ);
  for (int context : {5, 33, 150}) {
    const std::vector<bf16> invariant =
        run_attention(KernelFamily::invariant, f, q, {{f.table(3), context, false}});
    const std::vector<bf16> vendor =
        run_attention(KernelFamily::vendor, f, q, {{f.table(3), context, false}});
    EXPECT_EQ(bits_of(invariant), bits_of(vendor)) << "context " << context;
  }
}

}  // namespace
}  // namespace bih::cpu::test_cpu_kernels
