// content_hash.hpp: a digest of a file's bytes, to tell whether a file is still the one written.
//
// Not cryptographic: it catches a changed, truncated or replaced file (a damaged cache entry, an
// edited export), not an adversary who crafts a collision. Digest: h = 0x6a09e667f3bcc908; per
// 8-byte little-endian word w of the content (the last one zero-padded): h ^= w; h *=
// 0x100000001b3; h ^= h >> 32; then the same step with the byte count; output "fnv64w:" and
// splitmix64's finalizer of h as 16 lower-case hex digits.
#pragma once

#include <cstdint>
#include <string>

namespace bih {

struct FileDigest {
  uint64_t bytes = 0;
  std::string hash;  // "fnv64w:<16 hex digits>"
};

// Reads the whole file. Throws InfraError naming the file when it cannot be read.
FileDigest digest_file(const std::string& path);

// The same digest of bytes in memory.
std::string digest_bytes(const std::string& bytes);

}  // namespace bih
