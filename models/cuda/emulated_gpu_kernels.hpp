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

// all_gather on one rank in one launch: out[q * count + i] = inputs[q][i] for every rank q (a
// block whose input already is out + q * count is left alone). A copy moves bit patterns, so the
// result is the n copies' bit for bit; one launch instead of n keeps an emulated rank's
// collective one graph node and one API call (n copies per rank made all_gather the largest
// share of an eager TP=8 step's launches).
struct GatherArgs {
  const uint16_t* inputs[kMaxChainLength] = {};  // [ranks] device pointers, bf16 bit patterns
  int ranks = 0;
  size_t count = 0;         // elements per rank
  uint16_t* out = nullptr;  // [ranks * count] device
};
void launch_gather(const GatherArgs& args, cudaStream_t stream);

// kernels tp_invariant's collectives (Communicator::*_tree_f32), shared by the emulated and the
// NCCL communicator: out[i] = bf16(pairwise_tree_sum over r in rank order of
// inputs[r][input_offset + i]), the host's tree_f32_sum (models/comm/reduce_order.hpp) bit for bit.
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
