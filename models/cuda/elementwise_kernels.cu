// elementwise_kernels.cu: silu_mul, embedding and write_kv (kernels.hpp), the kernels without a
// reduction: each output element depends on its own inputs alone, so the launch shape is free to
// change without touching a bit. Numerics: device_math.cuh.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "models/cuda/device_math.cuh"
#include "models/cuda/kernels.hpp"
#include "models/cuda/programmatic_launch.cuh"
#include "models/cuda/ptx.cuh"

namespace bih::cuda {
namespace {

using device::bits_of;
using device::check_launch;
using device::kBf16QuietNan;
using device::require;
using device::silu_mul_bits;
using device::u16;

constexpr int kElementThreads = 256;

// grid-stride over M*I. gate_up: [M, 2I]; y: [M, I].
__global__ void silu_mul_kernel(const u16* gate_up, u16* y, int64_t M, int64_t I) {
  ptx::allow_dependent_launch();  // a GEMM after it may stream its weights meanwhile
  ptx::wait_for_prerequisites();  // launched early (programmatic_launch.cuh)
  const int64_t total = M * I;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = e / I;
    const int64_t i = e - m * I;
    y[e] = silu_mul_bits(gate_up[m * 2 * I + i], gate_up[m * 2 * I + I + i]);
  }
}

// grid [M], block [kElementThreads]. table: [vocab, H]; ids: [M]; y: [M, H].
__global__ void embedding_kernel(const u16* table, int vocab, const int32_t* ids, u16* y, int H) {
  ptx::allow_dependent_launch();
  const int id = ids[blockIdx.x];
  u16* yr = y + static_cast<size_t>(blockIdx.x) * H;
  const bool valid = id >= 0 && id < vocab;
  const u16* src = table + static_cast<size_t>(valid ? id : 0) * H;
  for (int i = threadIdx.x; i < H; i += blockDim.x) yr[i] = valid ? src[i] : kBf16QuietNan;
}

// grid [M], block [kElementThreads]. k, v: [M, row]; pool_k, pool_v: [num_slots, row].
__global__ void write_kv_kernel(u16* pool_k, u16* pool_v, int64_t num_slots, const u16* k,
                                const u16* v, const int64_t* slots, int row) {
  const int64_t slot = slots[blockIdx.x];
  if (slot < 0 || slot >= num_slots) return;
  const size_t src = static_cast<size_t>(blockIdx.x) * row;
  const size_t dst = static_cast<size_t>(slot) * row;
  for (int i = threadIdx.x; i < row; i += blockDim.x) {
    pool_k[dst + i] = k[src + i];
    pool_v[dst + i] = v[src + i];
  }
}

}  // namespace

void silu_mul(const bf16* gate_up, bf16* y, int M, int I, Stream stream) {
  require(M >= 0 && I > 0, "silu_mul: need M >= 0 and I > 0");
  if (M == 0) return;
  const int64_t total = int64_t{M} * I;
  const int64_t blocks = std::min<int64_t>((total + kElementThreads - 1) / kElementThreads, 65536);
  launch_early(silu_mul_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kElementThreads), 0,
               stream, bits_of(gate_up), bits_of(y), int64_t{M}, int64_t{I});
  check_launch();
}

void embedding(const bf16* table, int vocab, const int32_t* ids, bf16* y, int M, int H,
               Stream stream) {
  require(M >= 0 && H > 0 && vocab > 0, "embedding: need M >= 0, H > 0 and vocab > 0");
  if (M == 0) return;
  embedding_kernel<<<M, kElementThreads, 0, stream>>>(bits_of(table), vocab, ids, bits_of(y), H);
  check_launch();
}

void write_kv(const KvPool& kv, const bf16* k, const bf16* v, const int64_t* slots, int M,
              Stream stream) {
  require(M >= 0, "write_kv: need M >= 0");
  if (M == 0) return;
  const int64_t num_slots = int64_t{kv.num_blocks} * kv.block_size;
  write_kv_kernel<<<M, kElementThreads, 0, stream>>>(bits_of(kv.k), bits_of(kv.v), num_slots,
                                                     bits_of(k), bits_of(v), slots,
                                                     kv.num_kv_heads * kv.head_dim);
  check_launch();
}

}  // namespace bih::cuda
