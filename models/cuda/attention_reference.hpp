// attention_reference.hpp: the CUDA attention kernel as it was before its shared-memory staging,
// kept as the bitwise reference of the fast one (test only; it is several times slower).
//
// attention_with_splits must give these outputs bit for bit, for both families and any shape:
// the rewrite changed where operands are read from and which thread computes a value, never an
// operation or its order. tests/gpu/test_cuda_attention_reference.cpp holds it to that.
#pragma once

#include "models/cuda/kernels.hpp"

namespace bih::cuda {

// attention_with_splits' contract and arguments, computed by the previous kernel.
void attention_with_splits_reference(KernelFamily family, const bf16* q, const KvPool& kv,
                                     const AttentionBatch& batch, int M, int n_heads,
                                     int vendor_splits, bf16* out, Stream stream);

}  // namespace bih::cuda
