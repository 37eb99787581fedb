// emulated_gpu.cu: the kernels of the GPU communicators (emulated_gpu_kernels.hpp): the
// emulated order models' chain sum, the emulated all_gather, and kernels tp_invariant's fp32 tree.
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

// blockIdx.y is the source rank; Word is uint4 when every block is 16-byte aligned, else uint16_t.
template <class Word>
__global__ void gather_kernel(const GatherArgs args, size_t words) {
  const int q = blockIdx.y;
  const Word* in = reinterpret_cast<const Word*>(args.inputs[q]);
  Word* out = reinterpret_cast<Word*>(args.out + static_cast<size_t>(q) * args.count);
  if (static_cast<const void*>(in) == static_cast<const void*>(out)) return;  // in place
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += stride) {
    out[i] = in[i];
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

void launch_gather(const GatherArgs& args, cudaStream_t stream) {
  if (args.count == 0 || args.ranks == 0) return;
  constexpr int kThreads = 256;
  constexpr size_t kWord = sizeof(uint4) / sizeof(uint16_t);  // elements per 16-byte word
  bool aligned = args.count % kWord == 0 && reinterpret_cast<uintptr_t>(args.out) % 16 == 0;
  for (int q = 0; q < args.ranks; ++q) {
    aligned = aligned && reinterpret_cast<uintptr_t>(args.inputs[q]) % 16 == 0;
  }
  const size_t words = aligned ? args.count / kWord : args.count;
  const dim3 grid(grid_for(words, kThreads), static_cast<unsigned>(args.ranks));
  if (aligned) {
    gather_kernel<uint4><<<grid, kThreads, 0, stream>>>(args, words);
  } else {
    gather_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(args, words);
  }
  cudaCheck(cudaGetLastError());
}

void launch_chain_sum(const ChainSumArgs& args, cudaStream_t stream) {
  if (args.count == 0) return;
  constexpr int kThreads = 256;
  chain_sum_kernel<<<grid_for(args.count, kThreads), kThreads, 0, stream>>>(args);
  cudaCheck(cudaGetLastError());
}

}  // namespace bih::cuda::detail
