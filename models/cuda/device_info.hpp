// device_info.hpp: what the CUDA leaf knows about the machine's GPUs, for reports and decisions.
//
// Plain C++ (no CUDA header): main registers gpu_environment() as the report environment's
// provider, and the driver asks it how many GPUs there are before it decides a scenario is
// `unsupported`.
#pragma once

#include <nlohmann/json.hpp>

namespace bih::cuda {

// Visible CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();

// The current device's multiprocessors, queried once per device (launchers size grids by it on
// every launch). Throws where CUDA fails.
int multiprocessor_count();

// A report's "gpu" section: device name and count, driver and runtime versions, and the NCCL and
// cuBLASLt versions this build links (keys of harness/environment.hpp's gpu_environment_keys()).
nlohmann::json gpu_environment();

}  // namespace bih::cuda
