// device_info.hpp: what the CUDA leaf knows about the machine's GPUs, for reports and decisions.
//
// Plain C++ (no CUDA header): the harness calls it through the environment provider hook, and the
// driver asks it how many GPUs there are before it decides a scenario is `unsupported`.
#pragma once

namespace bih::cuda {

// Visible CUDA devices; 0 when there is no driver or no device (never throws).
int device_count();

// Registers the environment provider that fills a report's "gpu" section: device name and count,
// driver and runtime versions, and the NCCL and cuBLASLt versions this build links.
void register_environment_provider();

}  // namespace bih::cuda
