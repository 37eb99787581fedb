// emulated_gpu.cu: the chain-sum kernel of the emulated GPU communicator
// (emulated_gpu_kernels.hpp).
#include <cstdint>

#include "models/cuda/check.hpp"
#include "models/cuda/emulated_gpu_kernels.hpp"

namespace bih::cuda::detail {
namespace {

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// Round to nearest, ties to even; a NaN stays a quiet NaN with its sign. Bit for bit the host's
// bih::to_bf16 (models/bf16.hpp), rather than __float2bfloat16_rn, whose NaN is canonical.
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

// One thread per output element (grid-stride). __fadd_rn is an IEEE fp32 add that the compiler
// never contracts or reorders: the host's `acc + x` under -ffp-contract=off.
__global__ void chain_sum_kernel(const ChainSumArgs args) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < args.count;
       i += stride) {
    const size_t at = args.input_offset + i;
    float acc = bf16_bits_to_float(args.inputs[args.chain[0]][at]);
    for (int j = 1; j < args.chain_length; ++j) {
      const float x = bf16_bits_to_float(args.inputs[args.chain[j]][at]);
      acc = __fadd_rn(acc, x);
      // Every hop of a ring or tree sends a bf16 partial sum to the next rank.
      if (!args.fp32_once) acc = bf16_bits_to_float(float_to_bf16_bits(acc));
    }
    args.out[i] = float_to_bf16_bits(acc);
  }
}

}  // namespace

void launch_chain_sum(const ChainSumArgs& args, cudaStream_t stream) {
  if (args.count == 0) return;
  constexpr int kThreads = 256;
  constexpr size_t kMaxBlocks = 4096;  // grid-stride beyond: plenty for one GPU's SMs
  const size_t blocks_needed = (args.count + kThreads - 1) / kThreads;
  const unsigned blocks =
      static_cast<unsigned>(blocks_needed < kMaxBlocks ? blocks_needed : kMaxBlocks);
  chain_sum_kernel<<<blocks, kThreads, 0, stream>>>(args);
  cudaCheck(cudaGetLastError());
}

}  // namespace bih::cuda::detail
