// copy_bandwidth.hpp: the device's measured copy bandwidth, the floor every bandwidth figure of
// the CUDA benchmarks is a fraction of.
#pragma once

namespace bih::bench {

// Device-to-device copy bandwidth of the current GPU, bytes read + bytes written per second: the
// best of 5 copies of 2 GiB, measured once per process.
double copy_bandwidth();

}  // namespace bih::bench
