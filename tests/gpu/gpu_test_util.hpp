// gpu_test_util.hpp: what every GPU test needs first: skip cleanly on a machine without a GPU.
#pragma once

#include <gtest/gtest.h>

#include "models/cuda/device_info.hpp"

// Ends the current test as skipped when no CUDA device is visible (CI builds but has no GPU).
#define BIH_SKIP_WITHOUT_GPU()                                              \
  do {                                                                      \
    if (::bih::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
