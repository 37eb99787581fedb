// test_command_engine.cpp: an adapter that crashes, hangs or lies gives an `error` verdict that
// quotes it, and the run goes on; knobs an engine cannot take give `unsupported`; no adapter
// outlives bih. The adapter is tests/data/adapters/faulty_adapter.py, which fails on purpose.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "base/json_file.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"

namespace bih::test_command_engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fresh_dir;
using testing::report_files;
using testing::run_bih;

const std::string kAdapter = std::string(BIH_SOURCE_DIR) + "/tests/data/adapters/faulty_adapter.py";

json faulty_engine(const std::string& fault) {
  return {{"kind", "command"},
          {"name", "faulty"},
          {"command", {"python3", kAdapter}},
          {"options", {{"fault", fault}}},
          {"reply_timeout_s", 3}};
}

json small_plan() { return {{"prompts", {{"count", 3}}}, {"max_tokens", 2}}; }

void write(const fs::path& path, const json& j) { std::ofstream(path) << j.dump(2); }

// Reports by id.
std::map<std::string, json> reports_in(const fs::path& dir) {
  std::map<std::string, json> out;
  for (const auto& f : report_files(dir)) {
    json r = read_json_file(f.string());
    out[r["id"].get<std::string>()] = r;
  }
  return out;
}

class CommandEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    setenv("BIH_CACHE_DIR", (dir_ / "cache").c_str(), 1);
  }
  fs::path dir_;
};

TEST_F(CommandEngine, EachFailureIsAnErrorQuotingTheAdapterAndTheRunGoesOn) {
  // fault -> a piece of the reason that only that failure produces.
  const std::vector<std::pair<std::string, std::string>> faults{
      {"crash_on_init", "RuntimeError: model failed to load"},
      {"crash_on_generate", "killed by signal 11"},
      {"hang_on_generate", "did not answer within 3 s"},
      {"not_json", "'Result: tokens=[1, 2, 3]'"},
      {"stdout_noise", "'loading model... done'"},
      {"wrong_count", "has 1 tokens for max_tokens 2"},
      {"token_out_of_range", "is '1000000000'; valid: a token id in 0..2047"},
      {"wrong_id", "carries id '2'"},
      {"error_reply", "'CUDA out of memory'"},
      {"bad_value", "'minus one' is not a float32 bit pattern"}};
  json axis = json::array();
  for (const auto& [fault, _] : faults) axis.push_back(fault);
  write(dir_ / "faults.json", {{"base",
                                {{"engine", faulty_engine("")},
                                 {"plan", small_plan()},
                                 {"timeout_s", 60},
                                 {"expect", "error"}}},
                               {"axes", {{"engine.options.fault", axis}}}});
  // After every failure, bih's own engine still runs in the same invocation.
  write(dir_ / "after.json", {{"plan", small_plan()}});
  const auto r = run_bih({"run", (dir_ / "faults.json").string(), (dir_ / "after.json").string(),
                          "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;  // every error was expected
  const auto reports = reports_in(dir_ / "out");
  ASSERT_EQ(reports.size(), faults.size() + 1) << r.output;
  for (const auto& [fault, quote] : faults) {
    const std::string id = "model=tiny,engine=faulty(fault=" + fault + ")";
    ASSERT_TRUE(reports.count(id)) << id;
    const json& report = reports.at(id);
    EXPECT_EQ(report["verdict"], "error") << id;
    const std::string reason = report["reason"];
    EXPECT_NE(reason.find(quote), std::string::npos) << fault << ": " << reason;
    EXPECT_NE(reason.find("faulty adapter: fault='" + fault + "'"), std::string::npos)
        << "the tail of the adapter's stderr is quoted: " << reason;
  }
  const std::string bih_id =
      "tp=1,sp=off,ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";
  ASSERT_TRUE(reports.count(bih_id));
  EXPECT_EQ(reports.at(bih_id)["verdict"], "invariant");
}

TEST_F(CommandEngine, AnAdapterThatDeclinesAKnobMakesTheScenarioUnsupported) {
  json s = {{"engine", faulty_engine("unsupported")},
            {"plan", small_plan()},
            {"parallel", {{"tp", 2}}},
            {"cudagraph", {{"mode", "full"}}},
            {"expect", "unsupported"}};
  write(dir_ / "s.json", s);
  const auto r = run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto reports = reports_in(dir_ / "out");
  ASSERT_EQ(reports.size(), 1u);
  const json& report = reports.begin()->second;
  EXPECT_EQ(report["id"], "tp=2,graph=full,model=tiny,engine=faulty(fault=unsupported)");
  EXPECT_EQ(report["verdict"], "unsupported");
  // The adapter was handed exactly the knobs the file set, and its reason is recorded.
  EXPECT_EQ(report["reason"],
            "engine faulty: this engine has no knob ['cudagraph.mode', 'parallel.tp']");
}

TEST_F(CommandEngine, KnobsOnlyBihHasAreUnsupportedWithoutStartingTheAdapter) {
  json engine = faulty_engine("");
  engine["options"]["pid_file"] = (dir_ / "adapter.pid").string();
  write(dir_ / "s.json", {{"engine", engine},
                          {"plan", small_plan()},
                          {"collectives", {{"reduce_scatter", "fixed"}}},
                          {"expect", "unsupported"}});
  const auto r = run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const json report = reports_in(dir_ / "out").begin()->second;
  EXPECT_EQ(report["verdict"], "unsupported");
  EXPECT_NE(report["reason"].get<std::string>().find("collectives.reduce_scatter is bih's own"),
            std::string::npos)
      << report["reason"];
  EXPECT_FALSE(fs::exists(dir_ / "adapter.pid")) << "the adapter must not have been started";
}

TEST_F(CommandEngine, AnAdapterDoesNotOutliveAWorkerKilledAtItsTimeout) {
  json engine = faulty_engine("hang_on_generate");
  engine["reply_timeout_s"] = 600;  // the scenario's timeout fires first and kills the worker
  engine["options"]["pid_file"] = (dir_ / "adapter.pid").string();
  write(dir_ / "s.json",
        {{"engine", engine}, {"plan", small_plan()}, {"timeout_s", 4}, {"expect", "error"}});
  const auto r = run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream pid_in(dir_ / "adapter.pid");
  pid_t pid = 0;
  ASSERT_TRUE(pid_in >> pid) << "the adapter ran and wrote its pid";
  // It was killed with the worker (PR_SET_PDEATHSIG); give the kernel a moment to reap it.
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    gone = kill(pid, 0) != 0;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "adapter pid " << pid << " outlived bih";
  if (!gone) kill(pid, SIGKILL);
}

TEST_F(CommandEngine, TheReportNamesTheEngineAndWhatItApplied) {
  json engine = faulty_engine("");
  write(dir_ / "s.json", {{"engine", engine}, {"plan", small_plan()}});
  const auto r = run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json report = reports_in(dir_ / "out").begin()->second;
  EXPECT_EQ(report["engine"]["kind"], "command");
  EXPECT_EQ(report["engine"]["name"], "faulty");
  EXPECT_EQ(report["engine"]["version"], "0");
  EXPECT_EQ(report["engine"]["value"], "logprob");
  EXPECT_EQ(report["engine"]["settings"]["fault"], "");
  EXPECT_EQ(report["engine"]["model_format"], "hf");
  // The preset was exported to the cache once, as an HF folder the adapter could load.
  const std::string model_path = report["engine"]["model_path"];
  EXPECT_TRUE(fs::exists(fs::path(model_path) / "config.json")) << model_path;
  EXPECT_TRUE(fs::exists(fs::path(model_path) / "model.safetensors")) << model_path;
  EXPECT_EQ(model_path.rfind((dir_ / "cache").string(), 0), 0u) << model_path;
}

TEST_F(CommandEngine, ExplainRefusesAnEngineItCannotTrace) {
  write(dir_ / "s.json", {{"engine", faulty_engine("")}, {"plan", small_plan()}});
  ASSERT_EQ(
      run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / "out").string()}).exit_code, 0);
  const auto report = report_files(dir_ / "out").at(0);
  const auto r = run_bih({"explain", report.string()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("engine faulty (kind command) is not traceable"), std::string::npos)
      << r.output;
}

TEST(CommandEngineScenario, IdsNameOnlyWhatTheFileSetAndTheEngine) {
  const auto dir = fresh_dir("command-ids");
  write(
      dir / "m.json",
      {{"base", {{"engine", faulty_engine("x")}}},
       {"axes", {{"engine.options.attn", {"eager", "sdpa"}}, {"prefix_caching.enabled", {true}}}}});
  const auto set = load_scenarios((dir / "m.json").string());
  ASSERT_EQ(set.scenarios.size(), 2u);
  EXPECT_EQ(set.scenarios[0].id(), "prefix=on,model=tiny,engine=faulty(attn=eager,fault=x)");
  EXPECT_EQ(set.scenarios[1].id(), "prefix=on,model=tiny,engine=faulty(attn=sdpa,fault=x)");
  // The resolved form keeps only the knobs set, so a re-read is the same scenario.
  const json resolved = set.scenarios[0].to_json();
  EXPECT_FALSE(resolved.contains("collectives"));
  EXPECT_EQ(resolved["prefix_caching"], json({{"enabled", true}}));
  EXPECT_EQ(scenario_from_json(resolved, "resolved.json").id(), set.scenarios[0].id());
  EXPECT_EQ(set.scenarios[0].knobs_json(), json({{"prefix_caching.enabled", true}}));
}

TEST(CommandEngineScenario, BadEngineSectionsAreUsageErrors) {
  const auto dir = fresh_dir("command-bad");
  const std::vector<std::pair<json, std::string>> cases{
      {{{"kind", "comand"}}, "did you mean 'command'"},
      {{{"kind", "command"}, {"command", {"x"}}}, "/engine/name"},
      {{{"kind", "command"}, {"name", "x"}}, "/engine/command"},
      {{{"kind", "command"}, {"name", "x y"}, {"command", {"x"}}}, "bad engine name"},
      {{{"kind", "command"}, {"name", "x"}, {"command", json::array()}}, "/engine/command"},
      {{{"kind", "command"}, {"name", "x"}, {"command", {"x"}}, {"model_format", "onnx"}},
       "unknown model format 'onnx'"},
      {{{"kind", "bih"}, {"command", {"x"}}}, "'command' is for an adapter"},
      {{{"kind", "http"}}, "neither 'url' nor 'profile' is given"}};
  for (const auto& [engine, message] : cases) {
    write(dir / "s.json", {{"engine", engine}});
    const auto r = run_bih({"list", (dir / "s.json").string()});
    EXPECT_EQ(r.exit_code, 2) << engine.dump() << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << engine.dump() << "\n" << r.output;
  }
}

}  // namespace
}  // namespace bih::test_command_engine
