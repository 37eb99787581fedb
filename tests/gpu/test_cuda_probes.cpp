// test_cuda_probes.cpp: every CUDA probe case (`bih probe backend=cuda`) on this GPU, as claimed.
//
// The CUDA cases are the CPU cases' twins (same ids, backend=cuda) plus qwen3-1.7b's shapes. With
// a GPU visible each must run and meet its claim: the invariant family and the row kernels
// invariant, vendor decode attention variant, the vendor GEMM as the split cuBLASLt picks predicts,
// the emulated-on-GPU collectives as DESIGN.md's order table says. Every result is printed, so the
// log is this GPU's probe table. The down projection (K=6144) is also swept past M=64, where
// cuBLASLt on H200 changes its split (splitK 3 at M=1, 2 at M=128): the vendor family must be
// caught there and the invariant one must not move.
#include <gtest/gtest.h>

#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "probes/cuda_probes.hpp"
#include "probes/probe.hpp"
#include "probes/probe_backend.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace bih::probe {
namespace {

// Installs the CUDA backend for one test, and removes it after.
struct CudaBackendInstalled {
  CudaBackendInstalled() { install_cuda_backend(); }
  ~CudaBackendInstalled() { set_cuda_backend({}); }
  CudaBackendInstalled(const CudaBackendInstalled&) = delete;
  CudaBackendInstalled& operator=(const CudaBackendInstalled&) = delete;
};

std::string describe(const Result& r) {
  return r.id + ": " + to_string(r.status) + " (claimed " + to_string(r.expect) + ") " + r.detail;
}

// Runs each case on its own, so that one that throws names itself and the others still run.
// Returns the failures: unsupported, not as claimed, or thrown.
std::vector<std::string> run_and_check(const std::vector<Case>& cases, const SweepOptions& options,
                                       std::vector<Result>& results) {
  std::vector<std::string> failures;
  for (const Case& c : cases) {
    try {
      const Result r = run_cases({c}, options).at(0);
      std::cout << "[probe] " << describe(r) << " [" << r.wall_s << " s]\n" << std::flush;
      if (r.status == Status::unsupported || !meets_expectation(r)) {
        failures.push_back(describe(r));
      }
      results.push_back(r);
    } catch (const std::exception& e) {
      failures.push_back(c.id(options) + ": threw: " + e.what());
    }
  }
  return failures;
}

std::string lines(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += "  " + s + "\n";
  return out;
}

TEST(CudaProbes, EveryCudaCaseRunsAndMeetsItsClaim) {
  BIH_SKIP_WITHOUT_GPU();
  const CudaBackendInstalled installed;
  const SweepOptions options;  // M = 1..64, first/middle/last rows, seed 0: `bih probe all`
  std::vector<Case> cases;
  for (Case& c : select_cases(all_cases(), {"backend=cuda"}, options)) {
    if (c.op != "nccl") cases.push_back(std::move(c));  // needs 2 GPUs: test_nccl_fingerprint
  }
  // Kernels: 2 families x (15 tiny + 13 qwen3-1.7b); collectives: 3 x 4 orders x 4 TP sizes.
  ASSERT_EQ(cases.size(), 2u * 28u + 48u);
  std::vector<Result> results;
  const std::vector<std::string> failures = run_and_check(cases, options, results);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << cases.size()
                                << " CUDA cases failed:\n"
                                << lines(failures);
  // The GPU cases catch what they claim to: vendor decode attention (both shapes), and the ring
  // and arrival orders of all_reduce and reduce_scatter at TP 3, 4 and 8.
  int caught = 0;
  for (const Result& r : results) {
    const bool decode_attention = r.op == "attention" &&
                                  r.id.find("family=vendor") != std::string::npos &&
                                  r.id.find("mode=decode") != std::string::npos;
    const bool ordered_sum = (r.op == "all_reduce" || r.op == "reduce_scatter") &&
                             r.id.find("tp=2,") == std::string::npos &&
                             (r.id.find("order=ring") != std::string::npos ||
                              r.id.find("order=arrival") != std::string::npos);
    if (decode_attention || ordered_sum) {
      EXPECT_EQ(r.status, Status::variant) << describe(r);
      ++caught;
    }
  }
  EXPECT_EQ(caught, 2 + 2 * 2 * 3);
}

TEST(CudaProbes, VendorDownProjectionIsCaughtWhereCuBlasLtChangesItsSplit) {
  BIH_SKIP_WITHOUT_GPU();
  const CudaBackendInstalled installed;
  SweepOptions options;
  options.batch_sizes = {1, 2, 7, 16, 63, 64, 65, 128, 256, 512};
  const std::vector<Case> cases =
      select_cases(all_cases(), {"gemm(*,n=2048,k=6144,*backend=cuda)"}, options);
  ASSERT_EQ(cases.size(), 2u);  // invariant, then vendor
  std::vector<Result> results;
  const std::vector<std::string> failures = run_and_check(cases, options, results);
  EXPECT_TRUE(failures.empty()) << lines(failures);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status, Status::invariant) << describe(results[0]);
  EXPECT_EQ(results[1].expect, Expect::variant) << describe(results[1]);
  EXPECT_EQ(results[1].status, Status::variant) << describe(results[1]);
  ASSERT_TRUE(results[1].first_difference.has_value()) << describe(results[1]);
  EXPECT_GT(results[1].first_difference->batch_size, 1);
}

}  // namespace
}  // namespace bih::probe
