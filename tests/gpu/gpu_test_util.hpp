// gpu_test_util.hpp: the two things every GPU test needs: a clean skip without a GPU, and an
// owning device buffer to copy host vectors to and from.
//
// A skip is right on a laptop and wrong on the GPU machine: there "no GPU visible" or a CUDA
// error while looking for one means the check itself is broken, and a suite of skips would read
// as green. With BIH_REQUIRE_GPU=1 (ci/device-check.sh sets it) those become failures. A skip for
// "needs N GPUs" stays a skip: a smaller machine is a legitimate place to run the rest.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "models/bf16.hpp"
#include "models/cuda/device_info.hpp"

namespace bih::test {

// True when BIH_REQUIRE_GPU is set to 1: a missing GPU, CUDA or NCCL fails the test.
bool gpu_required();

// Why no GPU can be used ("no CUDA device visible", or the CUDA error that cudaGetDeviceCount
// returned); "" when at least one is visible.
std::string gpu_unavailable_reason();

// The current device's compute capability major (9 on Hopper); 0 where CUDA cannot say.
int compute_capability_major();

// n bf16 values uniform in [-scale, scale), seeded (splitmix64: fast enough for the 311M-element
// lm_head).
std::vector<bf16> random_bf16(size_t n, uint64_t seed, float scale);

// Owning device memory of n elements of T (cudaMalloc; no managed memory). Defined in
// gpu_test_util.cpp so that test files include no CUDA header.
void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void device_synchronize();

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n), p_(static_cast<T*>(device_alloc(n * sizeof(T)))) {}
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    copy_to_device(p_, host.data(), host.size() * sizeof(T));
  }
  ~DeviceBuffer() { device_free(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return p_; }
  size_t size() const { return n_; }
  // Elements [offset, offset + count) back to the host.
  std::vector<T> download(size_t offset, size_t count) const {
    std::vector<T> host(count);
    copy_to_host(host.data(), p_ + offset, count * sizeof(T));
    return host;
  }

 private:
  size_t n_;
  T* p_;
};

}  // namespace bih::test

// Skips the test for a missing prerequisite of the environment (a GPU, NCCL in the build), or
// fails it under BIH_REQUIRE_GPU=1.
#define BIH_SKIP_OR_FAIL(why)                                                                \
  do {                                                                                       \
    if (::bih::test::gpu_required()) {                                                       \
      GTEST_FAIL() << (why) << " (BIH_REQUIRE_GPU=1: this machine must run every GPU test)"; \
    }                                                                                        \
    GTEST_SKIP() << (why);                                                                   \
  } while (0)

// First statement of every GPU test.
#define BIH_SKIP_WITHOUT_GPU()                                             \
  do {                                                                     \
    const std::string bih_no_gpu_ = ::bih::test::gpu_unavailable_reason(); \
    if (!bih_no_gpu_.empty()) BIH_SKIP_OR_FAIL(bih_no_gpu_);               \
  } while (0)

// After BIH_SKIP_WITHOUT_GPU, for tests of the sm_90 kernels (the tensor copy engine instance):
// another GPU is a legitimate place to run the rest, so that is a skip even under
// BIH_REQUIRE_GPU=1; a GPU whose compute capability CUDA cannot read fails the test.
#define BIH_SKIP_UNLESS_SM90()                                                         \
  do {                                                                                 \
    const int bih_major_ = ::bih::test::compute_capability_major();                    \
    if (bih_major_ == 0) GTEST_FAIL() << "CUDA could not read the compute capability"; \
    if (bih_major_ != 9) {                                                             \
      GTEST_SKIP() << "the tensor copy engine instance is built for sm_90";            \
    }                                                                                  \
  } while (0)
