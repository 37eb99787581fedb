// gemm.cpp: CudaGemm, the cuBLASLt side of the CUDA GEMM (see gemm.hpp for the families and the
// companion configurations of the invariant one).
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
#include <chrono>
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
#include "models/cuda/gemm_chunk_tree.hpp"
#include "models/cuda/gemm_equivalence.hpp"
#include "models/cuda/gemm_skinny.hpp"
#include "models/cuda/gemm_tiled.hpp"
#include "models/tree_sum.hpp"

namespace bih::cuda {
namespace {

// How many candidates the heuristic may offer for the pinned algorithm.
constexpr int kCandidates = 32;
// Every cuBLASLt path needs ld*2 bytes and base pointers at least 16-byte aligned (TMA loads).
constexpr uint32_t kInvariantAlignment = 16;
// The equivalence check's operands: fixed, so every process compares on the same data.
constexpr uint64_t kEquivalenceSeed = 0x6269682d67656d6dull;  // "bih-gemm"
// Ms compared before the first look at the results: the smallest, so that a candidate that
// differs is usually dropped before the expensive large-M runs.
constexpr size_t kEquivalenceFirstLook = 4;

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

// The fields that make two configurations the same kernel: not workspace, M or provenance.
std::string identity(const GemmAlgoConfig& c) {
  if (c.skinny) return "skinny";
  std::ostringstream s;
  s << c.algo_id << '/' << c.tile_id << '/' << c.stages_id << '/' << c.splitk_num << '/'
    << c.reduction_scheme << '/' << c.cta_swizzling << '/' << c.custom_option << '/'
    << c.inner_shape_id << '/' << c.cluster_shape_id;
  return s.str();
}

std::string range_text(int first, int last) {
  std::string s = "M=" + std::to_string(first);
  if (last != first) s += ".." + std::to_string(last);
  return s;
}

// One configuration, without companions: the own kernel's reason, or the cuBLASLt fields.
std::string describe_single(const GemmAlgoConfig& c) {
  std::ostringstream s;
  if (c.skinny) {
    s << "own skinny kernel (mma.sync m16n8k16, one k16 chain per element)";
    if (c.validated_max_m > 0) s << " valid M=" << c.validated_min_m << ".." << c.validated_max_m;
    return s.str();
  }
  if (!c.cublaslt) {
    s << "own tiled kernel (" << c.reason << ")";
    return s.str();
  }
  s << "cublasLt algo " << c.algo_id << " tile " << c.tile_id << " stages " << c.stages_id
    << " splitK " << c.splitk_num << " reduction " << c.reduction_scheme << " swizzle "
    << c.cta_swizzling << " custom " << c.custom_option << " inner " << c.inner_shape_id
    << " cluster " << c.cluster_shape_id << " workspace " << c.workspace_bytes << " align "
    << c.min_alignment_bytes << " chosen at M=" << c.chosen_at_m;
  if (c.validated_max_m > 0) s << " valid M=" << c.validated_min_m << ".." << c.validated_max_m;
  return s.str();
}

// The Ms at which a candidate for first..last is compared with the reference: every M of a short
// band; otherwise both ends (8 Ms each up to 512, 3 above, where one GEMM costs more), each
// power of two inside the band with its neighbours (tile edges), and four odd interior Ms.
std::vector<int> equivalence_ms(int first, int last) {
  std::set<int> ms;
  if (last - first < 24) {
    for (int m = first; m <= last; ++m) ms.insert(m);
    return {ms.begin(), ms.end()};
  }
  const int ends = last <= 512 ? 8 : 3;
  for (int i = 0; i < ends; ++i) {
    ms.insert(first + i);
    ms.insert(last - i);
  }
  for (int64_t p = 1; p <= last; p *= 2) {
    for (int64_t m = p - 1; m <= p + 1; ++m) {
      if (m >= first && m <= last) ms.insert(static_cast<int>(m));
    }
  }
  for (int i = 1; i <= 4; ++i) {
    ms.insert((first + static_cast<int>(static_cast<int64_t>(last - first) * i / 5)) | 1);
  }
  return {ms.begin(), ms.end()};
}

// A non-blocking stream of our own: the check neither waits for nor delays the caller's work.
class PrivateStream {
 public:
  PrivateStream() { cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~PrivateStream() {
    // Destructors do not throw: the frees enqueued before this complete before the stream goes.
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  PrivateStream(const PrivateStream&) = delete;
  PrivateStream& operator=(const PrivateStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// Stream-ordered device memory (cudaMallocAsync), freed on its stream when destroyed: nothing
// synchronizes the whole device, so other streams (other ranks' collectives) are not waited for.
class StreamBuffer {
 public:
  StreamBuffer() = default;
  ~StreamBuffer() {
    if (p_ != nullptr) cudaFreeAsync(p_, stream_);
  }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;

  // False when the device has no room or no stream-ordered allocator (the error is cleared);
  // other errors throw.
  bool allocate(size_t bytes, cudaStream_t stream) {
    stream_ = stream;
    const cudaError_t error = cudaMallocAsync(&p_, std::max<size_t>(bytes, 1), stream);
    if (error == cudaErrorMemoryAllocation || error == cudaErrorNotSupported) {
      cudaGetLastError();
      p_ = nullptr;
      return false;
    }
    cudaCheck(error);
    return true;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// Runs two algorithms on the same order-sensitive operands (gemm_equivalence.hpp) and compares
// every element of their outputs bit for bit, on a private stream with its own buffers and its
// own zeroed scheduler workspace (the shared one may be in use on the caller's stream).
class EquivalenceCheck {
 public:
  struct Outcome {
    std::vector<int> equal_ms;        // Ms compared with every element equal, ascending
    int differing_m = 0;              // the first M with a difference; 0 when none
    uint64_t differing_elements = 0;  // of its M * N elements
    uint64_t first_index = 0;         // the first differing element, row-major in y[M, N]
    std::string failure;              // why the candidate could not run, if it could not
    bool equal_at_all(size_t tested) const {
      return differing_m == 0 && failure.empty() && equal_ms.size() == tested;
    }
  };

  // Operands x[max_rows, K] and w[N, K], two outputs [max_rows, N] and the workspace.
  EquivalenceCheck(cublasLtHandle_t handle, int N, int K, int max_rows, size_t workspace_bytes)
      : handle_(handle), N_(N), K_(K), workspace_bytes_(workspace_bytes) {
    const cudaStream_t s = stream_.get();
    const size_t rows = static_cast<size_t>(max_rows);
    const std::pair<StreamBuffer*, size_t> buffers[] = {
        {&x_, rows * K * sizeof(bf16)},
        {&w_, static_cast<size_t>(N) * K * sizeof(bf16)},
        {&y_reference_, rows * N * sizeof(bf16)},
        {&y_candidate_, rows * N * sizeof(bf16)},
        {&workspace_, workspace_bytes}};
    size_t total = 0;
    for (const auto& [buffer, bytes] : buffers) total += bytes;
    for (const auto& [buffer, bytes] : buffers) {
      if (!buffer->allocate(bytes, s)) {
        unavailable_ = "could not allocate the bitwise check's device memory (" +
                       std::to_string(total >> 20) + " MiB)";
        return;
      }
    }
    if (workspace_bytes > 0)
      cudaCheck(cudaMemsetAsync(workspace_.as<void>(), 0, workspace_bytes, s));
    fill_order_sensitive_operands(x_.as<bf16>(), max_rows, w_.as<bf16>(), N, K, kEquivalenceSeed,
                                  s);
  }

  // Empty when the check can run.
  const std::string& unavailable() const { return unavailable_; }

  // Runs both algorithms at each M (ascending) and compares all M * N output elements; stops at
  // the first M that differs. Throws if the reference cannot run; a candidate that cannot run is
  // an outcome (a failure), not an error.
  Outcome compare(const cublasLtMatmulAlgo_t& reference, const cublasLtMatmulAlgo_t& candidate,
                  const std::vector<int>& ms) {
    return compare_with(
        reference,
        [&](bf16* y, int M) -> std::string {
          const cublasStatus_t status = run(candidate, y, M);
          if (status == CUBLAS_STATUS_SUCCESS) return "";
          cudaGetLastError();  // a launch error cuBLASLt may have left; a sticky one stays
          return std::string("cublasLtMatmul failed: ") + cublasLtGetStatusName(status);
        },
        ms);
  }

  // The own skinny kernel as the candidate.
  Outcome compare_skinny(const cublasLtMatmulAlgo_t& reference, const std::vector<int>& ms) {
    return compare_with(
        reference,
        [&](bf16* y, int M) -> std::string {
          launch_skinny_gemm(x_.as<bf16>(), w_.as<bf16>(), y, M, N_, K_, stream_.get());
          return "";
        },
        ms);
  }

  // run_candidate(y, M) enqueues the candidate on the check's stream; it returns why it could
  // not, or "".
  template <class RunCandidate>
  Outcome compare_with(const cublasLtMatmulAlgo_t& reference, RunCandidate&& run_candidate,
                       const std::vector<int>& ms) {
    Outcome outcome;
    const cudaStream_t s = stream_.get();
    const size_t n = ms.size();
    StreamBuffer tallies;  // [2, n]: differing elements per M, then the first differing index
    if (!tallies.allocate(2 * n * sizeof(uint64_t), s)) {
      outcome.failure = "no device memory for the tallies";
      return outcome;
    }
    uint64_t* counts = tallies.as<uint64_t>();
    uint64_t* firsts = counts + n;
    cudaCheck(cudaMemsetAsync(counts, 0, n * sizeof(uint64_t), s));
    cudaCheck(cudaMemsetAsync(firsts, 0xFF, n * sizeof(uint64_t), s));
    std::vector<uint64_t> host(2 * n);
    for (size_t done = 0; done < n;) {
      const size_t end = done == 0 ? std::min(kEquivalenceFirstLook, n) : n;
      for (size_t i = done; i < end; ++i) {
        const int M = ms[i];
        const size_t bytes = static_cast<size_t>(M) * N_ * sizeof(bf16);
        // Different fills: an algorithm that wrote nothing leaves bits the other did not.
        cudaCheck(cudaMemsetAsync(y_reference_.as<void>(), 0x00, bytes, s));
        cudaCheck(cudaMemsetAsync(y_candidate_.as<void>(), 0xFF, bytes, s));
        cublasCheck(run(reference, y_reference_.as<bf16>(), M));
        const std::string failure = run_candidate(y_candidate_.as<bf16>(), M);
        if (!failure.empty()) {
          outcome.failure = failure + " at M=" + std::to_string(M);
          return outcome;
        }
        launch_count_bit_differences(y_reference_.as<bf16>(), y_candidate_.as<bf16>(),
                                     static_cast<size_t>(M) * N_, counts + i, firsts + i, s);
      }
      cudaCheck(cudaMemcpyAsync(host.data(), counts, 2 * n * sizeof(uint64_t),
                                cudaMemcpyDeviceToHost, s));
      cudaCheck(cudaStreamSynchronize(s));
      for (size_t i = done; i < end; ++i) {
        if (host[i] != 0) {
          outcome.differing_m = ms[i];
          outcome.differing_elements = host[i];
          outcome.first_index = host[n + i];
          return outcome;
        }
        outcome.equal_ms.push_back(ms[i]);
      }
      done = end;
    }
    return outcome;
  }

 private:
  cublasStatus_t run(const cublasLtMatmulAlgo_t& algo, bf16* y, int M) {
    Problem problem(M, N_, K_);
    const float alpha = 1.0f;
    const float beta = 0.0f;
    return cublasLtMatmul(handle_, problem.desc(), &alpha, w_.as<bf16>(), problem.a(),
                          x_.as<bf16>(), problem.b(), &beta, y, problem.d(), y, problem.d(), &algo,
                          workspace_.as<void>(), workspace_bytes_, stream_.get());
  }

  cublasLtHandle_t handle_;
  int N_;
  int K_;
  size_t workspace_bytes_;
  std::string unavailable_;
  // Declared before the buffers, so destroyed after them: it waits for their frees.
  PrivateStream stream_;
  StreamBuffer x_;            // [max_rows, K]
  StreamBuffer w_;            // [N, K]
  StreamBuffer y_reference_;  // [max_rows, N]
  StreamBuffer y_candidate_;  // [max_rows, N]
  StreamBuffer workspace_;    // [workspace_bytes], zeroed
};

}  // namespace

std::string GemmAlgoConfig::describe() const {
  std::string s = describe_single(*this);
  if (companions.empty()) return s;
  // The reference serves what no companion does: the gaps in 1..validated_max_m, and beyond.
  std::string served;
  int next = 1;
  auto add = [&](const std::string& range) { served += (served.empty() ? "" : ", ") + range; };
  for (const GemmCompanion& c : companions) {
    if (c.first_m > next) add(range_text(next, c.first_m - 1));
    next = c.last_m + 1;
  }
  if (next <= validated_max_m) add(range_text(next, validated_max_m));
  add("M>" + std::to_string(validated_max_m));
  s += " (reference: serves " + served + ")";
  for (const GemmCompanion& c : companions) {
    s += "; " + range_text(c.first_m, c.last_m) + ": " + describe_single(c.config) +
         " (bitwise = reference on " + std::to_string(c.tested_ms.size()) + " Ms)";
  }
  return s;
}

const GemmAlgoConfig& GemmAlgoConfig::serving(int M) const {
  for (const GemmCompanion& c : companions) {
    if (M >= c.first_m && M <= c.last_m) return c.config;
  }
  return *this;
}

namespace {

// An equivalence check's outcome for a candidate that was not equal, in words.
std::string how_it_differed(const EquivalenceCheck::Outcome& outcome, int N) {
  if (!outcome.failure.empty()) return outcome.failure;
  const uint64_t row = outcome.first_index / static_cast<uint64_t>(N);
  const uint64_t col = outcome.first_index % static_cast<uint64_t>(N);
  return "differs at M=" + std::to_string(outcome.differing_m) + ": " +
         std::to_string(outcome.differing_elements) + " of " +
         std::to_string(static_cast<uint64_t>(outcome.differing_m) * N) + " elements, first row " +
         std::to_string(row) + " col " + std::to_string(col) + "; equal on " +
         std::to_string(outcome.equal_ms.size()) + " Ms before";
}

}  // namespace

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

  // The first M in first_m..last_m where the algorithm fails; the likely failures (the smallest
  // Ms, powers of two, last_m) are tried before the full sweep so that bad candidates go quickly.
  std::optional<CheckFailure> first_failure(Problem& problem, const cublasLtMatmulAlgo_t& algo,
                                            int first_m, int last_m, size_t workspace_limit,
                                            size_t* workspace) {
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
  std::vector<cublasLtMatmulAlgo_t> heuristic_candidates(int M, int N, int K,
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
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, problem.desc(), problem.a(), problem.b(), problem.d(), problem.d(), pref,
        kCandidates, results, &count);
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
  std::optional<Candidate> first_valid_variant(Problem& problem,
                                               const cublasLtMatmulAlgo_t& offered, int heuristic_m,
                                               int first_m, int last_m,
                                               std::set<std::string>& tried, Rejections& rejections,
                                               int N, int K) {
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
        cublasCheck(cublasLtMatmulAlgoConfigSetAttribute(
            &algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &no_cluster, sizeof(no_cluster)));
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
        const std::string why = "[" + config.describe() + ": M=" + std::to_string(failure->m) +
                                " " + cublasLtGetStatusName(failure->status) + " workspace " +
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
  Pinned pin_reference(int N, int K) {
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
        std::optional<Candidate> found = first_valid_variant(
            problem, offered, heuristic_m, 1, options.max_m, tried, rejections, N, K);
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

  // The companion search of one band (gemm.hpp): the heuristic's candidates at the band's
  // heuristic_m, first those it offers without a reduction, then the rest forced to split-K 1,
  // each taken as its first variant valid over the band. The search ends at the first candidate
  // bitwise equal to the reference at every tested M (accepted), at the reference itself (the
  // heuristic ranks everything after it as slower), or after companion_tries comparisons.
  // Candidates in `differs` (seen to differ in an earlier band) are skipped, and those that
  // differ here are added. Returns a note on the outcome.
  std::string find_companion(Pinned& p, const GemmBand& band, EquivalenceCheck& check,
                             std::set<std::string>& differs, int N, int K) {
    const std::vector<int> ms = equivalence_ms(band.first_m, band.last_m);
    const std::string reference_key = identity(p.config);
    Problem problem(band.heuristic_m, N, K);
    std::set<std::string> tried;
    Rejections rejections;
    std::string differed;  // " [candidate: how it differed]" for each one compared
    int compared = 0;
    if (band.last_m <= options.skinny_max_m && skinny_gemm_supports(band.last_m, N, K) &&
        differs.count("skinny") == 0) {
      const EquivalenceCheck::Outcome outcome = check.compare_skinny(p.algo, ms);
      if (outcome.equal_at_all(ms.size())) {
        GemmCompanion companion;
        companion.first_m = band.first_m;
        companion.last_m = band.last_m;
        companion.config.skinny = true;
        companion.config.min_alignment_bytes = 16;
        companion.config.chosen_at_m = band.heuristic_m;
        companion.config.validated_min_m = band.first_m;
        companion.config.validated_max_m = band.last_m;
        companion.tested_ms = outcome.equal_ms;
        if (log) {
          std::fprintf(stderr, "bih gemm N=%d K=%d %s: companion own skinny kernel\n", N, K,
                       range_text(band.first_m, band.last_m).c_str());
        }
        p.config.companions.push_back(std::move(companion));
        Companion serving;
        serving.first_m = band.first_m;
        serving.last_m = band.last_m;
        serving.skinny = true;
        p.companions.push_back(serving);
        return "companion own skinny kernel (bitwise = reference on " + std::to_string(ms.size()) +
               " Ms)";
      }
      differs.insert("skinny");
      differed += " [own skinny kernel: " + how_it_differed(outcome, N) + "]";
    }
    for (const bool reduction_none_only : {true, false}) {
      for (const cublasLtMatmulAlgo_t& offered :
           heuristic_candidates(band.heuristic_m, N, K, reduction_none_only)) {
        std::optional<Candidate> candidate = first_valid_variant(
            problem, offered, band.heuristic_m, band.first_m, band.last_m, tried, rejections, N, K);
        if (!candidate) continue;
        const std::string key = identity(candidate->config);
        if (key == reference_key) {
          return "reference (the heuristic at M=" + std::to_string(band.heuristic_m) +
                 " ranks it first among the remaining valid candidates)" + differed;
        }
        if (differs.count(key) != 0) continue;
        if (compared == options.companion_tries) {
          return "reference (" + std::to_string(compared) + " candidates differed)" + differed;
        }
        ++compared;
        const EquivalenceCheck::Outcome outcome = check.compare(p.algo, candidate->algo, ms);
        if (outcome.equal_at_all(ms.size())) {
          GemmCompanion companion;
          companion.first_m = band.first_m;
          companion.last_m = band.last_m;
          companion.config = candidate->config;
          companion.tested_ms = outcome.equal_ms;
          if (log) {
            std::fprintf(stderr,
                         "bih gemm N=%d K=%d %s: companion %s (bitwise = reference on %zu Ms)\n", N,
                         K, range_text(band.first_m, band.last_m).c_str(),
                         describe_single(candidate->config).c_str(), ms.size());
          }
          p.config.companions.push_back(std::move(companion));
          p.companions.push_back(Companion{band.first_m, band.last_m, false, candidate->algo});
          return "companion tile " + std::to_string(candidate->config.tile_id) +
                 " (bitwise = reference on " + std::to_string(ms.size()) + " Ms)" + differed;
        }
        differs.insert(key);
        const std::string how = how_it_differed(outcome, N);
        if (log) {
          std::fprintf(stderr, "bih gemm N=%d K=%d %s: candidate %s %s\n", N, K,
                       range_text(band.first_m, band.last_m).c_str(),
                       describe_single(candidate->config).c_str(), how.c_str());
        }
        differed += " [tile " + std::to_string(candidate->config.tile_id) + " stages " +
                    std::to_string(candidate->config.stages_id) + ": " + how + "]";
      }
    }
    return std::string("reference (") +
           (compared == 0 ? "no other candidate valid over the band" : "none bitwise equal") + ")" +
           differed;
  }

  // The companions of a cuBLASLt reference (see gemm.hpp); returns what each band found.
  std::string add_companions(Pinned& p, int N, int K) {
    if (!p.config.cublaslt) return "none: the own kernel serves every M";
    if (bands.empty()) return "none: no companion band inside 1..max_m";
    int max_rows = 1;
    for (const GemmBand& band : bands) max_rows = std::max(max_rows, band.last_m);
    EquivalenceCheck check(handle, N, K, max_rows, options.scheduler_workspace_bytes);
    if (!check.unavailable().empty()) return "none: " + check.unavailable();
    std::string notes;
    std::set<std::string> differs;
    for (const GemmBand& band : bands) {
      notes += range_text(band.first_m, band.last_m) + ": " +
               find_companion(p, band, check, differs, N, K) + "; ";
    }
    return notes;
  }  // the check's buffers are freed and its stream is done here

  // Pinning a shape with companions runs GPU work (the bitwise check), which has no place in a
  // CUDA graph; refuse before starting rather than break the caller's capture.
  void refuse_pinning_during_capture(cudaStream_t stream, int N, int K) {
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

  Pinned& pinned_for(int N, int K) {
    auto it = pinned.find({N, K});
    if (it == pinned.end()) {
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
      it = pinned.emplace(std::make_pair(N, K), std::move(p)).first;
    }
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

namespace {

// options.companion_bands checked and resolved against max_m (see GemmBand).
std::vector<GemmBand> resolve_bands(const CudaGemmOptions& options) {
  std::vector<GemmBand> bands;
  int64_t previous_last = 0;
  for (const GemmBand& b : options.companion_bands) {
    const bool open_ended = b.last_m == GemmBand::kUpToMaxM;
    if (b.first_m < 1 || b.heuristic_m < 0 || (!open_ended && b.last_m < b.first_m) ||
        b.first_m <= previous_last) {
      throw std::invalid_argument(
          "CudaGemmOptions::companion_bands: each band needs 1 <= first_m <= last_m (or last_m "
          "kUpToMaxM) and heuristic_m >= 0, in ascending order without overlap; got first_m=" +
          std::to_string(b.first_m) + " last_m=" + std::to_string(b.last_m) +
          " heuristic_m=" + std::to_string(b.heuristic_m));
    }
    previous_last = open_ended ? INT64_MAX : b.last_m;
    if (b.first_m > options.max_m) continue;
    GemmBand r;
    r.first_m = b.first_m;
    r.last_m = open_ended ? options.max_m : std::min(b.last_m, options.max_m);
    r.heuristic_m = b.heuristic_m == GemmBand::kUpToMaxM ? options.max_m : b.heuristic_m;
    bands.push_back(r);
  }
  return bands;
}

}  // namespace

CudaGemm::CudaGemm(CudaGemmOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.max_m < 1 || options.pin_m < 1) {
    throw std::invalid_argument("CudaGemmOptions: max_m and pin_m must be >= 1");
  }
  if (options.companion_tries < 0) {
    throw std::invalid_argument("CudaGemmOptions: companion_tries must be >= 0");
  }
  if (const char* skinny = std::getenv("BIH_GEMM_SKINNY_MAX_M")) {
    options.skinny_max_m = std::atoi(skinny);
  }
  impl_->bands = resolve_bands(options);
  impl_->options = std::move(options);
  const CudaGemmOptions& o = impl_->options;
  cublasCheck(cublasLtCreate(&impl_->handle));
  if (o.vendor_workspace_bytes > 0) {
    cudaCheck(cudaMalloc(&impl_->workspace, o.vendor_workspace_bytes));
  }
  if (o.scheduler_workspace_bytes > 0) {
    cudaCheck(cudaMalloc(&impl_->scheduler_workspace, o.scheduler_workspace_bytes));
    cudaCheck(cudaMemset(impl_->scheduler_workspace, 0, o.scheduler_workspace_bytes));
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
  if (family == KernelFamily::tp_invariant) {
    check_tp_invariant_split("CudaGemm::gemm tp_invariant", K, kTpInvariantChunks);
    launch_chunk_tree_gemm(x, w, y, nullptr, M, N, K, kTpInvariantChunks, stream);
    return;
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
  if (impl_->pinned.count({N, K}) == 0) impl_->refuse_pinning_during_capture(stream, N, K);
  Impl::Pinned& p = impl_->pinned_for(N, K);
  if (!p.config.cublaslt) {
    launch_tiled_gemm(x, w, y, M, N, K, stream);
    return;
  }
  const uint32_t needed = std::max(p.config.serving(M).min_alignment_bytes, kInvariantAlignment);
  for (const void* ptr :
       {static_cast<const void*>(x), static_cast<const void*>(w), static_cast<const void*>(y)}) {
    // Falling back to another kernel for one call would change the bits: refuse instead.
    if (pointer_alignment(ptr) < needed) {
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
  // Always offered: the algorithm's tile scheduler may want its counter at this M. Companions
  // serve only Ms inside 1..validated_max_m, so beyond it this is the reference.
  const Impl::Companion* companion = p.companion_at(M);
  if (companion != nullptr && companion->skinny) {
    launch_skinny_gemm(x, w, y, M, N, K, stream);
    return;
  }
  impl_->run_cublaslt(companion != nullptr ? companion->algo : p.algo, x, w, y, M, N, K,
                      impl_->scheduler_workspace, impl_->options.scheduler_workspace_bytes, stream);
}

void CudaGemm::gemm_tp_invariant_partial(const bf16* x, const bf16* w, float* y, int M, int N,
                                         int K, int chunks, cudaStream_t stream) {
  if (M < 1 || N < 1 || K < 1) {
    throw std::invalid_argument(
        "CudaGemm::gemm_tp_invariant_partial: M, N, K must be >= 1; got M=" + std::to_string(M) +
        " N=" + std::to_string(N) + " K=" + std::to_string(K));
  }
  if (x == nullptr || w == nullptr || y == nullptr) {
    throw std::invalid_argument(
        "CudaGemm::gemm_tp_invariant_partial: x, w and y must be device pointers, not null");
  }
  check_tp_invariant_split("CudaGemm::gemm_tp_invariant_partial", K, chunks);
  launch_chunk_tree_gemm(x, w, nullptr, y, M, N, K, chunks, stream);
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
