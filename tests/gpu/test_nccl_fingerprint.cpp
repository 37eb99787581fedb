// test_nccl_fingerprint.cpp: real NCCL's bf16 sums against the emulated order models.
//
// At n=2 every order model gives the same bits (one commutative add), so real NCCL must equal
// ring, tree and fixed at every position of every size; at n>=3 the claimed model must match.
// The rows via bih_fixed (NcclCommunicator's `fixed` order) must match the `fixed` model always.
// Skips unless this build has NCCL and the machine has at least 2 GPUs.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "models/cuda/device_info.hpp"
#include "tests/gpu/gpu_test_util.hpp"
#if defined(BIH_HAVE_NCCL)
#include "probes/nccl_fingerprint.hpp"
#endif

namespace {

TEST(NcclFingerprint, RealNcclMatchesTheEmulatedModelsBitwise) {
#if !defined(BIH_HAVE_NCCL)
  BIH_SKIP_OR_FAIL("this build has no NCCL");
#else
  BIH_SKIP_WITHOUT_GPU();
  const int gpus = bih::cuda::device_count();
  if (gpus < 2) GTEST_SKIP() << "needs at least 2 GPUs; found " << gpus;
  bih::nccl::FingerprintOptions options;
  options.count_multipliers = {1, 64, 4096, size_t{1} << 20};
  const bih::nccl::Fingerprint f = bih::nccl::run_fingerprint(options);
  std::cout << bih::nccl::render(f);
  ASSERT_TRUE(f.supported) << f.reason;
  EXPECT_EQ(f.gpus, gpus);
  EXPECT_EQ(f.nccl_env.at("NCCL_NVLS_ENABLE"), "0");
  // Per size: NCCL's all_reduce and reduce_scatter, then the same two via bih_fixed.
  ASSERT_EQ(f.entries.size(), 4 * options.count_multipliers.size());
  size_t fixed_rows = 0;
  for (const auto& e : f.entries) {
    if (e.via == "bih_fixed") {
      ++fixed_rows;
      EXPECT_EQ(e.claimed, std::vector<std::string>{"fixed"});
      EXPECT_EQ(e.matched_model, "fixed") << e.collective << " count " << e.count_per_rank;
    } else {
      EXPECT_EQ(e.via, "nccl");
    }
    EXPECT_EQ(e.positions, static_cast<size_t>(gpus) * (e.count_per_rank / gpus));
    EXPECT_TRUE(e.claim_met) << e.collective << " count " << e.count_per_rank;
    if (gpus == 2) {
      EXPECT_TRUE(f.orders_coincide);
      EXPECT_FALSE(f.validated);
      for (const auto& m : e.models) {
        EXPECT_EQ(m.positions_matched, e.positions)
            << e.collective << " count " << e.count_per_rank << " model " << m.model;
      }
    }
  }
  EXPECT_EQ(fixed_rows, 2 * options.count_multipliers.size());
  EXPECT_TRUE(f.claim_met());
  EXPECT_EQ(f.validated, gpus >= 3);
  if (gpus == 2) EXPECT_NE(bih::nccl::render(f).find("not validated"), std::string::npos);
#endif
}

TEST(NcclFingerprint, ClaimFollowsNcclAlgo) {
#if !defined(BIH_HAVE_NCCL)
  BIH_SKIP_OR_FAIL("this build has no NCCL");
#else
  using V = std::vector<std::string>;
  EXPECT_EQ(bih::nccl::claimed_all_reduce_models(""), (V{"ring", "tree"}));
  EXPECT_EQ(bih::nccl::claimed_all_reduce_models("Tree"), (V{"tree"}));
  EXPECT_EQ(bih::nccl::claimed_all_reduce_models("allreduce:ring"), (V{"ring"}));
  EXPECT_EQ(bih::nccl::claimed_all_reduce_models("^ring"), (V{"tree"}));
  EXPECT_EQ(bih::nccl::claimed_all_reduce_models("ring,tree"), (V{"ring", "tree"}));
#endif
}

}  // namespace
