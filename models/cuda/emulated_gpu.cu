// emulated_gpu.cu: the kernels of the GPU communicators (emulated_gpu_kernels.hpp): the order
// models' chain sum and kernels tp_invariant's fp32 tree for one rank (the NCCL communicator), and
// the hub launches that run a whole collective for every emulated rank at once.
#include <cstdint>

#include "models/cuda/bf16_bits.cuh"
#include "models/cuda/check.hpp"
#include "models/cuda/emulated_gpu_kernels.hpp"

namespace bih::cuda::detail {
namespace {

using bits::narrow;
using bits::widen;

// Element `at` of inputs[chain[0]] + inputs[chain[1]] + ..., in that order. __fadd_rn is an IEEE
// fp32 add that the compiler never contracts or reorders: the host's `acc + x` under
// -ffp-contract=off.
template <class Input, class Index>
__device__ uint16_t chain_sum_at(const Input* inputs, const Index* chain, int chain_length,
                                 bool fp32_once, size_t at) {
  float acc = widen(static_cast<const uint16_t*>(inputs[chain[0]])[at]);
  for (int j = 1; j < chain_length; ++j) {
    const float x = widen(static_cast<const uint16_t*>(inputs[chain[j]])[at]);
    acc = __fadd_rn(acc, x);
    // Every hop of a ring or tree sends a bf16 partial sum to the next rank.
    if (!fp32_once) acc = widen(narrow(acc));
  }
  return narrow(acc);
}

// The host's pairwise_tree_sum over the ranks, level by level, then one rounding.
template <class Input>
__device__ uint16_t tree_f32_sum_at(const Input* inputs, int ranks, size_t at) {
  float v[kMaxTreeRanks];
  for (int r = 0; r < ranks; ++r) v[r] = static_cast<const float*>(inputs[r])[at];
  for (int width = ranks; width > 1; width /= 2) {
    for (int j = 0; j < width / 2; ++j) v[j] = __fadd_rn(v[2 * j], v[2 * j + 1]);
  }
  return narrow(v[0]);
}

// One thread per output element (grid-stride).
__global__ void chain_sum_kernel(const ChainSumArgs args) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < args.count;
       i += stride) {
    args.out[i] = chain_sum_at(args.inputs, args.chain, args.chain_length, args.fp32_once,
                               args.input_offset + i);
  }
}

__global__ void tree_f32_sum_kernel(const TreeF32SumArgs args) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < args.count;
       i += stride) {
    args.out[i] = tree_f32_sum_at(args.inputs, args.ranks, args.input_offset + i);
  }
}

// The reducing hub ops. Thread t computes element t of the whole result: reduce_scatter's t is
// owner * count + i (the element's place in every input, too); all_reduce's t is the element.
template <int kRanks>
__global__ void hub_sum_kernel(const HubArgs<kRanks> args) {
  const bool scatter = args.scatters();
  const bool tree =
      args.op == HubOp::all_reduce_tree_f32 || args.op == HubOp::reduce_scatter_tree_f32;
  const size_t total = args.reduced_elements();
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += stride) {
    const size_t row = scatter ? t / args.count : t / args.segment;
    const uint16_t sum =
        tree ? tree_f32_sum_at(args.inputs, args.ranks, t)
             : chain_sum_at(args.inputs, args.chains[row], args.chain_length, args.fp32_once, t);
    if (scatter) {
      args.outputs[row][t - row * args.count] = sum;
    } else {
      for (int r = 0; r < args.ranks; ++r) args.outputs[r][t] = sum;
    }
  }
}

// all_gather: blockIdx.y is the source rank q; its block goes to block q of every rank's output,
// except where it already is (in place). Word is uint4 when every block is 16-byte aligned.
template <class Word, int kRanks>
__global__ void hub_gather_kernel(const HubArgs<kRanks> args, size_t words) {
  const int q = blockIdx.y;
  const Word* in = static_cast<const Word*>(args.inputs[q]);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += stride) {
    const Word w = in[i];
    for (int r = 0; r < args.ranks; ++r) {
      Word* out = reinterpret_cast<Word*>(args.outputs[r]) + static_cast<size_t>(q) * words;
      if (out != in) out[i] = w;
    }
  }
}

unsigned grid_for(size_t count, int threads) {
  constexpr size_t kMaxBlocks = 4096;  // grid-stride beyond: plenty for one GPU's SMs
  const size_t blocks_needed = (count + threads - 1) / threads;
  return static_cast<unsigned>(blocks_needed < kMaxBlocks ? blocks_needed : kMaxBlocks);
}

constexpr int kThreads = 256;

template <int kRanks>
void launch_hub_impl(const HubArgs<kRanks>& args, cudaStream_t stream) {
  if (args.count == 0 || args.ranks == 0) return;
  if (args.op != HubOp::all_gather) {
    hub_sum_kernel<kRanks>
        <<<grid_for(args.reduced_elements(), kThreads), kThreads, 0, stream>>>(args);
    cudaCheck(cudaGetLastError());
    return;
  }
  constexpr size_t kWord = sizeof(uint4) / sizeof(uint16_t);  // elements per 16-byte word
  bool aligned = args.count % kWord == 0;
  for (int q = 0; q < args.ranks; ++q) {
    aligned = aligned && reinterpret_cast<uintptr_t>(args.inputs[q]) % 16 == 0 &&
              reinterpret_cast<uintptr_t>(args.outputs[q]) % 16 == 0;
  }
  const size_t words = aligned ? args.count / kWord : args.count;
  const dim3 grid(grid_for(words, kThreads), static_cast<unsigned>(args.ranks));
  if (aligned) {
    hub_gather_kernel<uint4, kRanks><<<grid, kThreads, 0, stream>>>(args, words);
  } else {
    hub_gather_kernel<uint16_t, kRanks><<<grid, kThreads, 0, stream>>>(args, words);
  }
  cudaCheck(cudaGetLastError());
}

}  // namespace

void launch_hub(const HubArgs<kHubSmallRanks>& args, cudaStream_t stream) {
  launch_hub_impl(args, stream);
}

void launch_hub(const HubArgs<kMaxChainLength>& args, cudaStream_t stream) {
  launch_hub_impl(args, stream);
}

void launch_tree_f32_sum(const TreeF32SumArgs& args, cudaStream_t stream) {
  if (args.count == 0) return;
  tree_f32_sum_kernel<<<grid_for(args.count, kThreads), kThreads, 0, stream>>>(args);
  cudaCheck(cudaGetLastError());
}

void launch_chain_sum(const ChainSumArgs& args, cudaStream_t stream) {
  if (args.count == 0) return;
  chain_sum_kernel<<<grid_for(args.count, kThreads), kThreads, 0, stream>>>(args);
  cudaCheck(cudaGetLastError());
}

}  // namespace bih::cuda::detail
