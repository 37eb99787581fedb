// gpu_test_util.hpp: the one check every GPU test starts with: skip cleanly on a machine without a
// CUDA device (CI compiles and runs the GPU suites on machines that have none).
#pragma once

#include <gtest/gtest.h>

#include "models/cuda/device_info.hpp"

// Use as the first statement of a GPU test body.
#define BIH_SKIP_WITHOUT_CUDA_DEVICE()    \
  if (::bih::cuda::device_count() == 0) { \
    GTEST_SKIP() << "no CUDA device";     \
  }                                       \
  static_assert(true, "require a semicolon after the macro")
