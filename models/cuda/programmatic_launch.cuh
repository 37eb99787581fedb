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
// BIH_STEP_PDL=0 launches these kernels the ordinary way, and the skinny stream GEMM no longer lets
// its dependents start early: the A/B of reports/gpu/step-pdl-2026-12-07.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "models/cuda/check.hpp"

namespace bih::cuda {

// BIH_STEP_PDL, read once: unset or 1 launches early, 0 does not.
inline bool step_kernels_launch_early() {
  static const bool early = [] {
    const char* value = std::getenv("BIH_STEP_PDL");
    if (value == nullptr) return true;
    const std::string v = value;
    if (v != "0" && v != "1") {
      throw std::invalid_argument("BIH_STEP_PDL=" + v + ": valid values are 0 and 1");
    }
    return v == "1";
  }();
  return early;
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
