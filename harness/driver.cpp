#include "harness/driver.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "base/atomic_file.hpp"
#include "base/child_process.hpp"
#include "base/errors.hpp"
#include "base/folder_lock.hpp"
#include "base/process_tree.hpp"
#include "base/utf8.hpp"
#include "engines/bih_engine.hpp"
#include "engines/registry.hpp"
#include "harness/config_compare.hpp"
#include "harness/dry_run.hpp"
#include "harness/environment.hpp"
#include "harness/generation.hpp"
#include "harness/health.hpp"
#include "harness/report.hpp"
#include "harness/report_set.hpp"
#include "harness/run_inputs.hpp"
#include "harness/table.hpp"
#include "harness/weights_hash_cache.hpp"
#include "harness/worker.hpp"
#include "spec/plan.hpp"
#include "spec/scenario_file.hpp"

namespace fs = std::filesystem;

namespace bih {
namespace {

Generation read_generation(const fs::path& path) {
  return generation_from_json(read_json_file(path.string()), path.string());
}

// SIGINT or SIGTERM arrived while a scenario ran: its workers are stopped and it gets no report.
struct Interrupted {
  int signal;
};

void throw_if_interrupted() {
  if (const int sig = interrupt_signal(); sig != 0) throw Interrupted{sig};
}

std::string first_line(const std::string& text) {
  const auto nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}

// What the terminal shows of a reason: its first line, then up to `max_lines` of the lines after
// it (the stderr lines it quotes), indented; a longer rest is left to the report.
std::string reason_for_terminal(const std::string& reason, size_t max_lines = 12) {
  std::string out = first_line(reason);
  size_t start = reason.find('\n');
  size_t shown = 0;
  while (start != std::string::npos && start + 1 < reason.size()) {
    size_t nl = reason.find('\n', start + 1);
    const std::string line =
        reason.substr(start + 1, (nl == std::string::npos ? reason.size() : nl) - start - 1);
    start = nl;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (shown == max_lines) {
      out += "\n    ... (the rest in the report)";
      break;
    }
    out += "\n    " + line;
    ++shown;
  }
  return out;
}

// Why a worker failed, from how it ended and its stderr (outside text: repaired to UTF-8 here, as
// it enters the report). The worker's own message ("bih: infrastructure error: ...", with the
// adapter stderr lines it quotes) is given once, whole; other stderr text follows it.
std::string worker_failure(const std::string& who, const std::string& how,
                           const std::string& stderr_tail) {
  const std::string tail = valid_utf8(stderr_tail);
  if (tail.empty()) return who + " " + how + "; its stderr is empty";
  // The last line that starts with "bih" begins the worker's own message.
  size_t own = std::string::npos;
  for (size_t at = 0; at < tail.size();) {
    if (tail.compare(at, 3, "bih") == 0) own = at;
    const size_t nl = tail.find('\n', at);
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  auto trimmed = [](std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    return text;
  };
  if (own == std::string::npos) {
    return who + " " + how + "; last lines of its stderr:\n" + trimmed(tail);
  }
  std::string out = who + " " + how + ": " + trimmed(tail.substr(own));
  if (own > 0) out += "\nbefore that, its stderr had:\n" + trimmed(tail.substr(0, own));
  return out;
}

// The report already in `out_dir` for this scenario, if it was made from the same resolved
// scenario in a comparable environment and did not end in `error` (errors are worth a retry).
std::optional<ScenarioOutcome> finished_outcome(const Scenario& s, const std::string& out_dir,
                                                const nlohmann::json& environment) {
  const fs::path path = fs::path(out_dir) / report_file_name(s.id());
  if (!fs::exists(path)) return std::nullopt;
  nlohmann::json report;
  try {
    report = read_report(path.string());
  } catch (const InputError&) {
    return std::nullopt;  // unreadable: run it again and replace it
  }
  // A readable report whose verdict contradicts its own comparisons is not rerun over: someone
  // edited it or a bug wrote it, and either must be seen (InputError naming the file).
  check_report_verdict(report, path.string());
  if (report.at("scenario") != s.to_json() ||
      comparable_environment(report.at("environment")) != comparable_environment(environment) ||
      report.at("verdict") == "error") {
    return std::nullopt;
  }
  // A configuration is compared against its reference: a report made against another reference
  // (or none) is not this run's result.
  const std::string reference_id = s.config_reference ? s.config_reference->id() : "";
  const nlohmann::json stored_reference = report.value("config_reference", nlohmann::json());
  if ((stored_reference.is_object() ? stored_reference.value("id", "") : "") != reference_id) {
    return std::nullopt;
  }
  ScenarioOutcome o;
  o.id = s.id();
  o.expect = s.expect;
  o.verdict = *parse_verdict(report.at("verdict").get<std::string>());
  o.reason = report.value("reason", nlohmann::json()).is_string() ? report.at("reason") : "";
  o.report_path = path.string();
  o.wall_s = report.value("wall_s", 0.0);
  o.resumed = true;
  for (const auto& c : report.at("comparisons"))
    o.resumed_summaries.emplace_back(c.at("kind"), c.at("summary"));
  return o;
}

}  // namespace

void parse_shard(const std::string& text, int& index, int& count) {
  const auto slash = text.find('/');
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    size_t used_i = 0, used_n = 0;
    index = std::stoi(text.substr(0, slash), &used_i);
    count = std::stoi(text.substr(slash + 1), &used_n);
    if (used_i != slash || used_n != text.size() - slash - 1) throw std::invalid_argument("junk");
  } catch (const std::exception&) {
    throw InputError("--shard " + text + ": expected I/N with integers, e.g. --shard 2/4");
  }
  if (count < 1 || index < 1 || index > count) {
    throw InputError("--shard " + text + ": valid: 1 <= I <= N, e.g. --shard 1/4 .. 4/4");
  }
}

void remove_work_folder_if_done(const std::string& out_dir) {
  const fs::path work = fs::path(out_dir) / "work";
  std::error_code ec;
  fs::remove(weights_hash_cache_file(work.string()), ec);
  fs::remove(work, ec);  // only when empty (no --keep-work dumps, no kept failures)
}

ScenarioOutcome run_scenario(const Scenario& scenario, const RunOptions& options,
                             const std::function<void(const std::string&)>& progress,
                             const ConfigRun& config) {
  const auto start = std::chrono::steady_clock::now();
  ScenarioOutcome outcome;
  outcome.id = scenario.id();
  outcome.expect = scenario.expect;

  // The worker reads the resolved scenario from another folder: anchor a relative prompts file.
  Scenario resolved = scenario;
  fs::path prompts_file = resolved.plan.prompts.file;
  if (!prompts_file.empty() && prompts_file.is_relative()) {
    resolved.plan.prompts.file =
        fs::absolute(fs::path(scenario.source_file).parent_path() / prompts_file).string();
  }
  ReportInput report;
  report.scenario = resolved.to_json();
  report.id = outcome.id;
  report.expect = scenario.expect;
  report.environment = collect_environment();
  report.model = {{"seed", scenario.model.seed}};
  if (!scenario.model.path.empty()) {
    report.model["path"] = scenario.model.path;
  } else {
    report.model["preset"] = scenario.model.preset;
  }

  const fs::path work =
      fs::path(options.out_dir) / "work" / fs::path(report_file_name(outcome.id)).stem();
  auto finish = [&](Verdict verdict, std::string reason) {
    outcome.verdict = verdict;
    outcome.reason = std::move(reason);
    outcome.wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.verdict = outcome.verdict;
    report.reason = outcome.reason;
    report.comparisons = outcome.comparisons;
    report.wall_s = outcome.wall_s;
    if (scenario.config_reference) {
      report.config_reference = {{"id", scenario.config_reference->id()},
                                 {"scenario", scenario.config_reference->to_json()}};
    }
    if (config.write_report) {
      outcome.report_path = (fs::path(options.out_dir) / report_file_name(outcome.id)).string();
      // Outside text is repaired where it enters; should any slip through, a replaced character
      // in this one report beats losing it and every scenario after it (type_error.316).
      write_file_atomically(
          outcome.report_path,
          make_report(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    }
    // A scenario that did not come out as expected keeps its work folder (the adapter's log, the
    // worker's stderr, the dumps): that is where its failure is explained.
    const Expected expected{scenario.expect.value_or(kDefaultExpectation),
                            scenario.expect.has_value(), options.require_all};
    outcome.work_kept = is_failure(check_expectation(verdict, expected)) && fs::exists(work);
    if (outcome.work_kept) outcome.work_dir = work.string();
    if (!options.keep_work && !outcome.work_kept) {
      std::error_code ec;
      fs::remove_all(work, ec);
    }
    return outcome;
  };

  if (std::string why = EngineRegistry::instance().unsupported_reason(scenario); !why.empty()) {
    return finish(Verdict::unsupported, why);
  }

  std::error_code ec;
  fs::remove_all(work, ec);
  fs::create_directories(work);
  const std::string scenario_file = (work / "scenario.json").string();
  write_file_atomically(scenario_file, report.scenario.dump(2));

  const Plan plan = make_plan(scenario.plan, scenario.prefix_caching, scenario.compare);
  const std::string exe = self_executable();
  // One worker process, or one per rank for NCCL ranks (rank r on GPU r, all joining one NCCL
  // communicator whose unique id the driver makes); the first failing rank stops its peers.
  auto launch = [&](bool fresh) -> std::string {
    const bool nccl = scenario.ranks == RankKind::nccl;
    const int processes = nccl ? scenario.tp : 1;
    const std::string nccl_id = nccl ? bih_nccl_unique_id() : "";
    std::atomic<bool> failed{false};
    std::string declined;  // an engine's `unsupported` answer, from the worker's stdout
    std::vector<ChildResult> results(processes);
    std::vector<std::string> err_files(processes);
    auto run_rank = [&](int r) {
      std::vector<std::string> argv{exe,           "worker", "--scenario",
                                    scenario_file, "--work", work.string()};
      if (fresh) argv.push_back("--fresh");
      if (nccl) {
        argv.insert(argv.end(), {"--rank", std::to_string(r), "--nccl-id", nccl_id});
      }
      err_files[r] = (work / fmt::format("stderr{}{}.log", fresh ? "-fresh" : "",
                                         nccl ? fmt::format("-rank{}", r) : ""))
                         .string();
      results[r] = run_child(
          argv, err_files[r], scenario.timeout_s,
          [&](const std::string& line) {
            if (line.rfind("@progress ", 0) == 0)
              progress((fresh ? "fresh process: " : "") + line.substr(10));
            if (line.rfind("@unsupported ", 0) == 0 && r == 0) declined = line.substr(13);
          },
          &failed);
      if (!results[r].ok()) failed = true;
    };
    std::vector<std::thread> threads;
    for (int r = 1; r < processes; ++r) threads.emplace_back(run_rank, r);
    run_rank(0);
    for (auto& t : threads) t.join();
    // A worker killed at its timeout (or one that crashed) leaves its adapter's tree to us, the
    // subreaper: nothing a scenario started survives into the next one.
    if (is_subreaper()) kill_descendants();
    // The root cause: the first rank that failed on its own, not one stopped for a peer.
    for (int r = 0; r < processes; ++r) {
      if (results[r].ok() || results[r].cancelled) continue;
      return worker_failure(fmt::format("{} worker{}", fresh ? "fresh-process" : "scenario",
                                        nccl ? fmt::format(" of rank {}", r) : ""),
                            results[r].describe(), tail_of_file(err_files[r], 12));
    }
    if (!declined.empty()) return "@unsupported " + declined;
    return "";
  };
  const auto ended = [&](const std::string& failure) {
    // A worker killed for an interruption is no verdict: leave no report, not even `error`.
    if (interrupt_signal() != 0) {
      if (!options.keep_work) fs::remove_all(work, ec);
      throw Interrupted{interrupt_signal()};
    }
    if (failure.rfind("@unsupported ", 0) == 0) {
      return finish(Verdict::unsupported, failure.substr(13));
    }
    return finish(Verdict::error, failure);
  };

  if (std::string failure = launch(false); !failure.empty()) return ended(failure);
  if (!plan.fresh.empty()) {
    if (std::string failure = launch(true); !failure.empty()) return ended(failure);
  }
  throw_if_interrupted();

  std::string unhealthy;
  std::map<std::string, Generation> gens;
  try {
    for (const auto* list : {&plan.in_process, &plan.fresh}) {
      for (const GenerationSpec& spec : *list) {
        gens[spec.label] = read_generation(work / generation_file_name(spec.label));
        report.generations.push_back(timing_of(gens[spec.label]));
        report.generations.back().cache = spec.cache;
      }
    }
    const nlohmann::json meta = read_json_file((work / "meta.json").string());
    for (const auto& [key, value] : meta.at("model").items()) report.model[key] = value;
    report.engine = nlohmann::json::object();
    for (const char* key : {"backend", "communicator"}) {
      if (!meta.value(key, std::string()).empty()) report.engine[key] = meta[key];
    }
    if (meta.contains("engine")) {
      const nlohmann::json& e = meta["engine"];
      for (const char* key : {"kind", "name", "version", "value", "settings"}) {
        if (e.contains(key)) report.engine[key] = e[key];
      }
      const nlohmann::json details = e.value("details", nlohmann::json::object());
      for (const auto& [key, value] : details.items()) {
        if (key != "backend" && key != "communicator") report.engine[key] = value;
      }
    }
    if (scenario.ranks == RankKind::nccl) {
      nlohmann::json nccl_env = report.environment.value("nccl_env", nlohmann::json::object());
      for (const auto& [key, value] : scenario.nccl_env) nccl_env[key] = value;
      report.engine["nccl_env"] = nccl_env;
    }
    // Every engine's output passes here: a broken model is never certified by its diff.
    std::vector<const Generation*> checked;
    for (const auto* list : {&plan.in_process, &plan.fresh}) {
      for (const GenerationSpec& spec : *list) checked.push_back(&gens.at(spec.label));
    }
    const Health health =
        check_health(checked, meta.value("engine", nlohmann::json::object()).value("value", ""));
    report.health = to_json(health);
    if (!health.healthy()) {
      unhealthy = "unhealthy output, no verdict on invariance: " + health.problems.front();
      if (health.problems.size() > 1) {
        unhealthy += fmt::format(" (and {} more problem(s); see the report's health section)",
                                 health.problems.size() - 1);
      }
    }
    // compare.prefill: a scoring the engine could not run is named in meta.json with its reason.
    std::map<std::string, std::string> scoring_unsupported;
    for (const auto& entry : meta.value("scorings", nlohmann::json::array())) {
      if (entry.contains("unsupported")) {
        scoring_unsupported[entry.at("label").get<std::string>()] =
            entry.at("unsupported").get<std::string>();
      }
    }
    for (const ScoringSpec& scoring : plan.scorings) {
      if (scoring_unsupported.count(scoring.label)) continue;
      gens[scoring.label] = read_generation(work / generation_file_name(scoring.label));
    }
    for (const ComparisonSpec& c : plan.comparisons) {
      if (auto it = scoring_unsupported.find(c.b); it != scoring_unsupported.end()) {
        outcome.comparisons.push_back(unsupported_comparison(c.kind, c.a, c.b, it->second));
        continue;
      }
      outcome.comparisons.push_back(compare(gens.at(c.a), gens.at(c.b), c.kind,
                                            static_cast<size_t>(options.max_divergences),
                                            scenario.compare));
    }
  } catch (const std::exception& e) {
    return finish(Verdict::error, std::string("reading the worker's output failed: ") + e.what());
  }
  if (!unhealthy.empty()) return finish(Verdict::error, unhealthy);
  if (needs_config_reference(scenario)) {
    const ReferenceRun* ref = config.reference;
    if (!ref) throw std::logic_error("run_scenario: a configuration without its reference's run");
    if (ref->verdict == Verdict::error || ref->verdict == Verdict::unsupported) {
      return finish(ref->verdict,
                    "its reference configuration " + ref->id + " ended in " +
                        to_string(ref->verdict) +
                        ", so nothing to compare against: " + first_line(ref->reason));
    }
    try {
      for (Comparison& c : compare_with_reference(scenario, plan, gens, *ref,
                                                  static_cast<size_t>(options.max_divergences))) {
        outcome.comparisons.push_back(std::move(c));
      }
    } catch (const std::exception& e) {
      return finish(Verdict::error,
                    std::string("comparing with the reference failed: ") + e.what());
    }
  }
  if (config.keep_generations) outcome.generations = gens;
  ScenarioOutcome done = finish(decide_verdict(outcome.comparisons), "");
  const bool variant = done.verdict == Verdict::batch_variant ||
                       done.verdict == Verdict::nondeterministic ||
                       done.verdict == Verdict::config_variant;
  if (scenario.localize && variant && !scenario.engine.is_bih()) {
    done.localization = "not localized: engine " + scenario.engine.name +
                        " is not traceable (bih explain traces bih's own engine only)\n";
  } else if (scenario.localize && variant) {
    progress("localizing the first divergence");
    fs::create_directories(work);
    const std::string err_file = (work / "stderr-explain.log").string();
    std::string text;
    const ChildResult r =
        run_child({exe, "explain", done.report_path}, err_file, scenario.timeout_s,
                  [&](const std::string& line) { text += line + "\n"; });
    if (is_subreaper()) kill_descendants();
    if (r.interrupted) {
      done.localization = "not localized: bih was interrupted\n";
    } else if (!r.ok()) {
      done.localization = "bih explain " + r.describe() + ": " + tail_of_file(err_file, 5);
    } else {
      // Where its time went, from its stderr (the file goes with the work folder).
      std::string times = tail_of_file(err_file, 1);
      const std::string head = "bih explain: re-run times: ";
      times = times.rfind(head, 0) == 0 ? "; " + first_line(times.substr(head.size())) : "";
      done.localization = text + fmt::format("    (bih explain: {:.1f} s{})\n", r.wall_s, times);
    }
    if (!options.keep_work && !done.work_kept) fs::remove_all(work, ec);
  }
  return done;
}

int run_command(const RunOptions& options) {
  std::vector<Scenario> scenarios;
  for (const std::string& file : options.files) {
    ScenarioSet set = load_scenarios(file, options.sets);
    for (Scenario& s : set.scenarios) scenarios.push_back(std::move(s));
  }
  scenarios = filter_scenarios(std::move(scenarios), options.only);
  check_unique_ids(scenarios);
  check_checkpoints(scenarios);
  for (const Scenario& s : scenarios) {
    if (make_plan(s.plan, s.prefix_caching, s.compare).comparisons.empty()) {
      throw InputError(s.source_file, "/plan",
                       "scenario " + s.id() +
                           " compares nothing; valid: at least two "
                           "batch_sizes, repeats >= 2, fresh_process true or compare.prefill true");
    }
  }
  if (scenarios.empty()) {
    throw InputError("no scenario matches the --only filters; `bih list FILE` prints the ids");
  }
  RunManifest manifest;
  for (const Scenario& s : scenarios) manifest.all_ids.push_back(s.id());
  manifest.shard_index = options.shard_index;
  manifest.shard_count = options.shard_count;
  if (options.shard_count > 1) {
    std::vector<Scenario> mine;
    for (size_t k = 0; k < scenarios.size(); ++k) {
      if (static_cast<int>(k % options.shard_count) == options.shard_index - 1) {
        mine.push_back(std::move(scenarios[k]));
      }
    }
    scenarios = std::move(mine);
  }
  for (const Scenario& s : scenarios) manifest.shard_ids.push_back(s.id());
  if (options.dry_run) {
    std::fputs(dry_run_text(scenarios).c_str(), stdout);
    return 0;
  }
  // Held until the run returns: a second run into this --out is refused, naming our pid.
  const FolderLock out_lock(options.out_dir);
  write_manifest(options.out_dir, manifest);
  if (scenarios.empty()) {
    std::printf("shard %d/%d has no scenario (the selection has %zu)\n", options.shard_index,
                options.shard_count, manifest.all_ids.size());
    return 0;
  }
  const nlohmann::json environment = collect_environment();

  install_interrupt_handlers();
  const bool tty = isatty(STDERR_FILENO);
  // Config comparisons: each reference runs once per `bih run`, before the first configuration
  // that needs it, and its generations stay in memory for the others. A reference that is one of
  // this shard's scenarios runs as that scenario (with its report, and is not run again at its
  // turn); one that is not (another shard's, outside the matrix, or resumed) runs for its
  // generations only and writes no report.
  std::map<std::string, ReferenceRun> reference_runs;
  std::map<std::string, ScenarioOutcome>
      ran_early;  // references of this shard run before their turn
  auto keep_reference = [&](const std::string& id, const ScenarioOutcome& o) {
    reference_runs[id] = ReferenceRun{id, o.verdict, o.reason, o.generations};
  };
  auto reference_for =
      [&](const Scenario& s,
          const std::function<void(const std::string&)>& progress) -> const ReferenceRun* {
    const std::string id = s.config_reference->id();
    if (auto it = reference_runs.find(id); it != reference_runs.end()) return &it->second;
    const auto mine = std::find_if(scenarios.begin(), scenarios.end(),
                                   [&](const Scenario& other) { return other.id() == id; });
    const bool report_here =
        mine != scenarios.end() &&
        !(options.resume && finished_outcome(*mine, options.out_dir, environment));
    progress("running its reference " + id);
    ScenarioOutcome o = run_scenario(
        report_here ? *mine : *s.config_reference, options, progress,
        ConfigRun{.reference = nullptr, .write_report = report_here, .keep_generations = true});
    std::fprintf(stderr, "%s    reference %s -> %s (%.1f s%s)\n", tty ? "\r\033[K" : "", id.c_str(),
                 to_string(o.verdict).c_str(), o.wall_s,
                 report_here ? "" : "; run for its generations, no report of its own here");
    keep_reference(id, o);
    if (report_here) ran_early[id] = std::move(o);
    return &reference_runs.at(id);
  };
  const auto run_start = std::chrono::steady_clock::now();
  std::vector<TableRow> rows;
  int exit_code = 0;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    const Scenario& s = scenarios[i];
    const std::string prefix = fmt::format("[{}/{}] {}", i + 1, scenarios.size(), s.id());
    std::string last_shown;
    std::string phase_now = "starting";
    auto progress = [&](const std::string& phase) {
      phase_now = phase;
      // On a terminal one line is rewritten; in a log each phase change is a line (no step spam).
      if (tty) {
        std::fprintf(stderr, "\r\033[K%s | %s", prefix.c_str(), phase.c_str());
      } else {
        const std::string head = phase.substr(0, phase.find(':'));
        if (head == last_shown) return;
        last_shown = head;
        std::fprintf(stderr, "%s | %s\n", prefix.c_str(), phase.c_str());
      }
      std::fflush(stderr);
    };
    std::optional<ScenarioOutcome> resumed;
    if (options.resume) resumed = finished_outcome(s, options.out_dir, environment);
    if (!resumed) progress("starting");
    std::optional<ScenarioOutcome> ran;
    try {
      throw_if_interrupted();
      if (!resumed && ran_early.count(s.id())) {
        ran = std::move(ran_early.at(s.id()));
        ran_early.erase(s.id());
      } else if (!resumed) {
        ConfigRun config;
        if (needs_config_reference(s)) config.reference = reference_for(s, progress);
        // A reference keeps its generations for the configurations after it.
        config.keep_generations = is_config_reference(s) && !reference_runs.count(s.id());
        ran = run_scenario(s, options, progress, config);
        if (config.keep_generations) keep_reference(s.id(), *ran);
        ran->generations.clear();
      }
    } catch (const Interrupted& stop) {
      const char* name = stop.signal == SIGTERM ? "SIGTERM" : "SIGINT";
      std::fprintf(stderr,
                   "%s\nbih: interrupted by %s during scenario %s (phase: %s); its workers were "
                   "stopped and it has no report.\n%zu of %zu scenario(s) finished before it, "
                   "their reports are in %s.\nTo go on, run the same command again with --resume "
                   "and the same --out %s: finished scenarios are skipped.\n",
                   tty ? "\r\033[K" : "", name, prefix.c_str(), phase_now.c_str(), i,
                   scenarios.size(), options.out_dir.c_str(), options.out_dir.c_str());
      std::error_code ec;
      fs::remove(fs::path(options.out_dir) / "work", ec);
      return 128 + stop.signal;  // the shell's convention: 130 for SIGINT, 143 for SIGTERM
    }
    const ScenarioOutcome o = resumed ? *resumed : *ran;
    std::fprintf(
        stderr, "%s%s -> %s (%s)%s\n", tty ? "\r\033[K" : "", prefix.c_str(),
        to_string(o.verdict).c_str(),
        o.resumed ? "resumed: report already there" : fmt::format("{:.1f} s", o.wall_s).c_str(),
        o.reason.empty() ? "" : (": " + reason_for_terminal(o.reason)).c_str());
    if (o.work_kept && !options.keep_work) {
      std::fprintf(stderr, "    its work folder is kept for a look (logs, adapter stderr): %s\n",
                   o.work_dir.c_str());
    }
    TableRow row;
    row.id = o.id;
    row.verdict = o.verdict;
    row.expect = o.expect;
    row.wall_s = o.wall_s;
    if (!o.localization.empty()) std::fprintf(stderr, "%s", o.localization.c_str());
    std::vector<std::pair<std::string, std::string>> summaries = o.resumed_summaries;
    const size_t resumed_count = summaries.size();
    for (const Comparison& c : o.comparisons) {
      summaries.emplace_back(c.kind, summarize(c));
      if (c.kind == "prefill") {
        row.notes.push_back("prefill vs decode, " + c.a_label + ": " + summarize(c));
      }
    }
    for (size_t i = 0; i < summaries.size(); ++i) {
      const auto& [kind, summary] = summaries[i];
      // compare.prefill: a line of its own under the row, one per scored generation (added above
      // for this run's comparisons; a resumed report's summaries carry no labels).
      if (kind == "prefill" && i < resumed_count) {
        row.notes.push_back("prefill vs decode: " + summary);
      }
      // Show a differing comparison in preference to an identical one: batch and cache (warm vs
      // cold, also a dependence on other requests) in one column, repeat and fresh in the other.
      const bool differs = summary.rfind("0/", 0) != 0;
      if (kind == "batch" && (row.batch_summary.empty() || differs)) row.batch_summary = summary;
      if (kind == "cache" && (row.batch_summary.empty() || differs)) {
        row.batch_summary = "warm vs cold: " + summary;
      }
      if (kind == "config" && (row.config_summary.empty() || differs)) row.config_summary = summary;
      if ((kind == "repeat" || kind == "fresh") && (row.repeat_summary.empty() || differs)) {
        row.repeat_summary = summary;
        row.repeat_kind = kind;
      }
    }
    // What was asked for but could not be compared (an engine without top-k), once each.
    for (const Comparison& c : o.comparisons) {
      for (const std::string& note : c.notes) {
        if (std::find(row.notes.begin(), row.notes.end(), note) == row.notes.end()) {
          row.notes.push_back(note);
        }
      }
    }
    row.reason = o.reason;
    row.must_run = options.require_all;
    if (is_config_reference(s)) row.config_summary = "the reference";
    rows.push_back(row);
    if (is_failure(check_expectation(o.verdict, expected_of(row)))) {
      exit_code = std::max(exit_code, o.verdict == Verdict::error ? 3 : 1);
    }
  }
  remove_work_folder_if_done(options.out_dir);
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  std::printf("%s", render_table(rows, should_use_color(STDOUT_FILENO)).c_str());
  std::printf("%zu scenario(s) in %.1f s; reports in %s\n", scenarios.size(), total_s,
              options.out_dir.c_str());
  return exit_code;
}

}  // namespace bih
