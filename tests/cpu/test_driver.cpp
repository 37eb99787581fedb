// The driver's contract with users: a crashed, aborted or hung worker becomes an `error` verdict
// with its reason and the run goes on; bad input exits 2 naming file, pointer and the fix.
#include <gtest/gtest.h>

#include <fstream>

#include "run_bih.hpp"
#include "spec/scenario_file.hpp"
#include "test_files.hpp"

namespace bih::test_driver {
namespace {

using testing::write_text;

// A small, fast plan: 4 prompts, 4 tokens.
constexpr const char* kSmallBase = R"({
  "model": {"preset": "tiny"}, "parallel": {"tp": 2},
  "plan": {"prompts": {"count": 4, "min_len": 8, "max_len": 12}, "max_tokens": 4,
           "batch_sizes": [1, 4], "repeats": 2})";
// The same without "parallel", for tests that set it: a key twice in one object is refused.
constexpr const char* kSmallBaseAnyTp = R"({
  "model": {"preset": "tiny"},
  "plan": {"prompts": {"count": 4, "min_len": 8, "max_len": 12}, "max_tokens": 4,
           "batch_sizes": [1, 4], "repeats": 2})";

nlohmann::json report_by_fault(const std::filesystem::path& dir, const std::string& fault) {
  for (const auto& f : testing::report_files(dir)) {
    nlohmann::json r = read_json_file(f.string());
    if (r.at("scenario").at("debug").at("fault") == fault) return r;
  }
  return nullptr;
}

TEST(Driver, CrashedWorkerIsAnErrorAndTheRunGoesOn) {
  const auto dir = testing::fresh_dir("driver-crash");
  write_text(dir / "m.json", std::string(R"({"base": )") + kSmallBase + R"(},
    "cases": [{"debug.fault": "crash", "name": "crash"}, {"debug.fault": "abort", "name": "abort"},
              {"debug.fault": "exit", "name": "exit"}, {"name": "healthy"}]})");
  const auto r =
      testing::run_bih({"run", (dir / "m.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  const auto crash = report_by_fault(dir / "out", "crash");
  ASSERT_FALSE(crash.is_null()) << r.output;
  EXPECT_EQ(crash.at("verdict"), "error");
  EXPECT_NE(crash.at("reason").get<std::string>().find("signal 11"), std::string::npos)
      << crash.at("reason");
  const auto abort = report_by_fault(dir / "out", "abort");
  EXPECT_NE(abort.at("reason").get<std::string>().find("signal 6"), std::string::npos);
  // The worker says where it died (base/fatal_signal): the signal and its frames.
  const std::string abort_reason = abort.at("reason").get<std::string>();
  EXPECT_NE(abort_reason.find("bih worker: fatal signal 6 (ABRT)"), std::string::npos)
      << abort_reason;
  EXPECT_NE(abort_reason.find("libc.so.6(abort+0x"), std::string::npos)
      << "the frames name the call that raised it: " << abort_reason;
  EXPECT_NE(abort_reason.find("/bih("), std::string::npos)
      << "and the frames in bih that made it: " << abort_reason;
  const auto exit = report_by_fault(dir / "out", "exit");
  EXPECT_NE(exit.at("reason").get<std::string>().find("status 7"), std::string::npos);
  EXPECT_NE(exit.at("reason").get<std::string>().find("debug.fault=exit"), std::string::npos)
      << "the stderr tail belongs in the reason";
  const auto healthy = report_by_fault(dir / "out", "none");
  ASSERT_FALSE(healthy.is_null());
  EXPECT_EQ(healthy.at("verdict"), "invariant");
  EXPECT_EQ(testing::report_files(dir / "out").size(), 4u);
}

TEST(Driver, HungWorkerTimesOutIntoAnError) {
  const auto dir = testing::fresh_dir("driver-hang");
  write_text(dir / "s.json",
             std::string(kSmallBase) + R"(, "timeout_s": 2, "debug": {"fault": "hang"}})");
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  const auto report = report_by_fault(dir / "out", "hang");
  ASSERT_FALSE(report.is_null()) << r.output;
  EXPECT_EQ(report.at("verdict"), "error");
  EXPECT_NE(report.at("reason").get<std::string>().find("timed out"), std::string::npos);
}

TEST(Driver, FreshProcessRunIsCompared) {
  const auto dir = testing::fresh_dir("driver-fresh");
  write_text(dir / "s.json", std::string(kSmallBase) + R"(})");
  const auto r = testing::run_bih({"run", (dir / "s.json").string(), "--set",
                                   "plan.fresh_process=true", "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto files = testing::report_files(dir / "out");
  ASSERT_EQ(files.size(), 1u);
  const auto report = read_json_file(files[0].string());
  ASSERT_EQ(report.at("comparisons").size(), 3u);
  EXPECT_EQ(report.at("comparisons")[2].at("kind"), "fresh");
  EXPECT_EQ(report.at("comparisons")[2].at("logprobs_differ"), 0);
}

TEST(Driver, UnsupportedIsNeverEmulatedSilently) {
  const auto dir = testing::fresh_dir("driver-unsupported");
  write_text(dir / "s.json", std::string(kSmallBaseAnyTp) +
                                 R"(, "backend": "cuda", "parallel": {"tp": 2, "ranks": "nccl"},
                                    "expect": "unsupported"})");
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto files = testing::report_files(dir / "out");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(read_json_file(files[0].string()).at("verdict"), "unsupported");
}

// A cuda scenario on a machine that cannot run it answers `unsupported` with the reason, and a
// claim it cannot check is not a failure (exit 0); where a GPU is present it really runs there.
TEST(Driver, CudaScenarioRunsOnTheGpuOrIsUnsupportedWithTheReason) {
  const auto dir = testing::fresh_dir("driver-cuda");
  write_text(dir / "s.json",
             std::string(kSmallBase) + R"(, "backend": "cuda", "expect": "invariant"})");
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto files = testing::report_files(dir / "out");
  ASSERT_EQ(files.size(), 1u);
  const auto report = read_json_file(files[0].string());
  if (report.at("verdict") == "unsupported") {
    const std::string reason = report.at("reason");
    EXPECT_NE(reason.find(BIH_BINARY_HAS_CUDA ? "no CUDA GPU is visible" : "built without CUDA"),
              std::string::npos)
        << reason;
    EXPECT_FALSE(report.contains("engine"));
    EXPECT_NE(r.output.find("0 not as expected"), std::string::npos) << r.output;
  } else {
    EXPECT_EQ(report.at("verdict"), "invariant");
    EXPECT_EQ(report.at("engine").at("backend").get<std::string>().rfind("cuda(", 0), 0u);
  }
}

TEST(Driver, AutoBackendRunsWhereItCanAndSaysWhere) {
  const auto dir = testing::fresh_dir("driver-auto");
  write_text(dir / "s.json", std::string(kSmallBase) + R"(, "backend": "auto"})");
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto files = testing::report_files(dir / "out");
  ASSERT_EQ(files.size(), 1u);
  const auto report = read_json_file(files[0].string());
  EXPECT_EQ(report.at("verdict"), "invariant");
  const std::string backend = report.at("engine").at("backend");
  // cpu where no GPU is visible (or no CUDA backend was built), the GPU's name otherwise.
  EXPECT_TRUE(backend == "cpu" || (BIH_BINARY_HAS_CUDA && backend.rfind("cuda(", 0) == 0))
      << backend;
}

TEST(Driver, ReportNamesTheBackendAndCommunicatorThatRan) {
  const auto dir = testing::fresh_dir("driver-engine");
  write_text(dir / "s.json", std::string(kSmallBase) + "}");
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto files = testing::report_files(dir / "out");
  ASSERT_EQ(files.size(), 1u);
  const auto engine = read_json_file(files[0].string()).at("engine");
  EXPECT_EQ(engine.at("backend"), "cpu");
  EXPECT_EQ(engine.at("communicator"), "emulated(ar=tree,rs=ring,ag=ring)");
  EXPECT_FALSE(engine.contains("nccl_env"));
}

TEST(Driver, UnknownKeyExitsTwoNamingFilePointerAndSuggestion) {
  const auto dir = testing::fresh_dir("driver-badkey");
  write_text(dir / "bad.json", R"({"kernals": "invariant"})");
  const auto r =
      testing::run_bih({"run", (dir / "bad.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("bad.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/kernals"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kernels"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "out")) << "nothing half-written on bad input";
}

TEST(Driver, ImpossibleTpExitsTwo) {
  const auto dir = testing::fresh_dir("driver-badtp");
  write_text(dir / "bad.json", R"({"parallel": {"tp": 3}})");
  const auto r =
      testing::run_bih({"run", (dir / "bad.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/parallel/tp"), std::string::npos) << r.output;
}

TEST(Driver, DiffOfTwoDumpsReportsCounts) {
  const auto dir = testing::fresh_dir("driver-diff");
  write_text(dir / "s.json",
             std::string(kSmallBaseAnyTp) + R"(, "parallel": {"tp": 1}, "kernels": "vendor"})");
  const auto r = testing::run_bih(
      {"run", (dir / "s.json").string(), "--keep-work", "--out", (dir / "out").string()});
  std::vector<std::filesystem::path> dumps;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "out" / "work")) {
    if (e.path().filename().string().rfind("gen-", 0) == 0) dumps.push_back(e.path());
  }
  std::sort(dumps.begin(), dumps.end());
  ASSERT_EQ(dumps.size(), 3u) << r.output;  // bs=1, bs=4, bs=4#2
  const auto reports = testing::report_files(dir / "out");
  ASSERT_EQ(reports.size(), 1u);
  const auto batch = read_json_file(reports[0].string()).at("comparisons").at(0);
  const int differ = batch.at("logprobs_differ").get<int>();
  // bih diff of the bs=1 and bs=4 dumps says what the report's batch comparison says.
  const auto d = testing::run_bih({"diff", dumps[0].string(), dumps[1].string()});
  EXPECT_EQ(d.exit_code, differ > 0 ? 1 : 0) << d.output;
  EXPECT_NE(d.output.find(std::to_string(differ) + "/16 logprobs differ"), std::string::npos)
      << d.output;
  const auto same = testing::run_bih({"diff", dumps[1].string(), dumps[1].string()});
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("0/16 logprobs differ"), std::string::npos) << same.output;
}

}  // namespace
}  // namespace bih::test_driver
