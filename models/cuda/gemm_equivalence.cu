// gemm_equivalence.cu: order-sensitive GEMM operands and a bitwise comparison (see the header).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

#include "models/cuda/check.hpp"
#include "models/cuda/gemm_equivalence.hpp"

namespace bih::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 2048;  // grid-stride beyond: enough to fill 132 SMs many times over
constexpr uint32_t kTensorX = 0;
constexpr uint32_t kTensorW = 1;
constexpr int32_t kSmall = -1;  // partner[k] of a position outside every cancelling pair

__host__ __device__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ±(1 + m/128)·2^e as bf16 bits, e in 1..8 (large) or -8..0 (small), from (seed, tensor, row, k).
__device__ uint16_t value_bits(uint64_t seed, uint32_t tensor, uint64_t row, uint64_t k,
                               bool large) {
  const uint64_t h = mix64(mix64(seed * 2 + tensor) ^ mix64((row << 32) | k));
  const uint32_t sign = static_cast<uint32_t>(h & 1);
  const uint32_t mantissa = static_cast<uint32_t>((h >> 1) & 0x7F);
  const int exponent = large ? 1 + static_cast<int>((h >> 8) % 8) : -static_cast<int>((h >> 8) % 9);
  return static_cast<uint16_t>((sign << 15) | (static_cast<uint32_t>(127 + exponent) << 7) |
                               mantissa);
}

// out[rows, K]; partner[K]: kSmall, k itself (a pair's leader), or the leader of k's pair (k is
// the follower: it repeats the leader's value, negated in w).
__global__ void fill_kernel(uint16_t* __restrict__ out, size_t rows, int K,
                            const int32_t* __restrict__ partner, uint64_t seed, uint32_t tensor) {
  const size_t total = rows * static_cast<size_t>(K);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const size_t row = i / K;
    const int k = static_cast<int>(i % K);
    const int32_t p = partner[k];
    if (p == kSmall) {
      out[i] = value_bits(seed, tensor, row, k, false);
    } else if (p == k) {
      out[i] = value_bits(seed, tensor, row, k, true);
    } else {
      const uint16_t leader = value_bits(seed, tensor, row, static_cast<uint64_t>(p), true);
      out[i] = tensor == kTensorW ? static_cast<uint16_t>(leader ^ 0x8000u) : leader;
    }
  }
}

__device__ unsigned long long smaller(unsigned long long a, unsigned long long b) {
  return a < b ? a : b;
}

__device__ void note_difference(size_t index, unsigned long long& count,
                                unsigned long long& first) {
  ++count;
  first = smaller(first, index);
}

__global__ void count_differences_kernel(const uint16_t* __restrict__ a,
                                         const uint16_t* __restrict__ b, size_t n, bool vectorized,
                                         unsigned long long* count, unsigned long long* first) {
  unsigned long long local_count = 0;
  unsigned long long local_first = ~0ull;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t scalar_from = 0;
  if (vectorized) {
    // 8 elements per 16-byte load; within a 32-bit word the low half is the lower index.
    const size_t vectors = n / 8;
    const uint4* av = reinterpret_cast<const uint4*>(a);
    const uint4* bv = reinterpret_cast<const uint4*>(b);
    for (size_t v = tid; v < vectors; v += stride) {
      const uint4 x = av[v];
      const uint4 y = bv[v];
      const uint32_t diff[4] = {x.x ^ y.x, x.y ^ y.y, x.z ^ y.z, x.w ^ y.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if ((diff[j] & 0xFFFFu) != 0) note_difference(v * 8 + 2 * j, local_count, local_first);
        if ((diff[j] >> 16) != 0) note_difference(v * 8 + 2 * j + 1, local_count, local_first);
      }
    }
    scalar_from = vectors * 8;
  }
  for (size_t i = scalar_from + tid; i < n; i += stride) {
    if (a[i] != b[i]) note_difference(i, local_count, local_first);
  }
  // Every thread of the block gets here (no early return), so the full-warp shuffles are safe.
  for (int offset = 16; offset > 0; offset /= 2) {
    local_count += __shfl_down_sync(0xffffffffu, local_count, offset);
    local_first = smaller(local_first, __shfl_down_sync(0xffffffffu, local_first, offset));
  }
  if (threadIdx.x % 32 == 0 && local_count != 0) {
    atomicAdd(count, local_count);
    atomicMin(first, local_first);
  }
}

int blocks_for(size_t work) {
  return static_cast<int>(std::clamp<size_t>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// A seeded random matching of max(1, K/8) pairs of K positions: partner[K] as fill_kernel reads.
std::vector<int32_t> cancelling_pairs(int K, uint64_t seed) {
  std::vector<int32_t> order(K);
  for (int k = 0; k < K; ++k) order[k] = k;
  uint64_t state = mix64(seed ^ 0x5bd1e995ull);
  for (int i = K - 1; i > 0; --i) {  // Fisher-Yates
    state = mix64(state + 0x9e3779b97f4a7c15ull);
    std::swap(order[i], order[static_cast<int>(state % static_cast<uint64_t>(i + 1))]);
  }
  std::vector<int32_t> partner(K, kSmall);
  const int pairs = std::max(1, K / 8);
  for (int i = 0; i < pairs; ++i) {
    const int leader = std::min(order[2 * i], order[2 * i + 1]);
    const int follower = std::max(order[2 * i], order[2 * i + 1]);
    partner[leader] = leader;
    partner[follower] = leader;
  }
  return partner;
}

}  // namespace

void fill_order_sensitive_operands(bf16* x, int x_rows, bf16* w, int w_rows, int K, uint64_t seed,
                                   CUstream_st* stream) {
  if (K < 2 || x_rows < 0 || w_rows < 0) {
    throw std::invalid_argument("fill_order_sensitive_operands: needs K >= 2 and rows >= 0");
  }
  const std::vector<int32_t> partner = cancelling_pairs(K, seed);
  int32_t* device_partner = nullptr;
  cudaCheck(
      cudaMallocAsync(reinterpret_cast<void**>(&device_partner), K * sizeof(int32_t), stream));
  // A pageable source: the copy has read it by the time cudaMemcpyAsync returns.
  cudaCheck(cudaMemcpyAsync(device_partner, partner.data(), K * sizeof(int32_t),
                            cudaMemcpyHostToDevice, stream));
  const std::pair<bf16*, int> tensors[] = {{x, x_rows}, {w, w_rows}};
  for (uint32_t t = 0; t < 2; ++t) {
    const size_t rows = static_cast<size_t>(tensors[t].second);
    if (rows == 0) continue;
    fill_kernel<<<blocks_for(rows * K), kThreads, 0, stream>>>(
        reinterpret_cast<uint16_t*>(tensors[t].first), rows, K, device_partner, seed,
        t == 0 ? kTensorX : kTensorW);
    cudaCheck(cudaGetLastError());
  }
  cudaCheck(cudaFreeAsync(device_partner, stream));
}

void launch_count_bit_differences(const bf16* a, const bf16* b, size_t n, uint64_t* count,
                                  uint64_t* first, CUstream_st* stream) {
  if (n == 0) return;
  const bool vectorized =
      reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  count_differences_kernel<<<blocks_for(vectorized ? n / 8 + 1 : n), kThreads, 0, stream>>>(
      reinterpret_cast<const uint16_t*>(a), reinterpret_cast<const uint16_t*>(b), n, vectorized,
      reinterpret_cast<unsigned long long*>(count), reinterpret_cast<unsigned long long*>(first));
  cudaCheck(cudaGetLastError());
}

BitDifferences count_bit_differences(const bf16* a, const bf16* b, size_t n, CUstream_st* stream) {
  uint64_t* device = nullptr;  // [2]: count, first
  cudaCheck(cudaMallocAsync(reinterpret_cast<void**>(&device), 2 * sizeof(uint64_t), stream));
  cudaCheck(cudaMemsetAsync(device, 0, sizeof(uint64_t), stream));
  cudaCheck(cudaMemsetAsync(device + 1, 0xFF, sizeof(uint64_t), stream));
  launch_count_bit_differences(a, b, n, device, device + 1, stream);
  uint64_t host[2] = {0, 0};
  cudaCheck(cudaMemcpyAsync(host, device, sizeof(host), cudaMemcpyDeviceToHost, stream));
  cudaCheck(cudaFreeAsync(device, stream));
  cudaCheck(cudaStreamSynchronize(stream));
  return BitDifferences{host[0], host[1]};
}

}  // namespace bih::cuda
