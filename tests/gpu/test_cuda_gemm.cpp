// test_cuda_gemm.cpp: the CUDA GEMM's two families on the qwen3-1.7b projection shapes.
//
// Invariance is bitwise: row r of x[:M] · w^T must have the same bf16 bits as the M=1 product of
// row r alone, at every M the engine uses (both sides of every companion band's edges) and at
// several row positions. Companion configurations must never change a bit: with and without them
// the outputs are compared element by element. The vendor family must show the opposite
// somewhere on the down projection (DESIGN.md's measured fact). Accuracy is against an fp64 host
// reference with the stated tolerance |err| <= 2^-7 |ref| + 1e-3.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "models/bf16.hpp"
#include "models/config.hpp"
#include "models/cuda/gemm.hpp"
#include "models/cuda/gemm_equivalence.hpp"
#include "models/cuda/gemm_skinny.hpp"
#include "tests/gpu/cuda_graph_util.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace {

using bih::bf16;
using bih::KernelFamily;
using bih::cuda::CudaGemm;
using bih::cuda::CudaGemmOptions;
using bih::cuda::GemmAlgoConfig;
using bih::cuda::GemmCompanion;
using bih::test::DeviceBuffer;
using bih::test::random_bf16;

using Shape = bih::LinearShape;

// qwen3-1.7b at TP=1: hidden 2048, 16 query + 8 KV heads of 128, MLP 6144, vocab 151936.
const std::vector<Shape> kShapes = bih::linear_shapes(*bih::preset_config("qwen3-1.7b"));
const Shape kDown = kShapes[3];
// Both sides of every default companion band edge (8|9, 32|33, 128|129, 2047|2048), powers of two
// and their neighbours.
const std::vector<int> kEngineMs = {1,   2,   7,    8,    9,    16,   31,   32,
                                    33,  63,  64,   65,   127,  128,  129,  256,
                                    511, 512, 1024, 2047, 2048, 2049, 4095, 4096};
constexpr int kMaxM = 4096;

// `base` and, for each companion of `c`, the Ms on both sides of its edges.
std::vector<int> ms_across_companion_edges(const GemmAlgoConfig& c, const std::vector<int>& base) {
  std::set<int> ms(base.begin(), base.end());
  for (const GemmCompanion& companion : c.companions) {
    for (int m :
         {companion.first_m - 1, companion.first_m, companion.last_m, companion.last_m + 1}) {
      if (m >= 1 && m <= kMaxM) ms.insert(m);
    }
  }
  return {ms.begin(), ms.end()};
}

// Activations ~ U[-1, 1); weights with variance 1/K so outputs are O(1), like a trained layer.
struct ShapeData {
  std::vector<bf16> x;  // [kMaxM, K]
  std::vector<bf16> w;  // [N, K]
};

const ShapeData& host_data(const Shape& s) {
  static std::map<std::pair<int, int>, ShapeData> cache;
  auto it = cache.find({s.N, s.K});
  if (it == cache.end()) {
    ShapeData d;
    d.x = random_bf16(static_cast<size_t>(kMaxM) * s.K, 11 + s.K, 1.0f);
    d.w = random_bf16(static_cast<size_t>(s.N) * s.K, 17 + s.N, std::sqrt(3.0f / s.K));
    it = cache.emplace(std::make_pair(s.N, s.K), std::move(d)).first;
  }
  return it->second;
}

// Row positions checked at one M: first, second, a third in, the middle, the last.
std::set<int> rows_checked(int M) { return {0, std::min(1, M - 1), M / 3, M / 2, M - 1}; }

struct RowComparison {
  int rows_compared = 0;
  int rows_differing = 0;
  // The first difference found, in the order M ascending, row ascending, column ascending.
  int m = 0, row = 0, col = 0;
  uint16_t got = 0, want = 0;
};

// Compares rows of x[:M] · w^T at each M with the M=1 product of the same row, bitwise.
RowComparison compare_rows_with_single_row(CudaGemm& gemm, KernelFamily family, const Shape& s,
                                           const std::vector<int>& ms) {
  const ShapeData& data = host_data(s);
  const DeviceBuffer<bf16> x(data.x);
  const DeviceBuffer<bf16> w(data.w);
  std::set<int> all_rows;
  int max_m = 0;
  for (int m : ms) {
    for (int r : rows_checked(m)) all_rows.insert(r);
    max_m = std::max(max_m, m);
  }
  // The reference: each row alone, M=1.
  std::map<int, std::vector<bf16>> alone;
  DeviceBuffer<bf16> y1(s.N);  // [1, N]
  for (int r : all_rows) {
    gemm.gemm(family, x.get() + static_cast<size_t>(r) * s.K, w.get(), y1.get(), 1, s.N, s.K,
              nullptr);
    alone[r] = y1.download(0, s.N);  // a blocking copy: orders after the GEMM
  }
  DeviceBuffer<bf16> y(static_cast<size_t>(max_m) * s.N);  // [max_m, N]
  RowComparison c;
  for (int m : ms) {
    gemm.gemm(family, x.get(), w.get(), y.get(), m, s.N, s.K, nullptr);
    for (int r : rows_checked(m)) {
      const std::vector<bf16> row = y.download(static_cast<size_t>(r) * s.N, s.N);
      ++c.rows_compared;
      for (int col = 0; col < s.N; ++col) {
        if (row[col].bits == alone[r][col].bits) continue;
        if (c.rows_differing == 0) {
          c.m = m;
          c.row = r;
          c.col = col;
          c.got = row[col].bits;
          c.want = alone[r][col].bits;
        }
        ++c.rows_differing;
        break;
      }
    }
  }
  return c;
}

std::string describe_difference(const RowComparison& c) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "M=%d row %d col %d: 0x%04x (batch) vs 0x%04x (alone)", c.m,
                c.row, c.col, c.got, c.want);
  return buf;
}

TEST(CudaGemm, PinnedConfigurationHasNoSplitKNoReductionNoPartialSumWorkspace) {
  BIH_SKIP_WITHOUT_GPU();
  CudaGemm gemm;
  for (const Shape& s : kShapes) {
    const GemmAlgoConfig c = gemm.invariant_config(s.N, s.K);
    std::cout << "[invariant] " << s.name << " N=" << s.N << " K=" << s.K << ": " << c.describe()
              << "\n[invariant] " << s.name << " companion search: " << c.companion_notes << "\n";
    if (!c.cublaslt) {
      EXPECT_TRUE(c.companions.empty()) << s.name;  // the own kernel has no split-K by construction
      continue;
    }
    // The reference and every companion: at most a scheduler counter of workspace, which cannot
    // hold one fp32 partial tile.
    std::vector<GemmAlgoConfig> configs = {c};
    for (const GemmCompanion& companion : c.companions) configs.push_back(companion.config);
    for (const GemmAlgoConfig& k : configs) {
      if (k.skinny) continue;  // the own skinny kernel: one k16 chain per element, no split
      EXPECT_TRUE(k.cublaslt) << s.name;
      EXPECT_EQ(k.splitk_num, 1) << s.name;
      EXPECT_EQ(k.reduction_scheme, 0u) << s.name;
      EXPECT_LE(k.workspace_bytes, CudaGemmOptions{}.scheduler_workspace_bytes) << s.name;
      EXPECT_LE(k.min_alignment_bytes, 16u) << s.name;
    }
    EXPECT_EQ(c.validated_min_m, 1) << s.name;
    EXPECT_GE(c.validated_max_m, kMaxM) << s.name;
    // Companions: sorted, disjoint, inside 1..max_m, valid over their whole band, and compared
    // with the reference at both ends of it.
    int previous_last = 0;
    for (const GemmCompanion& companion : c.companions) {
      EXPECT_GT(companion.first_m, previous_last) << s.name;
      EXPECT_LE(companion.first_m, companion.last_m) << s.name;
      EXPECT_LE(companion.last_m, c.validated_max_m) << s.name;
      EXPECT_EQ(companion.config.validated_min_m, companion.first_m) << s.name;
      EXPECT_EQ(companion.config.validated_max_m, companion.last_m) << s.name;
      EXPECT_TRUE(companion.config.companions.empty()) << s.name;
      ASSERT_FALSE(companion.tested_ms.empty()) << s.name;
      EXPECT_EQ(companion.tested_ms.front(), companion.first_m) << s.name;
      EXPECT_EQ(companion.tested_ms.back(), companion.last_m) << s.name;
      previous_last = companion.last_m;
    }
  }
}

// Hand-made configurations: needs no GPU.
TEST(CudaGemmConfig, DescribeNamesTheMRangeOfEveryConfiguration) {
  GemmAlgoConfig reference;
  reference.cublaslt = true;
  reference.algo_id = 66;
  reference.tile_id = 18;
  reference.chosen_at_m = 512;
  reference.validated_max_m = 4096;
  GemmCompanion small;
  small.first_m = 1;
  small.last_m = 8;
  small.config = reference;
  small.config.tile_id = 10;
  small.config.chosen_at_m = 1;
  small.config.validated_max_m = 8;
  small.tested_ms = {1, 2, 3, 4, 5, 6, 7, 8};
  GemmCompanion large;
  large.first_m = 2048;
  large.last_m = 4096;
  large.config = reference;
  large.config.tile_id = 24;
  large.config.chosen_at_m = 4096;
  large.config.validated_min_m = 2048;
  large.config.validated_max_m = 4096;
  large.tested_ms = {2048, 2049, 2050, 4094, 4095, 4096};

  const std::string alone = reference.describe();
  EXPECT_EQ(alone.find("reference"), std::string::npos) << alone;
  EXPECT_EQ(alone.find("bitwise"), std::string::npos) << alone;
  EXPECT_NE(alone.find("tile 18 "), std::string::npos) << alone;

  reference.companions = {small, large};
  const std::string d = reference.describe();
  EXPECT_NE(d.find("valid M=1..4096 (reference: serves M=9..2047, M>4096)"), std::string::npos)
      << d;
  EXPECT_NE(d.find("; M=1..8: cublasLt algo 66 tile 10 "), std::string::npos) << d;
  EXPECT_NE(d.find("valid M=1..8 (bitwise = reference on 8 Ms)"), std::string::npos) << d;
  EXPECT_NE(d.find("; M=2048..4096: cublasLt algo 66 tile 24 "), std::string::npos) << d;
  EXPECT_NE(d.find("valid M=2048..4096 (bitwise = reference on 6 Ms)"), std::string::npos) << d;

  EXPECT_EQ(reference.serving(1).tile_id, 10u);
  EXPECT_EQ(reference.serving(8).tile_id, 10u);
  EXPECT_EQ(reference.serving(9).tile_id, 18u);
  EXPECT_EQ(reference.serving(2047).tile_id, 18u);
  EXPECT_EQ(reference.serving(2048).tile_id, 24u);
  EXPECT_EQ(reference.serving(4096).tile_id, 24u);
  EXPECT_EQ(reference.serving(4097).tile_id, 18u);
}

// A shape is pinned once per process and key (gemm_pin.cpp): two CudaGemms asking on two threads
// at once (as emulated ranks do) get the same configuration, one of them copied from the other
// and saying so; a third made later copies every shape; other options pin on their own.
TEST(CudaGemm, CudaGemmsOfOneProcessShareTheirPins) {
  BIH_SKIP_WITHOUT_GPU();
  CudaGemmOptions options;
  options.pin_m = 384;  // a key no other test of this process uses: these are the first to pin
  CudaGemm first(options);
  CudaGemm second(options);
  std::vector<GemmAlgoConfig> a(kShapes.size()), b(kShapes.size());
  std::thread other([&] {
    for (size_t i = 0; i < kShapes.size(); ++i)
      b[i] = second.invariant_config(kShapes[i].N, kShapes[i].K);
  });
  for (size_t i = 0; i < kShapes.size(); ++i)
    a[i] = first.invariant_config(kShapes[i].N, kShapes[i].K);
  other.join();
  const auto shared = [](const GemmAlgoConfig& c) {
    return c.companion_notes.find("shared: pinned by another CudaGemm") != std::string::npos;
  };
  CudaGemm third(options);
  CudaGemmOptions without_companions = options;
  without_companions.companions = false;
  CudaGemm fourth(without_companions);
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const Shape& s = kShapes[i];
    EXPECT_EQ(a[i].describe(), b[i].describe()) << s.name;
    EXPECT_NE(shared(a[i]), shared(b[i])) << s.name << ": exactly one pinned it\n"
                                          << a[i].companion_notes << "\n"
                                          << b[i].companion_notes;
    const GemmAlgoConfig later = third.invariant_config(s.N, s.K);
    EXPECT_TRUE(shared(later)) << s.name << ": " << later.companion_notes;
    EXPECT_EQ(later.describe(), a[i].describe()) << s.name;
    EXPECT_TRUE(fourth.invariant_config(s.N, s.K).companions.empty()) << s.name;
  }
}

TEST(CudaGemm, DescribeNamesTheMRangesOfThePinnedCompanions) {
  BIH_SKIP_WITHOUT_GPU();
  CudaGemm gemm;
  CudaGemmOptions off;
  off.companions = false;
  CudaGemm without(off);
  int companions = 0;
  for (const Shape& s : kShapes) {
    const GemmAlgoConfig c = gemm.invariant_config(s.N, s.K);
    const std::string d = c.describe();
    EXPECT_FALSE(c.companion_notes.empty()) << s.name;
    for (const GemmCompanion& companion : c.companions) {
      const std::string range =
          "M=" + std::to_string(companion.first_m) +
          (companion.last_m == companion.first_m ? "" : ".." + std::to_string(companion.last_m)) +
          ": ";
      EXPECT_NE(d.find(range), std::string::npos) << s.name << ": " << d;
      EXPECT_NE(
          d.find("(bitwise = reference on " + std::to_string(companion.tested_ms.size()) + " Ms)"),
          std::string::npos)
          << s.name << ": " << d;
      ++companions;
    }
    if (!c.companions.empty()) {
      EXPECT_NE(d.find("(reference: serves "), std::string::npos) << s.name << ": " << d;
    }
    // Without companions: the same reference, described alone.
    const GemmAlgoConfig alone = without.invariant_config(s.N, s.K);
    EXPECT_TRUE(alone.companions.empty()) << s.name;
    GemmAlgoConfig reference = c;
    reference.companions.clear();
    EXPECT_EQ(alone.describe(), reference.describe()) << s.name;
  }
  std::cout << "[invariant] " << companions << " companions over " << kShapes.size() << " shapes\n";
}

TEST(CudaGemm, InvariantRowsEqualTheirSingleRowProductBitwiseAtEveryM) {
  BIH_SKIP_WITHOUT_GPU();
  CudaGemm gemm;
  for (const Shape& s : kShapes) {
    // The single rows run at M=1 (the first companion's band, if any): every other M compared
    // with them crosses from one configuration to another at the band edges.
    const std::vector<int> ms =
        ms_across_companion_edges(gemm.invariant_config(s.N, s.K), kEngineMs);
    const RowComparison c = compare_rows_with_single_row(gemm, KernelFamily::invariant, s, ms);
    std::cout << "[invariant] " << s.name << ": " << c.rows_compared << " rows compared at "
              << ms.size() << " Ms, " << c.rows_differing << " differ\n";
    EXPECT_GT(c.rows_compared, 0);
    EXPECT_EQ(c.rows_differing, 0) << s.name << " first difference " << describe_difference(c)
                                   << " with " << gemm.invariant_config(s.N, s.K).describe();
  }
}

TEST(CudaGemm, OwnKernelRowsEqualTheirSingleRowProductBitwiseAtEveryM) {
  BIH_SKIP_WITHOUT_GPU();
  CudaGemmOptions options;
  options.own_kernel_only = true;
  CudaGemm gemm(options);
  for (const Shape& s : {kShapes[0], kDown}) {
    ASSERT_FALSE(gemm.invariant_config(s.N, s.K).cublaslt);
    const RowComparison c =
        compare_rows_with_single_row(gemm, KernelFamily::invariant, s, kEngineMs);
    EXPECT_EQ(c.rows_differing, 0) << s.name << " first difference " << describe_difference(c);
  }
}

// The own skinny kernel alone (whether it may serve a band is the companion check's call): each
// row of x[:M] · w^T bitwise equal to that row's M=1 product at every M it takes, with one and two
// token tiles, and within the fp64 tolerance of AllPathsMatchAnFp64ReferenceWithinTolerance.
TEST(CudaGemm, SkinnyKernelRowsAreBatchInvariantAndAccurate) {
  BIH_SKIP_WITHOUT_GPU();
  for (const Shape& s : kShapes) {
    ASSERT_TRUE(bih::cuda::skinny_gemm_supports(bih::cuda::kSkinnyMaxM, s.N, s.K)) << s.name;
    const ShapeData& data = host_data(s);
    const DeviceBuffer<bf16> x(data.x);
    const DeviceBuffer<bf16> w(data.w);
    DeviceBuffer<bf16> y(static_cast<size_t>(bih::cuda::kSkinnyMaxM) * s.N);  // [32, N]
    std::map<int, std::vector<bf16>> alone;
    int differing = 0;
    std::string first;
    for (int M = 1; M <= bih::cuda::kSkinnyMaxM; ++M) {
      bih::cuda::launch_skinny_gemm(x.get(), w.get(), y.get(), M, s.N, s.K, nullptr);
      const std::vector<bf16> out = y.download(0, static_cast<size_t>(M) * s.N);
      if (M == 1) alone[0] = out;
      for (int r = 0; r < M; ++r) {
        if (alone.count(r) == 0) {  // row r alone: x + r * K at M = 1
          DeviceBuffer<bf16> y1(s.N);
          bih::cuda::launch_skinny_gemm(x.get() + static_cast<size_t>(r) * s.K, w.get(), y1.get(),
                                        1, s.N, s.K, nullptr);
          alone[r] = y1.download(0, s.N);
        }
        for (int col = 0; col < s.N; ++col) {
          if (out[static_cast<size_t>(r) * s.N + col].bits == alone[r][col].bits) continue;
          if (differing++ == 0) {
            first = "M=" + std::to_string(M) + " row " + std::to_string(r) + " col " +
                    std::to_string(col);
          }
          break;
        }
      }
      if (M != 5 && M != 27) continue;
      for (int r : {0, M - 1}) {
        for (int col = 0; col < s.N; col += s.N / 64) {
          double ref = 0.0;
          for (int k = 0; k < s.K; ++k) {
            ref += static_cast<double>(bih::to_float(data.x[static_cast<size_t>(r) * s.K + k])) *
                   static_cast<double>(bih::to_float(data.w[static_cast<size_t>(col) * s.K + k]));
          }
          const double got = bih::to_float(out[static_cast<size_t>(r) * s.N + col]);
          EXPECT_LE(std::abs(got - ref), std::ldexp(1.0, -7) * std::abs(ref) + 1e-3)
              << s.name << " M=" << M << " row " << r << " col " << col;
        }
      }
    }
    EXPECT_EQ(differing, 0) << s.name << ": rows differing from their M=1 product, first at "
                            << first;
  }
  EXPECT_THROW(bih::cuda::launch_skinny_gemm(nullptr, nullptr, nullptr, 33, 8, 16, nullptr),
               std::invalid_argument);
  EXPECT_THROW(bih::cuda::launch_skinny_gemm(nullptr, nullptr, nullptr, 1, 8, 24, nullptr),
               std::invalid_argument);
}

// With skinny_max_m = kSkinnyMaxM, the skinny kernel is offered first for every band up to it.
// On Hopper it is accepted on every shape (measured on the H200: an mma.sync k16 chain has the
// bits of cuBLASLt's wgmma one), and whatever serves, the outputs equal the reference's bitwise.
TEST(CudaGemm, SkinnyCompanionServesSmallMOnHopperWithTheReferenceBits) {
  BIH_SKIP_WITHOUT_GPU();
  const int major = bih::test::compute_capability_major();
  CudaGemmOptions on;
  on.skinny_max_m = bih::cuda::kSkinnyMaxM;
  CudaGemm with(on);
  CudaGemmOptions off;
  off.companions = false;
  CudaGemm reference(off);
  for (const Shape& s : kShapes) {
    const GemmAlgoConfig c = with.invariant_config(s.N, s.K);
    std::cout << "[skinny] " << s.name << ": " << c.companion_notes << "\n";
    if (major == 9) {
      EXPECT_TRUE(c.serving(1).skinny) << s.name << ": " << c.companion_notes;
      EXPECT_TRUE(c.serving(bih::cuda::kSkinnyMaxM).skinny) << s.name << ": " << c.companion_notes;
    }
    DeviceBuffer<bf16> x(static_cast<size_t>(bih::cuda::kSkinnyMaxM) * s.K);  // [32, K]
    DeviceBuffer<bf16> w(static_cast<size_t>(s.N) * s.K);                     // [N, K]
    DeviceBuffer<bf16> y_with(static_cast<size_t>(bih::cuda::kSkinnyMaxM) * s.N);
    DeviceBuffer<bf16> y_reference(static_cast<size_t>(bih::cuda::kSkinnyMaxM) * s.N);
    bih::cuda::fill_order_sensitive_operands(x.get(), bih::cuda::kSkinnyMaxM, w.get(), s.N, s.K,
                                             20261201, nullptr);
    for (int m : {1, 2, 8, 9, 17, 32}) {
      with.gemm(KernelFamily::invariant, x.get(), w.get(), y_with.get(), m, s.N, s.K, nullptr);
      reference.gemm(KernelFamily::invariant, x.get(), w.get(), y_reference.get(), m, s.N, s.K,
                     nullptr);
      const bih::cuda::BitDifferences d = bih::cuda::count_bit_differences(
          y_with.get(), y_reference.get(), static_cast<size_t>(m) * s.N, nullptr);
      EXPECT_EQ(d.count, 0u) << s.name << " M=" << m << ": first at row " << d.first / s.N
                             << " col " << d.first % s.N;
    }
  }
}

// The decode instance (gemm_skinny_stream.cu) on the shapes one rank of TP 1..8 sees, at every M
// it takes: bitwise the pinned reference on order-sensitive operands (so the permutation inside a
// k16 step changes no bit), and a clear refusal of what it does not take.
TEST(CudaGemm, SkinnyStreamGivesTheReferenceBitsOnEveryRankShape) {
  BIH_SKIP_WITHOUT_GPU();
  BIH_SKIP_UNLESS_SM90();
  CudaGemmOptions off;
  off.companions = false;
  CudaGemm reference(off);
  struct RankShape {
    std::string name;
    int N, K;
  };
  std::vector<RankShape> shapes;
  for (int tp : {1, 2, 8}) {
    for (const Shape& s : kShapes) {
      const bool row_parallel = s.name == "o_proj" || s.name == "down";
      if (s.name == "lm_head" && tp > 1) continue;  // one vocab shard is enough: tp 1
      shapes.push_back({s.name + "/tp" + std::to_string(tp), row_parallel ? s.N : s.N / tp,
                        row_parallel ? s.K / tp : s.K});
    }
  }
  shapes.push_back({"smallest", 16, 256});
  for (const RankShape& s : shapes) {
    ASSERT_TRUE(bih::cuda::skinny_stream_supports(8, s.N, s.K, reinterpret_cast<void*>(256),
                                                  reinterpret_cast<void*>(256)))
        << s.name;
    DeviceBuffer<bf16> x(static_cast<size_t>(8) * s.K);  // [8, K]
    DeviceBuffer<bf16> w(static_cast<size_t>(s.N) * s.K);
    DeviceBuffer<bf16> y(static_cast<size_t>(8) * s.N);
    DeviceBuffer<bf16> y_reference(static_cast<size_t>(8) * s.N);
    bih::cuda::fill_order_sensitive_operands(x.get(), 8, w.get(), s.N, s.K, 20261206, nullptr);
    const std::vector<std::string> rings = bih::cuda::skinny_stream_rings(s.N, s.K);
    ASSERT_FALSE(rings.empty()) << s.name;
    for (int m = 1; m <= 8; ++m) {
      reference.gemm(KernelFamily::invariant, x.get(), w.get(), y_reference.get(), m, s.N, s.K,
                     nullptr);
      for (const std::string& ring : rings) {
        bih::cuda::launch_skinny_stream_ring(ring, x.get(), w.get(), y.get(), m, s.N, s.K, nullptr);
        const bih::cuda::BitDifferences d = bih::cuda::count_bit_differences(
            y.get(), y_reference.get(), static_cast<size_t>(m) * s.N, nullptr);
        EXPECT_EQ(d.count, 0u) << s.name << " N=" << s.N << " K=" << s.K << " M=" << m << " ring "
                               << ring << ": first at row " << d.first / s.N << " col "
                               << d.first % s.N;
      }
    }
  }
  DeviceBuffer<bf16> buffer(static_cast<size_t>(16) * 512);
  EXPECT_FALSE(bih::cuda::skinny_stream_supports(9, 16, 256, buffer.get(), buffer.get()));
  EXPECT_FALSE(bih::cuda::skinny_stream_supports(1, 16, 128, buffer.get(), buffer.get()));
  EXPECT_FALSE(bih::cuda::skinny_stream_supports(1, 8, 256, buffer.get(), buffer.get()));
  EXPECT_FALSE(bih::cuda::skinny_stream_supports(1, 16, 256, buffer.get() + 1, buffer.get()));
  EXPECT_THROW(bih::cuda::launch_skinny_stream(buffer.get(), buffer.get(), buffer.get(), 1, 16, 384,
                                               nullptr),
               std::invalid_argument);
  EXPECT_THROW(bih::cuda::launch_skinny_stream_ring("wide", buffer.get(), buffer.get(),
                                                    buffer.get(), 1, 16, 256, nullptr),
               std::invalid_argument);  // 16 rows: narrower than the wide rings' 32
  EXPECT_THROW(bih::cuda::launch_skinny_stream_ring("deep", buffer.get(), buffer.get(),
                                                    buffer.get(), 1, 16, 256, nullptr),
               std::invalid_argument);
}

// Which ring serves qwen3-1.7b's TP=1 shapes on a Hopper of 132 multiprocessors (H100 SXM, H200)
// by default: the decode ring while its CTAs fit four an SM at once, the wide ring past that
// (gate_up's 768 decode CTAs would take 1.45 waves; lm_head's many). BIH_GEMM_SKINNY_RING would
// change it, so the test skips where that is set.
TEST(CudaGemm, SkinnyStreamTakesTheWideRingPastFourDecodeCtasAnSm) {
  BIH_SKIP_WITHOUT_GPU();
  BIH_SKIP_UNLESS_SM90();
  if (std::getenv("BIH_GEMM_SKINNY_RING") != nullptr) GTEST_SKIP() << "BIH_GEMM_SKINNY_RING is set";
  if (bih::cuda::multiprocessor_count() != 132) {
    GTEST_SKIP() << "the expected rings are worked out for 132 multiprocessors; this GPU has "
                 << bih::cuda::multiprocessor_count();
  }
  const std::map<std::string, std::string> expected = {{"qkv", "decode"},
                                                       {"o_proj", "decode"},
                                                       {"gate_up", "wide"},
                                                       {"down", "decode"},
                                                       {"lm_head", "wide"}};
  for (const Shape& s : kShapes) {
    EXPECT_EQ(bih::cuda::skinny_stream_ring_for(s.N, s.K), expected.at(s.name))
        << s.name << " N=" << s.N << " K=" << s.K;
  }
}

// Small shapes, for compute-sanitizer's memcheck and racecheck (ci/device-check.sh's sanitize
// stage; reports/gpu/decode-pipeline-2026-12-06 ran it with each ring forced by
// BIH_GEMM_SKINNY_RING): one stage, a ring filled exactly, and stage counts that wrap the ring,
// every M, each output against the register instance bitwise.
TEST(CudaGemm, SkinnyStreamSmallShapesKeepTheRegisterInstanceBits) {
  BIH_SKIP_WITHOUT_GPU();
  BIH_SKIP_UNLESS_SM90();
  // N, K: 1, 9, 4 and 5 stages of the decode ring (256 k); the last three 18, 8 and 10 of the
  // wide one (128 k; N = 16 is too narrow for it). Every ring that takes a shape runs it.
  const std::vector<std::pair<int, int>> shapes = {{16, 256}, {32, 2304}, {32, 1024}, {64, 1280}};
  for (const auto& [N, K] : shapes) {
    DeviceBuffer<bf16> x(static_cast<size_t>(8) * K);  // [8, K]
    DeviceBuffer<bf16> w(static_cast<size_t>(N) * K);  // [N, K]
    DeviceBuffer<bf16> y(static_cast<size_t>(8) * N);  // [8, N]
    DeviceBuffer<bf16> y_registers(static_cast<size_t>(8) * N);
    bih::cuda::fill_order_sensitive_operands(x.get(), 8, w.get(), N, K, 20261207, nullptr);
    for (int m = 1; m <= 8; ++m) {
      bih::cuda::launch_skinny_registers(x.get(), w.get(), y_registers.get(), m, N, K, nullptr);
      for (const std::string& ring : bih::cuda::skinny_stream_rings(N, K)) {
        bih::cuda::launch_skinny_stream_ring(ring, x.get(), w.get(), y.get(), m, N, K, nullptr);
        const bih::cuda::BitDifferences d = bih::cuda::count_bit_differences(
            y.get(), y_registers.get(), static_cast<size_t>(m) * N, nullptr);
        EXPECT_EQ(d.count, 0u) << "N=" << N << " K=" << K << " M=" << m << " ring " << ring
                               << ": first at row " << d.first / N << " col " << d.first % N;
      }
    }
  }
}

// The stream instance under the load that broke it in the engine (reports/gpu/skinny-race-
// 2026-12-06): many streams launching it at once, thousands of launches, every output compared with
// the register instance's on the same operands. Without the proxy fence before a slot's release
// (BIH_GEMM_SKINNY_FENCE=0), the tensor copy engine could overwrite a slot that a consumer warp's
// shared loads had not read yet. Without it this test found 10640 and 7741 differing elements in
// two runs on an H100; with it, none.
TEST(CudaGemm, SkinnyStreamUnderConcurrentLoadKeepsTheRegisterInstanceBits) {
  BIH_SKIP_WITHOUT_GPU();
  BIH_SKIP_UNLESS_SM90();
  constexpr int kThreads = 16;
  constexpr int kRounds = 250;
  struct StreamShape {
    const char* name;
    int N, K;
  };
  // One rank's shapes at TP=4 (lm_head takes the wide ring) and qkv at TP=1.
  const std::vector<StreamShape> shapes = {{"o_proj/tp4", 2048, 512},
                                           {"down/tp4", 2048, 1536},
                                           {"qkv/tp1", 4096, 2048},
                                           {"lm_head/tp4", 37984, 2048}};
  constexpr int kMaxK = 2048;
  auto m_of = [](int thread) { return 1 + thread % 8; };
  std::vector<std::unique_ptr<DeviceBuffer<bf16>>> w;
  std::vector<std::vector<std::unique_ptr<DeviceBuffer<bf16>>>> x(shapes.size()),
      alone(shapes.size());
  DeviceBuffer<bf16> other_draw(static_cast<size_t>(shapes.back().N) * kMaxK);
  for (size_t s = 0; s < shapes.size(); ++s) {
    w.push_back(std::make_unique<DeviceBuffer<bf16>>(static_cast<size_t>(shapes[s].N) * kMaxK));
    for (int i = 0; i < kThreads; ++i) {
      x[s].push_back(std::make_unique<DeviceBuffer<bf16>>(static_cast<size_t>(8) * kMaxK));
      alone[s].push_back(
          std::make_unique<DeviceBuffer<bf16>>(static_cast<size_t>(8) * shapes[s].N));
      // Thread i's tokens; the weights are thread 0's draw, shared by every thread.
      bih::cuda::fill_order_sensitive_operands(x[s][i]->get(), 8,
                                               i == 0 ? w[s]->get() : other_draw.get(), shapes[s].N,
                                               shapes[s].K, 20261206 + 97 * i + s, nullptr);
    }
    for (int i = 0; i < kThreads; ++i) {
      bih::cuda::launch_skinny_registers(x[s][i]->get(), w[s]->get(), alone[s][i]->get(), m_of(i),
                                         shapes[s].N, shapes[s].K, nullptr);
    }
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // [thread][shape]: count, first (launch_count_bit_differences accumulates over the rounds).
  DeviceBuffer<uint64_t> counters(static_cast<size_t>(kThreads) * shapes.size() * 2);
  std::vector<uint64_t> initial(counters.size());
  for (size_t c = 0; c < initial.size(); ++c) initial[c] = c % 2 == 0 ? 0 : UINT64_MAX;
  ASSERT_EQ(cudaMemcpy(counters.get(), initial.data(), initial.size() * sizeof(uint64_t),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      cudaStream_t stream = nullptr;
      try {
        if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
          errors[i] = "cudaStreamCreateWithFlags failed";
          return;
        }
        DeviceBuffer<bf16> y(static_cast<size_t>(8) * shapes.back().N);
        for (int round = 0; round < kRounds; ++round) {
          for (size_t s = 0; s < shapes.size(); ++s) {
            const size_t n = static_cast<size_t>(m_of(i)) * shapes[s].N;
            bih::cuda::launch_skinny_stream(x[s][i]->get(), w[s]->get(), y.get(), m_of(i),
                                            shapes[s].N, shapes[s].K, stream);
            uint64_t* c = counters.get() + (static_cast<size_t>(i) * shapes.size() + s) * 2;
            bih::cuda::launch_count_bit_differences(y.get(), alone[s][i]->get(), n, c, c + 1,
                                                    stream);
          }
        }
        if (cudaStreamSynchronize(stream) != cudaSuccess) errors[i] = "stream failed";
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      if (stream != nullptr) cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) ASSERT_EQ(errors[i], "") << "thread " << i;
  std::vector<uint64_t> result(counters.size());
  ASSERT_EQ(cudaMemcpy(result.data(), counters.get(), result.size() * sizeof(uint64_t),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  uint64_t total = 0;
  for (int i = 0; i < kThreads; ++i) {
    for (size_t s = 0; s < shapes.size(); ++s) {
      const uint64_t count = result[(i * shapes.size() + s) * 2];
      const uint64_t first = result[(i * shapes.size() + s) * 2 + 1];
      total += count;
      EXPECT_EQ(count, 0u) << shapes[s].name << " thread " << i << " (M=" << m_of(i) << "): over "
                           << kRounds << " launches, first at row " << first / shapes[s].N
                           << " col " << first % shapes[s].N;
    }
  }
  std::cout << "[skinny stream] " << kThreads * kRounds * shapes.size() << " launches on "
            << kThreads << " streams: " << total
            << " output elements differed from the register instance\n";
}

TEST(CudaGemm, VendorDownProjectionRowDependsOnTheBatch) {
  BIH_SKIP_WITHOUT_GPU();
  CudaGemm gemm;
  const RowComparison c =
      compare_rows_with_single_row(gemm, KernelFamily::vendor, kDown, kEngineMs);
  ASSERT_GT(c.rows_differing, 0) << "the vendor GEMM kept every row of the down projection equal "
                                    "to its M=1 product at every M";
  std::cout << "[vendor] down: " << c.rows_differing << " of " << c.rows_compared
            << " rows differ; first " << describe_difference(c) << "\n"
            << "[vendor] down at M=1: " << gemm.vendor_config(1, kDown.N, kDown.K).describe()
            << "\n[vendor] down at M=" << c.m << ": "
            << gemm.vendor_config(c.m, kDown.N, kDown.K).describe() << "\n";
}

// fp64 host reference of a sample (3 rows x 64 columns) of x[:64] · w^T.
TEST(CudaGemm, AllPathsMatchAnFp64ReferenceWithinTolerance) {
  BIH_SKIP_WITHOUT_GPU();
  constexpr int kM = 64;
  CudaGemm gemm;
  CudaGemmOptions own_options;
  own_options.own_kernel_only = true;
  CudaGemm own(own_options);
  struct Path {
    const char* name;
    CudaGemm* gemm;
    KernelFamily family;
  };
  const Path paths[] = {{"invariant", &gemm, KernelFamily::invariant},
                        {"vendor", &gemm, KernelFamily::vendor},
                        {"own kernel", &own, KernelFamily::invariant}};
  for (const Shape& s : kShapes) {
    const ShapeData& data = host_data(s);
    const DeviceBuffer<bf16> x(data.x);
    const DeviceBuffer<bf16> w(data.w);
    DeviceBuffer<bf16> y(static_cast<size_t>(kM) * s.N);  // [kM, N]
    for (const Path& p : paths) {
      p.gemm->gemm(p.family, x.get(), w.get(), y.get(), kM, s.N, s.K, nullptr);
      int checked = 0;
      for (int r : {0, 31, kM - 1}) {
        const std::vector<bf16> row = y.download(static_cast<size_t>(r) * s.N, s.N);
        for (int col = 0; col < s.N; col += s.N / 64) {
          double ref = 0.0;
          for (int k = 0; k < s.K; ++k) {
            ref += static_cast<double>(bih::to_float(data.x[static_cast<size_t>(r) * s.K + k])) *
                   static_cast<double>(bih::to_float(data.w[static_cast<size_t>(col) * s.K + k]));
          }
          const double got = bih::to_float(row[col]);
          EXPECT_LE(std::abs(got - ref), std::ldexp(1.0, -7) * std::abs(ref) + 1e-3)
              << p.name << " " << s.name << " row " << r << " col " << col;
          ++checked;
        }
      }
      EXPECT_GE(checked, 3 * 64) << p.name << " " << s.name;
    }
  }
}

// The outputs of the family with and without companions, element by element, at the brief's Ms
// and both sides of every companion edge; on the test's uniform data and on order-sensitive
// operands of another seed than the pin-time check's.
TEST(CudaGemm, CompanionsNeverChangeABit) {
  BIH_SKIP_WITHOUT_GPU();
  CudaGemm with;
  CudaGemmOptions off;
  off.companions = false;
  CudaGemm without(off);
  for (const Shape& s : kShapes) {
    const GemmAlgoConfig c = with.invariant_config(s.N, s.K);
    const std::vector<int> ms = ms_across_companion_edges(c, {1, 7, 64, 65, 512, 4096});
    DeviceBuffer<bf16> x(static_cast<size_t>(kMaxM) * s.K);          // [kMaxM, K]
    DeviceBuffer<bf16> w(static_cast<size_t>(s.N) * s.K);            // [N, K]
    DeviceBuffer<bf16> y_with(static_cast<size_t>(kMaxM) * s.N);     // [kMaxM, N]
    DeviceBuffer<bf16> y_without(static_cast<size_t>(kMaxM) * s.N);  // [kMaxM, N]
    for (const char* data : {"uniform", "order-sensitive"}) {
      if (std::string(data) == "uniform") {
        const ShapeData& host = host_data(s);
        bih::test::copy_to_device(x.get(), host.x.data(), host.x.size() * sizeof(bf16));
        bih::test::copy_to_device(w.get(), host.w.data(), host.w.size() * sizeof(bf16));
      } else {
        bih::cuda::fill_order_sensitive_operands(x.get(), kMaxM, w.get(), s.N, s.K, 20261130,
                                                 nullptr);
      }
      for (int m : ms) {
        with.gemm(KernelFamily::invariant, x.get(), w.get(), y_with.get(), m, s.N, s.K, nullptr);
        without.gemm(KernelFamily::invariant, x.get(), w.get(), y_without.get(), m, s.N, s.K,
                     nullptr);
        const bih::cuda::BitDifferences d = bih::cuda::count_bit_differences(
            y_with.get(), y_without.get(), static_cast<size_t>(m) * s.N, nullptr);
        EXPECT_EQ(d.count, 0u) << s.name << " " << data << " M=" << m << ": first at row "
                               << d.first / s.N << " col " << d.first % s.N << " with "
                               << c.serving(m).describe();
      }
    }
    std::cout << "[invariant] " << s.name << ": companions on = off at " << ms.size()
              << " Ms, two data sets\n";
  }
}

TEST(CudaGemm, BitDifferenceCountFindsEveryDifferingElementAndNoOther) {
  BIH_SKIP_WITHOUT_GPU();
  constexpr size_t kN = 1001;  // not a multiple of 8: the last element is in the scalar tail
  const std::vector<bf16> a = random_bf16(kN + 1, 5, 1.0f);
  std::vector<bf16> b = a;
  b[3].bits ^= 0x0001;     // the high half of a 32-bit word in the first 16-byte vector
  b[8].bits ^= 0x8000;     // a sign flip (+0 and -0 differ too): the low half of a word
  b[1000].bits ^= 0x0100;  // the scalar tail
  b[kN].bits ^= 0x0001;    // beyond n: must not count
  const DeviceBuffer<bf16> da(a);
  const DeviceBuffer<bf16> db(b);
  const bih::cuda::BitDifferences d =
      bih::cuda::count_bit_differences(da.get(), db.get(), kN, nullptr);
  EXPECT_EQ(d.count, 3u);
  EXPECT_EQ(d.first, 3u);
  const bih::cuda::BitDifferences same =
      bih::cuda::count_bit_differences(da.get(), da.get(), kN, nullptr);
  EXPECT_EQ(same.count, 0u);
  EXPECT_EQ(same.first, UINT64_MAX);
  // Pointers 2 bytes past 16-byte alignment take the scalar path: the same three, shifted.
  const bih::cuda::BitDifferences shifted =
      bih::cuda::count_bit_differences(da.get() + 1, db.get() + 1, kN - 1, nullptr);
  EXPECT_EQ(shifted.count, 3u);
  EXPECT_EQ(shifted.first, 2u);
}

// The pin-time check is only as strong as its data: the large products must cancel exactly, and
// a different summation order (the own kernel's sequential fmaf chain) must change most outputs.
TEST(CudaGemm, OrderSensitiveOperandsCancelExactlyAndExposeAnotherSummationOrder) {
  BIH_SKIP_WITHOUT_GPU();
  constexpr int kM = 64;
  const Shape s = kDown;
  DeviceBuffer<bf16> x(static_cast<size_t>(kM) * s.K);   // [kM, K]
  DeviceBuffer<bf16> w(static_cast<size_t>(s.N) * s.K);  // [N, K]
  bih::cuda::fill_order_sensitive_operands(x.get(), kM, w.get(), s.N, s.K, 99, nullptr);
  const std::vector<bf16> xs = x.download(0, x.size());
  const std::vector<bf16> ws = w.download(0, w.size());
  for (int r : {0, 31, kM - 1}) {
    for (int n : {0, 777, s.N - 1}) {
      // Large values are >= 2 in magnitude, small ones < 2; products are exact in double, and
      // so are these sums (about 40 significant bits).
      int large = 0;
      int unmatched = 0;  // positions where only one operand is large
      double large_sum = 0.0;
      for (int k = 0; k < s.K; ++k) {
        const double xv = bih::to_float(xs[static_cast<size_t>(r) * s.K + k]);
        const double wv = bih::to_float(ws[static_cast<size_t>(n) * s.K + k]);
        if ((std::abs(xv) >= 2.0) != (std::abs(wv) >= 2.0)) ++unmatched;
        if (std::abs(xv) >= 2.0) {
          ++large;
          large_sum += xv * wv;
        }
      }
      EXPECT_EQ(unmatched, 0) << "row " << r << " col " << n;
      EXPECT_EQ(large, 2 * (s.K / 8)) << "row " << r << " col " << n;
      EXPECT_EQ(large_sum, 0.0) << "row " << r << " col " << n;
    }
  }
  CudaGemmOptions plain;
  plain.companions = false;
  CudaGemm cublaslt(plain);
  CudaGemmOptions own_options;
  own_options.own_kernel_only = true;
  CudaGemm own(own_options);
  ASSERT_TRUE(cublaslt.invariant_config(s.N, s.K).cublaslt);
  DeviceBuffer<bf16> y_cublaslt(static_cast<size_t>(kM) * s.N);  // [kM, N]
  DeviceBuffer<bf16> y_own(static_cast<size_t>(kM) * s.N);       // [kM, N]
  cublaslt.gemm(KernelFamily::invariant, x.get(), w.get(), y_cublaslt.get(), kM, s.N, s.K, nullptr);
  own.gemm(KernelFamily::invariant, x.get(), w.get(), y_own.get(), kM, s.N, s.K, nullptr);
  const bih::cuda::BitDifferences d = bih::cuda::count_bit_differences(
      y_cublaslt.get(), y_own.get(), static_cast<size_t>(kM) * s.N, nullptr);
  std::cout << "[order-sensitive] down M=" << kM << ": " << d.count << " of " << kM * s.N
            << " elements differ between cuBLASLt and the own kernel\n";
  EXPECT_GT(d.count, static_cast<uint64_t>(kM) * s.N / 2);
}

// Captures what `enqueue` puts on `stream` into a graph; abandons the capture if it throws.
template <class Enqueue>
std::unique_ptr<bih::test::CapturedGraph> capture(cudaStream_t stream, Enqueue enqueue) {
  bih::test::begin_capture(stream);
  try {
    enqueue();
  } catch (...) {
    bih::test::abandon_capture(stream);
    throw;
  }
  return std::make_unique<bih::test::CapturedGraph>(stream);
}

// Pinning runs the bitwise check on the GPU: refused while the caller's stream is capturing,
// leaving the capture intact; once pinned eagerly, the shape captures and replays its eager bits.
TEST(CudaGemm, PinningIsRefusedDuringCaptureAndAPinnedShapeReplaysTheEagerBits) {
  BIH_SKIP_WITHOUT_GPU();
  const Shape s = kShapes[1];
  constexpr int kM = 3;
  const size_t count = static_cast<size_t>(kM) * s.N;
  const ShapeData& data = host_data(s);
  const DeviceBuffer<bf16> x(data.x);
  const DeviceBuffer<bf16> w(data.w);
  DeviceBuffer<bf16> y_eager(count);  // [kM, N]
  DeviceBuffer<bf16> y_graph(count);  // [kM, N]
  bih::test::TestStream stream;
  CudaGemm gemm;
  CudaGemmOptions own_options;
  own_options.own_kernel_only = true;  // pins without GPU work
  CudaGemm own(own_options);

  // The refusal, then more work in the same capture: the capture must still be usable.
  auto refused = capture(stream.get(), [&] {
    EXPECT_THROW(gemm.gemm(KernelFamily::invariant, x.get(), w.get(), y_graph.get(), kM, s.N, s.K,
                           stream.get()),
                 std::runtime_error);
    own.gemm(KernelFamily::invariant, x.get(), w.get(), y_graph.get(), kM, s.N, s.K, stream.get());
  });
  refused->launch(stream.get());
  own.gemm(KernelFamily::invariant, x.get(), w.get(), y_eager.get(), kM, s.N, s.K, stream.get());
  stream.synchronize();
  EXPECT_EQ(bih::cuda::count_bit_differences(y_eager.get(), y_graph.get(), count, nullptr).count,
            0u);

  // Pinned eagerly first, the cuBLASLt shape captures like any other kernel.
  gemm.gemm(KernelFamily::invariant, x.get(), w.get(), y_eager.get(), kM, s.N, s.K, stream.get());
  auto pinned = capture(stream.get(), [&] {
    gemm.gemm(KernelFamily::invariant, x.get(), w.get(), y_graph.get(), kM, s.N, s.K, stream.get());
  });
  pinned->launch(stream.get());
  stream.synchronize();
  EXPECT_EQ(bih::cuda::count_bit_differences(y_eager.get(), y_graph.get(), count, nullptr).count,
            0u);
}

TEST(CudaGemm, RejectsBadSizesAndNullPointers) {
  BIH_SKIP_WITHOUT_GPU();
  CudaGemm gemm;
  DeviceBuffer<bf16> buf(3 * 64 * 64);
  EXPECT_THROW(
      gemm.gemm(KernelFamily::invariant, buf.get(), buf.get(), buf.get(), 0, 64, 64, nullptr),
      std::invalid_argument);
  EXPECT_THROW(gemm.gemm(KernelFamily::vendor, nullptr, buf.get(), buf.get(), 1, 64, 64, nullptr),
               std::invalid_argument);
  // Misaligned x: the pinned cuBLASLt path refuses rather than running another kernel.
  if (gemm.invariant_config(64, 64).cublaslt) {
    EXPECT_THROW(gemm.gemm(KernelFamily::invariant, buf.get() + 1, buf.get() + 4096,
                           buf.get() + 2 * 4096, 1, 64, 64, nullptr),
                 std::invalid_argument);
  }
}

}  // namespace
