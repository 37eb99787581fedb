// environment.hpp: where a report was produced (host, CPU, OS, compiler, bih build, NCCL env, GPU).
//
// The core never includes a CUDA header, so the GPU fields start null and a CUDA leaf fills them
// through a provider hook registered at startup.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bih {

// {
//   "host": "node7",
//   "cpu": {"model": "AMD EPYC 9654 96-Core Processor" | null, "cores": 192},
//   "os": {"sysname": "Linux", "release": "6.8.0", "version": "#1 SMP ...", "machine": "x86_64"},
//   "compiler": "13.2.0",                           // __VERSION__ of the compiler that built bih
//   "bih": {"version": "0.1.0", "commit": "1474166abcde"},
//   "nccl_env": {"NCCL_ALGO": "allreduce:tree"},    // every NCCL_* variable of this process
//   "gpu": {"name": null, "count": null, "driver": null, "cuda_runtime": null,
//           "nccl_version": null, "cublas_version": null}
// }
nlohmann::json collect_environment();

// The GPU keys collect_environment() fills: name (string), count (integer), driver, cuda_runtime,
// nccl_version, cublas_version (strings).
const std::vector<std::string>& gpu_environment_keys();

// Registers the function that fills "gpu" (a CUDA leaf calls this at startup). It returns an
// object whose keys, each one of gpu_environment_keys(), replace the null defaults; a key outside
// that list makes collect_environment() throw std::logic_error (the report schema would reject
// it). An empty function unregisters.
void set_gpu_environment_provider(std::function<nlohmann::json()> provider);

}  // namespace bih
