// fuzz_input.hpp: what every libFuzzer target in fuzz/ shares.
//
// The readers under test take a file path (that is how bih meets their input), so a target writes
// each input to one temporary file per process and hands over its path. `rejects` runs a reader
// and swallows only what a reader may throw for bad input: InputError, InfraError and
// ProtocolError (and nlohmann's parse_error where the API parses raw text itself). Anything else
// (another exception, a sanitizer report, a hang) escapes and libFuzzer records it as a crash.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/errors.hpp"
#include "engines/engine_protocol.hpp"

namespace bih::fuzz {

// The temp file this process reuses for every input: the pid keeps parallel jobs (-jobs=N)
// apart, and /dev/shm keeps the writes off the disk where it exists.
inline const std::string& temp_path(const char* suffix) {
  static const std::string path = [suffix] {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/bih-fuzz-" + std::to_string(getpid()) + suffix;
  }();
  return path;
}

// Writes the input to the temp file and returns its path.
inline const std::string& write_input(const uint8_t* data, size_t size, const char* suffix) {
  const std::string& path = temp_path(suffix);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) std::abort();  // the harness itself failed, not the reader
  return path;
}

// Runs `fn`, treating the documented rejections as a normal outcome.
template <class Fn>
void rejects(Fn&& fn) {
  try {
    fn();
  } catch (const InputError&) {
  } catch (const InfraError&) {
  } catch (const protocol::ProtocolError&) {
  } catch (const nlohmann::json::parse_error&) {
  }
}

}  // namespace bih::fuzz
