// test_http_engine.cpp: engine.kind "http": its fields (a wrong one is exit 2 naming it), its ids,
// `bih run --dry-run` for every engine kind, and the engine in url mode against
// tests/hostile/http_fixture.py, a fake server (deterministic fake tokens: it tests the plumbing,
// the real servers are tested elsewhere) that answers in each dialect and misbehaves on request.
// Every misbehaviour is an `error` verdict quoting the reply, and the run goes on.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>

#include "base/json_file.hpp"
#include "base/line_process.hpp"
#include "engines/registry.hpp"
#include "run_bih.hpp"
#include "schema_check.hpp"
#include "spec/scenario.hpp"
#include "spec/server_profile.hpp"
#include "test_util.hpp"

#if BIH_HAVE_HTTP
#include "engines/http/server_launch.hpp"
#endif

namespace bih::test_http_engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fresh_dir;
using testing::input_error_of;
using testing::report_files;
using testing::run_bih;

const std::string kFixture = std::string(BIH_SOURCE_DIR) + "/tests/hostile/http_fixture.py";
const std::string kReportSchema = std::string(BIH_SOURCE_DIR) + "/reports/report.schema.json";

json url_engine(const std::string& url, const std::string& dialect = "openai") {
  return {{"kind", "http"}, {"url", url}, {"dialect", dialect}};
}

Scenario parse(const json& engine, const json& rest = json::object()) {
  json j = rest;
  j["engine"] = engine;
  return scenario_from_json(j, "mem.json");
}

std::string parse_error(const json& engine, const json& rest = json::object()) {
  return input_error_of([&] { parse(engine, rest); });
}

void write(const fs::path& path, const json& j) { std::ofstream(path) << j.dump(2); }

std::map<std::string, json> reports_in(const fs::path& dir) {
  std::map<std::string, json> out;
  for (const auto& f : report_files(dir)) {
    json r = read_json_file(f.string());
    out[r["id"].get<std::string>()] = r;
  }
  return out;
}

TEST(HttpEngineFields, UrlModeParsesAndNamesDialectAndBatchingInTheId) {
  json e = url_engine("http://127.0.0.1:8000/v2/", "sglang");
  e["batching"] = "concurrent";
  e["reset_cache"] = "POST /flush_cache";
  e["reply_timeout_s"] = 5;
  const Scenario s = parse(e);
  EXPECT_EQ(s.engine.url, "http://127.0.0.1:8000/v2");
  EXPECT_EQ(s.engine.name, "http");
  EXPECT_EQ(s.id(), "model=tiny,engine=http,dialect=sglang,batching=concurrent");
  // The resolved scenario reads back as the same scenario.
  const Scenario again = scenario_from_json(s.to_json(), "mem.json");
  EXPECT_EQ(again.id(), s.id());
  EXPECT_EQ(again.engine.reset_cache, "POST /flush_cache");
  e["name"] = "my-vllm";
  EXPECT_EQ(parse(e, {{"parallel", {{"tp", 2}}}}).id(),
            "tp=2,model=tiny,engine=my-vllm,dialect=sglang,batching=concurrent");
}

TEST(HttpEngineFields, EveryWrongFieldIsExit2NamingItAndWhatIsValid) {
  const json ok = url_engine("http://127.0.0.1:8000");
  const auto with = [&](const std::string& key, const json& value) {
    json e = ok;
    e[key] = value;
    return e;
  };
  json neither = {{"kind", "http"}, {"dialect", "openai"}};
  json no_dialect = {{"kind", "http"}, {"url", "http://127.0.0.1:8000"}};
  const std::vector<std::pair<json, std::vector<std::string>>> cases{
      {neither, {"/engine", "neither 'url' nor 'profile'", "exactly one of 'url'"}},
      {with("profile", "vllm"), {"/engine", "both 'url' and 'profile'"}},
      {no_dialect, {"/engine/dialect", "needs the dialect", "'openai', 'sglang', 'llama.cpp'"}},
      {with("dialect", "openia"), {"/engine/dialect", "did you mean 'openai'"}},
      {with("batching", "parallel"), {"/engine/batching", "'request', 'concurrent'"}},
      {with("url", "https://127.0.0.1:8000"), {"/engine/url", "is not http://"}},
      {with("url", "http://127.0.0.1"), {"/engine/url", "no port in 1..65535"}},
      {with("url", "http://127.0.0.1:70000"), {"/engine/url", "no port in 1..65535"}},
      {with("url", "http://:80"), {"/engine/url", "no valid host"}},
      {with("url", "http://h:80/x?y=1"), {"/engine/url", "query"}},
      {with("url", 8000), {"/engine/url", "expected a string"}},
      {with("args", {"--x"}), {"/engine/args", "for a server bih launches (engine.profile)"}},
      {with("env", {{"A", "1"}}), {"/engine/env", "engine.profile"}},
      {with("options", {{"a", 1}}), {"/engine/options", "engine.profile"}},
      {with("ready_timeout_s", 5), {"/engine/ready_timeout_s", "engine.profile"}},
      {with("reset_cache", "GET /flush"), {"/engine/reset_cache", "\"POST /path\""}},
      {with("reply_timeout_s", -1), {"/engine/reply_timeout_s", "seconds"}},
      {with("served_model", 3), {"/engine/served_model", "expected a string"}},
      {with("name", "a b"), {"/engine/name", "bad engine name"}},
      {with("command", {"x"}), {"/engine/command", "is for an adapter (engine.kind 'command')"}},
      {with("model_format", "gguf"), {"/engine/model_format", "engine.kind 'command'"}},
      {{{"kind", "command"}, {"name", "x"}, {"command", {"x"}}, {"dialect", "openai"}},
       {"/engine/dialect", "is for a server (engine.kind 'http')"}},
      {{{"kind", "bih"}, {"url", "http://h:1"}}, {"/engine/url", "engine.kind is 'bih'"}},
      {{{"kind", "htp"}}, {"/engine/kind", "did you mean 'http'", "'bih', 'command', 'http'"}},
  };
  for (const auto& [engine, pieces] : cases) {
    const std::string message = parse_error(engine);
    for (const std::string& piece : pieces) {
      EXPECT_NE(message.find(piece), std::string::npos) << engine.dump() << "\n" << message;
    }
  }
  // A profile that cannot be loaded is the user's to fix, before anything runs.
  const std::string bad_profile =
      parse_error({{"kind", "http"}, {"profile", "/no/such/profile.json"}});
  EXPECT_FALSE(bad_profile.empty());
}

TEST(HttpEngineFields, MatrixAxesCanBeDialectAndBatching) {
  const fs::path dir = fresh_dir("http-axes");
  write(dir / "m.json", {{"base", {{"engine", url_engine("http://127.0.0.1:9")}}},
                         {"axes",
                          {{"engine.dialect", {"openai", "llama.cpp"}},
                           {"engine.batching", {"request", "concurrent"}}}}});
  const auto r = run_bih({"list", (dir / "m.json").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* id : {"engine=http,dialect=openai,batching=request",
                         "engine=http,dialect=openai,batching=concurrent",
                         "engine=http,dialect=llama.cpp,batching=request",
                         "engine=http,dialect=llama.cpp,batching=concurrent"}) {
    EXPECT_NE(r.output.find(std::string("model=tiny,") + id + "\n"), std::string::npos)
        << id << "\n"
        << r.output;
  }
}

TEST(HttpEngineFields, UnsupportedReasons) {
  json e = url_engine("http://127.0.0.1:9");
  const auto reason = [](const Scenario& s) {
    return EngineRegistry::instance().unsupported_reason(s);
  };
  EXPECT_EQ(reason(parse(e)), "");
  EXPECT_NE(reason(parse(e, {{"parallel", {{"tp", 2}}}}))
                .find("a running server's configuration is its own: knob parallel.tp cannot be "
                      "set; use engine.profile"),
            std::string::npos);
  EXPECT_NE(reason(parse(e, {{"collectives", {{"all_reduce", "ring"}}}})).find("bih's own"),
            std::string::npos);
  EXPECT_NE(reason(parse(e, {{"prefix_caching", {{"enabled", true}}}})).find("reset_cache"),
            std::string::npos);
  e["reset_cache"] = "POST /flush_cache";
  EXPECT_EQ(reason(parse(e, {{"prefix_caching", {{"enabled", true}}}})), "");
  EXPECT_NE(reason(parse(e, {{"plan", {{"fresh_process", true}}}})).find("cannot be restarted"),
            std::string::npos);
}

TEST(HttpEngineDryRun, EachKindSaysWhatItWouldRunAndRunsNothing) {
  const fs::path dir = fresh_dir("http-dry-run");
  write(dir / "bih.json", json::object());
  write(dir / "command.json", {{"engine",
                                {{"kind", "command"},
                                 {"name", "adapter"},
                                 {"command", {"python3", "my adapter.py"}},
                                 {"env", {{"OMP_NUM_THREADS", "1"}}}}}});
  json url = url_engine("http://127.0.0.1:9", "llama.cpp");
  url["batching"] = "concurrent";
  write(dir / "url.json", {{"engine", url}});
  const auto r =
      run_bih({"run", (dir / "bih.json").string(), (dir / "command.json").string(),
               (dir / "url.json").string(), "--dry-run", "--out", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* piece :
       {"tp=1,sp=off,ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny\n"
        "  engine: kind bih, name bih, backend cpu\n",
        "model=tiny,engine=adapter\n  engine: kind command, name adapter\n"
        "  command: python3 'my adapter.py'\n",
        "  env: OMP_NUM_THREADS=1\n",
        "model=tiny,engine=http,dialect=llama.cpp,batching=concurrent\n"
        "  engine: kind http, name http, dialect llama.cpp, batching concurrent\n"
        "  url: http://127.0.0.1:9 (a running server: bih starts nothing)\n",
        "3 scenarios; nothing was run (--dry-run)"}) {
    EXPECT_NE(r.output.find(piece), std::string::npos) << piece << "\n---\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir / "out")) << "a dry run writes nothing";
  // Bad input is still exit 2.
  write(dir / "bad.json", {{"engine", {{"kind", "http"}, {"url", "http://h"}}}});
  EXPECT_EQ(run_bih({"run", (dir / "bad.json").string(), "--dry-run"}).exit_code, 2);
}

#if BIH_HAVE_HTTP
TEST(HttpEngineDryRun, AProfileShowsThePlannedLaunch) {
  // The command lines themselves are the profile's (tested with the profiles): here, that the
  // dry run prints what planned_server_launch says, for the first shipped profile.
  const std::vector<std::string> profiles = shipped_profile_names();
  ASSERT_FALSE(profiles.empty());
  const fs::path dir = fresh_dir("http-dry-run-profile");
  write(dir / "p.json", {{"engine", {{"kind", "http"}, {"profile", profiles[0]}}}});
  const Scenario s =
      scenario_from_json(read_json_file((dir / "p.json").string()), (dir / "p.json").string());
  const ServerLaunch planned = planned_server_launch(s);
  const auto r = run_bih({"run", (dir / "p.json").string(), "--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(s.id() + "\n  engine: kind http, name " + s.engine.name),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("  profile: " + profiles[0] + "\n"), std::string::npos) << r.output;
  if (planned.unsupported.empty()) {
    ASSERT_FALSE(planned.argv.empty());
    EXPECT_NE(r.output.find("  command: "), std::string::npos) << r.output;
    for (const auto& [key, value] : planned.env) {
      EXPECT_NE(r.output.find("  env: " + key + "="), std::string::npos) << r.output;
    }
  } else {
    EXPECT_NE(r.output.find(planned.unsupported), std::string::npos) << r.output;
  }
}

// The fixture server, for the life of one test.
class HttpEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fixture_ = std::make_unique<LineProcess>(std::vector<std::string>{"python3", kFixture}, "",
                                             std::map<std::string, std::string>{},
                                             (dir_ / "fixture.log").string());
    std::string port;
    ASSERT_EQ(fixture_->read_line(10, port), LineProcess::ReadStatus::line);
    base_ = "http://127.0.0.1:" + port;
  }
  void TearDown() override {
    if (fixture_) fixture_->finish(0);
  }
  // The fixture's counters (GET /stats), read with python's standard library.
  json fixture_stats() {
    const std::string cmd =
        "python3 -c \"import urllib.request,sys;sys.stdout.write("
        "urllib.request.urlopen('" +
        base_ + "/stats').read().decode())\"";
    FILE* pipe = popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
    pclose(pipe);
    return json::parse(out);
  }
  fs::path dir_;
  std::unique_ptr<LineProcess> fixture_;
  std::string base_;
};

TEST_F(HttpEngine, EachDialectAndBatchingRunsInvariantAgainstTheFixture) {
  write(dir_ / "m.json",
        {{"base",
          {{"engine", url_engine(base_ + "/ok")},
           {"plan", {{"prompts", {{"count", 4}}}, {"max_tokens", 3}, {"batch_sizes", {1, 4}}}},
           {"timeout_s", 60}}},
         {"axes",
          {{"engine.dialect", {"openai", "sglang", "llama.cpp"}},
           {"engine.batching", {"request", "concurrent"}}}}});
  const auto r = run_bih({"run", (dir_ / "m.json").string(), "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto reports = reports_in(dir_ / "out");
  ASSERT_EQ(reports.size(), 6u) << r.output;
  for (const auto& [id, report] : reports) {
    EXPECT_EQ(report["verdict"], "invariant") << id << ": " << report["reason"];
    EXPECT_EQ(report["engine"]["kind"], "http") << id;
    EXPECT_EQ(report["engine"]["version"], "fixture-1") << id;
    const bool concurrent = id.find("batching=concurrent") != std::string::npos;
    // One request at a time, or up to the batch: this fixture answers at once, so a fast reply
    // can come back before the last request leaves (the exact count is the next test's).
    for (const json& g : report["generations"]) {
      const int most = g["requests_in_flight"];
      if (!concurrent || g["batch_size"] == 1) {
        EXPECT_EQ(most, 1) << id << " " << g.dump();
      } else {
        EXPECT_TRUE(most >= 1 && most <= 4) << id << " " << g.dump();
      }
    }
  }
  // Per scenario bs=1 (4 requests of 1), bs=4 and bs=4#2 (1 request of 4, or 4 of 1 each).
  EXPECT_EQ(fixture_stats()["answered"], 3 * ((4 + 1 + 1) + (4 + 4 + 4)));
}

TEST_F(HttpEngine, ConcurrentBatchingReleasesEveryRequestTogether) {
  json engine = url_engine(base_ + "/hold8", "openai");
  engine["batching"] = "concurrent";
  write(dir_ / "s.json",
        {{"engine", engine},
         {"plan", {{"prompts", {{"count", 8}}}, {"max_tokens", 2}, {"batch_sizes", {8}}}},
         {"timeout_s", 60}});
  const auto r = run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto reports = reports_in(dir_ / "out");
  ASSERT_EQ(reports.size(), 1u) << r.output;
  const json& report = reports.begin()->second;
  EXPECT_EQ(report["verdict"], "invariant") << report["reason"];
  ASSERT_EQ(report["generations"].size(), 2u);
  for (const json& g : report["generations"]) EXPECT_EQ(g["requests_in_flight"], 8) << g.dump();
  EXPECT_EQ(testing::SchemaChecker(kReportSchema).errors(report), "");
  // The server saw them together too (it waits up to 2 s for stragglers).
  EXPECT_EQ(fixture_stats()["most_in_flight"], 8);
}

TEST_F(HttpEngine, EachMisbehaviourIsAnErrorQuotingTheReplyAndTheRunGoesOn) {
  const std::vector<std::pair<std::string, std::string>> modes{
      {"bad_json", "the body is not JSON; the reply: '{\"choices\": [ this is not json'"},
      {"few_tokens", "holds 1 tokens and 1 values, but 2 were asked for"},
      {"bad_value", "value -0.30000000000000004 does not round-trip through float32"},
      {"status500",
       "HTTP status 500; the reply: '{\"error\": \"fixture: internal error on "
       "purpose\"}'"},
      {"hang", "no complete answer within 1 s"},
      {"close", "/close/v1/completions: "}};
  std::vector<std::string> files;
  for (const auto& [mode, _] : modes) {
    json engine = url_engine(base_ + "/" + mode);
    engine["name"] = "fx-" + mode;
    engine["reply_timeout_s"] = 1;
    write(dir_ / (mode + ".json"), {{"engine", engine},
                                    {"plan", {{"prompts", {{"count", 2}}}, {"max_tokens", 2}}},
                                    {"timeout_s", 60},
                                    {"expect", "error"}});
    files.push_back((dir_ / (mode + ".json")).string());
  }
  json after = url_engine(base_ + "/ok", "sglang");
  write(dir_ / "after.json",
        {{"engine", after}, {"plan", {{"prompts", {{"count", 2}}}, {"max_tokens", 2}}}});
  files.push_back((dir_ / "after.json").string());
  std::vector<std::string> args{"run"};
  args.insert(args.end(), files.begin(), files.end());
  args.insert(args.end(), {"--out", (dir_ / "out").string()});
  const auto r = run_bih(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;  // every error was expected
  const auto reports = reports_in(dir_ / "out");
  ASSERT_EQ(reports.size(), modes.size() + 1) << r.output;
  for (const auto& [mode, quote] : modes) {
    const std::string id = "model=tiny,engine=fx-" + mode + ",dialect=openai,batching=request";
    ASSERT_TRUE(reports.count(id)) << id << "\n" << r.output;
    const json& report = reports.at(id);
    EXPECT_EQ(report["verdict"], "error") << id;
    EXPECT_EQ(testing::SchemaChecker(kReportSchema).errors(report), "") << id;
    const std::string reason = report["reason"];
    EXPECT_NE(reason.find(quote), std::string::npos) << mode << ": " << reason;
    EXPECT_NE(reason.find("engine fx-" + mode + " at " + base_ + "/" + mode), std::string::npos)
        << reason;
  }
  const json& last = reports.at("model=tiny,engine=http,dialect=sglang,batching=request");
  EXPECT_EQ(last["verdict"], "invariant") << last["reason"];
}

TEST_F(HttpEngine, PrefixCachingEmptiesTheServersCacheBeforeEachColdGeneration) {
  json engine = url_engine(base_ + "/ok", "llama.cpp");
  engine["reset_cache"] = "POST /flush_cache";  // after the url, as the dialect's path
  write(dir_ / "s.json", {{"engine", engine},
                          {"prefix_caching", {{"enabled", true}}},
                          {"plan", {{"prompts", {{"count", 2}}}, {"max_tokens", 2}}},
                          {"timeout_s", 60}});
  const auto r = run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto reports = reports_in(dir_ / "out");
  ASSERT_EQ(reports.size(), 1u) << r.output;
  const json& report = reports.begin()->second;
  EXPECT_EQ(report["verdict"], "invariant") << report["reason"];
  int cold = 0;
  for (const json& g : report["generations"]) cold += g["cache"] == "cold";
  EXPECT_GT(cold, 0);
  EXPECT_EQ(fixture_stats()["resets"], cold);
}
#endif

}  // namespace
}  // namespace bih::test_http_engine
