// tree_sum.hpp: the one fixed fp32 binary tree the tp_invariant family reduces K chunks with.
//
// kernels tp_invariant (DESIGN.md, "Kernel families") splits the K of every contraction into
// kTpInvariantChunks fixed chunks and combines their fp32 partials pairwise by global chunk index:
// ((c0+c1)+(c2+c3))+((c4+c5)+(c6+c7)). A rank of TP=t holds 8/t consecutive chunks, which form a
// whole subtree; the collective continues the same tree over the ranks' subtree sums. Because the
// GEMM (models/cpu/gemm.cpp) and the emulated communicator (models/comm/emulated.cpp) both call
// pairwise_tree_sum, the two halves of that tree cannot drift apart.
#pragma once

#include <stdexcept>
#include <string>

namespace bih {

// The largest TP size tp_invariant supports; every contraction's K is split into this many chunks.
inline constexpr int kTpInvariantChunks = 8;

// True for the TP sizes whose ranks hold whole subtrees of the chunk tree: 1, 2, 4, 8.
inline constexpr bool tp_invariant_tp_ok(int tp) {
  return tp >= 1 && tp <= kTpInvariantChunks && kTpInvariantChunks % tp == 0 &&
         (tp & (tp - 1)) == 0;
}

// Throws std::invalid_argument, prefixed by `who`, unless a contraction of K split into `chunks`
// local chunks is one a tp_invariant GEMM can run: chunks is 1, 2, 4 or 8 and divides K. Every
// backend's GEMM checks here, so they refuse the same shapes in the same words.
inline void check_tp_invariant_split(const char* who, int K, int chunks) {
  if (!tp_invariant_tp_ok(chunks)) {
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(chunks) +
                                " local chunks; a rank holds 1, 2, 4 or 8 of the " +
                                std::to_string(kTpInvariantChunks));
  }
  if (K % chunks != 0) {
    throw std::invalid_argument(std::string(who) + ": K=" + std::to_string(K) +
                                " does not split into " + std::to_string(chunks) +
                                " equal chunks (the full K of every contraction must be a "
                                "multiple of " +
                                std::to_string(kTpInvariantChunks) + ")");
  }
}

// Sums v[0..n) pairwise, level by level: (v0+v1), (v2+v3), ... then pairs of those, in place.
// n must be a power of two (1 returns v[0]). Plain IEEE fp32 adds, nothing reassociated.
inline float pairwise_tree_sum(float* v, int n) {
  for (int width = n; width > 1; width /= 2) {
    for (int i = 0; i < width / 2; ++i) v[i] = v[2 * i] + v[2 * i + 1];
  }
  return v[0];
}

}  // namespace bih
