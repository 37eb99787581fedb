// shared_limit.hpp: lets a kernel use more than 48 KiB of dynamic shared memory.
//
// The opt-in limit is an attribute of a kernel on one device, so a process that drives several
// devices (NCCL ranks in threads) must raise it on each; this does so once per (kernel, device).
#pragma once

#include <cstddef>

namespace bih::cuda {

// sm_90's opt-in dynamic shared memory per block (227 KiB).
inline constexpr size_t kMaxDynamicSharedBytes = 227 * 1024;

// Before launching `kernel` (a __global__ function's address) on the current device with up to
// kMaxDynamicSharedBytes of dynamic shared memory. Thread-safe; throws std::runtime_error
// (file:line) if CUDA refuses.
void allow_max_dynamic_shared(const void* kernel);

}  // namespace bih::cuda
