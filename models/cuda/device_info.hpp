// device_info.hpp: what the CUDA leaf knows about the machine's GPUs, for reports and decisions.
//
// Plain C++ (no CUDA header): main registers gpu_environment() as the report environment's
// provider, and the driver asks it how many GPUs there are before it decides a scenario is
// `unsupported`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace bih::cuda {

// Visible CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();

// A report's "gpu" section: device name and count, driver and runtime versions, and the NCCL and
// cuBLASLt versions this build links (keys of harness/environment.hpp's gpu_environment_keys()).
nlohmann::json gpu_environment();

// How a host thread waits for `device` (cudaSetDeviceFlags' schedule): "auto" (CUDA's choice:
// spin while the process has fewer contexts than cores), "spin", "yield" or "blocking". Throws
// std::invalid_argument on another name, std::runtime_error on a CUDA error.
void set_host_wait(int device, const std::string& mode);

}  // namespace bih::cuda
