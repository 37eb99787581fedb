// test_hostile_input.cpp: hostile input never crashes bih, never exhausts the machine, and gets
// a clear exit-2 message whose first line names the file and the field.
//
// Unit tests pin the shared rules (base/json_text: nesting depth, duplicate keys; the KV pool's
// overflow guard); the rest runs the binary, where the exit code and the first line matter:
// deep nesting, duplicate keys, sizes that pass range checks but not the machine, corrupt
// checkpoints (refused at load time, before any worker), the --out lock and bad --out paths,
// unknown matrix axes, one id from two files, and the worker's last words on the terminal.
// tests/hostile/run_cases.sh tries many more cases and writes docs/hostile-cases.md.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/folder_lock.hpp"
#include "base/json_file.hpp"
#include "base/json_text.hpp"
#include "engines/engine_protocol.hpp"
#include "models/forward.hpp"
#include "models/safetensors.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"
#include "test_files.hpp"
#include "test_util.hpp"

namespace bih::test_hostile_input {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fresh_dir;
using testing::input_error_of;
using testing::run_bih;
using testing::write_text;

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// A scenario small enough to run in a second or two, with `extra` merged in.
std::string small_scenario(const json& extra = json::object()) {
  json j = {{"plan",
             {{"prompts", {{"count", 2}, {"min_len", 2}, {"max_len", 4}}},
              {"max_tokens", 2},
              {"batch_sizes", {1, 2}}}}};
  j.merge_patch(extra);
  return j.dump();
}

// ---- base/json_text: the shared rules ----

TEST(JsonText, DepthUpToTheLimitParsesAndOneMoreIsRefusedWithLineAndColumn) {
  EXPECT_NO_THROW(parse_json_text<json>(nested(kMaxJsonDepth), "f.json"));
  const std::string text = "{\n  \"a\": " + nested(kMaxJsonDepth) + "}";
  const std::string msg = input_error_of([&] { parse_json_text<json>(text, "f.json"); });
  // The object is level 1, so the 64th '[' opens level 65: line 2, column 8 + 63.
  EXPECT_EQ(first_line(msg).rfind("f.json: at /: line 2, column 71: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("valid: at most 64 levels"), std::string::npos) << msg;
}

TEST(JsonText, BracketsInStringsAndCommentsDoNotCount) {
  const std::string text = "// [[[[ " + std::string(100, '[') + "\n/* {{{{" +
                           std::string(100, '{') + " */ [\"" + std::string(100, '[') + "\\\"" +
                           std::string(100, '{') + "\"]";
  EXPECT_FALSE(first_too_deep(text, 2).has_value());
  EXPECT_NO_THROW(parse_json_text<json>(text, "f.json"));
}

TEST(JsonText, HundredThousandLevelsAreRefusedNotACrash) {
  const std::string msg =
      input_error_of([&] { parse_json_text<json>(nested(100000), "deep.json"); });
  EXPECT_NE(msg.find("deep.json: at /: line 1, column 65"), std::string::npos) << msg;
}

TEST(JsonText, DuplicateKeyIsRefusedWithItsPointer) {
  const std::string text = R"({"a": [{"x": 1}, {"b": 1, "c": {"d": 0}, "b": 2}]})";
  const std::string msg = input_error_of([&] { parse_json_text<json>(text, "f.json"); });
  EXPECT_EQ(first_line(msg).rfind("f.json: at /a/1/b: key 'b' appears twice", 0), 0u) << msg;
}

TEST(JsonText, TheSameKeyInSiblingObjectsIsFineAndTildesAreEscaped) {
  EXPECT_NO_THROW(parse_json_text<json>(R"([{"k": 1}, {"k": 2}, {"o": {"k": 3}, "k": 4}])", "f"));
  const std::string msg =
      input_error_of([&] { parse_json_text<json>(R"({"a/b": {"x~": 1, "x~": 2}})", "f"); });
  EXPECT_NE(msg.find("at /a~1b/x~0: key 'x~' appears twice"), std::string::npos) << msg;
}

TEST(JsonText, NumberPastADoubleIsAnInputErrorToo) {
  const std::string msg = input_error_of([&] { parse_json_text<json>("[1e999]", "f.json"); });
  EXPECT_NE(msg.find("f.json: at /: not valid JSON: "), std::string::npos) << msg;
}

TEST(JsonText, StrictModeRefusesComments) {
  const std::string msg =
      input_error_of([&] { parse_json_text<json>("{} // no", "line", {.comments = false}); });
  EXPECT_NE(msg.find("line: at /: not valid JSON"), std::string::npos) << msg;
}

TEST(JsonText, ProtocolLinesAreBoundedToo) {
  EXPECT_THROW(protocol::parse_line("{\"type\": \"hello\", \"x\": " + nested(100000) + "}"),
               protocol::ProtocolError);
  EXPECT_THROW(protocol::parse_line(R"({"type": "hello", "type": "error"})"),
               protocol::ProtocolError);
}

TEST(KvPool, ABlockCountPastAnIntThrowsInsteadOfOverflowing) {
  EngineOptions o;
  o.max_num_seqs = 1 << 30;
  o.max_model_len = 1 << 20;
  o.prefix_caching = true;
  EXPECT_THROW(kv_pool_blocks(o), std::length_error);
  o.max_num_seqs = 64;
  o.max_model_len = 512;
  EXPECT_EQ(kv_pool_blocks(o), 64 * 32 * 2 + 1);
  // tiny: 4 layers, 8 KV heads of 16 at tp=1.
  EXPECT_EQ(kv_cache_bytes_per_rank(o, 4, 8, 16),
            uint64_t(kv_pool_blocks(o)) * 16 * 8 * 16 * 2 * 4 * 2);
}

// ---- through the binary ----

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(std::string("hostile-") +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `text` as NAME and runs `bih list` on it: exit 2 and the first line are the contract.
  testing::BihResult list(const std::string& text, const std::string& name = "s.json") const {
    write_text(dir_ / name, text);
    return run_bih({"list", path(name)});
  }
  fs::path dir_;
};

void expect_input_error(const testing::BihResult& r, const std::string& first_line_has) {
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(first_line(r.output).find(first_line_has), std::string::npos) << r.output;
}

TEST_F(Hostile, DeeplyNestedScenarioIsAnInputErrorNotASegfault) {
  const auto r = list("{\"plan\": " + nested(100000) + "}");
  expect_input_error(r,
                     path("s.json") + ": at /: line 1, column 73: arrays and objects nest deeper");
}

TEST_F(Hostile, DeepValueInSetIsRefused) {
  write_text(dir_ / "s.json", small_scenario());
  const auto r = run_bih({"list", path("s.json"), "--set", "engine.options.x=" + nested(5000)});
  expect_input_error(r, "--set engine.options.x=");
  EXPECT_NE(first_line(r.output).find("deeper than 64 levels"), std::string::npos) << r.output;
}

TEST_F(Hostile, DuplicateKeyInAScenarioNamesThePointer) {
  const auto r = list(R"({"parallel": {"tp": 2, "tp": 4}})");
  expect_input_error(r, path("s.json") + ": at /parallel/tp: key 'tp' appears twice");
}

TEST_F(Hostile, DuplicateKeyInAMatrixCaseNamesThePointer) {
  const auto r = list(R"({"base": {}, "cases": [{"name": "a"}, {"name": "b", "name": "c"}]})");
  expect_input_error(r, "at /cases/1/name: key 'name' appears twice");
}

TEST_F(Hostile, DuplicateKeyInAnExpectationsFileIsRefused) {
  write_text(dir_ / "e.json",
             R"({"schema": "bih.expectations/1", "schema": "x", "expectations": []})");
  fs::create_directories(dir_ / "reports");
  const auto r = run_bih({"gate", "--expect", path("e.json"), path("reports")});
  expect_input_error(r, path("e.json") + ": at /schema: key 'schema' appears twice");
}

TEST_F(Hostile, CaptureSizeNearTwoToThe31IsRefusedNamingTheBound) {
  const auto r =
      list(small_scenario({{"cudagraph", {{"mode", "full"}, {"capture_sizes", {1, 2147483647}}}}}));
  expect_input_error(r, "at /cudagraph/capture_sizes/1: capture size 2147483647 exceeds");
  EXPECT_NE(first_line(r.output).find("16384"), std::string::npos) << r.output;
}

TEST_F(Hostile, CaptureSizeBeyondTheLargestStepOfASmallPlanNamesThatBound) {
  const auto r = list(small_scenario({{"cudagraph", {{"capture_sizes", {1, 4096}}}},
                                      {"plan", {{"max_num_seqs", 2}, {"max_model_len", 64}}}}));
  expect_input_error(r, "max_num_seqs (2) x max_model_len (64) = 128 rows");
}

TEST_F(Hostile, HugeMaxNumSeqsIsOutOfRange) {
  const auto r = list(small_scenario({{"plan", {{"max_num_seqs", 2147483647}}}}));
  expect_input_error(r,
                     "at /plan/max_num_seqs: value 2147483647 is out of range; valid: an "
                     "integer in 1..4096");
}

TEST_F(Hostile, KvCacheBeyondTheMachineIsRefusedWithTheBytes) {
  // tiny at tp=4: 4 x (2 x 4 layers x 2 KV heads x 16 x 2 bytes) per slot x 4096 x 40960 x 2:
  // ~687 GB, more than any machine these tests run on.
  const auto r =
      list(small_scenario({{"parallel", {{"tp", 4}}},
                           {"prefix_caching", {{"enabled", true}}},
                           {"plan", {{"max_num_seqs", 4096}, {"max_model_len", 40960}}}}));
  expect_input_error(r, "at /plan/max_model_len: the KV cache this plan reserves up front");
  EXPECT_NE(first_line(r.output).find(" bytes ("), std::string::npos) << r.output;
  EXPECT_NE(first_line(r.output).find("MemAvailable"), std::string::npos) << r.output;
}

TEST_F(Hostile, RepeatsAndTimeoutAreBounded) {
  expect_input_error(
      list(small_scenario({{"plan", {{"repeats", 1000000}}}})),
      "at /plan/repeats: value 1000000 is out of range; valid: an integer in 1..100");
  expect_input_error(list(small_scenario({{"timeout_s", 1e300}})), "at /timeout_s: ");
  expect_input_error(list(small_scenario({{"plan", {{"max_model_len", 2000000}}}})),
                     "at /plan/max_model_len: value 2000000 is out of range");
}

// A tiny checkpoint exported by bih, then broken in one way.
class HostileCheckpoint : public Hostile {
 protected:
  void SetUp() override {
    Hostile::SetUp();
    const auto r = run_bih({"export", "--preset", "tiny", "--format", "hf", "--out", path("ckpt")});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    write_text(dir_ / "s.json", small_scenario({{"model", {{"path", "ckpt"}}}}));
  }
  std::string weights() const { return path("ckpt/model.safetensors"); }
  // `bih run` checks the checkpoint before any worker starts (`bih list` reads only config.json).
  testing::BihResult run_it() const {
    return run_bih({"run", path("s.json"), "--out", path("out")});
  }
};

TEST_F(HostileCheckpoint, IntactCheckpointRuns) { EXPECT_EQ(run_it().exit_code, 0); }

TEST_F(HostileCheckpoint, TruncatedWeightsAreAnInputErrorAtLoadTime) {
  fs::resize_file(weights(), fs::file_size(weights()) - 1000);
  const auto r = run_it();
  expect_input_error(r, path("s.json") + ": at /model/path: bad checkpoint: " + weights());
  EXPECT_NE(first_line(r.output).find("truncated file?"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "out")) << "refused before anything is written";
}

TEST_F(HostileCheckpoint, ShapeAgainstConfigIsCheckedAtLoadTime) {
  json config = read_json_file(path("ckpt/config.json"));
  config["intermediate_size"] = 512;
  std::ofstream(path("ckpt/config.json")) << config.dump();
  const auto r = run_it();
  expect_input_error(r, "bad checkpoint: " + weights() + ": at /model.layers.0.mlp.");
  EXPECT_NE(first_line(r.output).find("the model config expects"), std::string::npos) << r.output;
}

TEST_F(HostileCheckpoint, HeaderLengthPastTheFileIsNamed) {
  {
    std::fstream f(weights(), std::ios::in | std::ios::out | std::ios::binary);
    const unsigned char huge[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    f.write(reinterpret_cast<const char*>(huge), 8);
  }
  expect_input_error(run_it(), "header length 4294967295 (u64 little-endian at byte 0) exceeds");
}

TEST_F(HostileCheckpoint, MissingTensorIsNamed) {
  // Rewrite the weights without the final norm.
  SafetensorsFile file(weights());
  std::vector<std::vector<bf16>> data;
  std::vector<TensorToWrite> keep;
  data.reserve(file.entries().size());
  for (const auto& [name, e] : file.entries()) {
    if (name == "model.norm.weight") continue;
    data.emplace_back();
    file.read_bf16(name, e.shape, data.back());
    keep.push_back({name, e.shape, &data.back()});
  }
  write_safetensors_bf16(weights(), keep);
  expect_input_error(run_it(), ": at /model.norm.weight: tensor 'model.norm.weight' is missing");
}

TEST_F(HostileCheckpoint, DuplicateKeyInConfigJsonIsRefused) {
  std::string text;
  {
    std::ifstream in(path("ckpt/config.json"));
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  text.insert(1, "\"vocab_size\": 4096, ");
  write_text(dir_ / "ckpt/config.json", text);
  expect_input_error(run_it(), "at /vocab_size: key 'vocab_size' appears twice");
}

TEST_F(Hostile, WorkersLastWordsReachTheTerminalLine) {
  write_text(dir_ / "s.json", small_scenario({{"debug", {{"fault", "exit"}}}}));
  const auto r = run_bih({"run", path("s.json"), "--out", path("out")});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  // The one progress line of the failure carries the worker's message, not just "stderr:".
  bool found = false;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("-> error") == std::string::npos) continue;
    found = true;
    EXPECT_NE(line.find("exited with status 7: bih worker: debug.fault=exit"), std::string::npos)
        << line;
  }
  EXPECT_TRUE(found) << r.output;
}

TEST_F(Hostile, SecondRunIntoALockedOutIsRefusedNamingTheHolder) {
  write_text(dir_ / "s.json", small_scenario());
  const FolderLock held(path("out"));  // as a first run holds it
  const auto r = run_bih({"run", path("s.json"), "--out", path("out")});
  expect_input_error(r, path("out") + ": at /: another bih run (pid " + std::to_string(getpid()) +
                            ") is writing into this folder");
  EXPECT_FALSE(fs::exists(dir_ / "out" / "manifest.json"));
}

TEST_F(Hostile, TheLockIsReleasedWhenTheHolderGoes) {
  { const FolderLock held(path("out")); }
  EXPECT_NO_THROW(FolderLock(path("out")));
}

TEST_F(Hostile, OutThatIsAFileOrBelowAFileIsAUsageError) {
  write_text(dir_ / "s.json", small_scenario());
  write_text(dir_ / "file", "x");
  expect_input_error(run_bih({"run", path("s.json"), "--out", path("file")}),
                     path("file") + ": at /: exists and is not a folder");
  expect_input_error(run_bih({"run", path("s.json"), "--out", path("file/sub")}),
                     path("file/sub") + ": at /: cannot create the folder");
}

TEST_F(Hostile, UnknownMatrixAxisKeyListsTheValidOnes) {
  fs::create_directories(dir_ / "reports");
  const auto r = run_bih({"matrix", path("reports"), "--rows", "paralel.tp", "--out", path("m")});
  expect_input_error(r, "unknown scenario key \"paralel.tp\" (did you mean \"parallel.tp\"?)");
  EXPECT_NE(first_line(r.output).find("valid: name, model, model.preset"), std::string::npos)
      << r.output;
}

TEST_F(Hostile, OneIdFromTwoFilesIsRefusedNamingBoth) {
  write_text(dir_ / "a.json", small_scenario());
  write_text(dir_ / "b.json", small_scenario());
  const auto r = run_bih({"run", path("a.json"), path("b.json"), "--out", path("out")});
  expect_input_error(r, "both " + path("a.json") + " and " + path("b.json") + " define it");
  const auto twice = run_bih({"run", path("a.json"), path("a.json"), "--out", path("out")});
  expect_input_error(twice, "the file " + path("a.json") + " is given twice");
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST_F(Hostile, CommandEngineFromAFileNamedWithoutAFolderRunsInTheWorkingDirectory) {
  // "s.json" has an empty parent path; fs::absolute("") threw "internal error" before.
  write_text(
      dir_ / "s.json",
      small_scenario({{"engine", {{"kind", "command"}, {"name", "x"}, {"command", {"true"}}}}}));
  const fs::path before = fs::current_path();
  fs::current_path(dir_);
  std::string cwd;
  EXPECT_NO_THROW(cwd = load_scenarios("s.json").scenarios.at(0).engine.cwd);
  fs::current_path(before);
  EXPECT_EQ(fs::path(cwd), fs::canonical(dir_));
}

// The table's script doubles as a test: every case must give its expected exit code.
TEST(HostileCases, EveryCaseOfTheTableScriptGivesItsExpectedExitCode) {
  const fs::path table = fresh_dir("hostile-cases") / "hostile-cases.md";
  const std::string cmd =
      "bash " + testing::shell_quote(std::string(BIH_SOURCE_DIR) + "/tests/hostile/run_cases.sh") +
      " " + testing::shell_quote(BIH_BINARY) + " " + testing::shell_quote(table.string()) + " 2>&1";
  std::string output;
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << output;
  std::ifstream in(table);
  int rows = 0;
  for (std::string line; std::getline(in, line);) rows += line.rfind("| ", 0) == 0 ? 1 : 0;
  EXPECT_GE(rows - 1, 60) << "the table holds at least 60 cases";
}

TEST(HostileHelp, RunHelpHasExamplesExitCodesAndTheSetPathRule) {
  const auto r = run_bih({"run", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("Examples:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Exit codes: 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resolved against the scenario\nfile's folder"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace bih::test_hostile_input
