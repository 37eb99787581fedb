// test_util.hpp: small helpers several test files share.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/errors.hpp"
#include "models/bf16.hpp"
#include "models/comm/communicator.hpp"

namespace bih::testing {

// The message of the InputError that `action` throws; a test failure (and "") if it throws nothing
// or something else.
inline std::string input_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected InputError, nothing was thrown";
  return "";
}

// n bf16 values of magnitudes 2^-6..2^6, so that summation order shows in the rounded result.
inline std::vector<bf16> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> exponent(-6, 6);
  std::vector<bf16> v(n);
  for (bf16& x : v) x = to_bf16(std::ldexp(normal(gen), exponent(gen)));
  return v;
}

// Each rank's buffer as a pointer, in rank order.
inline std::vector<const bf16*> pointers(const std::vector<std::vector<bf16>>& per_rank) {
  std::vector<const bf16*> p;
  for (const auto& v : per_rank) p.push_back(v.data());
  return p;
}

// Runs body(r) on one thread per rank r in 0..n-1. Returns each rank's failure: "" when it
// returned, "aborted: ..." for CommAborted, "error: ..." for anything else.
inline std::vector<std::string> run_rank_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const CommAborted& e) {
        failures[r] = std::string("aborted: ") + e.what();
      } catch (const std::exception& e) {
        failures[r] = std::string("error: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return failures;
}

}  // namespace bih::testing
