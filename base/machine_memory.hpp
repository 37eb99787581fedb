// machine_memory.hpp: how much memory this machine can give a run, for the plan's size bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace bih {

// MemAvailable from /proc/meminfo (what the kernel can hand out without swapping), else
// free physical pages from sysconf; nothing when neither can be read.
std::optional<uint64_t> available_memory_bytes();

// "10.7 GB": bytes for a message, in decimal units as free(1) -h and the kernel docs print them.
std::string format_bytes(uint64_t bytes);

}  // namespace bih
