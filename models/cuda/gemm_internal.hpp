// gemm_internal.hpp: what the CudaGemm files share (internal to gemm.cpp, gemm_describe.cpp,
// gemm_pin.cpp and gemm_companion.cpp; not part of the API, which is gemm.hpp).
//
// CudaGemm::Impl is defined here because its state (the handle, the pinned shapes) and its
// methods span the files: gemm_pin.cpp pins the invariant family's reference, gemm_companion.cpp
// adds the companions, gemm.cpp has the vendor family and the matmul call of gemm(). Each method's
// comment is at its definition.
//
// Row-major to column-major (Problem): cuBLASLt is column-major, so the row-major y[M, N] = x · w^T
// is computed as the column-major y^T[N, M] = w[N, K] · x^T[K, M]. In cuBLASLt's terms A = w
// stored as a column-major [K, N] matrix (ld K) used transposed, B = x stored as a column-major
// [K, M] matrix (ld K), D = y stored as a column-major [N, M] matrix (ld N). M is the column count
// of B and D, so a change of M only changes how many column tiles there are, never a tile's K loop.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "models/cuda/check.hpp"
#include "models/cuda/gemm.hpp"

namespace bih::cuda {
namespace detail {

// Every cuBLASLt path needs ld*2 bytes and base pointers at least 16-byte aligned (TMA loads).
inline constexpr uint32_t kInvariantAlignment = 16;

// One matmul problem's descriptors, in stack storage (no allocation per call).
struct Problem {
  cublasLtMatmulDescOpaque_t desc_storage;
  cublasLtMatrixLayoutOpaque_t a_storage;  // w as column-major [K, N], ld K, used transposed
  cublasLtMatrixLayoutOpaque_t b_storage;  // x as column-major [K, M], ld K
  cublasLtMatrixLayoutOpaque_t d_storage;  // y as column-major [N, M], ld N (also C; beta = 0)

  Problem(int M, int N, int K) {
    cublasCheck(cublasLtMatmulDescInit(desc(), CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T;
    const cublasOperation_t plain = CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc(), CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                               sizeof(transpose)));
    cublasCheck(
        cublasLtMatmulDescSetAttribute(desc(), CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain)));
    cublasCheck(cublasLtMatrixLayoutInit(a(), CUDA_R_16BF, K, N, K));
    cublasCheck(cublasLtMatrixLayoutInit(b(), CUDA_R_16BF, K, M, K));
    cublasCheck(cublasLtMatrixLayoutInit(d(), CUDA_R_16BF, N, M, N));
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  // Only M changes between the checks of one pinned algorithm: B's and D's column count.
  void set_m(int M) {
    const uint64_t cols = static_cast<uint64_t>(M);
    cublasCheck(
        cublasLtMatrixLayoutSetAttribute(b(), CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
    cublasCheck(
        cublasLtMatrixLayoutSetAttribute(d(), CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols)));
  }

  cublasLtMatmulDesc_t desc() { return &desc_storage; }
  cublasLtMatrixLayout_t a() { return &a_storage; }
  cublasLtMatrixLayout_t b() { return &b_storage; }
  cublasLtMatrixLayout_t d() { return &d_storage; }
};

inline void set_preference(cublasLtMatmulPreference_t pref,
                           cublasLtMatmulPreferenceAttributes_t attr, uint32_t value) {
  cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

// gemm_describe.cpp: a cuBLASLt algorithm as a GemmAlgoConfig, and configurations in words.
GemmAlgoConfig describe_algo(const cublasLtMatmulAlgo_t& algo, size_t workspace, int chosen_at_m);
std::string identity(const GemmAlgoConfig& c);
std::string range_text(int first, int last);
std::string describe_single(const GemmAlgoConfig& c);

// gemm_companion.cpp: the bitwise comparison of a candidate with the reference.
class EquivalenceCheck;

}  // namespace detail

struct CudaGemm::Impl {
  // An algorithm serving first_m..last_m in place of the reference.
  struct Companion {
    int first_m = 0;
    int last_m = 0;
    bool skinny = false;  // the own skinny kernel; otherwise `algo`
    cublasLtMatmulAlgo_t algo{};
  };
  struct Pinned {
    GemmAlgoConfig config;  // the reference; config.companions describes `companions`
    cublasLtMatmulAlgo_t algo{};
    std::vector<Companion> companions;  // sorted, disjoint, inside 1..config.validated_max_m
    std::map<int, bool> beyond_max_m;   // AlgoCheck results for M > validated_max_m

    // The companion serving M, or null where the reference does.
    const Companion* companion_at(int M) const {
      for (const Companion& c : companions) {
        if (M >= c.first_m && M <= c.last_m) return &c;
      }
      return nullptr;
    }
  };
  struct VendorChoice {
    GemmAlgoConfig config;
    cublasLtMatmulAlgo_t algo{};
  };
  // A cuBLASLt algorithm that passed AlgoCheck over a range of M, and its description.
  struct Candidate {
    cublasLtMatmulAlgo_t algo{};
    GemmAlgoConfig config;
  };
  // Candidates AlgoCheck turned down: how many, and the first three for the error message.
  struct Rejections {
    int count = 0;
    std::string first;
  };

  CudaGemmOptions options;
  std::vector<GemmBand> bands;  // options.companion_bands resolved against max_m
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;            // [vendor_workspace_bytes] device bytes, vendor family only
  void* scheduler_workspace = nullptr;  // [scheduler_workspace_bytes] zeroed, invariant family
  std::mutex mutex;
  std::map<std::pair<int, int>, Pinned> pinned;  // (N, K) -> the invariant family's choice
  std::map<std::tuple<int, int, int, uint32_t>, VendorChoice> vendor;  // (M, N, K, alignment)
  const bool log = std::getenv("BIH_GEMM_LOG") != nullptr;

  // Why a candidate failed at one M: the AlgoCheck status, or the workspace it would need.
  struct CheckFailure {
    int m = 0;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    size_t workspace = 0;
  };

  // gemm_pin.cpp: the reference, AlgoCheck over ranges of M, and pinning a shape.
  std::optional<CheckFailure> check_at(detail::Problem& problem, const cublasLtMatmulAlgo_t& algo,
                                       int M, size_t workspace_limit, size_t* workspace);
  bool algo_valid_at(detail::Problem& problem, const cublasLtMatmulAlgo_t& algo, int M);
  std::optional<CheckFailure> first_failure(detail::Problem& problem,
                                            const cublasLtMatmulAlgo_t& algo, int first_m,
                                            int last_m, size_t workspace_limit, size_t* workspace);
  std::vector<cublasLtMatmulAlgo_t> heuristic_candidates(int M, int N, int K,
                                                         bool reduction_none_only);
  std::optional<Candidate> first_valid_variant(detail::Problem& problem,
                                               const cublasLtMatmulAlgo_t& offered, int heuristic_m,
                                               int first_m, int last_m,
                                               std::set<std::string>& tried, Rejections& rejections,
                                               int N, int K);
  Pinned pin_reference(int N, int K);
  Pinned pin_with_companions(int N, int K);
  std::string pin_key(int N, int K) const;
  void refuse_pinning_during_capture(cudaStream_t stream, int N, int K);
  Pinned& pinned_for(int N, int K);

  // gemm_companion.cpp: the companion search of each band.
  std::string find_companion(Pinned& p, const GemmBand& band, detail::EquivalenceCheck& check,
                             std::set<std::string>& differs, int N, int K);
  std::string add_companions(Pinned& p, int N, int K);

  // gemm.cpp: the vendor family's choice, and the one matmul call of both families.
  VendorChoice& vendor_for(int M, int N, int K, uint32_t alignment);
  void run_cublaslt(const cublasLtMatmulAlgo_t& algo, const bf16* x, const bf16* w, bf16* y, int M,
                    int N, int K, void* work, size_t work_bytes, cudaStream_t stream);
};

}  // namespace bih::cuda
