// gemm_companion.cpp: the invariant family's companions, found by a bitwise check on the GPU.
//
// For each band of M (CudaGemmOptions::companion_bands) a faster configuration may serve in place
// of the pinned reference (gemm_pin.cpp), but only after it produced the reference's bits on every
// element of every tested M, on operands that expose any change of accumulation order
// (gemm_equivalence.hpp). The check runs on a private stream with stream-ordered buffers, so it
// neither waits for nor delays other streams (other ranks' collectives); see gemm.hpp for why the
// bits of such configurations can agree at all.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/cuda/gemm_equivalence.hpp"
#include "models/cuda/gemm_internal.hpp"
#include "models/cuda/gemm_skinny.hpp"

namespace bih::cuda {
namespace {

// The equivalence check's operands: fixed, so every process compares on the same data.
constexpr uint64_t kEquivalenceSeed = 0x6269682d67656d6dull;  // "bih-gemm"
// Ms compared before the first look at the results: the smallest, so that a candidate that
// differs is usually dropped before the expensive large-M runs.
constexpr size_t kEquivalenceFirstLook = 4;

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

}  // namespace

namespace detail {

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

}  // namespace detail

using detail::describe_single;
using detail::EquivalenceCheck;
using detail::identity;
using detail::Problem;
using detail::range_text;

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

// The companion search of one band (gemm.hpp): the heuristic's candidates at the band's
// heuristic_m, first those it offers without a reduction, then the rest forced to split-K 1,
// each taken as its first variant valid over the band. The search ends at the first candidate
// bitwise equal to the reference at every tested M (accepted), at the reference itself (the
// heuristic ranks everything after it as slower), or after companion_tries comparisons.
// Candidates in `differs` (seen to differ in an earlier band) are skipped, and those that
// differ here are added. Returns a note on the outcome.
std::string CudaGemm::Impl::find_companion(Pinned& p, const GemmBand& band, EquivalenceCheck& check,
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
std::string CudaGemm::Impl::add_companions(Pinned& p, int N, int K) {
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

}  // namespace bih::cuda
