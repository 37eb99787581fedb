// nccl_collectives.cpp: NcclCommunicator's collectives (nccl_comm.hpp): all_reduce,
// reduce_scatter and all_gather in bf16, the fp32 tree collectives of kernels tp_invariant, the
// launches of the `fixed`-order and tree sum kernels they end with, and nccl_call, the locked,
// polled NCCL call each of them goes through.
//
// Only where this build has NCCL; otherwise nccl_comm.cpp has the members that throw.
#include <cuda_runtime_api.h>
#if defined(BIH_HAVE_NCCL)
#include <nccl.h>
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/cuda/emulated_gpu_kernels.hpp"
#include "models/cuda/nccl_comm.hpp"
#include "models/cuda/nccl_internal.hpp"
#include "models/tree_sum.hpp"

namespace bih::cuda {

#if defined(BIH_HAVE_NCCL)

static_assert(sizeof(bf16) == sizeof(uint16_t), "bf16 must be its 16 bits, as the kernel reads it");

using nccl_detail::async_state;
using nccl_detail::Backoff;
using nccl_detail::Deadline;
using nccl_detail::milliseconds_text;
using nccl_detail::nccl_error_text;
using nccl_detail::no_error;

namespace {

// The all-to-all of a reduce_scatter built from point-to-point calls (the `fixed` order and the
// fp32 tree): block `peer` of `in` goes to each peer, and each peer's block `rank` lands in
// staging block `peer`; this rank's own block stays where it is. `count` elements of
// `element_bytes` per block. One NCCL group, closed even after an error.
ncclResult_t exchange_blocks(ncclComm_t comm, const void* in, void* staging, size_t count,
                             ncclDataType_t type, size_t element_bytes, int rank, int size,
                             cudaStream_t stream) {
  const ncclResult_t started = ncclGroupStart();
  if (started != ncclSuccess) return started;
  ncclResult_t first = ncclSuccess;
  for (int peer = 0; peer < size && no_error(first); ++peer) {
    if (peer == rank) continue;
    const size_t offset = static_cast<size_t>(peer) * count * element_bytes;
    first = ncclSend(static_cast<const char*>(in) + offset, count, type, peer, comm, stream);
    if (no_error(first)) {
      first = ncclRecv(static_cast<char*>(staging) + offset, count, type, peer, comm, stream);
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  return no_error(first) ? ended : first;
}

const uint16_t* bits_of(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }

}  // namespace

template <class Call>
void NcclCommunicator::nccl_call(const char* what, Call&& call) {
  std::unique_lock lock(mutex_);
  if (aborted_) throw CommAborted(abort_reason_);
  ncclResult_t r = call(comm_);
  const Deadline deadline(options_.watchdog);
  Backoff backoff;
  while (r == ncclInProgress) {
    // Nonblocking mode: NCCL enqueues in the background (connecting peers on first use); no
    // other NCCL call and no kernel on the stream until it is done.
    if (deadline.passed()) {
      abort_locked(where() + ": NCCL watchdog: " + what + " for " + describe_latest() +
                   " was not enqueued within " + milliseconds_text(options_.watchdog) +
                   " (a peer never joined?); the communicator was aborted (ncclCommAbort)");
      throw CommAborted(abort_reason_);
    }
    lock.unlock();
    backoff.pause();
    lock.lock();
    if (aborted_) throw CommAborted(abort_reason_);
    r = async_state(comm_);
  }
  if (r != ncclSuccess) {
    abort_locked(where() + ": " + what + " for " + describe_latest() +
                 " failed: " + nccl_error_text(r) + "; the communicator was aborted");
    throw CommAborted(abort_reason_);
  }
}

void NcclCommunicator::launch_fixed_sum(const std::vector<const bf16*>& inputs, size_t count,
                                        bf16* out) {
  // The emulated `fixed` model exactly: chain 0..n-1 from rank 0's value, fp32, one rounding.
  detail::ChainSumArgs args;
  for (int q = 0; q < size_; ++q) {
    args.inputs[q] = bits_of(inputs[q]);
    args.chain[q] = q;
  }
  args.chain_length = size_;
  args.fp32_once = true;
  args.input_offset = 0;
  args.count = count;
  args.out = reinterpret_cast<uint16_t*>(out);
  try {
    detail::launch_chain_sum(args, stream_);
  } catch (const std::exception& e) {
    abort_and_throw(where() + ": the fixed-order sum of " + describe_latest() +
                    " failed to launch: " + e.what());
  }
}

void NcclCommunicator::all_reduce(bf16* data, size_t count) {
  begin_collective(Op::all_reduce, count);
  if (count == 0) return;
  if (options_.orders.all_reduce == ReduceOrder::fixed) {
    // Every rank gathers every rank's whole buffer: staging [size][count]; then sums it.
    bf16* staging = staging_for(count);
    nccl_call("ncclAllGather", [&](ncclComm_t comm) {
      return ncclAllGather(data, staging, count, ncclBfloat16, comm, stream_);
    });
    std::vector<const bf16*> inputs(size_);
    for (int q = 0; q < size_; ++q) inputs[q] = staging + static_cast<size_t>(q) * count;
    // The all-gather has finished on this stream, so peers are done reading `data`.
    launch_fixed_sum(inputs, count, data);
  } else {
    nccl_call("ncclAllReduce", [&](ncclComm_t comm) {
      return ncclAllReduce(data, data, count, ncclBfloat16, ncclSum, comm, stream_);
    });
  }
  end_collective();
}

void NcclCommunicator::reduce_scatter(const bf16* in, bf16* out, size_t count) {
  begin_collective(Op::reduce_scatter, count);
  if (count == 0) return;
  if (options_.orders.reduce_scatter == ReduceOrder::fixed) {
    // All-to-all of blocks: peer q's block `rank` lands in staging block q; block `rank` of this
    // rank's own input is summed in place where it is.
    bf16* staging = staging_for(count);
    nccl_call("ncclSend/ncclRecv", [&](ncclComm_t comm) {
      return exchange_blocks(comm, in, staging, count, ncclBfloat16, sizeof(bf16), rank_, size_,
                             stream_);
    });
    std::vector<const bf16*> inputs(size_);
    for (int q = 0; q < size_; ++q) {
      const size_t block = static_cast<size_t>(q) * count;
      inputs[q] = q == rank_ ? in + block : staging + block;
    }
    // out may be in + rank*count (in place): each element is read before it is written.
    launch_fixed_sum(inputs, count, out);
  } else {
    nccl_call("ncclReduceScatter", [&](ncclComm_t comm) {
      return ncclReduceScatter(in, out, count, ncclBfloat16, ncclSum, comm, stream_);
    });
  }
  end_collective();
}

void NcclCommunicator::check_tree_size(const char* what) const {
  if (!tp_invariant_tp_ok(size_)) {
    throw std::invalid_argument(where() + ": " + what + " needs 1, 2, 4 or 8 ranks (the chunk " +
                                "tree of kernels tp_invariant), not " + std::to_string(size_));
  }
}

void NcclCommunicator::launch_tree_sum(const std::vector<const float*>& inputs, size_t count,
                                       bf16* out) {
  detail::TreeF32SumArgs args;
  std::copy(inputs.begin(), inputs.end(), args.inputs);
  args.ranks = size_;
  args.count = count;
  args.out = reinterpret_cast<uint16_t*>(out);
  try {
    detail::launch_tree_f32_sum(args, stream_);
  } catch (const std::exception& e) {
    abort_and_throw(where() + ": the tree sum of " + describe_latest() +
                    " failed to launch: " + e.what());
  }
}

void NcclCommunicator::all_reduce_tree_f32(const float* in, bf16* out, size_t count) {
  check_tree_size("all_reduce_tree_f32");
  begin_collective(Op::all_reduce_tree_f32, count);
  if (count == 0) return;
  // Every rank gathers every rank's fp32 buffer: staging [size][count] floats; then sums it.
  auto* staging = reinterpret_cast<float*>(staging_for(2 * count));
  nccl_call("ncclAllGather", [&](ncclComm_t comm) {
    return ncclAllGather(in, staging, count, ncclFloat32, comm, stream_);
  });
  std::vector<const float*> inputs(size_);
  for (int q = 0; q < size_; ++q) inputs[q] = staging + static_cast<size_t>(q) * count;
  launch_tree_sum(inputs, count, out);
  end_collective();
}

void NcclCommunicator::reduce_scatter_tree_f32(const float* in, bf16* out, size_t count) {
  check_tree_size("reduce_scatter_tree_f32");
  begin_collective(Op::reduce_scatter_tree_f32, count);
  if (count == 0) return;
  // All-to-all of fp32 blocks: peer q's block `rank` lands in staging block q; this rank's own
  // block is read where it is.
  auto* staging = reinterpret_cast<float*>(staging_for(2 * count));
  nccl_call("ncclSend/ncclRecv", [&](ncclComm_t comm) {
    return exchange_blocks(comm, in, staging, count, ncclFloat32, sizeof(float), rank_, size_,
                           stream_);
  });
  std::vector<const float*> inputs(size_);
  for (int q = 0; q < size_; ++q) {
    const size_t block = static_cast<size_t>(q) * count;
    inputs[q] = q == rank_ ? in + static_cast<size_t>(rank_) * count : staging + block;
  }
  launch_tree_sum(inputs, count, out);
  end_collective();
}

void NcclCommunicator::all_gather(const bf16* in, bf16* out, size_t count) {
  begin_collective(Op::all_gather, count);
  if (count == 0) return;
  nccl_call("ncclAllGather", [&](ncclComm_t comm) {
    return ncclAllGather(in, out, count, ncclBfloat16, comm, stream_);
  });
  end_collective();
}

#endif  // BIH_HAVE_NCCL

}  // namespace bih::cuda
