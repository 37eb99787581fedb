// communicator.hpp: the collectives tensor parallelism needs, as one interface.
//
// One Communicator object per rank. Every rank of a group must call the same collectives in the
// same order with the same counts. Implementations differ in *summation order* (DESIGN.md,
// "Collectives and their summation order"); the interface says nothing about it.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "models/bf16.hpp"

namespace bih {

// Thrown by a collective when the group was aborted (a peer failed or the watchdog fired).
class CommAborted : public std::runtime_error {
 public:
  explicit CommAborted(const std::string& why) : std::runtime_error(why) {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[count] on every rank becomes the elementwise sum over ranks.
  virtual void all_reduce(bf16* data, size_t count) = 0;
  // in[size()*count] -> out[count]: rank r receives the sum over ranks of block r of their input.
  virtual void reduce_scatter(const bf16* in, bf16* out, size_t count) = 0;
  // in[count] -> out[size()*count]: block r of out is rank r's input.
  virtual void all_gather(const bf16* in, bf16* out, size_t count) = 0;

  // The tp_invariant family's collectives (models/tree_sum.hpp): each rank brings unrounded fp32
  // partials, every element is summed by pairwise_tree_sum over the ranks in rank order
  // ((r0+r1)+(r2+r3))+..., then rounded to bf16 once. size() must be 1, 2, 4 or 8. The
  // collectives.* order knobs do not apply: the order is the chunk tree's, always.
  // in[count] on every rank -> out[count] (bf16) on every rank.
  virtual void all_reduce_tree_f32(const float* in, bf16* out, size_t count);
  // in[size()*count] -> out[count]: rank r receives the tree sum of block r of every rank's input.
  virtual void reduce_scatter_tree_f32(const float* in, bf16* out, size_t count);

  // Wakes every rank blocked in a collective with CommAborted; later calls throw too.
  virtual void abort(const std::string& why) = 0;
  // "emulated(ar=tree,rs=ring,ag=ring)", plus ",ring=0-2-1-3" for a non-identity ring
  virtual std::string describe() const = 0;
};

// Every communicator in bih implements them (the CPU and GPU emulations, NCCL); one that does not
// refuses them by name rather than summing in another order.
inline void Communicator::all_reduce_tree_f32(const float*, bf16*, size_t) {
  throw std::logic_error(
      describe() + ": all_reduce_tree_f32 is not implemented (kernels tp_invariant needs it)");
}
inline void Communicator::reduce_scatter_tree_f32(const float*, bf16*, size_t) {
  throw std::logic_error(
      describe() + ": reduce_scatter_tree_f32 is not implemented (kernels tp_invariant needs it)");
}

}  // namespace bih
