// test_audit_bounds.cpp: the up-front KV budget against an injected available-memory figure
// ($BIH_AVAILABLE_MEMORY_BYTES), so that a test can put the machine exactly at the edge and prove
// the budget counts every TP rank (issue 20: counting one rank accepted a TP=4 plan reserving
// 21 GB on a 23 GiB machine).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/errors.hpp"
#include "base/machine_memory.hpp"
#include "models/config.hpp"
#include "models/forward.hpp"
#include "spec/engine_options.hpp"
#include "spec/scenario.hpp"
#include "test_util.hpp"

namespace bih::test_audit_bounds {
namespace {

using json = nlohmann::json;
using bih::testing::input_error_of;

// Sets the variable for one test and restores what was there.
class AuditBounds : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = getenv(kAvailableMemoryEnv)) saved_ = old;
  }
  void TearDown() override {
    if (saved_) {
      setenv(kAvailableMemoryEnv, saved_->c_str(), 1);
    } else {
      unsetenv(kAvailableMemoryEnv);
    }
  }
  static void set_available(uint64_t bytes) {
    setenv(kAvailableMemoryEnv, std::to_string(bytes).c_str(), 1);
  }
  std::optional<std::string> saved_;
};

TEST_F(AuditBounds, TheVariableReplacesTheMachinesFigure) {
  set_available(123456789);
  EXPECT_EQ(available_memory_bytes(), std::optional<uint64_t>(123456789));
  EXPECT_EQ(available_memory_source(), kAvailableMemoryEnv);
  setenv(kAvailableMemoryEnv, "", 1);  // empty: as unset
  EXPECT_EQ(available_memory_source(), "MemAvailable");
  for (const char* bad : {"0", "-5", "12GB", "1e9", " 7", "99999999999999999999999"}) {
    setenv(kAvailableMemoryEnv, bad, 1);
    const std::string message = input_error_of([] { available_memory_bytes(); });
    EXPECT_NE(message.find(kAvailableMemoryEnv), std::string::npos) << bad << ": " << message;
    EXPECT_NE(message.find("valid: a positive decimal integer"), std::string::npos) << message;
  }
}

// At tp 1, 2 and 4: a machine whose budget (half its memory) is one byte short of every rank's KV
// cache together refuses the plan, naming the field and the figure's source; one with exactly
// enough accepts it. One rank's share alone always fits, so a budget of one rank fails here.
TEST_F(AuditBounds, TheKvBudgetCountsEveryRank) {
  const ModelConfig c = *preset_config("tiny");
  for (const int tp : {1, 2, 4}) {
    const json j = {{"parallel", {{"tp", tp}}},
                    {"plan", {{"max_model_len", 4096}, {"max_num_seqs", 64}}}};
    unsetenv(kAvailableMemoryEnv);
    const Scenario s = scenario_from_json(j, "mem.json");
    const uint64_t per_rank =
        kv_cache_bytes_per_rank(engine_options(s), c.num_layers, c.num_kv_heads / tp, c.head_dim);
    const uint64_t total = per_rank * static_cast<uint64_t>(tp);
    ASSERT_GT(per_rank, 0u);

    set_available(2 * total);  // budget = total exactly
    EXPECT_NO_THROW(scenario_from_json(j, "mem.json")) << "tp " << tp;

    set_available(2 * total - 2);  // budget = total - 1
    const std::string message = input_error_of([&] { scenario_from_json(j, "mem.json"); });
    EXPECT_EQ(message.rfind("mem.json: at /plan/max_model_len:", 0), 0u) << message;
    EXPECT_NE(message.find(std::to_string(total) + " bytes"), std::string::npos)
        << "tp " << tp << ": " << message;
    EXPECT_NE(message.find(kAvailableMemoryEnv), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace bih::test_audit_bounds
