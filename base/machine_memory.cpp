// machine_memory.cpp: available memory (machine_memory.hpp).
#include "base/machine_memory.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "base/errors.hpp"

namespace bih {
namespace {

// The override, or nullptr when unset or empty: the one place the variable is read.
const char* memory_override() {
  const char* text = std::getenv(kAvailableMemoryEnv);
  return text != nullptr && *text != '\0' ? text : nullptr;
}

}  // namespace

std::string available_memory_source() {
  return memory_override() != nullptr ? kAvailableMemoryEnv : "MemAvailable";
}

std::optional<uint64_t> available_memory_bytes() {
  if (const char* text = memory_override()) {
    const std::string value = text;
    const bool digits = value.find_first_not_of("0123456789") == std::string::npos;
    errno = 0;
    const unsigned long long bytes = digits ? std::strtoull(value.c_str(), nullptr, 10) : 0;
    if (!digits || errno == ERANGE || bytes == 0) {
      throw InputError(std::string("environment variable ") + kAvailableMemoryEnv + "=\"" +
                       value.substr(0, 40) +
                       "\": not a byte count; valid: a positive decimal integer of bytes (up to "
                       "2^64 - 1), or unset to use the machine's MemAvailable");
    }
    return static_cast<uint64_t>(bytes);
  }
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) return uint64_t{kb} * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) return static_cast<uint64_t>(pages) * page_size;
  return std::nullopt;
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000 && u < 6) {
    v /= 1000;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return text;
}

}  // namespace bih
