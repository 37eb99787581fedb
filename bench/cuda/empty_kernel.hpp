// empty_kernel.hpp: a kernel whose body is empty, the per-launch floor of a graph node.
//
// bench_cuda_kernels.cpp captures it exactly as it captures the kernel under test, so the ratio
// between the two says how much of a kernel's time is the launch itself. A plain C++ header for the
// bench's C++ translation units; the kernel lives in empty_kernel.cu.
#pragma once

#include <cuda_runtime_api.h>

namespace bih::bench {

// Enqueues the empty kernel on `stream` with grid [blocks] and block [threads]; throws
// std::runtime_error (models/cuda/check.hpp) when the launch is rejected.
void launch_empty_kernel(cudaStream_t stream, int blocks, int threads);

}  // namespace bih::bench
