// gemm_pin.cpp: the invariant family's reference for a weight shape (N, K), pinned once.
//
// The heuristic's candidates, each forced to split-K 1 and reduction none, must pass
// cublasLtMatmulAlgoCheck at every M in 1..max_m with at most a scheduler counter of workspace
// (gemm.hpp says why that keeps a row's bits independent of M); the first that does is the
// reference, else the shape takes the own tiled kernel. pinned_for pins a shape on first use (once
// per process and key) and hands it to the companion search (gemm_companion.cpp) for the bands of
// M.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/cuda/gemm_internal.hpp"

namespace bih::cuda {
namespace {

// How many candidates the heuristic may offer for the pinned algorithm.
constexpr int kCandidates = 32;

}  // namespace

using detail::describe_algo;
using detail::identity;
using detail::kInvariantAlignment;
using detail::Problem;
using detail::set_preference;

// Empty when AlgoCheck accepts the algorithm at M and it needs at most `workspace_limit`
// bytes of workspace; `*workspace` then grows to what it needs.
std::optional<CudaGemm::Impl::CheckFailure> CudaGemm::Impl::check_at(
    Problem& problem, const cublasLtMatmulAlgo_t& algo, int M, size_t workspace_limit,
    size_t* workspace) {
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

bool CudaGemm::Impl::algo_valid_at(Problem& problem, const cublasLtMatmulAlgo_t& algo, int M) {
  size_t workspace = 0;
  return !check_at(problem, algo, M, options.scheduler_workspace_bytes, &workspace).has_value();
}

// The first M in first_m..last_m where the algorithm fails; the likely failures (the smallest
// Ms, powers of two, last_m) are tried before the full sweep so that bad candidates go quickly.
std::optional<CudaGemm::Impl::CheckFailure> CudaGemm::Impl::first_failure(
    Problem& problem, const cublasLtMatmulAlgo_t& algo, int first_m, int last_m,
    size_t workspace_limit, size_t* workspace) {
  std::vector<int> quick;
  for (int m = first_m; m <= std::min(first_m + 15, last_m); ++m) quick.push_back(m);
  for (int64_t m = 32; m < last_m; m *= 2) {
    if (m > first_m + 15) quick.push_back(static_cast<int>(m));
  }
  quick.push_back(last_m);
  for (int m : quick) {
    if (auto f = check_at(problem, algo, m, workspace_limit, workspace)) return f;
  }
  for (int m = first_m; m <= last_m; ++m) {
    if (auto f = check_at(problem, algo, m, workspace_limit, workspace)) return f;
  }
  return std::nullopt;
}

// The heuristic's candidates (no workspace, 16-byte alignment) for the problem at M, in its
// order. reduction_none_only: only configurations without a reduction (split-K 1), so the
// heuristic ranks the ones the invariant family can use as they are.
std::vector<cublasLtMatmulAlgo_t> CudaGemm::Impl::heuristic_candidates(int M, int N, int K,
                                                                       bool reduction_none_only) {
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
  std::vector<cublasLtMatmulAlgo_t> algos;
  if (reduction_none_only) {
    // A mask with no scheme bit set: none of INPLACE, COMPUTE_TYPE, OUTPUT_TYPE is allowed.
    // Should this library refuse such a mask, there is simply no such list.
    const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
    if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                             &none, sizeof(none)) != CUBLAS_STATUS_SUCCESS) {
      return algos;
    }
  }
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle, problem.desc(), problem.a(), problem.b(), problem.d(),
                                     problem.d(), pref, kCandidates, results, &count);
  if (status != CUBLAS_STATUS_SUCCESS) return algos;
  for (int i = 0; i < count; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) algos.push_back(results[i].algo);
  }
  return algos;
}

// The first variant of a heuristic's candidate that is valid at every M in first_m..last_m:
// each variant forced to split-K 1 and reduction none (split-K sums K slices in an order and
// count the heuristic ties to M), then also tried with a 1x1x1 thread-block cluster and with
// custom option 0 (a cluster only shares operand loads between CTAs; it does not touch a CTA's
// K loop). Valid: AlgoCheck accepts it at every M of the range with a workspace of at most
// scheduler_workspace_bytes; of the variants, one needing no workspace is preferred. Variants
// already in `tried` are skipped; every variant looked at is added to it.
std::optional<CudaGemm::Impl::Candidate> CudaGemm::Impl::first_valid_variant(
    Problem& problem, const cublasLtMatmulAlgo_t& offered, int heuristic_m, int first_m, int last_m,
    std::set<std::string>& tried, Rejections& rejections, int N, int K) {
  const int32_t one_split = 1;
  const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  const uint16_t no_cluster = CUBLASLT_CLUSTER_SHAPE_1x1x1;
  const uint32_t no_custom = 0;
  std::optional<Candidate> with_workspace;  // this candidate's first valid variant
  for (int variant = 0; variant < 4; ++variant) {
    cublasLtMatmulAlgo_t algo = offered;
    cublasCheck(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                     &one_split, sizeof(one_split)));
    cublasCheck(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                     &no_reduction, sizeof(no_reduction)));
    if ((variant & 1) != 0) {
      cublasCheck(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                                       &no_cluster, sizeof(no_cluster)));
    }
    if ((variant & 2) != 0) {
      cublasCheck(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                                       &no_custom, sizeof(no_custom)));
    }
    GemmAlgoConfig config = describe_algo(algo, 0, heuristic_m);
    if (!tried.insert(identity(config)).second) continue;
    // Once a variant needing a workspace is in hand, only a workspace-free one can beat it.
    const size_t limit = with_workspace ? 0 : options.scheduler_workspace_bytes;
    size_t workspace = 0;
    std::optional<CheckFailure> failure;
    if (config.min_alignment_bytes > kInvariantAlignment) {
      failure = CheckFailure{0, CUBLAS_STATUS_NOT_SUPPORTED, 0};
    } else {
      failure = first_failure(problem, algo, first_m, last_m, limit, &workspace);
    }
    if (failure) {
      const std::string why = "[" + config.describe() + ": M=" + std::to_string(failure->m) + " " +
                              cublasLtGetStatusName(failure->status) + " workspace " +
                              std::to_string(failure->workspace) + "]";
      if (log) {
        std::fprintf(stderr, "bih gemm N=%d K=%d M=%d..%d rejected %s\n", N, K, first_m, last_m,
                     why.c_str());
      }
      if (rejections.count++ < 3) rejections.first += " " + why;
      continue;
    }
    Candidate found;
    found.algo = algo;
    found.config = config;
    found.config.workspace_bytes = workspace;
    found.config.validated_min_m = first_m;
    found.config.validated_max_m = last_m;
    with_workspace = found;
    if (workspace == 0) break;
  }
  return with_workspace;
}

// Chooses the invariant family's reference algorithm for (N, K): the heuristic's candidates at
// pin_m, then at max_m, in its order (its estimate of speed), the first with a variant valid at
// every M in 1..max_m. No timing: the choice is deterministic for a given library and GPU, so
// every process pins the same algorithm.
CudaGemm::Impl::Pinned CudaGemm::Impl::pin_reference(int N, int K) {
  Pinned p;
  if (options.own_kernel_only) {
    p.config.reason = "own_kernel_only option";
    return p;
  }
  if (N % 8 != 0 || K % 8 != 0) {
    p.config.reason = "N or K not a multiple of 8 (rows not 16-byte aligned)";
    return p;
  }
  Problem problem(options.pin_m, N, K);
  std::vector<int> heuristic_ms = {options.pin_m};
  if (options.max_m != options.pin_m) heuristic_ms.push_back(options.max_m);
  std::set<std::string> tried;
  Rejections rejections;
  for (int heuristic_m : heuristic_ms) {
    for (const cublasLtMatmulAlgo_t& offered : heuristic_candidates(heuristic_m, N, K, false)) {
      std::optional<Candidate> found = first_valid_variant(problem, offered, heuristic_m, 1,
                                                           options.max_m, tried, rejections, N, K);
      if (!found) continue;
      if (log) {
        std::fprintf(stderr, "bih gemm N=%d K=%d pinned %s\n", N, K,
                     found->config.describe().c_str());
      }
      p.algo = found->algo;
      p.config = found->config;
      return p;
    }
  }
  p.config.reason = "none of " + std::to_string(rejections.count) +
                    " cuBLASLt candidates passed AlgoCheck with at most " +
                    std::to_string(options.scheduler_workspace_bytes) +
                    " bytes of workspace at every M in 1.." + std::to_string(options.max_m) +
                    "; first:" + rejections.first;
  return p;
}

// Pinning a shape with companions runs GPU work (the bitwise check), which has no place in a
// CUDA graph; refuse before starting rather than break the caller's capture.
void CudaGemm::Impl::refuse_pinning_during_capture(cudaStream_t stream, int N, int K) {
  if (!options.companions || bands.empty() || options.own_kernel_only) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t error = cudaStreamIsCapturing(stream, &status);
  // cudaErrorStreamCaptureImplicit: the legacy stream, while a blocking stream is capturing.
  if (error == cudaErrorStreamCaptureImplicit ||
      (error == cudaSuccess && status != cudaStreamCaptureStatusNone)) {
    cudaGetLastError();
    throw std::runtime_error(
        "CudaGemm: the invariant GEMM for N=" + std::to_string(N) + " K=" + std::to_string(K) +
        " is not pinned yet, and pinning runs GPU work (the bitwise check of its companion "
        "configurations), which cannot happen while the stream is captured into a CUDA graph: "
        "run this shape once outside capture first (an eager warm-up step), or set "
        "CudaGemmOptions::companions = false");
  }
  cudaCheck(error);
}

CudaGemm::Impl::Pinned CudaGemm::Impl::pin_with_companions(int N, int K) {
  const auto start = std::chrono::steady_clock::now();
  Pinned p = pin_reference(N, K);
  if (options.companions) {
    const std::string notes = add_companions(p, N, K);
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    p.config.companion_notes = notes + (notes.back() == ' ' ? "" : "; ") + "pinning took " +
                               std::to_string(elapsed.count()) + " ms";
    if (log) {
      std::fprintf(stderr, "bih gemm N=%d K=%d companions: %s\n", N, K,
                   p.config.companion_notes.c_str());
    }
  }
  return p;
}

// What a pin depends on besides the library: the device and every option that steers the search.
std::string CudaGemm::Impl::pin_key(int N, int K) const {
  int device = -1;
  cudaCheck(cudaGetDevice(&device));
  std::string key = std::to_string(device) + " " + std::to_string(N) + "x" + std::to_string(K);
  for (const int64_t value :
       {int64_t{options.max_m}, int64_t{options.pin_m}, int64_t{options.own_kernel_only},
        static_cast<int64_t>(options.scheduler_workspace_bytes), int64_t{options.companions},
        int64_t{options.companion_tries}, int64_t{options.skinny_max_m}}) {
    key += " " + std::to_string(value);
  }
  for (const GemmBand& b : bands) {
    key += " " + std::to_string(b.first_m) + ".." + std::to_string(b.last_m) + "@" +
           std::to_string(b.heuristic_m);
  }
  return key;
}

// A pin is a deterministic choice and a bitwise check, the same for every CudaGemm of the process
// with the same key; engines side by side would each pay for it (TP=4 on 4 solo lanes pinned
// every shape 16 times, about 0.6 s of work per rank, measured on an H200). The first CudaGemm to
// ask pins; the others wait for its answer and keep a copy (cuBLASLt algorithms are plain data,
// valid with any handle of the same library). A failed pin is forgotten, so the next one tries
// again.
CudaGemm::Impl::Pinned& CudaGemm::Impl::pinned_for(int N, int K) {
  auto it = pinned.find({N, K});
  if (it != pinned.end()) return it->second;
  struct SharedPins {
    std::mutex mutex;
    std::map<std::string, std::shared_future<Pinned>> pins;
  };
  static SharedPins& shared = *new SharedPins;  // never destroyed: no teardown-order hazard
  const std::string key = pin_key(N, K);
  std::promise<Pinned> promise;
  std::shared_future<Pinned> answer;
  bool mine = false;
  {
    const std::lock_guard lock(shared.mutex);
    auto found = shared.pins.find(key);
    if (found == shared.pins.end()) {
      answer = promise.get_future().share();
      shared.pins.emplace(key, answer);
      mine = true;
    } else {
      answer = found->second;
    }
  }
  if (mine) {
    try {
      promise.set_value(pin_with_companions(N, K));
    } catch (...) {
      {
        const std::lock_guard lock(shared.mutex);
        shared.pins.erase(key);
      }
      promise.set_exception(std::current_exception());
    }
  }
  Pinned p = answer.get();
  if (!mine && !p.config.companion_notes.empty()) {
    p.config.companion_notes += "; shared: pinned by another CudaGemm of this process";
  }
  return pinned.emplace(std::make_pair(N, K), std::move(p)).first->second;
}

}  // namespace bih::cuda
