// machine_memory.hpp: how much memory this machine can give a run, for the plan's size bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace bih {

// The environment variable that replaces the machine's figure (tests of the size bounds, or a
// user who wants bih to plan for less than the whole machine): a positive decimal byte count.
inline constexpr const char* kAvailableMemoryEnv = "BIH_AVAILABLE_MEMORY_BYTES";

// $BIH_AVAILABLE_MEMORY_BYTES when set and not empty; else MemAvailable from /proc/meminfo (what
// the kernel can hand out without swapping), else free physical pages from sysconf; nothing when
// none can be read. Throws InputError naming the variable for a value that is not a positive
// decimal integer.
std::optional<uint64_t> available_memory_bytes();

// Where available_memory_bytes() takes its figure from, for messages: "BIH_AVAILABLE_MEMORY_BYTES"
// or "MemAvailable".
std::string available_memory_source();

// "10.7 GB": bytes for a message, in decimal units as free(1) -h and the kernel docs print them.
std::string format_bytes(uint64_t bytes);

}  // namespace bih
