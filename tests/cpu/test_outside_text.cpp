// test_outside_text.cpp: text from outside bih (an adapter's lines and stderr, paths, the host)
// never ends the run: bytes that are not UTF-8 end one scenario as its `error` (or change nothing
// when only stderr had them), the scenarios after it run, and every report is valid JSON. The
// adapter is tests/data/adapters/text_adapter.py.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "base/json_file.hpp"
#include "base/utf8.hpp"
#include "engines/engine_protocol.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"

namespace bih::test_outside_text {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fresh_dir;
using testing::report_files;
using testing::run_bih;

const std::string kAdapter = std::string(BIH_SOURCE_DIR) + "/tests/data/adapters/text_adapter.py";

json text_engine(const std::string& mode) {
  return {{"kind", "command"},
          {"name", "text"},
          {"command", {"python3", kAdapter}},
          {"options", {{"mode", mode}}},
          {"reply_timeout_s", 20}};
}

json small_plan() { return {{"prompts", {{"count", 2}}}, {"max_tokens", 2}}; }

void write(const fs::path& path, const json& j) { std::ofstream(path) << j.dump(2); }

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Whether nlohmann can dump the string: the rule every report has to meet.
bool dumps(const std::string& text) {
  try {
    (void)json(text).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

TEST(Utf8, AgreesWithWhatJsonDumpAccepts) {
  // Random short byte strings, biased to the bytes where UTF-8's rules live.
  std::mt19937 rng(7);
  const std::vector<uint8_t> interesting{0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0,
                                         0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED,
                                         0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF};
  int valid = 0;
  for (int n = 0; n < 200000; ++n) {
    std::string s;
    const int len = static_cast<int>(rng() % 6);
    for (int i = 0; i < len; ++i) s += static_cast<char>(interesting[rng() % interesting.size()]);
    ASSERT_EQ(is_valid_utf8(s), dumps(s)) << "bytes: " << valid_utf8(s);
    valid += is_valid_utf8(s);
    const std::string repaired = valid_utf8(s);
    ASSERT_TRUE(dumps(repaired)) << repaired;
    if (is_valid_utf8(s)) {
      ASSERT_EQ(repaired, s);
    }
  }
  EXPECT_GT(valid, 1000);  // both sides of the rule were exercised
}

TEST(Utf8, RepairShowsTheByteAndCutsKeepCharactersWhole) {
  EXPECT_EQ(valid_utf8("m\xe9moire"), "m\\xE9moire");
  EXPECT_EQ(valid_utf8("caf\xc3\xa9"), "caf\xc3\xa9");       // é in UTF-8 stays
  EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "\\xED\\xA0\\x80");  // a surrogate is not UTF-8
  EXPECT_EQ(valid_utf8("\xc0\xaf"), "\\xC0\\xAF");           // nor an overlong '/'
  EXPECT_EQ(cut_utf8("a\xc3\xa9", 2), "a");                  // not "a\xc3"
  EXPECT_EQ(cut_utf8("a\xc3\xa9", 3), "a\xc3\xa9");
  EXPECT_EQ(cut_utf8("\xe9\xe9\xe9", 2), "\xe9\xe9");  // a bad byte counts as one
}

TEST(OutsideText, QuotesOfAdapterTextAreValidUtf8) {
  // A Latin-1 byte, and a UTF-8 text whose cut at the limit falls inside a character: both
  // produced invalid UTF-8 before (the raw byte; half an 'é').
  std::string long_text = "a";
  for (int i = 0; i < 150; ++i) long_text += "\xc3\xa9";
  for (const std::string& text : {std::string("m\xe9moire"), long_text}) {
    const std::string quoted = protocol::quote_text(text, 200);
    EXPECT_TRUE(is_valid_utf8(quoted)) << quoted;
  }
  try {
    protocol::parse_line("{\"type\": \"error\", \"message\": \"m\xe9moire\"}");
    FAIL() << "a line that is not UTF-8 is a protocol error";
  } catch (const protocol::ProtocolError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(is_valid_utf8(what)) << what;
    EXPECT_NE(what.find("not valid UTF-8 (byte 0xE9 at offset 31)"), std::string::npos) << what;
    EXPECT_NE(what.find("m\\xE9moire"), std::string::npos) << what;
  }
}

class OutsideTextRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    setenv("BIH_CACHE_DIR", (dir_ / "cache").c_str(), 1);
  }
  std::map<std::string, json> reports() const {
    std::map<std::string, json> out;
    for (const auto& f : report_files(dir_ / "out")) {
      const std::string bytes = read_bytes(f);
      EXPECT_TRUE(is_valid_utf8(bytes)) << f;
      json r = read_json_file(f.string());
      out[r["id"].get<std::string>()] = r;
    }
    return out;
  }
  fs::path dir_;
};

TEST_F(OutsideTextRun, BadBytesFromAnAdapterEndOnlyItsScenarioAndTheRunGoesOn) {
  // mode -> (verdict, a piece of the reason only that case gives)
  const std::vector<std::tuple<std::string, std::string, std::string>> cases{
      {"latin1_error", "error", "m\\xE9moire insuffisante"},
      {"latin1_hello", "error", "caf\\xE9"},
      {"latin1_progress", "error", "\\xE9tape 1"},
      {"latin1_crash", "error", "erreur fatale: d\\xE9passement"},
      {"long_utf8_error", "error", "(cut; 3001 bytes)"},
      {"latin1_stderr", "invariant", ""}};
  json axis = json::array();
  for (const auto& [mode, verdict, quote] : cases) axis.push_back(mode);
  write(dir_ / "text.json",
        {{"base", {{"engine", text_engine("")}, {"plan", small_plan()}, {"timeout_s", 60}}},
         {"axes", {{"engine.options.mode", axis}}}});
  // The second file runs after every failure: bih's own engine, in the same invocation.
  write(dir_ / "after.json", {{"plan", small_plan()}});
  // Every error is unexpected here: exit 3, and the run still reaches the last file.
  const auto r = run_bih({"run", (dir_ / "text.json").string(), (dir_ / "after.json").string(),
                          "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  const auto got = reports();
  ASSERT_EQ(got.size(), cases.size() + 1) << r.output;
  for (const auto& [mode, verdict, quote] : cases) {
    const std::string id = "model=tiny,engine=text(mode=" + mode + ")";
    ASSERT_TRUE(got.count(id)) << id << "\n" << r.output;
    const json& report = got.at(id);
    EXPECT_EQ(report["verdict"], verdict) << id << ": " << report.value("reason", "");
    if (quote.empty()) continue;
    const std::string reason = report["reason"];
    EXPECT_NE(reason.find(quote), std::string::npos) << mode << ": " << reason;
    // The adapter's stderr tail is quoted once, not twice.
    const std::string tail_line = "text adapter: mode=" + mode;
    const size_t first = reason.find(tail_line);
    EXPECT_NE(first, std::string::npos) << mode << ": " << reason;
    EXPECT_EQ(reason.find(tail_line, first + 1), std::string::npos) << mode << ": " << reason;
  }
  const std::string bih_id =
      "tp=1,sp=off,ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";
  ASSERT_TRUE(got.count(bih_id)) << r.output;
  EXPECT_EQ(got.at(bih_id)["verdict"], "invariant");
}

TEST_F(OutsideTextRun, TheTerminalShowsTheStderrTailAndTheWorkFolderOfAFailureStays) {
  write(dir_ / "crash.json", {{"engine", text_engine("latin1_crash")},
                              {"plan", small_plan()},
                              {"timeout_s", 60}});  // no expect: the error is not as expected
  write(dir_ / "expected.json", {{"engine", text_engine("latin1_error")},
                                 {"plan", small_plan()},
                                 {"timeout_s", 60},
                                 {"expect", "error"}});
  const auto r = run_bih({"run", (dir_ / "crash.json").string(), (dir_ / "expected.json").string(),
                          "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  // The terminal's line for the crash goes on past "last lines of its stderr:" to the lines.
  const size_t head = r.output.find("engine=text(mode=latin1_crash) -> error");
  ASSERT_NE(head, std::string::npos) << r.output;
  const size_t tail = r.output.find("| erreur fatale: d\\xE9passement", head);
  EXPECT_NE(tail, std::string::npos) << r.output;
  EXPECT_LT(tail, r.output.find("engine=text(mode=latin1_error) -> error")) << r.output;
  // The failed scenario keeps its work folder with the adapter's log; the expected error does
  // not (no --keep-work).
  const auto got = reports();
  std::vector<std::string> kept;
  if (fs::exists(dir_ / "out" / "work")) {
    for (const auto& e : fs::directory_iterator(dir_ / "out" / "work")) {
      kept.push_back(e.path().filename().string());
      bool has_log = false;
      for (const auto& f : fs::directory_iterator(e.path())) {
        has_log = has_log || f.path().filename().string().rfind("adapter-", 0) == 0;
      }
      EXPECT_TRUE(has_log) << e.path();
    }
  }
  ASSERT_EQ(kept.size(), 1u) << r.output;
  EXPECT_NE(kept[0].find("latin1_crash"), std::string::npos) << kept[0];
  EXPECT_NE(r.output.find("its work folder is kept"), std::string::npos) << r.output;
}

TEST_F(OutsideTextRun, APathThatIsNotUtf8IsAUsageErrorNamingIt) {
  // A scenario file in a folder whose name is Latin-1: the adapter's default working directory
  // (and the report) would carry those bytes. Before: internal error type_error.316, exit 3.
  const fs::path folder = dir_ / "caf\xe9";
  fs::create_directories(folder);
  write(folder / "s.json", {{"engine", text_engine("")}, {"plan", small_plan()}});
  const auto r = run_bih({"run", (folder / "s.json").string(), "--out", (dir_ / "out").string()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/engine/cwd"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("caf\\xE9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not valid UTF-8"), std::string::npos) << r.output;
}

TEST_F(OutsideTextRun, BihsOwnMessagesOnTheTerminalAreUtf8) {
  // The file name and the parser's "last read" quote the file's own bytes; the terminal (and a CI
  // log that a tool parses as UTF-8) gets them as visible \xNN. Before: the raw bytes.
  const fs::path folder = dir_ / "caf\xe9";
  fs::create_directories(folder);
  std::ofstream(folder / "bad.json") << "\xff\xfe{}";
  const auto r = run_bih({"list", (folder / "bad.json").string()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(is_valid_utf8(r.output)) << valid_utf8(r.output);
  EXPECT_NE(r.output.find("caf\\xE9/bad.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\\xFF"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace bih::test_outside_text
