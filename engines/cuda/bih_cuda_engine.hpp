// bih_cuda_engine.hpp: registers the CUDA backend of bih's engine in the engine registry.
//
// Called once at startup by a build with CUDA. The engine it makes for a scenario: device weights
// (generated on the GPU from the seed, or copied from a loaded checkpoint), the communicators
// (EmulatedGpuGroup with every rank on GPU 0, or this process's NcclCommunicator on GPU `rank`),
// a CudaForward over them and the scheduler (models/engine.hpp).
#pragma once

namespace bih::cuda {

void register_cuda_backend();

}  // namespace bih::cuda
