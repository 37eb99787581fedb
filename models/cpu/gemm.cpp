// gemm.cpp: the CPU GEMM y[M,N] = x[M,K] . w[N,K]^T, bf16 in and out, fp32 accumulation.
//
// Every output element is one dot product whose reduction order is fixed by K alone: lane j of an
// 8-lane fp32 accumulator sums the products at k = k0 + j, k0 + j + 8, ... (k0 the start of the
// reduced range), then the lanes are added by a fixed tree ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
// Rows are processed in blocks only to reuse loaded data; each output has its own accumulator
// chain, so blocking never changes the arithmetic. The lanes are written with GCC vector
// extensions so the compiler vectorizes them at -O2 for any target without reassociating
// anything (no -ffast-math is needed or wanted).
//
// The tp_invariant family splits K into kTpInvariantChunks equal chunks, reduces each with the
// same lane pattern from zero and combines the chunk partials with pairwise_tree_sum
// (models/tree_sum.hpp): one rounding to bf16 at the end, or none for a row-parallel rank's fp32
// partial, which the communicator's tree collective finishes and rounds.
#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/cpu/kernels.hpp"
#include "models/tree_sum.hpp"

// The vector helpers below are internal and always inlined, so their AVX-sized ABI never shows.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace bih::cpu {
namespace {

constexpr int kLanes = 8;      // independent fp32 accumulators per dot product
constexpr int kRowBlock = 4;   // w rows reduced together against one x row
constexpr int kWidenMinM = 8;  // from this many x rows on, w rows are widened to fp32 once

typedef float Vec8f __attribute__((vector_size(32)));
typedef uint16_t Vec8u16 __attribute__((vector_size(16)));
typedef uint32_t Vec8u32 __attribute__((vector_size(32)));

[[gnu::always_inline]] inline Vec8f load8(const float* p) {
  Vec8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// bf16 -> fp32 is exact: the bf16 bits become the top half of the float.
[[gnu::always_inline]] inline Vec8f load8(const bf16* p) {
  Vec8u16 h;
  std::memcpy(&h, p, sizeof h);
  Vec8u32 wide = __builtin_convertvector(h, Vec8u32) << 16;
  return std::bit_cast<Vec8f>(wide);
}

inline float lane_value(const float* p, int i) { return p[i]; }
inline float lane_value(const bf16* p, int i) { return to_float(p[i]); }

// The fixed lane-combining tree.
inline float reduce_lanes(const Vec8f& a) {
  const float t0 = a[0] + a[4];
  const float t1 = a[1] + a[5];
  const float t2 = a[2] + a[6];
  const float t3 = a[3] + a[7];
  return (t0 + t2) + (t1 + t3);
}

// out[r] = dot(x[k0:k1], w[r][k0:k1]) for R rows of w, each in the fixed lane order.
// x: [K] fp32; w[r]: [K] fp32 (widened once, reused across M) or bf16 (read directly for tiny M).
template <int R, class WType>
inline void dot_rows(const float* x, const WType* const* w, int k0, int k1, float* out) {
  Vec8f acc[R];
  for (int r = 0; r < R; ++r) acc[r] = Vec8f{};
  int k = k0;
  for (; k + kLanes <= k1; k += kLanes) {
    const Vec8f xv = load8(x + k);
    for (int r = 0; r < R; ++r) acc[r] += xv * load8(w[r] + k);
  }
  // The tail continues the same lane pattern: element k0 + j + 8i always lands in lane j.
  for (int j = 0; k + j < k1; ++j) {
    for (int r = 0; r < R; ++r) acc[r][j] += x[k + j] * lane_value(w[r], k + j);
  }
  for (int r = 0; r < R; ++r) out[r] = reduce_lanes(acc[r]);
}

// How one output's K is reduced: the ranges, each from zero in the lane order, and how their
// partials are combined: summed in order (invariant: one range; vendor: kVendorSplitK contiguous
// ranges of ceil(K / splits) at small M), or by the pairwise chunk tree (tp_invariant).
struct KPlan {
  std::vector<std::pair<int, int>> ranges;
  bool tree = false;
};

KPlan sequential_plan(int K, int splits) {
  KPlan plan;
  const int chunk = (K + splits - 1) / splits;
  for (int k0 = 0; k0 < K || plan.ranges.empty(); k0 += std::max(chunk, 1)) {
    plan.ranges.emplace_back(k0, std::min(K, k0 + chunk));
  }
  return plan;
}

// `chunks` equal chunks of K (K % chunks == 0), combined by the tree.
KPlan chunk_tree_plan(int K, int chunks) {
  KPlan plan;
  plan.tree = true;
  const int chunk = K / chunks;
  for (int c = 0; c < chunks; ++c) plan.ranges.emplace_back(c * chunk, (c + 1) * chunk);
  return plan;
}

// y[m, n0:n0+R] for one x row against R w rows: bf16 (y) or unrounded fp32 (y32, when set).
template <int R, class WType>
inline void output_block(const float* x, const WType* const* w, const KPlan& plan, bf16* y,
                         float* y32) {
  float total[R];
  if (plan.tree) {
    const int n = static_cast<int>(plan.ranges.size());
    float parts[R][kTpInvariantChunks];
    for (int i = 0; i < n; ++i) {
      float part[R];
      dot_rows<R>(x, w, plan.ranges[i].first, plan.ranges[i].second, part);
      for (int r = 0; r < R; ++r) parts[r][i] = part[r];
    }
    for (int r = 0; r < R; ++r) total[r] = pairwise_tree_sum(parts[r], n);
  } else {
    dot_rows<R>(x, w, plan.ranges[0].first, plan.ranges[0].second, total);
    for (size_t i = 1; i < plan.ranges.size(); ++i) {
      float part[R];
      dot_rows<R>(x, w, plan.ranges[i].first, plan.ranges[i].second, part);
      for (int r = 0; r < R; ++r) total[r] += part[r];
    }
  }
  for (int r = 0; r < R; ++r) {
    if (y32 != nullptr) {
      y32[r] = total[r];
    } else {
      y[r] = to_bf16(total[r]);
    }
  }
}

// Cloned for AVX2 so the same vector code runs twice as wide where the CPU allows: mul and add
// are correctly rounded IEEE operations at any width, and the "avx2" target does not enable FMA,
// so both clones give identical bits. (A build with -mfma / -march=native lets g++ fuse them,
// which changes the bits, identically for every M: still batch invariant.)
// Exactly one of y (bf16 out) and y32 (fp32 out) is set.
__attribute__((target_clones("avx2", "default"))) void gemm_plan(const bf16* x, const bf16* w,
                                                                 bf16* y, float* y32, int M, int N,
                                                                 int K, const KPlan& plan) {
  // x widened once: [M, K] fp32. Thread-local because each TP rank is a thread.
  thread_local std::vector<float> x_wide;
  thread_local std::vector<float> w_wide;
  x_wide.resize(static_cast<size_t>(M) * K);
  for (size_t i = 0; i < x_wide.size(); ++i) x_wide[i] = to_float(x[i]);

  // With very few rows a widened w row would be used once: read bf16 directly instead. The values
  // (and so the arithmetic) are identical either way.
  const bool widen_w = M >= kWidenMinM;
  if (widen_w) w_wide.resize(static_cast<size_t>(kRowBlock) * K);

  int n = 0;
  for (; n + kRowBlock <= N; n += kRowBlock) {
    const bf16* w_rows[kRowBlock];
    const float* w_rows_wide[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) {
      w_rows[r] = w + static_cast<size_t>(n + r) * K;
      if (widen_w) {
        float* dst = w_wide.data() + static_cast<size_t>(r) * K;
        for (int k = 0; k < K; ++k) dst[k] = to_float(w_rows[r][k]);
        w_rows_wide[r] = dst;
      }
    }
    for (int m = 0; m < M; ++m) {
      const float* xm = x_wide.data() + static_cast<size_t>(m) * K;
      const size_t at = static_cast<size_t>(m) * N + n;
      bf16* ym = y != nullptr ? y + at : nullptr;
      float* ym32 = y32 != nullptr ? y32 + at : nullptr;
      if (widen_w) {
        output_block<kRowBlock>(xm, w_rows_wide, plan, ym, ym32);
      } else {
        output_block<kRowBlock>(xm, w_rows, plan, ym, ym32);
      }
    }
  }
  for (; n < N; ++n) {  // the last N % 4 rows of w, one at a time
    const bf16* w_row[1] = {w + static_cast<size_t>(n) * K};
    for (int m = 0; m < M; ++m) {
      const size_t at = static_cast<size_t>(m) * N + n;
      output_block<1>(x_wide.data() + static_cast<size_t>(m) * K, w_row, plan,
                      y != nullptr ? y + at : nullptr, y32 != nullptr ? y32 + at : nullptr);
    }
  }
}

void check_tp_invariant_k(int K, int chunks) {
  check_tp_invariant_split("gemm tp_invariant", K, chunks);
}

}  // namespace

void gemm(KernelFamily family, const bf16* x, const bf16* w, bf16* y, int M, int N, int K) {
  if (M < 0 || N < 0 || K < 0) throw std::invalid_argument("gemm: negative dimension");
  if (family == KernelFamily::tp_invariant) check_tp_invariant_k(K, kTpInvariantChunks);
  if (M == 0 || N == 0) return;
  if (family == KernelFamily::tp_invariant) {
    gemm_plan(x, w, y, nullptr, M, N, K, chunk_tree_plan(K, kTpInvariantChunks));
    return;
  }
  const bool split = family == KernelFamily::vendor && M < kVendorSplitKMaxM;
  gemm_plan(x, w, y, nullptr, M, N, K, sequential_plan(K, split ? kVendorSplitK : 1));
}

void gemm_tp_invariant_partial(const bf16* x, const bf16* w, float* y, int M, int N, int K,
                               int chunks) {
  if (M < 0 || N < 0 || K < 0) throw std::invalid_argument("gemm: negative dimension");
  check_tp_invariant_k(K, chunks);
  if (M == 0 || N == 0) return;
  gemm_plan(x, w, nullptr, y, M, N, K, chunk_tree_plan(K, chunks));
}

}  // namespace bih::cpu
