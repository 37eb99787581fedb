// gpu_test_util.hpp: the two things every GPU test needs: a clean skip without a GPU, and an
// owning device buffer to copy host vectors to and from.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "models/cuda/device_info.hpp"

namespace bih::test {

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

// First statement of every GPU test.
#define BIH_SKIP_WITHOUT_GPU()                                              \
  do {                                                                      \
    if (::bih::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
