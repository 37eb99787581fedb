// device_info.hpp: what the CUDA leaf knows about the machine's GPUs, for reports and decisions.
//
// Plain C++ (no CUDA header): main registers gpu_environment() as the report environment's
// provider, and the driver asks it how many GPUs there are before it decides a scenario is
// `unsupported`.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>

namespace bih::cuda {

// Visible CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();

// The current device's multiprocessors, queried once per device (launchers size grids by it on
// every launch). Throws where CUDA fails.
int multiprocessor_count();

// Lets `kernel` (a __global__ function's address) launch with `bytes` of dynamic shared memory on
// the current device: past the 48 KiB default that takes an opt-in per device and kernel, made once
// per size increase (the call synchronizes the runtime, so not on every launch). Safe inside a
// caller's graph capture: the attribute is no stream work, so this thread's capture mode is
// relaxed around the call, then restored. Throws where CUDA fails.
void allow_dynamic_shared_memory(const void* kernel, size_t bytes);

// A report's "gpu" section: device name and count, driver and runtime versions, and the NCCL and
// cuBLASLt versions this build links (keys of harness/environment.hpp's gpu_environment_keys()).
nlohmann::json gpu_environment();

}  // namespace bih::cuda
