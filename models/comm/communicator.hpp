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

  // Wakes every rank blocked in a collective with CommAborted; later calls throw too.
  virtual void abort(const std::string& why) = 0;
  // "emulated(ar=tree,rs=ring,ag=ring)", plus ",ring=0-2-1-3" for a non-identity ring
  virtual std::string describe() const = 0;
};

}  // namespace bih
