// programmatic_launch.cuh: launching a decode step's kernels with programmatic stream
// serialization (sm_90 programmatic dependent launch), so that each can be resident on the GPU,
// waiting, before the kernel ahead of it on the stream has ended.
//
// Between two ordinary launches the GPU drains the first grid, flushes its writes, then schedules
// the second one's blocks: a microsecond or two a boundary, and a decode step has nine kernels a
// layer. A kernel launched here may start once every block of the kernel before it has called
// ptx::allow_dependent_launch (or exited), so it must begin with ptx::wait_for_prerequisites,
// before it reads or writes any memory that the kernels before it touch; that wait returns when
// they have completed and their writes are visible. Nothing about the arithmetic changes, so
// neither do the bits: only when a kernel starts.
//
// Every kernel launched with launch_early must therefore wait before its first access; the
// kernels ahead of it may let it start as early as they like (the norms do as they start).
//
// The GEMMs let the kernel after them start once each of their blocks has asked for its last
// weights (BIH_STEP_PDL=3, the default): on an H100 one step's invariant GEMMs took 1.52 ms
// instead of 1.60 (74.7-75.2% of the copy bandwidth, cuBLAS 72.5%), since the next GEMM's blocks
// ask for their first weights while the last chains of the one before run
// (reports/gpu/deep-rings-2026-12-07). Letting it start as they start (2) was slower
// (reports/gpu/step-pdl-2026-12-07).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "models/cuda/check.hpp"

namespace bih::cuda {

// BIH_STEP_PDL, read once: 0 launches the step's kernels the ordinary way; 1 launches them early,
// the GEMMs letting the kernel after them start only as they end; 2 has the GEMMs let it start as
// they start; 3 (the default) once each of their blocks has asked for its last weights.
inline int step_pdl_mode() {
  static const int mode = [] {
    const char* value = std::getenv("BIH_STEP_PDL");
    if (value == nullptr) return 3;
    const std::string v = value;
    if (v != "0" && v != "1" && v != "2" && v != "3") {
      throw std::invalid_argument("BIH_STEP_PDL=" + v + ": valid values are 0, 1, 2 and 3");
    }
    return std::stoi(v);
  }();
  return mode;
}
inline bool step_kernels_launch_early() { return step_pdl_mode() >= 1; }

// When a GEMM block calls ptx::allow_dependent_launch: a kernel argument, so that one build
// measures every mode.
enum GemmRelease : int {
  kReleaseAtEnd = 0,         // never: the kernel after it starts as the grid ends (modes 0, 1)
  kReleaseAtStart = 1,       // as the block starts (mode 2)
  kReleaseAfterLastLoad = 2  // once the block has asked for its last weights (mode 3, the default)
};
inline int gemm_release() {
  switch (step_pdl_mode()) {
    case 2:
      return kReleaseAtStart;
    case 3:
      return kReleaseAfterLastLoad;
    default:
      return kReleaseAtEnd;
  }
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), with programmatic stream serialization
// where step_kernels_launch_early(). The kernel must start with ptx::wait_for_prerequisites.
template <class... Params, class... Args>
void launch_early(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                  cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &early;
  config.numAttrs = step_kernels_launch_early() ? 1 : 0;
  cudaCheck(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace bih::cuda
