// device_weights.cu: the synthetic weights generator (device_weights_kernels.hpp).
//
// Bit for bit the host's synthetic_normal (models/weights.cpp): the integer part is exact, every
// double product is an explicitly rounded __dmul_rn (no additions appear, so there is nothing to
// contract into an FMA anyway), sqrt is IEEE's, and log/cos are CUDA's double functions, within
// 1-2 ulp of glibc's; weights.hpp explains why that almost never changes a bf16.
#include <cmath>
#include <cstdint>

#include "models/cuda/check.hpp"
#include "models/cuda/device_weights_kernels.hpp"

namespace bih::cuda::detail {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr uint16_t kBf16One = 0x3f80;

// splitmix64's finalizer, as weights.cpp's mix64.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// weights.cpp's normal_from_key: value i of the tensor with `key`, Box-Muller in double.
__device__ __forceinline__ float normal_from_key(uint64_t key, uint64_t i) {
  const uint64_t r1 = mix64(key + (2 * i + 1) * kGolden);
  const uint64_t r2 = mix64(key + (2 * i + 2) * kGolden);
  // Both integers are below 2^53 + 1, so the conversions are exact.
  const double u1 = __dmul_rn(static_cast<double>((r1 >> 11) + 1), 0x1.0p-53);
  const double u2 = __dmul_rn(static_cast<double>(r2 >> 11), 0x1.0p-53);
  const double radius = __dsqrt_rn(__dmul_rn(-2.0, log(u1)));
  const double z = __dmul_rn(radius, cos(__dmul_rn(6.283185307179586, u2)));
  return __double2float_rn(__dmul_rn(0.02, z));
}

// models/bf16.hpp's to_bf16 (round to nearest, ties to even). The generator never makes a NaN
// (|z| < 8.6), so the NaN branch of the host recipe is left out.
__device__ __forceinline__ uint16_t to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

// One thread per output element (grid-stride loop).
__global__ void synthetic_block_kernel(const SyntheticBlock block) {
  const uint64_t count = block.rows * block.cols;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t e = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += stride) {
    if (block.ones) {
      block.out[e] = kBf16One;
      continue;
    }
    const uint64_t r = e / block.cols;
    const uint64_t c = e - r * block.cols;
    const uint64_t i = (block.row_begin + r) * block.source_cols + block.col_begin + c;
    block.out[e] = to_bf16_bits(normal_from_key(block.key, i));
  }
}

}  // namespace

void launch_synthetic_block(const SyntheticBlock& block, cudaStream_t stream) {
  const uint64_t count = block.rows * block.cols;
  if (count == 0) return;
  constexpr int kThreads = 256;
  constexpr uint64_t kMaxBlocks = 8192;  // grid-stride beyond: ~60 blocks per SM on an H200
  const uint64_t blocks_needed = (count + kThreads - 1) / kThreads;
  const unsigned blocks =
      static_cast<unsigned>(blocks_needed < kMaxBlocks ? blocks_needed : kMaxBlocks);
  synthetic_block_kernel<<<blocks, kThreads, 0, stream>>>(block);
  cudaCheck(cudaGetLastError());
}

}  // namespace bih::cuda::detail
