// emulated.hpp: a tensor-parallel group whose ranks are threads of one process.
//
// EmulatedGroup owns one Communicator per rank; rank r's thread calls rank(r)'s collectives. A
// collective is the two barriers of rendezvous.hpp: each rank publishes its buffers and waits
// (barrier 1), computes its own share of the result from every rank's input with the order model
// of reduce_order.hpp, and waits again (barrier 2) so that no input is overwritten while a peer
// still reads it. The sums
// are therefore bitwise those of the pure functions, except for `arrival`, whose chain is the order
// in which ranks reached barrier 1 (each rank first sleeps a random few microseconds, so the order
// varies from call to call and run to run, as a timing-dependent reduction does). The fp32 tree
// collectives of kernels tp_invariant (communicator.hpp) sum with tree_f32_sum, whatever the
// orders say.
//
// A failure must not hang the peers: abort(why) wakes every waiting rank with CommAborted(why) and
// every later call throws too; an optional watchdog aborts a collective that waits too long,
// naming the collective and the ranks that never arrived.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/comm/communicator.hpp"
#include "models/comm/reduce_order.hpp"
#include "models/comm/rendezvous.hpp"

namespace bih {

class EmulatedGroup {
 public:
  // size: ranks (1..kMaxRanks). ring_order: ring position -> rank, empty for 0..size-1.
  // watchdog: longest a rank may wait at a barrier before the group aborts; zero waits forever.
  // Throws std::invalid_argument for a bad size or ring order.
  EmulatedGroup(int size, CollectiveOrders orders, std::vector<int> ring_order = {},
                std::chrono::milliseconds watchdog = std::chrono::milliseconds::zero());
  ~EmulatedGroup();
  EmulatedGroup(const EmulatedGroup&) = delete;
  EmulatedGroup& operator=(const EmulatedGroup&) = delete;

  // Rank r's communicator, to be used from rank r's thread only.
  Communicator& rank(int r);
  int size() const { return size_; }
  const CollectiveOrders& orders() const { return orders_; }
  const std::vector<int>& ring_order() const { return ring_order_; }  // always size() entries

  // Aborts the group: waiting ranks wake with CommAborted(why); later collectives throw it too.
  // The first reason wins. Safe from any thread.
  void abort(const std::string& why);
  bool aborted() const;

  // "emulated(ar=tree,rs=ring,ag=ring)", plus ",ring=0-2-1-3" when the ring is not 0..size-1.
  std::string describe() const;

 private:
  class Rank;

  void all_reduce(int rank, bf16* data, size_t count);
  void reduce_scatter(int rank, const bf16* in, bf16* out, size_t count);
  void all_gather(int rank, const bf16* in, bf16* out, size_t count);
  void all_reduce_tree_f32(int rank, const float* in, bf16* out, size_t count);
  void reduce_scatter_tree_f32(int rank, const float* in, bf16* out, size_t count);
  void tree_f32_collective(int rank, CollectiveOp op, const char* name, const float* in, bf16* out,
                           size_t offset, size_t count);

  const int size_;
  const CollectiveOrders orders_;
  const std::vector<int> ring_order_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  // all_reduce results, [count]: rank r computes slice r, then every rank copies it all. One
  // buffer suffices: call k+1 resizes or writes it only after every rank reached call k+1's
  // barrier 1, that is after every rank finished copying call k's result.
  std::vector<bf16> scratch_;
  Rendezvous rendezvous_;  // after scratch_: its completion hook sizes scratch_
};

}  // namespace bih
