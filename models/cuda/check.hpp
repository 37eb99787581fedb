// check.hpp: turn a failed CUDA runtime or cuBLAS(Lt) call into an exception naming file:line.
//
// Style of llm.c: wrap every call, cudaCheck(cudaMalloc(...)), cublasCheck(cublasLtMatmul(...)).
// The exception is std::runtime_error; the harness reports it as an infrastructure failure.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace bih::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t error, const char* call, const char* file,
                                          int line) {
  // Clear the error so the next, unrelated call in this thread does not see it again.
  cudaGetLastError();
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call +
                           " failed: " + cudaGetErrorName(error) + " (" +
                           cudaGetErrorString(error) + ")");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call,
                                            const char* file, int line) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call +
                           " failed: " + cublasLtGetStatusName(status) + " (" +
                           cublasLtGetStatusString(status) + ")");
}

}  // namespace bih::cuda

#define cudaCheck(call)                                                          \
  do {                                                                           \
    const cudaError_t bih_cuda_error_ = (call);                                  \
    if (bih_cuda_error_ != cudaSuccess) {                                        \
      ::bih::cuda::throw_cuda_error(bih_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                            \
  } while (0)

#define cublasCheck(call)                                                             \
  do {                                                                                \
    const cublasStatus_t bih_cublas_status_ = (call);                                 \
    if (bih_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      ::bih::cuda::throw_cublas_error(bih_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)
