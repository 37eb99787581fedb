// emulated_gpu.cu: the sum kernels of the GPU communicators (emulated_gpu_kernels.hpp): the
// emulated order models' chain sum and kernels tp_invariant's fp32 tree.
#include <cstdint>

#include "models/cuda/bf16_bits.cuh"
#include "models/cuda/check.hpp"
#include "models/cuda/emulated_gpu_kernels.hpp"

namespace bih::cuda::detail {
namespace {

using bits::narrow;
using bits::widen;

// One thread per output element (grid-stride). __fadd_rn is an IEEE fp32 add that the compiler
// never contracts or reorders: the host's `acc + x` under -ffp-contract=off.
__global__ void chain_sum_kernel(const ChainSumArgs args) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < args.count;
       i += stride) {
    const size_t at = args.input_offset + i;
    float acc = widen(args.inputs[args.chain[0]][at]);
    for (int j = 1; j < args.chain_length; ++j) {
      const float x = widen(args.inputs[args.chain[j]][at]);
      acc = __fadd_rn(acc, x);
      // Every hop of a ring or tree sends a bf16 partial sum to the next rank.
      if (!args.fp32_once) acc = widen(narrow(acc));
    }
    args.out[i] = narrow(acc);
  }
}

// The host's pairwise_tree_sum over the ranks, level by level, then one rounding.
__global__ void tree_f32_sum_kernel(const TreeF32SumArgs args) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < args.count;
       i += stride) {
    float v[kMaxTreeRanks];
    for (int r = 0; r < args.ranks; ++r) v[r] = args.inputs[r][args.input_offset + i];
    for (int width = args.ranks; width > 1; width /= 2) {
      for (int j = 0; j < width / 2; ++j) v[j] = __fadd_rn(v[2 * j], v[2 * j + 1]);
    }
    args.out[i] = narrow(v[0]);
  }
}

unsigned grid_for(size_t count, int threads) {
  constexpr size_t kMaxBlocks = 4096;  // grid-stride beyond: plenty for one GPU's SMs
  const size_t blocks_needed = (count + threads - 1) / threads;
  return static_cast<unsigned>(blocks_needed < kMaxBlocks ? blocks_needed : kMaxBlocks);
}

}  // namespace

void launch_tree_f32_sum(const TreeF32SumArgs& args, cudaStream_t stream) {
  if (args.count == 0) return;
  constexpr int kThreads = 256;
  tree_f32_sum_kernel<<<grid_for(args.count, kThreads), kThreads, 0, stream>>>(args);
  cudaCheck(cudaGetLastError());
}

void launch_chain_sum(const ChainSumArgs& args, cudaStream_t stream) {
  if (args.count == 0) return;
  constexpr int kThreads = 256;
  chain_sum_kernel<<<grid_for(args.count, kThreads), kThreads, 0, stream>>>(args);
  cudaCheck(cudaGetLastError());
}

}  // namespace bih::cuda::detail
