// Faults the suite once missed: a broken model certified as invariant, Ctrl-C leaving workers
// behind, a fresh-process comparison that mixed prefix-cache states, and a set of places where a
// plausible wrong change (an audit made them) went unnoticed. Each test here fails on that change.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"
#include "harness/health.hpp"
#include "harness/report.hpp"
#include "models/comm/emulated.hpp"
#include "models/engine.hpp"
#include "models/kv_cache.hpp"
#include "models/weights.hpp"
#include "run_bih.hpp"
#include "schema_check.hpp"
#include "spec/plan.hpp"
#include "test_files.hpp"

namespace bih::test_faults {
namespace {

namespace fs = std::filesystem;
using testing::kSource;
using testing::read_text;
using testing::write_text;
using namespace std::chrono_literals;

// The one report in `dir`.
nlohmann::json only_report(const fs::path& dir) {
  const auto files = testing::report_files(dir);
  EXPECT_EQ(files.size(), 1u) << dir;
  return files.empty() ? nlohmann::json() : read_json_file(files[0].string());
}

// ---------------------------------------------------------------------------------------------
// A broken model is never certified

// The tiny preset with every weight set to `value`, saved as a checkpoint folder.
fs::path broken_checkpoint(const fs::path& dir, float value) {
  ModelWeights w = synthetic_weights(*preset_config("tiny"), 0);
  for (auto& [name, tensor] : tensors_by_name(w)) {
    auto* values = const_cast<std::vector<bf16>*>(tensor);
    for (bf16& v : *values) v = to_bf16(value);
  }
  const fs::path folder = dir / "ckpt";
  save_checkpoint(w, folder.string());
  return folder;
}

std::string checkpoint_scenario(const fs::path& ckpt, const std::string& extra = "") {
  return R"({"model": {"path": ")" + ckpt.string() + R"("}, "parallel": {"tp": 1},
    "plan": {"prompts": {"count": 4, "min_len": 8, "max_len": 12}, "max_tokens": 4,
             "batch_sizes": [1, 4], "repeats": 2})" +
         extra + "}";
}

TEST(Health, NanCheckpointIsAnErrorNotInvariant) {
  const auto dir = testing::fresh_dir("health-nan");
  write_text(dir / "s.json", checkpoint_scenario(broken_checkpoint(dir, NAN)));
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("-> error"), std::string::npos) << r.output;
  const nlohmann::json report = only_report(dir / "out");
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report.at("verdict"), "error");
  const std::string reason = report.at("reason");
  EXPECT_NE(reason.find("non-finite logprobs in 16 of 16 tokens (first: prompt 0 step 0)"),
            std::string::npos)
      << reason;
  EXPECT_EQ(report.at("health").at("healthy"), false);
  EXPECT_EQ(report.at("health").at("generations")[0].at("non_finite"), 16);
  // The comparisons are still there (all identical: exactly what made it look invariant).
  EXPECT_EQ(report.at("comparisons")[0].at("identical"), true);
  EXPECT_EQ(testing::SchemaChecker(kSource + "/reports/report.schema.json").errors(report), "");

  // The gate and its JUnit fail it too.
  write_text(dir / "expect.json", R"({"schema": "bih.expectations/1", "expectations": []})");
  const auto g = testing::run_bih({"gate", "--expect", (dir / "expect.json").string(),
                                   (dir / "out").string(), "--junit", (dir / "j.xml").string()});
  EXPECT_EQ(g.exit_code, 1) << g.output;
  EXPECT_NE(read_text(dir / "j.xml").find("<failure"), std::string::npos)
      << read_text(dir / "j.xml");
}

TEST(Health, ExpectedErrorOfABrokenModelPasses) {
  const auto dir = testing::fresh_dir("health-expected");
  write_text(dir / "s.json",
             checkpoint_scenario(broken_checkpoint(dir, NAN), R"(, "expect": "error")"));
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(Health, DegenerateOutputIsAnError) {
  // All-zero weights: every logit 0, so greedy picks token 0 everywhere with a finite logprob.
  const auto dir = testing::fresh_dir("health-zero");
  write_text(dir / "s.json", checkpoint_scenario(broken_checkpoint(dir, 0.0f)));
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  const nlohmann::json report = only_report(dir / "out");
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report.at("verdict"), "error");
  EXPECT_NE(report.at("reason").get<std::string>().find(
                "degenerate greedy output: all 16 tokens of all 4 sequences are token 0"),
            std::string::npos)
      << report.at("reason");
  EXPECT_EQ(report.at("health").at("generations")[0].at("non_finite"), 0);
}

TEST(Health, HealthyTinyModelStaysInvariant) {
  const auto dir = testing::fresh_dir("health-ok");
  write_text(dir / "s.json", R"({"model": {"preset": "tiny"}, "parallel": {"tp": 1},
    "plan": {"prompts": {"count": 4, "min_len": 8, "max_len": 12}, "max_tokens": 4,
             "batch_sizes": [1, 4], "repeats": 2}})");
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(only_report(dir / "out").at("health").at("healthy"), true);
}

Generation generation_of(std::vector<std::vector<float>> values, std::vector<int32_t> tokens) {
  Generation g;
  g.label = "bs=1";
  for (auto& v : values) {
    SequenceOutput s;
    s.prompt = {1, 2};
    s.tokens = tokens;
    s.logprobs = std::move(v);
    g.sequences.push_back(std::move(s));
  }
  return g;
}

TEST(Health, ExternalEngineValuesAreChecked) {
  // A probability outside [0, 1] or an infinite logprob: what an adapter could hand back.
  const Generation probs = generation_of({{0.5f, 1.5f}, {0.25f, -0.1f}}, {3, 4});
  Health h = check_health({&probs}, "probability");
  EXPECT_FALSE(h.healthy());
  EXPECT_EQ(h.generations[0].out_of_range, 2);
  EXPECT_EQ(h.generations[0].first_bad, (std::pair<int, int>{0, 1}));
  // The same numbers as logprobs are finite: no range rule for them.
  EXPECT_TRUE(check_health({&probs}, "logprob").healthy());
  const Generation inf =
      generation_of({{-1.0f, -std::numeric_limits<float>::infinity()}, {-2.0f, -3.0f}}, {3, 4});
  h = check_health({&inf}, "logprob");
  ASSERT_EQ(h.problems.size(), 1u);
  EXPECT_EQ(h.problems[0], "bs=1: non-finite logprobs in 1 of 4 tokens (first: prompt 0 step 1)");
}

// ---------------------------------------------------------------------------------------------
// Interruption leaves nothing running

// Pids of live processes (not zombies) whose command line contains `needle`.
std::set<pid_t> processes_mentioning(const std::string& needle) {
  std::set<pid_t> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_text(e.path() / "cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (cmdline.find(needle) != std::string::npos) pids.insert(std::stoi(name));
  }
  return pids;
}

struct Started {
  pid_t pid;
  fs::path log;
};

// Starts `bih run` on a scenario whose batch generation hangs, in its own process group (as a
// shell runs a foreground job), with stdout and stderr to a log.
Started start_hanging_run(const fs::path& dir, const std::string& extra_args = "") {
  write_text(dir / "s.json", R"({"model": {"preset": "tiny"}, "parallel": {"tp": 2},
    "plan": {"prompts": {"count": 2, "min_len": 8, "max_len": 8}, "max_tokens": 2,
             "batch_sizes": [1, 2], "repeats": 2}, "timeout_s": 300, "debug": {"fault": "hang"}})");
  const fs::path log = dir / "log.txt";
  const std::string out = (dir / "out").string();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    freopen(log.c_str(), "w", stdout);
    dup2(fileno(stdout), STDERR_FILENO);
    execl(BIH_BINARY, BIH_BINARY, "run", (dir / "s.json").c_str(), "--out", out.c_str(),
          extra_args.empty() ? nullptr : extra_args.c_str(), nullptr);
    _exit(127);
  }
  return {pid, log};
}

// Waits until the worker (a process naming the out folder's work path) runs.
pid_t wait_for_worker(const fs::path& dir) {
  const std::string needle = (dir / "out" / "work").string();
  for (int i = 0; i < 600; ++i) {
    const auto pids = processes_mentioning(needle);
    if (!pids.empty()) return *pids.begin();
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

// Waits until the worker reaches its hang: after bs=1's last progress line it writes nothing
// more (a worker that still writes would die of SIGPIPE with its driver, proving nothing).
void wait_for_silent_phase(const fs::path& log) {
  for (int i = 0; i < 200 && read_text(log).find("bs=1: 2/2") == std::string::npos; ++i) {
    std::this_thread::sleep_for(50ms);
  }
  std::this_thread::sleep_for(300ms);
}

bool gone_within(const std::string& needle, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (processes_mentioning(needle).empty()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return processes_mentioning(needle).empty();
}

void expect_interrupt_stops_everything(int sig, int expected_exit, const std::string& name) {
  const auto dir = testing::fresh_dir("interrupt-" + name);
  const Started run = start_hanging_run(dir);
  const pid_t worker = wait_for_worker(dir);
  ASSERT_GT(worker, 0) << read_text(run.log);
  wait_for_silent_phase(run.log);
  ASSERT_EQ(kill(run.pid, sig), 0);
  int status = 0;
  ASSERT_EQ(waitpid(run.pid, &status, 0), run.pid);
  const std::string log = read_text(run.log);
  ASSERT_TRUE(WIFEXITED(status)) << "the driver must exit, not die of the signal\n" << log;
  EXPECT_EQ(WEXITSTATUS(status), expected_exit) << log;
  EXPECT_NE(log.find("interrupted by " + name + " during scenario [1/1] tp=2"), std::string::npos)
      << log;
  EXPECT_NE(log.find("(phase: "), std::string::npos) << log;
  EXPECT_NE(log.find("--resume and the same --out " + (dir / "out").string()), std::string::npos)
      << log;
  EXPECT_TRUE(gone_within((dir / "out").string(), 3s)) << "worker " << worker << " left running";
  EXPECT_TRUE(testing::report_files(dir / "out").empty()) << "no report for an interrupted run";
}

TEST(Interrupt, SigintStopsTheWorkersAndExits130) {
  expect_interrupt_stops_everything(SIGINT, 130, "SIGINT");
}

TEST(Interrupt, SigtermStopsTheWorkersAndExits143) {
  expect_interrupt_stops_everything(SIGTERM, 143, "SIGTERM");
}

TEST(Interrupt, WorkersDieWithAKilledDriver) {
  const auto dir = testing::fresh_dir("interrupt-kill");
  const Started run = start_hanging_run(dir);
  const pid_t worker = wait_for_worker(dir);
  ASSERT_GT(worker, 0) << read_text(run.log);
  wait_for_silent_phase(run.log);
  ASSERT_EQ(kill(run.pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(run.pid, &status, 0), run.pid);
  EXPECT_TRUE(gone_within((dir / "out").string(), 5s))
      << "worker " << worker << " outlived its SIGKILLed driver";
}

// ---------------------------------------------------------------------------------------------
// Cache state is part of the plan

TEST(CachePlan, PrefixCachingComparesColdWithColdAndWarmSeparately) {
  PlanSpec spec;
  spec.batch_sizes = {1, 64};
  spec.repeats = 2;
  spec.fresh_process = true;
  const Plan off = make_plan(spec, false);
  for (const auto& g : off.in_process) EXPECT_EQ(g.cache, "") << g.label;
  EXPECT_EQ(off.comparisons.size(), 3u);

  const Plan on = make_plan(spec, true);
  std::vector<std::string> labels, states;
  for (const auto& g : on.in_process) {
    labels.push_back(g.label);
    states.push_back(g.cache);
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"bs=1", "bs=64", "bs=64#2", "bs=64(warm)"}));
  EXPECT_EQ(states, (std::vector<std::string>{"cold", "cold", "cold", "warm"}));
  ASSERT_EQ(on.fresh.size(), 1u);
  EXPECT_EQ(on.fresh[0].cache, "cold");
  std::map<std::string, std::string> state_of;
  for (const auto* list : {&on.in_process, &on.fresh}) {
    for (const auto& g : *list) state_of[g.label] = g.cache;
  }
  for (const auto& c : on.comparisons) {
    if (c.kind == "cache") {
      EXPECT_EQ(state_of[c.a], "cold");
      EXPECT_EQ(state_of[c.b], "warm");
    } else {
      EXPECT_EQ(state_of[c.a], state_of[c.b]) << c.kind << ": " << c.a << " vs " << c.b;
    }
  }
  EXPECT_EQ(on.comparisons.back().kind, "cache");
}

std::map<std::string, nlohmann::json> comparisons_by_kind(const nlohmann::json& report) {
  std::map<std::string, nlohmann::json> by_kind;
  for (const auto& c : report.at("comparisons")) by_kind[c.at("kind")] = c;
  return by_kind;
}

TEST(CachePlan, FullServingScenarioWithAFreshProcessIsNotNondeterministic) {
  // The README's full serving configuration (TP=4, SP ring, prefix caching, full graphs) with the
  // fresh-process run: the fresh process starts cold, and so does the batch it is compared with.
  const auto dir = testing::fresh_dir("cache-full-serving");
  const auto r =
      testing::run_bih({"run", kSource + "/scenarios/issue-56370.json", "--only",
                        "tp=4,sp=on(min=1),*prefix=on*", "--set", "plan.fresh_process=true",
                        "--set", "plan.prompts.count=16", "--out", (dir / "out").string()});
  const auto files = testing::report_files(dir / "out");
  ASSERT_EQ(files.size(), 2u) << r.output;
  for (const auto& f : files) {
    const nlohmann::json report = read_json_file(f.string());
    const std::string id = report.at("id");
    EXPECT_NE(report.at("verdict"), "nondeterministic") << id << "\n" << r.output;
    auto by_kind = comparisons_by_kind(report);
    ASSERT_TRUE(by_kind.contains("fresh")) << id;
    ASSERT_TRUE(by_kind.contains("cache")) << id;
    EXPECT_EQ(by_kind["fresh"].at("identical"), true) << id;
    EXPECT_EQ(by_kind["repeat"].at("identical"), true) << id;
    std::set<std::string> states;
    for (const auto& g : report.at("generations")) states.insert(g.at("cache").get<std::string>());
    EXPECT_EQ(states, (std::set<std::string>{"cold", "warm"})) << id;
    if (id.find("rs=ring") != std::string::npos) {
      EXPECT_EQ(report.at("verdict"), "batch_variant") << id;
      // Warm vs cold moves the bits here (a prefix hit shifts which rank owns a row): a finding
      // of its own kind, never nondeterminism.
      EXPECT_EQ(by_kind["cache"].at("identical"), false) << id;
    } else {
      EXPECT_EQ(report.at("verdict"), "invariant") << id;
      EXPECT_EQ(by_kind["cache"].at("identical"), true) << id;
    }
    EXPECT_EQ(testing::SchemaChecker(kSource + "/reports/report.schema.json").errors(report), "");
  }
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// ---------------------------------------------------------------------------------------------
// Audit: each of these fails on a plausible wrong change

std::vector<int32_t> block(int32_t base, int n = 4) {
  std::vector<int32_t> b(n);
  for (int i = 0; i < n; ++i) b[i] = base + i;
  return b;
}

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(PrefixCacheAudit, SameBlockAfterAnotherPrefixNeverHits) {
  // Block Y cached as the second block of [X, Y] must not serve Y as the first block of [Y, W] or
  // after another prefix [Z, Y]: its KV depends on every token before it.
  EXPECT_NE(BlockManager::block_hash(1, block(10)), BlockManager::block_hash(2, block(10)));
  BlockManager m(64, 4, true);
  const auto X = block(100), Y = block(200), Z = block(300), W = block(400);
  const std::vector<int32_t> first = concat({X, Y, {7}});
  std::vector<int32_t> table;
  m.ensure_capacity(static_cast<int>(first.size()), table);
  int registered = 0;
  m.register_full_blocks(first, static_cast<int>(first.size()), table, registered);
  m.release(table);

  std::vector<int32_t> t2;
  EXPECT_EQ(m.acquire_prefix(concat({Y, W, {7}}), t2), 0) << "Y at offset 0 hit Y at offset 4";
  m.release(t2);
  std::vector<int32_t> t3;
  EXPECT_EQ(m.acquire_prefix(concat({Z, Y, {7}}), t3), 0);
  m.release(t3);
  std::vector<int32_t> t4;
  EXPECT_EQ(m.acquire_prefix(concat({X, Y, {8}}), t4), 8) << "the real prefix must still hit";
  m.release(t4);
}

std::shared_ptr<const ModelWeights> tiny() {
  static auto w =
      std::make_shared<const ModelWeights>(synthetic_weights(*preset_config("tiny"), 0));
  return w;
}

std::vector<SequenceResult> run_engine(bool prefix, const std::vector<std::vector<int32_t>>& a,
                                       const std::vector<std::vector<int32_t>>& b) {
  EngineOptions o;
  o.tp = 1;
  o.prefix_caching = prefix;
  o.block_size = 16;
  EmulatedGroup group(1, {});
  Engine e(tiny(), o, {&group.rank(0)});
  e.generate(a, 4);
  return e.generate(b, 4);
}

TEST(PrefixCacheAudit, RepeatedBlockAtAnotherOffsetGivesTheUncachedTokens) {
  // Through the engine: the first request caches [X, Y]; the second starts with Y. A hit on Y
  // would attend to KV computed after X and change the greedy tokens.
  std::vector<int32_t> X(16), Y(16), tail{5, 6, 7};
  for (int i = 0; i < 16; ++i) {
    X[i] = 11 + 37 * i;
    Y[i] = 900 + 13 * i;
  }
  const std::vector<std::vector<int32_t>> a{concat({X, Y, tail})}, b{concat({Y, tail})};
  const auto cached = run_engine(true, a, b);
  const auto plain = run_engine(false, a, b);
  ASSERT_EQ(cached.size(), 1u);
  EXPECT_EQ(cached[0].tokens, plain[0].tokens);
  for (size_t t = 0; t < plain[0].logprobs.size(); ++t) {
    EXPECT_EQ(std::bit_cast<uint32_t>(cached[0].logprobs[t]),
              std::bit_cast<uint32_t>(plain[0].logprobs[t]))
        << "step " << t;
  }
}

TEST(NormAudit, PerturbedNormsMatchTheFp64Reference) {
  // With every norm weight 1.0 a q_norm applied to the k heads computes the same thing; norms
  // drawn around 1 make the engine and the fp64 reference disagree on such a swap.
  auto w = std::make_shared<const ModelWeights>(
      synthetic_weights(*preset_config("tiny"), 3, NormInit::perturbed));
  for (int tp : {1, 2}) {
    EngineOptions o;
    o.tp = tp;
    EmulatedGroup group(tp, {});
    std::vector<Communicator*> comms;
    for (int r = 0; r < tp; ++r) comms.push_back(&group.rank(r));
    Engine e(w, o, comms);
    std::vector<int32_t> prompt(24);
    for (int i = 0; i < 24; ++i) prompt[i] = (i * 131 + 7) % w->config.vocab_size;
    const std::vector<bf16> logits = e.prefill_logits(prompt);
    const std::vector<double> ref = reference_logits_fp64(*w, prompt);
    ASSERT_EQ(logits.size(), ref.size());
    double max_err = 0, sum_err = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double err = std::abs(static_cast<double>(to_float(logits[i])) - ref[i]);
      max_err = std::max(max_err, err);
      sum_err += err;
    }
    EXPECT_LE(max_err, 0.03) << "tp=" << tp;
    EXPECT_LE(sum_err / static_cast<double>(ref.size()), 0.005) << "tp=" << tp;
  }
}

TEST(RunAudit, MissedExpectationExitsOne) {
  const auto dir = testing::fresh_dir("missed-expectation");
  write_text(dir / "s.json", R"({"model": {"preset": "tiny"}, "parallel": {"tp": 1},
    "plan": {"prompts": {"count": 2, "min_len": 8, "max_len": 8}, "max_tokens": 2,
             "batch_sizes": [1, 2], "repeats": 2}, "expect": "batch_variant"})");
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(only_report(dir / "out").at("verdict"), "invariant");
  EXPECT_EQ(only_report(dir / "out").at("expect_met"), false);
}

int sp_steps_for(int min_tokens) {
  EngineOptions o;
  o.tp = 4;
  o.sp_enabled = true;
  o.sp_min_tokens = min_tokens;
  EmulatedGroup group(4, {});
  std::vector<Communicator*> comms;
  for (int r = 0; r < 4; ++r) comms.push_back(&group.rank(r));
  Engine e(tiny(), o, comms);
  GenerateStats stats;
  // One 8-token prompt, one token: a single prefill step of 8 rows (a multiple of tp: no padding).
  e.generate({block(40, 8)}, 1, &stats);
  EXPECT_EQ(stats.steps, 1);
  return static_cast<int>(stats.sp_steps);
}

TEST(SpThresholdAudit, SpAppliesAtExactlyMinTokens) {
  EXPECT_EQ(sp_steps_for(8), 1) << "padded tokens == min_tokens: SP applies (>=, not >)";
  EXPECT_EQ(sp_steps_for(9), 0);
  EXPECT_EQ(sp_steps_for(7), 1);
}

TEST(ResumeAudit, AReportFromAnotherEnvironmentIsRunAgain) {
  const auto dir = testing::fresh_dir("resume-env");
  write_text(dir / "s.json", R"({"model": {"preset": "tiny"}, "parallel": {"tp": 1},
    "plan": {"prompts": {"count": 2, "min_len": 8, "max_len": 8}, "max_tokens": 2,
             "batch_sizes": [1, 2], "repeats": 2}})");
  const std::vector<std::string> args{"run", (dir / "s.json").string(), "--out",
                                      (dir / "out").string(), "--resume"};
  ASSERT_EQ(testing::run_bih(args).exit_code, 0);
  const fs::path path = testing::report_files(dir / "out").at(0);
  nlohmann::json report = read_json_file(path.string());
  // Same scenario, same verdict, but made by another build on another GPU.
  report["environment"]["bih"]["commit"] = "0000000other";
  report["environment"]["gpu"] = {{"name", "Another GPU"}, {"count", 8}};
  write_text(path, report.dump(2));
  const auto again = testing::run_bih(args);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find("resumed: report already there"), std::string::npos) << again.output;
  EXPECT_NE(read_json_file(path.string()).at("environment").at("bih").at("commit"), "0000000other");
}

TEST(AtomicFileAudit, ReplacesByRenameNeverInPlace) {
  // A reader holding the old file (a hard link, or an open descriptor) keeps the old bytes: the
  // new content goes to a new inode renamed over the name. An in-place write would rewrite the
  // old inode, which readers could see half written.
  const auto dir = testing::fresh_dir("atomic-rename");
  const fs::path target = dir / "report.json";
  write_file_atomically(target.string(), "old content\n");
  fs::create_hard_link(target, dir / "link.json");
  write_file_atomically(target.string(), "new content\n");
  EXPECT_EQ(read_text(target), "new content\n");
  EXPECT_EQ(read_text(dir / "link.json"), "old content\n");
}

TEST(AtomicFileAudit, AReaderNeverSeesAPartialFile) {
  const auto dir = testing::fresh_dir("atomic-reader");
  const fs::path target = dir / "big.json";
  const std::string a(4 << 20, 'a'), b(4 << 20, 'b');
  write_file_atomically(target.string(), a);
  std::atomic<bool> done{false};
  std::atomic<int> partial{0}, reads{0};
  std::thread reader([&] {
    while (!done) {
      const std::string s = read_text(target);
      ++reads;
      if (s != a && s != b) ++partial;
    }
  });
  for (int i = 0; i < 20; ++i) write_file_atomically(target.string(), i % 2 ? a : b);
  done = true;
  reader.join();
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(partial.load(), 0) << "a reader saw a partly written file";
}

TEST(AtomicFileAudit, AFailedWriteLeavesTheOldFile) {
  const auto dir = testing::fresh_dir("atomic-fail");
  const fs::path target = dir / "report.json";
  write_file_atomically(target.string(), "old\n");
  // A path through a regular file cannot be created: the write fails before touching the target's
  // neighbour, and the target itself must be untouched by a failure on another path either way.
  EXPECT_THROW(write_file_atomically((target / "child.json").string(), "x"), InfraError);
  EXPECT_EQ(read_text(target), "old\n");
}

// ---------------------------------------------------------------------------------------------
// NCCL cells get no expectation derived from emulated runs

}  // namespace
}  // namespace bih::test_faults
