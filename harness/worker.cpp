#include "harness/worker.hpp"

#include <fmt/core.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"
#include "base/fatal_signal.hpp"
#include "engines/registry.hpp"
#include "harness/generation.hpp"
#include "harness/solo_lanes.hpp"
#include "harness/weights_hash_cache.hpp"
#include "models/comm/emulated.hpp"
#include "models/engine.hpp"
#include "models/weights.hpp"
#include "spec/plan.hpp"
#include "spec/scenario.hpp"
#include "spec/scenario_file.hpp"

namespace bih {
namespace {

void progress(const std::string& text) {
  std::printf("@progress %s\n", text.c_str());
  std::fflush(stdout);
}

// The test-only fault switch (debug.fault): fail the way a real worker can.
void inject_fault(const std::string& fault) {
  if (fault == "crash") {
    // Die by the signal itself, as an unhandled fault does: a SIGSEGV handler that someone
    // installed (ASan's in build-asan) would otherwise turn the death into an exit status.
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
  } else if (fault == "abort") {
    std::abort();
  } else if (fault == "hang") {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  } else if (fault == "exit") {
    std::fprintf(stderr, "bih worker: debug.fault=exit: exiting with status 7\n");
    std::exit(7);
  }
}

}  // namespace

std::string generation_file_name(const std::string& label) {
  std::string name = "gen-";
  for (char ch : label) {
    name += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_') ? ch : '_';
  }
  return name + ".json";
}

int run_worker(const WorkerArgs& args) {
  // A crash says where in the report ("bih worker: fatal signal 11 ..." and its frames).
  report_fatal_signals("bih worker");
  const nlohmann::json resolved = read_json_file(args.scenario_file);
  const Scenario s = scenario_from_json(resolved, args.scenario_file);
  const Plan plan = make_plan(s.plan, s.prefix_caching, s.compare);
  const auto& gens = args.fresh ? plan.fresh : plan.in_process;

  const bool writer = args.rank <= 0;  // NCCL ranks other than 0 compute but write nothing
  if (s.ranks == RankKind::nccl) {
    if (args.rank < 0 || args.nccl_unique_id.empty()) {
      throw InputError(
          args.scenario_file, "/parallel/ranks",
          "ranks nccl: the worker needs --rank and --nccl-id (the driver passes them)");
    }
    // NCCL reads its environment at communicator creation: the scenario's pins go in first.
    for (const auto& [key, value] : s.nccl_env) setenv(key.c_str(), value.c_str(), 1);
  }
  const auto progress = [writer](const std::string& text) {
    if (writer) bih::progress(text);
  };

  // The worker's engine, and every solo lane's (solo_lanes.hpp), made the same way.
  const auto make_engine = [&] {
    std::unique_ptr<TestedEngine> made = EngineRegistry::instance().make(
        s, EngineContext{RankAssignment{args.rank, args.nccl_unique_id}, args.work_dir});
    if (s.compare.top_k > 0 || s.compare.row_digest) {
      made->set_row_extras(RowExtras{s.compare.top_k, s.compare.row_digest});
    }
    return made;
  };
  progress("loading model");
  const auto load_start = std::chrono::steady_clock::now();
  std::unique_ptr<TestedEngine> engine;
  try {
    engine = make_engine();
  } catch (const UnsupportedError& e) {
    // The engine declined a knob: the driver records `unsupported`, not an error.
    std::printf("@unsupported %s\n", e.what());
    std::fflush(stdout);
    return 0;
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  const auto prompts = make_prompts(s.plan.prompts, engine->vocab_size(), s.source_file);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (static_cast<int>(prompts[i].size()) + s.plan.max_tokens > s.plan.max_model_len) {
      throw InputError(s.source_file, "/plan/max_model_len",
                       fmt::format("prompt {} has {} tokens; with max_tokens {} it exceeds "
                                   "max_model_len {}",
                                   i, prompts[i].size(), s.plan.max_tokens, s.plan.max_model_len));
    }
  }

  const EngineIdentity& identity = engine->identity();
  nlohmann::json meta;
  meta["model"] = {{"load_s", load_s}};
  if (writer) {
    if (identity.kind == "bih" && s.model.path.empty()) {
      // A synthetic model's hash is the same for every scenario of the run that names it
      // (weights_hash_cache.hpp): computed once, by the first.
      const std::string run_work = std::filesystem::path(args.work_dir).parent_path().string();
      meta["model"]["weights_hash"] =
          cached_weights_hash(weights_hash_cache_file(run_work),
                              weights_hash_key(identity.kind, s.to_json().at("model")),
                              [&] { return engine->model_hash(); });
    } else {
      meta["model"]["weights_hash"] = engine->model_hash();
    }
  }
  if (!s.model.path.empty()) meta["model"]["path"] = s.model.path;
  meta["engine"] = {{"kind", identity.kind},         {"name", identity.name},
                    {"version", identity.version},   {"value", identity.value},
                    {"settings", identity.settings}, {"details", identity.details}};
  meta["communicator"] = identity.details.value("communicator", "");
  meta["backend"] = identity.details.value("backend", "");
  meta["generations"] = nlohmann::json::array();
  meta["scorings"] = nlohmann::json::array();
  // compare.prefill: `of` scored in one prefill per batch of scoring.batch_size, right after it
  // ran. An engine that cannot score leaves no dump and its reason in meta.json; the driver then
  // records that comparison as unsupported and decides the verdict from the others.
  const auto run_scoring = [&](const ScoringSpec& scoring, const Generation& of) {
    const std::string why = engine->score_unsupported_reason();
    if (!why.empty()) {
      meta["scorings"].push_back(
          {{"label", scoring.label}, {"of", scoring.of}, {"unsupported", why}});
      return;
    }
    progress(scoring.label + ": scoring " + scoring.of + " in one prefill");
    Generation g;
    g.label = scoring.label;
    g.batch_size = scoring.batch_size;
    g.scenario_id = s.id();
    g.scores = scoring.of;
    g.sequences.resize(of.sequences.size());
    const auto start = std::chrono::steady_clock::now();
    const size_t n = of.sequences.size();
    for (size_t first = 0; first < n; first += scoring.batch_size) {
      const size_t last = std::min(n, first + static_cast<size_t>(scoring.batch_size));
      std::vector<ScoreRequest> requests;
      for (size_t i = first; i < last; ++i) {
        requests.push_back({of.sequences[i].prompt, of.sequences[i].tokens});
      }
      std::vector<SequenceResult> results;
      try {
        results = engine->score(requests);
      } catch (const std::invalid_argument& e) {
        throw InfraError(
            fmt::format("{} (prompts {}..{}): {}", scoring.label, first, last - 1, e.what()));
      }
      if (results.size() != requests.size()) {
        throw InfraError(fmt::format("engine {} scored {} sequences for a batch of {}",
                                     identity.name, results.size(), requests.size()));
      }
      for (size_t i = first; i < last; ++i) {
        SequenceResult& r = results[i - first];
        if (r.tokens.size() != of.sequences[i].tokens.size() ||
            r.logprobs.size() != r.tokens.size()) {
          throw InfraError(fmt::format("engine {} scored {} positions of prompt {}, expected {}",
                                       identity.name, r.tokens.size(), i,
                                       of.sequences[i].tokens.size()));
        }
        SequenceOutput& out = g.sequences[i];
        out.prompt = of.sequences[i].prompt;
        out.tokens = std::move(r.tokens);
        out.logprobs = std::move(r.logprobs);
        out.top_k_ids = std::move(r.top_k_ids);
        out.top_k_values = std::move(r.top_k_values);
        out.row_digests = std::move(r.row_digests);
      }
    }
    g.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (writer) {
      write_file_atomically(
          (std::filesystem::path(args.work_dir) / generation_file_name(g.label)).string(),
          to_json(g).dump());
    }
    meta["scorings"].push_back({{"label", g.label}, {"of", g.scores}, {"wall_s", g.wall_s}});
  };

  for (const GenerationSpec& spec : gens) {
    if (spec.batch_size == s.plan.batch_sizes.back() && spec.repeat == 0 && spec.cache != "warm") {
      inject_fault(s.fault);
    }
    // Like with like: a cold generation starts from an empty prefix cache, whatever ran before.
    if (spec.cache == "cold" && !engine->reset_prefix_cache()) {
      std::printf(
          "@unsupported engine %s cannot empty its prefix cache between generations, so "
          "with prefix caching on its cold and warm generations cannot be told apart "
          "(set prefix_caching.enabled=false)\n",
          identity.name.c_str());
      std::fflush(stdout);
      engine->shutdown();
      return 0;
    }
    Generation g;
    g.label = spec.label;
    g.batch_size = spec.batch_size;
    g.repeat = spec.repeat;
    g.fresh_process = spec.fresh_process;
    g.scenario_id = s.id();
    g.sequences.resize(prompts.size());
    const auto start = std::chrono::steady_clock::now();
    const int total = static_cast<int>(prompts.size());
    GenerateStats stats;
    // Prompts [first, last) as one batch on engine `e`, their results into g.
    auto run_batch = [&](TestedEngine& e, size_t first, size_t last, GenerateStats& into) {
      std::vector<std::vector<int32_t>> batch(prompts.begin() + first, prompts.begin() + last);
      std::vector<SequenceResult> results;
      try {
        results = e.generate(batch, s.plan.max_tokens, &into, [&](const std::string& text) {
          if (spec.batch_size > 1) {
            progress(spec.label + ": " + text);
          }
        });
      } catch (const InfraError& err) {
        // The user thinks in the plan's generations, not in an engine's request numbers.
        throw InfraError(fmt::format("generation {} (batch of prompts {}..{} of {}): {}",
                                     spec.label, first, last - 1, prompts.size(), err.what()));
      }
      if (results.size() != batch.size()) {
        throw InfraError(fmt::format("engine {} returned {} sequences for a batch of {}",
                                     identity.name, results.size(), batch.size()));
      }
      for (size_t i = first; i < last; ++i) {
        SequenceOutput& out = g.sequences[i];
        out.prompt = prompts[i];
        out.tokens = std::move(results[i - first].tokens);
        out.logprobs = std::move(results[i - first].logprobs);
        out.top_k_ids = std::move(results[i - first].top_k_ids);
        out.top_k_values = std::move(results[i - first].top_k_values);
        out.row_digests = std::move(results[i - first].row_digests);
      }
    };
    // A warm generation must see the cache the previous one left in this engine: one lane.
    int lanes = spec.batch_size == 1 && spec.cache != "warm" ? solo_lanes_for(s, total) : 1;
    if (lanes > 1) {
      int running = lanes;  // less any lane whose engine could not be made
      lanes = run_solo_lanes(
          *engine, make_engine, lanes, total,
          [&](TestedEngine& e, int i, GenerateStats& into) { run_batch(e, i, i + 1, into); },
          [&](int done) {
            if (done % 8 == 0 || done == total) {
              progress(
                  fmt::format("{}: {}/{} prompts ({} lanes)", spec.label, done, total, running));
            }
          },
          [&](const std::string& why) {
            --running;
            std::fprintf(stderr, "bih: %s\n", why.c_str());
            progress(spec.label + ": " + why);
          },
          stats);
    } else {
      for (size_t first = 0; first < prompts.size(); first += spec.batch_size) {
        const size_t last = std::min(prompts.size(), first + spec.batch_size);
        run_batch(*engine, first, last, stats);
        if (spec.batch_size == 1 && (last % 8 == 0 || last == prompts.size())) {
          progress(fmt::format("{}: {}/{} prompts", spec.label, last, total));
        }
      }
    }
    g.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    g.steps = stats.steps;
    g.tokens_processed = stats.rows;
    g.max_in_flight = stats.max_in_flight;
    g.solo_lanes = lanes;
    if (writer) {
      write_file_atomically(
          (std::filesystem::path(args.work_dir) / generation_file_name(g.label)).string(),
          to_json(g).dump());
    }
    meta["generations"].push_back({{"label", g.label},
                                   {"wall_s", g.wall_s},
                                   {"steps", stats.steps},
                                   {"rows", stats.rows},
                                   {"real_rows", stats.real_rows},
                                   {"sp_steps", stats.sp_steps},
                                   {"requests_in_flight", stats.max_in_flight},
                                   {"prefix_hit_tokens", stats.prefix_hit_tokens},
                                   {"cache", spec.cache}});
    if (!args.fresh) {
      for (const ScoringSpec& scoring : plan.scorings) {
        if (scoring.of == g.label) run_scoring(scoring, g);
      }
    }
  }
  // Not a silent wait: an adapter may take its grace period to exit, and how it ended is recorded
  // (engine.shutdown in the report for an adapter).
  progress("shutting down the engine");
  engine->shutdown();
  meta["engine"]["details"] = engine->identity().details;
  if (!writer) return 0;
  write_file_atomically(
      (std::filesystem::path(args.work_dir) / (args.fresh ? "meta-fresh.json" : "meta.json"))
          .string(),
      // Outside text (an adapter's settings, a path) is repaired where it enters; a byte that
      // slipped through costs a replaced character, not the scenario.
      meta.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  progress("done");
  return 0;
}

}  // namespace bih
