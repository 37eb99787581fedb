// gemm.cpp: CudaGemm, the cuBLASLt side of the CUDA GEMM (see gemm.hpp for the families).
//
// Row-major to column-major: cuBLASLt is column-major, so the row-major y[M, N] = x · w^T is
// computed as the column-major y^T[N, M] = w[N, K] · x^T[K, M]. In cuBLASLt's terms A = w stored
// as a column-major [K, N] matrix (ld K) used transposed, B = x stored as a column-major [K, M]
// matrix (ld K), D = y stored as a column-major [N, M] matrix (ld N). M is the column count of B
// and D, so a change of M only changes how many column tiles there are, never a tile's K loop.
#include "models/cuda/gemm.hpp"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "models/cuda/check.hpp"
#include "models/cuda/gemm_tiled.hpp"

namespace bih::cuda {
namespace {

// How many candidates the heuristic may offer for the pinned algorithm.
constexpr int kCandidates = 32;
// Every cuBLASLt path needs ld*2 bytes and base pointers at least 16-byte aligned (TMA loads).
constexpr uint32_t kInvariantAlignment = 16;

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

template <class T>
T algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  cublasCheck(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written));
  return value;
}

uint32_t algo_min_alignment(const cublasLtMatmulAlgo_t& algo) {
  uint32_t most = 0;
  for (auto attr :
       {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES}) {
    uint32_t value = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &value, sizeof(value), &written) ==
        CUBLAS_STATUS_SUCCESS) {
      most = std::max(most, value);
    }
  }
  return most;
}

GemmAlgoConfig describe_algo(const cublasLtMatmulAlgo_t& algo, size_t workspace, int chosen_at_m) {
  GemmAlgoConfig c;
  c.cublaslt = true;
  c.algo_id = algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID);
  c.tile_id = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
  c.stages_id = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
  c.splitk_num = algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  c.reduction_scheme = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  c.cta_swizzling = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
  c.custom_option = algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
  c.inner_shape_id = algo_config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
  c.cluster_shape_id = algo_config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
  c.workspace_bytes = workspace;
  c.min_alignment_bytes = algo_min_alignment(algo);
  c.chosen_at_m = chosen_at_m;
  return c;
}

// The largest power of two up to 256 that divides the address (what the pointer can promise).
uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

void set_preference(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                    uint32_t value) {
  cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

}  // namespace

std::string GemmAlgoConfig::describe() const {
  std::ostringstream s;
  if (!cublaslt) {
    s << "own tiled kernel (" << reason << ")";
    return s.str();
  }
  s << "cublasLt algo " << algo_id << " tile " << tile_id << " stages " << stages_id << " splitK "
    << splitk_num << " reduction " << reduction_scheme << " swizzle " << cta_swizzling << " custom "
    << custom_option << " inner " << inner_shape_id << " cluster " << cluster_shape_id
    << " workspace " << workspace_bytes << " align " << min_alignment_bytes
    << " chosen at M=" << chosen_at_m;
  if (validated_max_m > 0) s << " valid M=1.." << validated_max_m;
  return s.str();
}

struct CudaGemm::Impl {
  struct Pinned {
    GemmAlgoConfig config;
    cublasLtMatmulAlgo_t algo{};
    std::map<int, bool> beyond_max_m;  // AlgoCheck results for M > validated_max_m
  };
  struct VendorChoice {
    GemmAlgoConfig config;
    cublasLtMatmulAlgo_t algo{};
  };

  CudaGemmOptions options;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;            // [vendor_workspace_bytes] device bytes, vendor family only
  void* scheduler_workspace = nullptr;  // [scheduler_workspace_bytes] zeroed, invariant family
  std::mutex mutex;
  std::map<std::pair<int, int>, Pinned> pinned;  // (N, K) -> the invariant family's choice
  std::map<std::tuple<int, int, int, uint32_t>, VendorChoice> vendor;  // (M, N, K, alignment)

  // Why a candidate failed at one M: the AlgoCheck status, or the workspace it would need.
  struct CheckFailure {
    int m = 0;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    size_t workspace = 0;
  };

  // Empty when AlgoCheck accepts the algorithm at M and it needs at most `workspace_limit`
  // bytes of workspace; `*workspace` then grows to what it needs.
  std::optional<CheckFailure> check_at(Problem& problem, const cublasLtMatmulAlgo_t& algo, int M,
                                       size_t workspace_limit, size_t* workspace) {
    problem.set_m(M);
    cublasLtMatmulHeuristicResult_t result{};
    const cublasStatus_t status = cublasLtMatmulAlgoCheck(
        handle, problem.desc(), problem.a(), problem.b(), problem.d(), problem.d(), &algo, &result);
    if (status == CUBLAS_STATUS_SUCCESS && result.workspaceSize <= workspace_limit) {
      *workspace = std::max(*workspace, result.workspaceSize);
      return std::nullopt;
    }
    return CheckFailure{M, status, result.workspaceSize};
  }

  bool algo_valid_at(Problem& problem, const cublasLtMatmulAlgo_t& algo, int M) {
    size_t workspace = 0;
    return !check_at(problem, algo, M, options.scheduler_workspace_bytes, &workspace).has_value();
  }

  // The first M in 1..max_m where the algorithm fails; the likely failures (small M, powers of
  // two, max_m) are tried before the full sweep so that bad candidates are dropped quickly.
  std::optional<CheckFailure> first_failure(Problem& problem, const cublasLtMatmulAlgo_t& algo,
                                            size_t workspace_limit, size_t* workspace) {
    std::vector<int> quick;
    for (int m = 1; m <= std::min(16, options.max_m); ++m) quick.push_back(m);
    for (int m = 32; m < options.max_m; m *= 2) quick.push_back(m);
    quick.push_back(options.max_m);
    for (int m : quick) {
      if (auto f = check_at(problem, algo, m, workspace_limit, workspace)) return f;
    }
    for (int m = 1; m <= options.max_m; ++m) {
      if (auto f = check_at(problem, algo, m, workspace_limit, workspace)) return f;
    }
    return std::nullopt;
  }

  // The heuristic's candidates (no workspace, 16-byte alignment) for the problem at M.
  std::vector<cublasLtMatmulAlgo_t> heuristic_candidates(int M, int N, int K) {
    Problem problem(M, N, K);
    cublasLtMatmulPreferenceOpaque_t pref_storage;
    cublasLtMatmulPreference_t pref = &pref_storage;
    cublasCheck(cublasLtMatmulPreferenceInit(pref));
    const uint64_t no_workspace = 0;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &no_workspace, sizeof(no_workspace)));
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      set_preference(pref, attr, kInvariantAlignment);
    }
    cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
    int count = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, problem.desc(), problem.a(), problem.b(), problem.d(), problem.d(), pref,
        kCandidates, results, &count);
    std::vector<cublasLtMatmulAlgo_t> algos;
    if (status != CUBLAS_STATUS_SUCCESS) return algos;
    for (int i = 0; i < count; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS) algos.push_back(results[i].algo);
    }
    return algos;
  }

  // Chooses the invariant family's algorithm for (N, K). Candidates: the heuristic's answers at
  // pin_m, then at max_m, in its order (its estimate of speed); each forced to split-K 1 and
  // reduction none (split-K sums K slices in an order and count the heuristic ties to M), and
  // each also tried with a 1x1x1 thread-block cluster and with custom option 0 (a cluster only
  // shares operand loads between CTAs; it does not touch a CTA's K loop). A candidate is valid
  // when AlgoCheck accepts it at every M in 1..max_m with a workspace of at most
  // scheduler_workspace_bytes; of one candidate's variants, one needing no workspace is preferred.
  // No timing: the choice is deterministic for a given library and GPU, so every process pins
  // the same algorithm.
  Pinned pin(int N, int K) {
    Pinned p;
    if (options.own_kernel_only) {
      p.config.reason = "own_kernel_only option";
      return p;
    }
    if (N % 8 != 0 || K % 8 != 0) {
      p.config.reason = "N or K not a multiple of 8 (rows not 16-byte aligned)";
      return p;
    }
    const bool log = std::getenv("BIH_GEMM_LOG") != nullptr;
    Problem problem(options.pin_m, N, K);
    std::vector<int> heuristic_ms = {options.pin_m};
    if (options.max_m != options.pin_m) heuristic_ms.push_back(options.max_m);
    const int32_t one_split = 1;
    const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
    const uint16_t no_cluster = CUBLASLT_CLUSTER_SHAPE_1x1x1;
    const uint32_t no_custom = 0;
    std::set<std::string> tried;
    std::string rejections;
    int rejected = 0;
    for (int heuristic_m : heuristic_ms) {
      for (const cublasLtMatmulAlgo_t& offered : heuristic_candidates(heuristic_m, N, K)) {
        std::optional<Pinned> with_workspace;  // this candidate's first valid variant
        for (int variant = 0; variant < 4; ++variant) {
          cublasLtMatmulAlgo_t algo = offered;
          cublasCheck(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                           &one_split, sizeof(one_split)));
          cublasCheck(cublasLtMatmulAlgoConfigSetAttribute(
              &algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &no_reduction, sizeof(no_reduction)));
          if ((variant & 1) != 0) {
            cublasCheck(cublasLtMatmulAlgoConfigSetAttribute(
                &algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &no_cluster, sizeof(no_cluster)));
          }
          if ((variant & 2) != 0) {
            cublasCheck(cublasLtMatmulAlgoConfigSetAttribute(
                &algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &no_custom, sizeof(no_custom)));
          }
          GemmAlgoConfig config = describe_algo(algo, 0, heuristic_m);
          const std::string key = config.describe();
          if (!tried.insert(key.substr(0, key.find(" chosen at"))).second) continue;
          // Once a variant needing a workspace is in hand, only a workspace-free one can beat it.
          const size_t limit = with_workspace ? 0 : options.scheduler_workspace_bytes;
          size_t workspace = 0;
          std::optional<CheckFailure> failure;
          if (config.min_alignment_bytes > kInvariantAlignment) {
            failure = CheckFailure{0, CUBLAS_STATUS_NOT_SUPPORTED, 0};
          } else {
            failure = first_failure(problem, algo, limit, &workspace);
          }
          if (failure) {
            std::string why = "[" + key + ": M=" + std::to_string(failure->m) + " " +
                              cublasLtGetStatusName(failure->status) + " workspace " +
                              std::to_string(failure->workspace) + "]";
            if (log) std::fprintf(stderr, "bih gemm N=%d K=%d rejected %s\n", N, K, why.c_str());
            if (rejected++ < 3) rejections += " " + why;
            continue;
          }
          Pinned found;
          found.algo = algo;
          found.config = config;
          found.config.workspace_bytes = workspace;
          found.config.validated_max_m = options.max_m;
          if (workspace == 0) {
            with_workspace = found;
            break;
          }
          if (!with_workspace) with_workspace = found;
        }
        if (with_workspace) {
          if (log) {
            std::fprintf(stderr, "bih gemm N=%d K=%d pinned %s\n", N, K,
                         with_workspace->config.describe().c_str());
          }
          return *with_workspace;
        }
      }
    }
    p.config.reason = "none of " + std::to_string(rejected) +
                      " cuBLASLt candidates passed AlgoCheck with at most " +
                      std::to_string(options.scheduler_workspace_bytes) +
                      " bytes of workspace at every M in 1.." + std::to_string(options.max_m) +
                      "; first:" + rejections;
    return p;
  }

  Pinned& pinned_for(int N, int K) {
    auto it = pinned.find({N, K});
    if (it == pinned.end()) it = pinned.emplace(std::make_pair(N, K), pin(N, K)).first;
    return it->second;
  }

  VendorChoice& vendor_for(int M, int N, int K, uint32_t alignment) {
    const auto key = std::make_tuple(M, N, K, alignment);
    auto it = vendor.find(key);
    if (it != vendor.end()) return it->second;
    Problem problem(M, N, K);
    cublasLtMatmulPreferenceOpaque_t pref_storage;
    cublasLtMatmulPreference_t pref = &pref_storage;
    cublasCheck(cublasLtMatmulPreferenceInit(pref));
    const uint64_t bytes = options.vendor_workspace_bytes;
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &bytes, sizeof(bytes)));
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      set_preference(pref, attr, alignment);
    }
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(handle, problem.desc(), problem.a(), problem.b(),
                                               problem.d(), problem.d(), pref, 1, &result, &count));
    if (count == 0) {
      throw std::runtime_error(
          "cuBLASLt heuristic offered no algorithm for the vendor GEMM M=" + std::to_string(M) +
          " N=" + std::to_string(N) + " K=" + std::to_string(K));
    }
    VendorChoice choice;
    choice.algo = result.algo;
    choice.config = describe_algo(result.algo, result.workspaceSize, M);
    return vendor.emplace(key, choice).first->second;
  }

  void run_cublaslt(const cublasLtMatmulAlgo_t& algo, const bf16* x, const bf16* w, bf16* y, int M,
                    int N, int K, void* work, size_t work_bytes, cudaStream_t stream) {
    Problem problem(M, N, K);
    const float alpha = 1.0f;
    const float beta = 0.0f;
    cublasCheck(cublasLtMatmul(handle, problem.desc(), &alpha, w, problem.a(), x, problem.b(),
                               &beta, y, problem.d(), y, problem.d(), &algo, work, work_bytes,
                               stream));
  }
};

CudaGemm::CudaGemm(CudaGemmOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.max_m < 1 || options.pin_m < 1) {
    throw std::invalid_argument("CudaGemmOptions: max_m and pin_m must be >= 1");
  }
  impl_->options = options;
  cublasCheck(cublasLtCreate(&impl_->handle));
  if (options.vendor_workspace_bytes > 0) {
    cudaCheck(cudaMalloc(&impl_->workspace, options.vendor_workspace_bytes));
  }
  if (options.scheduler_workspace_bytes > 0) {
    cudaCheck(cudaMalloc(&impl_->scheduler_workspace, options.scheduler_workspace_bytes));
    cudaCheck(cudaMemset(impl_->scheduler_workspace, 0, options.scheduler_workspace_bytes));
  }
}

CudaGemm::~CudaGemm() {
  // Destructors do not throw: a failure here leaves nothing to recover.
  if (impl_->workspace != nullptr) cudaFree(impl_->workspace);
  if (impl_->scheduler_workspace != nullptr) cudaFree(impl_->scheduler_workspace);
  if (impl_->handle != nullptr) cublasLtDestroy(impl_->handle);
}

void CudaGemm::gemm(KernelFamily family, const bf16* x, const bf16* w, bf16* y, int M, int N, int K,
                    cudaStream_t stream) {
  if (M < 1 || N < 1 || K < 1) {
    throw std::invalid_argument("CudaGemm::gemm: M, N, K must be >= 1; got M=" + std::to_string(M) +
                                " N=" + std::to_string(N) + " K=" + std::to_string(K));
  }
  if (x == nullptr || w == nullptr || y == nullptr) {
    throw std::invalid_argument("CudaGemm::gemm: x, w and y must be device pointers, not null");
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (family == KernelFamily::vendor) {
    const uint32_t alignment =
        std::min({pointer_alignment(x), pointer_alignment(w), pointer_alignment(y)});
    Impl::VendorChoice& choice = impl_->vendor_for(M, N, K, alignment);
    impl_->run_cublaslt(choice.algo, x, w, y, M, N, K, impl_->workspace,
                        impl_->options.vendor_workspace_bytes, stream);
    return;
  }
  Impl::Pinned& p = impl_->pinned_for(N, K);
  if (!p.config.cublaslt) {
    launch_tiled_gemm(x, w, y, M, N, K, stream);
    return;
  }
  for (const void* ptr :
       {static_cast<const void*>(x), static_cast<const void*>(w), static_cast<const void*>(y)}) {
    // Falling back to another kernel for one call would change the bits: refuse instead.
    if (pointer_alignment(ptr) < std::max(p.config.min_alignment_bytes, kInvariantAlignment)) {
      throw std::invalid_argument("CudaGemm::gemm: invariant GEMM needs 16-byte aligned x, w, y");
    }
  }
  if (M > p.config.validated_max_m) {
    auto it = p.beyond_max_m.find(M);
    if (it == p.beyond_max_m.end()) {
      Problem problem(M, N, K);
      it = p.beyond_max_m.emplace(M, impl_->algo_valid_at(problem, p.algo, M)).first;
    }
    if (!it->second) {
      throw std::runtime_error("CudaGemm: the pinned algorithm for N=" + std::to_string(N) + " K=" +
                               std::to_string(K) + " is not valid at M=" + std::to_string(M) +
                               "; raise CudaGemmOptions::max_m to at least " + std::to_string(M) +
                               " so the pin covers it");
    }
  }
  // Always offered: the pinned algorithm's tile scheduler may want its counter at this M.
  impl_->run_cublaslt(p.algo, x, w, y, M, N, K, impl_->scheduler_workspace,
                      impl_->options.scheduler_workspace_bytes, stream);
}

GemmAlgoConfig CudaGemm::invariant_config(int N, int K) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->pinned_for(N, K).config;
}

GemmAlgoConfig CudaGemm::vendor_config(int M, int N, int K) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->vendor_for(M, N, K, 256).config;
}

}  // namespace bih::cuda
