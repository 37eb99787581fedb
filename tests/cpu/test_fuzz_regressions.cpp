// test_fuzz_regressions.cpp: inputs that the fuzz/ targets (or the sanitizer review behind them)
// found crashing a reader, each fed back to the reader that must now refuse it with InputError.
//
// One test per finding, named after what the input does; the bytes are spelled out here rather
// than kept as files so that each test says what was wrong with its input.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/json_file.hpp"
#include "engines/engine_protocol.hpp"
#include "harness/expectations.hpp"
#include "harness/gate.hpp"
#include "harness/generation.hpp"
#include "harness/report.hpp"
#include "harness/report_set.hpp"
#include "models/safetensors.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"
#include "test_util.hpp"

namespace bih::test_fuzz_regressions {
namespace {

// Writes `bytes` to a fresh file in its own folder and returns the path.
std::string write_case(const std::string& name, const std::string& bytes) {
  const auto path = testing::fresh_dir("fuzz-" + name) / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

// A safetensors file: u64 little-endian header length, the header, the data.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

// [2^62] F32 needs 2^64 bytes, which wrapped to 0 and matched data_offsets [0, 0]; reading it then
// asked for 2^62 elements (std::length_error, not an InputError).
TEST(FuzzRegressions, SafetensorsByteCountThatWrapsIsRefused) {
  const std::string path = write_case(
      "wrap.safetensors",
      safetensors_bytes(
          R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""));
  const std::string msg = testing::input_error_of([&] {
    SafetensorsFile f(path);
    std::vector<bf16> out;
    f.read_bf16("w", {uint64_t{1} << 62}, out);
  });
  EXPECT_NE(msg.find("overflows"), std::string::npos) << msg;
}

// nlohmann throws out_of_range.406, not parse_error, for a number a double cannot hold; every
// reader caught only parse_error, so 1e400 anywhere in a file ended bih with "internal error".
constexpr const char* kHugeNumber = "1e400";

TEST(FuzzRegressions, SafetensorsHeaderWithAHugeNumberIsRefused) {
  const std::string path = write_case(
      "huge.safetensors", safetensors_bytes(std::string(R"({"w":{"dtype":"BF16","shape":[)") +
                                                kHugeNumber + R"(],"data_offsets":[0,2]}})",
                                            std::string(2, '\0')));
  const std::string msg = testing::input_error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("number overflow"), std::string::npos) << msg;
}

TEST(FuzzRegressions, GenerationDumpWithAHugeNumberIsRefused) {
  const std::string path =
      write_case("huge-gen.json", std::string(R"({"label": "bs=1", "wall_s": )") + kHugeNumber +
                                      R"(, "sequences": []})");
  const std::string msg =
      testing::input_error_of([&] { generation_from_json(read_json_file(path), path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(FuzzRegressions, ScenarioFileWithAHugeNumberIsRefused) {
  const std::string path =
      write_case("huge-scenario.json", std::string(R"({"timeout_s": )") + kHugeNumber + "}");
  const std::string msg = testing::input_error_of([&] { load_scenarios(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

// A model.path component longer than the system's NAME_MAX (fuzz_scenarios, stop 51): stat fails
// with ENAMETOOLONG, which once escaped as a filesystem_error instead of an InputError.
TEST(FuzzRegressions, ScenarioWithAModelPathTooLongForTheSystemIsRefused) {
  const std::string path = write_case("long-model-path.json",
                                      R"({"model": {"path": ")" + std::string(300, 's') + R"("}})");
  const std::string msg = testing::input_error_of([&] { load_scenarios(path); });
  EXPECT_NE(msg.find("/model/path"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot be read"), std::string::npos) << msg;
}

TEST(FuzzRegressions, ReportWithAHugeNumberIsRefused) {
  const std::string path =
      write_case("huge-report.json",
                 std::string(R"({"schema": "bih.report/1", "wall_s": )") + kHugeNumber + "}");
  const std::string msg = testing::input_error_of([&] { read_report(path); });
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
}

TEST(FuzzRegressions, ExpectationsWithAHugeNumberAreRefused) {
  const std::string text =
      std::string(R"({"schema": "bih.expectations/1", "expectations": [)") + kHugeNumber + "]}";
  const std::string msg = testing::input_error_of([&] { parse_expectations(text, "e.json"); });
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
}

// read_report does not require "environment", but load_report_set read it with .at(): a report
// that read_report accepted ended `bih gate` and `bih matrix` with out_of_range.403.
TEST(FuzzRegressions, ReportWithoutEnvironmentGathersIntoASet) {
  const std::string path = write_case(
      "no-env.json",
      // unsupported: a verdict that needs no comparison (an invariant one must compare something).
      R"({"schema": "bih.report/1", "id": "tp=1", "verdict": "unsupported", "scenario": {},)"
      R"( "reason": "no GPU", "comparisons": []})");
  const ReportSet set = load_report_set({path});
  ASSERT_EQ(set.reports.size(), 1u);
  EXPECT_TRUE(set.environment_differences.empty());
}

// A hello whose capabilities.step_stats was not a boolean escaped as nlohmann's type_error.302
// (value() converts), so a lying adapter was an internal error instead of an InfraError.
TEST(FuzzRegressions, HelloWithANonBooleanStepStatsIsAProtocolError) {
  const nlohmann::json hello = protocol::parse_line(
      R"({"type":"hello","protocol":"bih.engine/1","engine":{"name":"x","version":"1"},)"
      R"("capabilities":{"step_stats":"yes"}})");
  try {
    (void)protocol::parse_hello(hello);
    ADD_FAILURE() << "expected ProtocolError";
  } catch (const protocol::ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("step_stats"), std::string::npos) << e.what();
  }
}

// verdict_evidence read comparison fields with value(), which throws nlohmann's type_error for a
// field of another type: a report that read_report accepted ended `bih gate` as an internal error.
TEST(FuzzRegressions, GateEvidenceSkipsComparisonFieldsOfTheWrongType) {
  const nlohmann::json report = {{"verdict", "batch_variant"},
                                 {"comparisons",
                                  {1,
                                   {{"kind", 7}, {"identical", "no"}},
                                   {{"kind", "batch"}, {"a", "bs=1"}, {"identical", false}}}}};
  const std::string evidence = verdict_evidence(report);
  EXPECT_NE(evidence.find("batch bs=1 vs ?"), std::string::npos) << evidence;
}

}  // namespace
}  // namespace bih::test_fuzz_regressions
