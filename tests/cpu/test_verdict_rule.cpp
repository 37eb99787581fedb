// Issue 19: one rule for what could not run here. For every pair of (expectation, verdict), with
// and without --require-all, `bih run`'s exit code, its table's mark and count, `bih gate`'s exit
// code and its JUnit XML say the same thing: met, missed, or not checked on this machine (and
// then counted with its reason, and a JUnit <skipped>).
//
// The reports are real: one `bih run` on the tiny preset gives invariant, error (debug.fault) and
// unsupported (NCCL ranks on the CUDA backend, no GPU here) reports; the batch_variant and
// nondeterministic ones are two of those reports carrying the comparisons of the bih-made reports
// in tests/data/matrix (the vendor and the arrival scenario), so that `bih run --resume` reads each
// verdict back as its own and the run's table and exit code come from the real driver.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "harness/expectations.hpp"
#include "harness/junit.hpp"
#include "harness/report.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"
#include "test_files.hpp"

namespace bih::test_verdict_rule {
namespace {

namespace fs = std::filesystem;
using testing::kSource;
using testing::read_text;
using testing::run_bih;
using testing::write_text;

constexpr const char* kMatrix = R"({
  "base": {"model": {"preset": "tiny"}, "parallel": {"tp": 1},
           "plan": {"prompts": {"count": 3, "min_len": 4, "max_len": 6}, "max_tokens": 2,
                    "batch_sizes": [1, 3], "repeats": 2}},
  "cases": [{"name": "inv"},
            {"name": "bv", "kernels": "vendor"},
            {"name": "nd", "collectives.all_reduce": "arrival"},
            {"name": "err", "debug.fault": "exit"},
            {"name": "uns", "backend": "cuda", "parallel.tp": 8, "parallel.ranks": "nccl"}]})";

const std::vector<Verdict> kVerdicts{Verdict::invariant, Verdict::batch_variant,
                                     Verdict::nondeterministic, Verdict::error,
                                     Verdict::unsupported};

nlohmann::json data_report(const std::string& needle) {
  for (const auto& e : fs::directory_iterator(kSource + "/tests/data/matrix")) {
    const std::string name = e.path().filename().string();
    if (name.find(needle) != std::string::npos) return read_json_file(e.path().string());
  }
  ADD_FAILURE() << "no report with " << needle << " in tests/data/matrix";
  return nullptr;
}

struct Fixture {
  fs::path dir, matrix, out;
  std::map<Verdict, std::string> id;   // the scenario that has this verdict
  std::map<Verdict, fs::path> report;  // its report file name inside `out`
  std::string unsupported_reason;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture f;
    f.dir = testing::fresh_dir("verdict-rule");
    f.matrix = f.dir / "m.json";
    write_text(f.matrix, kMatrix);
    f.out = f.dir / "out";
    const auto ran = run_bih({"run", f.matrix.string(), "--out", f.out.string()});
    EXPECT_NE(ran.exit_code, 2) << ran.output;
    const std::map<std::string, Verdict> by_name{{"inv", Verdict::invariant},
                                                 {"bv", Verdict::batch_variant},
                                                 {"nd", Verdict::nondeterministic},
                                                 {"err", Verdict::error},
                                                 {"uns", Verdict::unsupported}};
    const std::map<Verdict, std::string> source{{Verdict::batch_variant, "kernels=vendor"},
                                                {Verdict::nondeterministic, "ar=arrival"}};
    for (const auto& file : testing::report_files(f.out)) {
      nlohmann::json r = read_json_file(file.string());
      const Verdict v = by_name.at(r.at("scenario").at("name"));
      if (source.contains(v)) {  // real comparisons of a bih report that has this verdict
        r["comparisons"] = data_report(source.at(v)).at("comparisons");
        r["verdict"] = to_string(v);
        write_text(file, r.dump(2));
      }
      EXPECT_EQ(r.at("verdict"), to_string(v)) << file << "\n" << ran.output;
      f.id[v] = r.at("id");
      f.report[v] = file.filename();
      if (v == Verdict::unsupported) f.unsupported_reason = r.at("reason");
    }
    EXPECT_EQ(f.id.size(), 5u) << ran.output;
    return f;
  }();
  return f;
}

// The spec, written out: met when the verdict is the expected one (invariant without an
// expectation); unsupported under a declared expectation is not checked here, or a failure when
// the scenario must run; anything else is missed.
enum class Want { met, missed, unchecked };
Want want(std::optional<Verdict> expect, Verdict got, bool require_all) {
  if (got == expect.value_or(Verdict::invariant)) return Want::met;
  if (got == Verdict::unsupported && expect && !require_all) return Want::unchecked;
  return Want::missed;
}

std::string name_of(std::optional<Verdict> e) { return e ? to_string(*e) : "(none)"; }

// A --out folder for expectation `expect`: the fixture's reports with the scenario's `expect` set
// as the scenario file (with --set expect=...) resolves it, so that --resume takes them.
fs::path out_for(std::optional<Verdict> expect) {
  const Fixture& f = fixture();
  const fs::path out = f.dir / ("out-" + name_of(expect));
  fs::remove_all(out);
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(f.out)) {
    if (!e.is_regular_file() || e.path().extension() != ".json") continue;  // not OUT/.lock
    if (e.path().filename().string().rfind("manifest", 0) == 0) {
      fs::copy_file(e.path(), out / e.path().filename());
      continue;
    }
    nlohmann::json r = read_json_file(e.path().string());
    const nlohmann::json e_json = expect ? nlohmann::json(to_string(*expect)) : nlohmann::json();
    r["scenario"]["expect"] = e_json;
    r["expect"] = e_json;
    r["expect_met"] = expect ? nlohmann::json(r.at("verdict") == e_json) : nlohmann::json();
    write_text(out / e.path().filename(), r.dump(2));
  }
  return out;
}

// The table row of `id` in a run's output, and the totals line.
std::pair<std::string, std::string> row_and_totals(const std::string& output,
                                                   const std::string& id) {
  std::istringstream in(output);
  std::string row, totals;
  for (std::string line; std::getline(in, line);) {
    if (line.find(id + "  ") != std::string::npos && line.rfind("[", 0) != 0) row = line;
    if (line.find(" not as expected") != std::string::npos) totals = line;
  }
  return {row, totals};
}

// An exact-match --only filter: a glob matches the whole id (a plain filter is a substring, and
// the invariant case's id is a prefix of the others').
std::string exact(const std::string& id) { return id.substr(0, id.size() - 1) + "?"; }

TEST(VerdictRule, CheckExpectationTable) {
  using E = ExpectationCheck;
  const Verdict inv = Verdict::invariant, uns = Verdict::unsupported;
  EXPECT_EQ(check_expectation(inv, {inv, false, false}), E::met);
  EXPECT_EQ(check_expectation(uns, {inv, false, false}), E::missed);
  EXPECT_EQ(check_expectation(uns, {inv, true, false}), E::unchecked);
  EXPECT_EQ(check_expectation(uns, {inv, true, true}), E::required_unchecked);
  EXPECT_EQ(check_expectation(uns, {uns, true, true}), E::met);
  EXPECT_EQ(check_expectation(Verdict::error, {Verdict::batch_variant, true, false}), E::missed);
  EXPECT_EQ(unchecked_summary({"ranks nccl at tp=2 needs 2 GPUs\nmore",
                               "ranks nccl at tp=2 "
                               "needs 2 GPUs"}),
            "2 not checked on this machine: ranks nccl at tp=2 needs 2 GPUs");
}

TEST(VerdictRule, RunTableGateAndJUnitAgreeOnEveryPair) {
  const Fixture& f = fixture();
  ASSERT_EQ(f.id.size(), 5u);
  const std::string reason_line = f.unsupported_reason.substr(0, f.unsupported_reason.find('\n'));
  std::vector<std::optional<Verdict>> expectations{std::nullopt};
  for (Verdict v : kVerdicts) expectations.push_back(v);
  for (const auto& expect : expectations) {
    const fs::path out = out_for(expect);
    for (Verdict got : kVerdicts) {
      for (bool require_all : {false, true}) {
        const Want w = want(expect, got, require_all);
        const std::string pair = "expect " + name_of(expect) + ", got " + to_string(got) +
                                 (require_all ? ", --require-all" : "");
        // bih run: exit code, the row's mark, the totals line.
        std::vector<std::string> args{
            "run",      f.matrix.string(), "--only",    exact(f.id.at(got)),
            "--resume", "--out",           out.string()};
        if (expect) args.insert(args.end(), {"--set", "expect=" + to_string(*expect)});
        if (require_all) args.push_back("--require-all");
        const auto run = run_bih(args);
        const int run_fails = got == Verdict::error ? 3 : 1;
        EXPECT_EQ(run.exit_code, w == Want::missed ? run_fails : 0) << pair << "\n" << run.output;
        const auto [row, totals] = row_and_totals(run.output, f.id.at(got));
        const std::string mark = w == Want::missed      ? "✗"
                                 : w == Want::unchecked ? "○"
                                 : expect               ? "✓"
                                                        : "";
        if (mark.empty()) {
          EXPECT_EQ(row.rfind(" ", 0), 0u) << pair << "\n" << run.output;
        } else {
          EXPECT_EQ(row.rfind(mark, 0), 0u) << pair << ": " << row << "\n" << run.output;
        }
        EXPECT_NE(totals.find(w == Want::missed ? "; 1 not as expected" : "; 0 not as expected"),
                  std::string::npos)
            << pair << ": " << totals;
        const bool counted =
            totals.find("1 not checked on this machine: " + reason_line) != std::string::npos;
        EXPECT_EQ(counted, w == Want::unchecked) << pair << ": " << totals;

        // bih gate (--strict: a missed expectation fails even when the news is good, as the run
        // says) and its JUnit XML, on the same report.
        const fs::path exp = out / "exp.json";
        write_text(
            exp,
            expect
                ? R"({"schema": "bih.expectations/1", "expectations": [{"id": "*", "verdict": ")" +
                      to_string(*expect) + R"("}]})"
                : R"({"schema": "bih.expectations/1", "expectations": []})");
        const fs::path xml = out / "gate.xml";
        fs::remove(xml);
        std::vector<std::string> gate_args{"gate",
                                           "--strict",
                                           "--expect",
                                           exp.string(),
                                           "--junit",
                                           xml.string(),
                                           (out / f.report.at(got)).string()};
        if (require_all) gate_args.push_back("--require-all");
        const auto gate = run_bih(gate_args);
        EXPECT_EQ(gate.exit_code, w == Want::missed ? 1 : 0) << pair << "\n" << gate.output;
        EXPECT_EQ(
            gate.output.find("1 not checked on this machine: " + reason_line) != std::string::npos,
            w == Want::unchecked)
            << pair << "\n"
            << gate.output;
        const std::string junit = read_text(xml);
        EXPECT_EQ(junit.find("<failure ") != std::string::npos, w == Want::missed) << pair << "\n"
                                                                                   << junit;
        const bool skipped = junit.find("<skipped ") != std::string::npos;
        // An expected unsupported that is unsupported checked nothing either: skipped, as before.
        EXPECT_EQ(skipped, w == Want::unchecked || (w == Want::met && got == Verdict::unsupported))
            << pair << "\n"
            << junit;
        if (w == Want::unchecked) {
          EXPECT_NE(junit.find("not checked on this machine"), std::string::npos) << junit;
          EXPECT_NE(junit.find(xml_escape(reason_line, true)), std::string::npos) << junit;
        }
        // Without --strict only a good surprise (an expected variance that went away) differs:
        // a warning, not a failure.
        gate_args.erase(gate_args.begin() + 1);
        const auto lenient = run_bih(gate_args);
        const bool good_news = w == Want::missed && got == Verdict::invariant;
        EXPECT_EQ(lenient.exit_code, w == Want::missed && !good_news ? 1 : 0) << pair << "\n"
                                                                              << lenient.output;
      }
    }
  }
}

// The strict mode's other two spellings: an entry's "require" and the file's "require_all".
TEST(VerdictRule, RequireInTheExpectationsFileNamesWhatIsMissing) {
  const Fixture& f = fixture();
  const fs::path out = out_for(Verdict::invariant);
  const std::string report = (out / f.report.at(Verdict::unsupported)).string();
  const std::string reason_line = f.unsupported_reason.substr(0, f.unsupported_reason.find('\n'));
  struct Case {
    std::string text;
    std::string names;
  };
  const std::vector<Case> cases{
      {R"({"schema": "bih.expectations/1", "expectations": [{"id": "*", "verdict": "invariant", "require": true}]})",
       "\"require\": true"},
      {R"({"schema": "bih.expectations/1", "require_all": true, "expectations": []})",
       "\"require_all\": true"}};
  for (const Case& c : cases) {
    const fs::path exp = out / "req.json";
    write_text(exp, c.text);
    const auto gate = run_bih({"gate", "--expect", exp.string(), report});
    EXPECT_EQ(gate.exit_code, 1) << c.text << "\n" << gate.output;
    EXPECT_NE(gate.output.find(reason_line), std::string::npos) << gate.output;
    EXPECT_NE(gate.output.find(c.names), std::string::npos) << gate.output;
  }
  // Without either, the same report is not checked here, and the gate passes.
  const fs::path exp = out / "plain.json";
  write_text(exp, R"({"schema": "bih.expectations/1", "expectations": []})");
  const auto gate = run_bih({"gate", "--expect", exp.string(), report});
  EXPECT_EQ(gate.exit_code, 0) << gate.output;
  // A "require" that is not a boolean is bad input, named.
  write_text(
      exp,
      R"({"schema": "bih.expectations/1", "expectations": [{"id": "*", "verdict": "invariant", "require": "yes"}]})");
  const auto bad = run_bih({"gate", "--expect", exp.string(), report});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("/expectations/0/require"), std::string::npos) << bad.output;
}

// Issue 15's naming items. The terminal's run-to-run column says whether it shows the repeat or
// the fresh-process comparison; a command engine's report gets no null row or column in
// `bih matrix` (its absent knobs are the engine's defaults) and a JUnit class of its own.
TEST(ReportNaming, TheRunToRunColumnNamesItsComparison) {
  const fs::path dir = testing::fresh_dir("naming-fresh");
  write_text(dir / "s.json", R"({"model": {"preset": "tiny"}, "parallel": {"tp": 1},
    "plan": {"prompts": {"count": 2, "min_len": 4, "max_len": 6}, "max_tokens": 2,
             "batch_sizes": [1, 2], "repeats": 1, "fresh_process": true}})");
  const auto fresh = run_bih({"run", (dir / "s.json").string(), "--out", (dir / "a").string()});
  EXPECT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_NE(fresh.output.find("  fresh: 0/4 logprobs differ"), std::string::npos) << fresh.output;
  write_text(dir / "r.json", R"({"model": {"preset": "tiny"}, "parallel": {"tp": 1},
    "plan": {"prompts": {"count": 2, "min_len": 4, "max_len": 6}, "max_tokens": 2,
             "batch_sizes": [1, 2], "repeats": 2}})");
  const auto repeat = run_bih({"run", (dir / "r.json").string(), "--out", (dir / "b").string()});
  EXPECT_EQ(repeat.exit_code, 0) << repeat.output;
  EXPECT_NE(repeat.output.find("  repeat: 0/4 logprobs differ"), std::string::npos)
      << repeat.output;
}

TEST(ReportNaming, ACommandEngineHasNoNullAxesAndItsOwnJUnitClass) {
  const fs::path dir = testing::fresh_dir("naming-command");
  setenv("BIH_CACHE_DIR", (dir / "cache").c_str(), 1);
  const std::string adapter = kSource + "/tests/data/adapters/faulty_adapter.py";
  write_text(dir / "s.json", R"({"model": {"preset": "tiny"},
    "engine": {"kind": "command", "name": "faulty.v2", "command": ["python3", ")" +
                                 adapter + R"("], "options": {"fault": "none"}},
    "plan": {"prompts": {"count": 2, "min_len": 4, "max_len": 6}, "max_tokens": 2,
             "batch_sizes": [1, 2], "repeats": 2}})");
  const auto run = run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto matrix = run_bih(
      {"matrix", (dir / "out").string(), "--out", (dir / "m").string(), "--format", "json"});
  ASSERT_EQ(matrix.exit_code, 0) << matrix.output;
  const nlohmann::json view = read_json_file((dir / "m" / "matrix.json").string());
  const std::string text = view.dump();
  EXPECT_EQ(text.find("=null"), std::string::npos) << text;
  EXPECT_NE(text.find("tp=default"), std::string::npos) << text;
  EXPECT_NE(text.find("engine=faulty.v2"), std::string::npos) << text;
  write_text(dir / "exp.json", R"({"schema": "bih.expectations/1", "expectations": []})");
  const fs::path xml = dir / "gate.xml";
  const auto gate = run_bih({"gate", "--expect", (dir / "exp.json").string(), "--junit",
                             xml.string(), (dir / "out").string()});
  EXPECT_EQ(gate.exit_code, 0) << gate.output;
  const std::string junit = read_text(xml);
  EXPECT_NE(junit.find("classname=\"bih.command.faulty_v2\""), std::string::npos) << junit;
  EXPECT_EQ(junit.find("bih.unknown"), std::string::npos) << junit;
}

}  // namespace
}  // namespace bih::test_verdict_rule
