// test_files.hpp: the source tree's path, the files tests write and read back, and whether a
// process they started still runs.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace bih::testing {

// The source tree (fixtures, scripts, shipped scenarios), as CMake passed it.
inline const std::string kSource = BIH_SOURCE_DIR;

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The whole file; "" when it cannot be read.
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A process that still runs: /proc/<pid> exists and is not a zombie.
inline bool alive(pid_t pid) {
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

}  // namespace bih::testing
