// empty_kernel.cu: the empty kernel of empty_kernel.hpp and its launcher.
#include "bench/cuda/empty_kernel.hpp"
#include "models/cuda/check.hpp"

namespace bih::bench {
namespace {

__global__ void empty_kernel() {}

}  // namespace

void launch_empty_kernel(cudaStream_t stream, int blocks, int threads) {
  empty_kernel<<<blocks, threads, 0, stream>>>();
  cudaCheck(cudaGetLastError());
}

}  // namespace bih::bench
