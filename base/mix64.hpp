// mix64.hpp: splitmix64's finalizer, the one 64-bit mixer behind bih's documented streams and
// digests (synthetic weights, prompts, prefix-cache block hashes, file digests).
#pragma once

#include <cstdint>

namespace bih {

constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace bih
