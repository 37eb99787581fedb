// device_weights_kernels.hpp: the synthetic weights generator kernel of device_weights.cpp.
//
// Internal to device_weights.cpp and device_weights.cu. The host resolves everything that names a
// tensor (its key, whether it is a norm, which rows and columns a shard takes); the device only
// evaluates the per-element formula of models/weights.hpp (synthetic_normal) and rounds to bf16
// exactly as models/bf16.hpp does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace bih::cuda::detail {

// out[r * cols + c] = bf16 bits of value (row_begin + r) * source_cols + col_begin + c of the
// synthetic tensor with `key`, for r < rows, c < cols: a block of a row-major [*, source_cols]
// tensor. A flat range [b, e) of a tensor is rows = 1, col_begin = b, cols = e - b.
struct SyntheticBlock {
  uint16_t* out = nullptr;  // [rows, cols] device, contiguous
  uint64_t key = 0;         // bih::synthetic_key(seed, tensor name)
  bool ones = false;        // a norm weight: every value is 1.0
  uint64_t source_cols = 0;
  uint64_t row_begin = 0;
  uint64_t col_begin = 0;
  uint64_t rows = 0;
  uint64_t cols = 0;
};

// Enqueues the block on `stream`; throws std::runtime_error (file:line) if the launch fails.
void launch_synthetic_block(const SyntheticBlock& block, cudaStream_t stream);

}  // namespace bih::cuda::detail
