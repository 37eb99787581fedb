// gemm.cpp: CudaGemm, the cuBLASLt side of the CUDA GEMM (see gemm.hpp for the families and the
// companion configurations of the invariant one): the public methods, the vendor family, and the
// one cuBLASLt matmul call both families run.
//
// The invariant family's pin is in gemm_pin.cpp, its companion search in gemm_companion.cpp, the
// descriptions in gemm_describe.cpp; gemm_internal.hpp holds CudaGemm::Impl, which they share, and
// the row-major to column-major mapping of every matmul (Problem).
#include "models/cuda/gemm.hpp"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "models/cuda/check.hpp"
#include "models/cuda/gemm_chunk_tree.hpp"
#include "models/cuda/gemm_internal.hpp"
#include "models/cuda/gemm_skinny.hpp"
#include "models/cuda/gemm_tiled.hpp"
#include "models/tree_sum.hpp"

namespace bih::cuda {
namespace {

// Whether work launched on `stream` now goes into a CUDA graph being captured. An error (the
// legacy stream while another stream captures) reads as not capturing: the launch itself reports
// it.
bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusActive;
}

// The largest power of two up to 256 that divides the address (what the pointer can promise).
uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

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

using detail::describe_algo;
using detail::kInvariantAlignment;
using detail::Problem;
using detail::set_preference;

CudaGemm::Impl::VendorChoice& CudaGemm::Impl::vendor_for(int M, int N, int K, uint32_t alignment) {
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

void CudaGemm::Impl::run_cublaslt(const cublasLtMatmulAlgo_t& algo, const bf16* x, const bf16* w,
                                  bf16* y, int M, int N, int K, void* work, size_t work_bytes,
                                  cudaStream_t stream) {
  Problem problem(M, N, K);
  const float alpha = 1.0f;
  const float beta = 0.0f;
  cublasCheck(cublasLtMatmul(handle, problem.desc(), &alpha, w, problem.a(), x, problem.b(), &beta,
                             y, problem.d(), y, problem.d(), &algo, work, work_bytes, stream));
}

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
  if (const char* fuse = std::getenv("BIH_GEMM_FUSE_SILU_MUL")) {
    const std::string value = fuse;
    if (value == "0") {
      options.fuse_silu_mul = SiluMulFusion::never;
    } else if (value == "1") {
      options.fuse_silu_mul = SiluMulFusion::always;
    } else if (value == "graphs") {
      options.fuse_silu_mul = SiluMulFusion::in_graphs;
    } else {
      throw std::invalid_argument("BIH_GEMM_FUSE_SILU_MUL=" + value +
                                  ": valid values are 0 (never), 1 (always) and graphs (only while "
                                  "the stream is captured into a CUDA graph)");
    }
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

bool CudaGemm::gemm_silu_mul(KernelFamily family, const bf16* x, const bf16* w, bf16* act, int M,
                             int I, int K, cudaStream_t stream) {
  if (family != KernelFamily::invariant || impl_->options.fuse_silu_mul == SiluMulFusion::never ||
      M < 1 || I < 1 || K < 1 || x == nullptr || w == nullptr || act == nullptr ||
      !skinny_stream_instance_on() || skinny_verify_on() || !skinny_gemm_supports(M, 2 * I, K) ||
      !skinny_stream_silu_mul_supports(M, I, K, x, w) || pointer_alignment(act) < 4) {
    return false;
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->pinned.count({2 * I, K}) == 0) impl_->refuse_pinning_during_capture(stream, 2 * I, K);
  const Impl::Pinned& p = impl_->pinned_for(2 * I, K);
  const Impl::Companion* companion = p.config.cublaslt ? p.companion_at(M) : nullptr;
  if (companion == nullptr || !companion->skinny) return false;
  // Checked last, so that a call outside capture still pins the shape for the capture to come.
  if (impl_->options.fuse_silu_mul == SiluMulFusion::in_graphs && !stream_is_capturing(stream)) {
    return false;
  }
  launch_skinny_stream_silu_mul(x, w, act, M, I, K, stream);
  return true;
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
