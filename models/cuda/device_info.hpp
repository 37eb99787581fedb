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

// Blocks of `kernel` one multiprocessor of the current device holds at `threads` a block and
// `dynamic_shared_bytes` (shared memory, threads and registers), asked of the runtime once per
// (kernel, threads, bytes, device) and remembered; at least 1. Safe inside a graph capture, as
// above. Throws where CUDA fails.
int blocks_per_multiprocessor(const void* kernel, int threads, size_t dynamic_shared_bytes);

// How a grid of `blocks` covers the current device at `per_multiprocessor` blocks each: in how
// many waves, and on how many multiprocessors its first wave runs. Launchers that choose among
// instances of a memory-bound kernel prefer the fewest waves (a wave more costs a whole block's
// stream), then the most multiprocessors (each streams its own share), then the deeper pipeline.
struct GridFit {
  long waves = 0;
  long multiprocessors = 0;
};
GridFit grid_fit(long blocks, int per_multiprocessor);

// A report's "gpu" section: device name and count, driver and runtime versions, and the NCCL and
// cuBLASLt versions this build links (keys of harness/environment.hpp's gpu_environment_keys()).
nlohmann::json gpu_environment();

}  // namespace bih::cuda
