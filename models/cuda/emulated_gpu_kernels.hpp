// emulated_gpu_kernels.hpp: the device kernels of the emulated GPU communicator.
//
// Internal to emulated_gpu.cpp and emulated_gpu.cu (plain C++17, as nvcc compiles .cu files). The
// host decides every summation order with the pure models of models/comm/reduce_order.hpp and
// hands the device a finished chain; the device only does the arithmetic, the same arithmetic as
// the host (IEEE fp32 round-to-nearest adds, bf16 round-to-nearest-even after every hop, or one
// rounding for `fixed`), so the bits agree.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace bih::cuda::detail {

// Largest chain the kernel takes; equals bih::kMaxRanks (checked in emulated_gpu.cpp).
inline constexpr int kMaxChainLength = 64;

// out[i] = sum over j in [0, chain_length) of inputs[chain[j]][input_offset + i], i in [0, count).
// Passed by value as the kernel's parameter block (about 0.8 KB).
struct ChainSumArgs {
  const uint16_t* inputs[kMaxChainLength] = {};  // [ranks] device pointers, bf16 bit patterns
  int chain[kMaxChainLength] = {};               // [chain_length] ranks, chain[0] enters first
  int chain_length = 0;
  bool fp32_once = false;  // `fixed`: fp32 accumulation, rounded to bf16 once at the end
  size_t input_offset = 0;
  size_t count = 0;
  uint16_t* out = nullptr;  // [count] device; may be inputs[r] + input_offset for any r
};

// Enqueues the sum on `stream`; throws std::runtime_error (file:line) if the launch fails.
void launch_chain_sum(const ChainSumArgs& args, cudaStream_t stream);

// One collective for EVERY rank of an emulated group in one launch (emulated_gpu_hub.cu), made
// on the group's hub stream by the last rank to reach the barrier: one kernel and one graph node
// per collective instead of one (plus a staging copy) per rank. Each output element is computed
// by one thread, which reads every input it needs before it writes, so the in-place forms are
// safe element by element: all_reduce sums into every rank's `data`, reduce_scatter may write
// in + owner * count, and all_gather may find a rank's input already at its block.
enum class HubOp : int {
  all_reduce,               // chain sum; the same result into every rank's output
  reduce_scatter,           // chain sum of block `owner`; into owner's output
  all_gather,               // copies; block q of every rank's output is rank q's input
  all_reduce_tree_f32,      // fp32 inputs, the chunk tree, one rounding; into every output
  reduce_scatter_tree_f32,  // the same over block `owner`; into owner's output
};

// kRanks: the largest group the launch takes (8, or kMaxChainLength). The parameter block is
// about 0.2 KB at 8 and 5 KB at 64 (kernels take up to 32 KB of parameters since CUDA 12.1).
template <int kRanks>
struct HubArgs {
  HubOp op = HubOp::all_reduce;
  int ranks = 0;
  int chain_length = 0;    // entries of every row of `chains` (the chain ops)
  bool fp32_once = false;  // `fixed`: fp32 accumulation, rounded to bf16 once at the end
  // all_reduce: a row of `chains` holds for `segment` elements (the ring chunk; else count).
  size_t segment = 0;
  // all_reduce's message; reduce_scatter's and all_gather's block per rank (elements).
  size_t count = 0;
  const void* inputs[kRanks] = {};  // [ranks] device: bf16 bit patterns, fp32 for the tree ops
  uint16_t* outputs[kRanks] = {};   // [ranks] device: bf16 bit patterns
  // [row][j]: rank summed j-th. row = element / segment (all_reduce) or owner (reduce_scatter).
  uint8_t chains[kRanks][kRanks] = {};

  // Elements the reducing ops compute: every rank's block for the scatter forms, else the message.
  __host__ __device__ bool scatters() const {
    return op == HubOp::reduce_scatter || op == HubOp::reduce_scatter_tree_f32;
  }
  __host__ __device__ size_t reduced_elements() const {
    return scatters() ? count * static_cast<size_t>(ranks) : count;
  }
};
inline constexpr int kHubSmallRanks = 8;
// Enqueue on `stream`; throw std::runtime_error (file:line) if the launch fails.
void launch_hub(const HubArgs<kHubSmallRanks>& args, cudaStream_t stream);
void launch_hub(const HubArgs<kMaxChainLength>& args, cudaStream_t stream);

// The NCCL communicator's kernels tp_invariant collectives (Communicator::*_tree_f32): out[i] =
// bf16(pairwise_tree_sum over r in rank order of inputs[r][input_offset + i]), the host's
// tree_f32_sum (models/comm/reduce_order.hpp) bit for bit.
inline constexpr int kMaxTreeRanks = 8;  // bih::kTpInvariantChunks
struct TreeF32SumArgs {
  const float* inputs[kMaxTreeRanks] = {};  // [ranks] device pointers
  int ranks = 0;                            // 1, 2, 4 or 8
  size_t input_offset = 0;
  size_t count = 0;
  uint16_t* out = nullptr;  // [count] device bf16 bits; never overlaps an input
};
void launch_tree_f32_sum(const TreeF32SumArgs& args, cudaStream_t stream);

}  // namespace bih::cuda::detail
