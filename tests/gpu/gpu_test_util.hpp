// gpu_test_util.hpp: what every GPU test needs first: skip cleanly on a machine without a GPU
// (CI compiles and runs the GPU suites on machines that have none).
#pragma once

#include <gtest/gtest.h>

#include "models/cuda/device_info.hpp"

// Ends the current test as skipped when no CUDA device is visible. First statement of a GPU test.
#define BIH_SKIP_WITHOUT_GPU()                                              \
  do {                                                                      \
    if (::bih::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
