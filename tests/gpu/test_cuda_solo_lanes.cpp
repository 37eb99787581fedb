// plan.solo_lanes on the CUDA backend: the bs=1 generation on 3 engines in one worker process
// (each with its own emulated ranks, streams and graphs on the one GPU) gives, prompt by prompt,
// the bits one engine gives, in every graph mode; the verdicts stay as expected.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../cpu/run_bih.hpp"
#include "gpu_test_util.hpp"
#include "harness/generation.hpp"
#include "spec/scenario_file.hpp"

namespace bih {
namespace {

Generation solo_dump(const std::filesystem::path& out) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(out)) {
    if (entry.path().filename() == "gen-bs_1.json") {
      return generation_from_json(read_json_file(entry.path().string()), entry.path().string());
    }
  }
  ADD_FAILURE() << "no bs=1 dump under " << out;
  return {};
}

class CudaSoloLanes : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaSoloLanes, GiveTheBitsOfOneEngine) {
  BIH_SKIP_WITHOUT_GPU();
  const std::string mode = GetParam();
  std::vector<Generation> solo;
  for (const int lanes : {1, 3}) {
    const auto dir = testing::fresh_dir("cuda-lanes-" + mode + "-" + std::to_string(lanes));
    std::ofstream(dir / "s.json") << R"({"model": {"preset": "tiny"}, "backend": "cuda",
      "parallel": {"tp": 2, "ranks": "emulated"}, "sequence_parallel": {"enabled": true},
      "collectives": {"reduce_scatter": "fixed"}, "cudagraph": {"mode": ")"
                                  << mode << R"("},
      "plan": {"prompts": {"count": 7, "min_len": 4, "max_len": 20}, "max_tokens": 6,
               "batch_sizes": [1, 7], "repeats": 2, "solo_lanes": )"
                                  << lanes << R"(}, "expect": "invariant"})";
    const auto r = testing::run_bih(
        {"run", (dir / "s.json").string(), "--out", (dir / "out").string(), "--keep-work"});
    ASSERT_EQ(r.exit_code, 0) << mode << ", " << lanes << " lanes: " << r.output;
    solo.push_back(solo_dump(dir / "out"));
  }
  ASSERT_EQ(solo[0].sequences.size(), 7u);
  ASSERT_EQ(solo[1].sequences.size(), 7u);
  EXPECT_EQ(solo[1].solo_lanes, 3);
  for (size_t i = 0; i < 7; ++i) {
    const SequenceOutput& a = solo[0].sequences[i];
    const SequenceOutput& b = solo[1].sequences[i];
    EXPECT_EQ(a.prompt, b.prompt) << "prompt " << i;
    EXPECT_EQ(a.tokens, b.tokens) << "prompt " << i;
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    EXPECT_EQ(std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * sizeof(float)),
              0)
        << "prompt " << i << ": the logprobs' bits differ";
  }
}

INSTANTIATE_TEST_SUITE_P(GraphModes, CudaSoloLanes, ::testing::Values("none", "piecewise", "full"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace bih
