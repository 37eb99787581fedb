// cuda_probes.hpp: the probes' CUDA backend (a CUDA leaf, compiled into bih_cuda).
//
// The CUDA cases are registered by the core (kernel_probes.cpp, collective_probes.cpp) with the
// same ids as the CPU cases but backend=cuda; this backend runs them: every kernel of
// models/cuda/kernels.hpp, the CUDA GEMM of models/cuda/gemm.hpp in both families, and the
// emulated communicator on one GPU (models/cuda/emulated_gpu.hpp) with each order model. Each op
// uploads a batch's host arrays, launches, and downloads the result, all on the default stream
// (collectives: each rank on its own stream), synchronously.
// Plain C++ header: the CLI and the GPU tests include it; the leaf uses no CUDA header either, only
// the CUDA leaf's plain C++ APIs.
#pragma once

#include <memory>

#include "probes/probe_backend.hpp"

namespace bih::probe {

// A CUDA backend on device 0. Throws std::runtime_error where CUDA fails (no device).
std::shared_ptr<ProbeBackend> make_cuda_backend();

// Installs the CUDA backend's hook (set_cuda_backend): the CUDA cases run where a GPU is visible
// and are `unsupported` with kNoCudaGpu where none is.
void install_cuda_backend();

}  // namespace bih::probe
