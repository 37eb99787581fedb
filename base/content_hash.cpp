// content_hash.cpp: the word-wise FNV digest of content_hash.hpp, read in 1 MiB blocks.
#include "base/content_hash.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "base/errors.hpp"
#include "base/mix64.hpp"

namespace bih {
namespace {

class Digest {
 public:
  void add(const unsigned char* p, size_t n) {
    bytes_ += n;
    size_t i = 0;
    for (; i < n && fill_ > 0; ++i) {  // complete a word left open by the last block
      word_ |= uint64_t{p[i]} << (8 * fill_);
      if (++fill_ == 8) flush();
    }
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);  // little-endian host (as the GGUF and safetensors code)
      absorb(w);
    }
    for (; i < n; ++i) word_ |= uint64_t{p[i]} << (8 * fill_++);
  }
  std::string finish() {
    if (fill_ > 0) flush();
    absorb(bytes_);
    const uint64_t z = mix64(h_);
    char text[17];
    static const char* hex = "0123456789abcdef";
    for (int i = 0; i < 16; ++i) text[i] = hex[(z >> (60 - 4 * i)) & 0xf];
    text[16] = '\0';
    return std::string("fnv64w:") + text;
  }
  uint64_t bytes() const { return bytes_; }

 private:
  void absorb(uint64_t w) {
    h_ ^= w;
    h_ *= 0x100000001b3ull;
    h_ ^= h_ >> 32;
  }
  void flush() {
    absorb(word_);
    word_ = 0;
    fill_ = 0;
  }
  uint64_t h_ = 0x6a09e667f3bcc908ull;
  uint64_t word_ = 0;
  int fill_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace

FileDigest digest_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InfraError("cannot read " + path + ": " + std::strerror(errno));
  Digest d;
  std::vector<unsigned char> block(1 << 20);
  while (true) {
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      throw InfraError("cannot read " + path + ": " + std::strerror(error));
    }
    if (n == 0) break;
    d.add(block.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  FileDigest out;
  out.bytes = d.bytes();
  out.hash = d.finish();
  return out;
}

std::string digest_bytes(const std::string& bytes) {
  Digest d;
  d.add(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return d.finish();
}

}  // namespace bih
