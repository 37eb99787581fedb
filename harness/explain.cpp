#include "harness/explain.hpp"

#include <fmt/core.h>

#include <bit>
#include <chrono>
#include <map>
#include <tuple>

#include "base/errors.hpp"
#include "engines/bih_engine.hpp"
#include "harness/config_compare.hpp"
#include "harness/diff.hpp"
#include "spec/plan.hpp"

namespace bih {
namespace {

struct Context {
  int batch_size = 1;
  bool fresh = false;
};

Context parse_label(const std::string& label) {
  // "bs=64", "bs=64#2", "bs=64(fresh)"
  if (label.rfind("bs=", 0) != 0) throw InputError("unknown generation label '" + label + "'");
  Context c;
  c.batch_size = std::stoi(label.substr(3));
  c.fresh = label.find("(fresh)") != std::string::npos;
  return c;
}

// The scenario's engine and prompts, made once; each trace generates the group of prompts that
// holds `prompt` at `batch_size`, tracing `prompt`'s token `step`. A trace starts on an empty
// prefix cache, as the plan's cold generations do, unless `warm` (the plan's warm generation
// reuses what the one before it cached).
class Tracer {
 public:
  // `timings`, when given, gets how long making the engine and each trace took.
  Tracer(const Scenario& s, std::shared_ptr<const ModelWeights> weights,
         std::string* timings = nullptr)
      : timings_(timings),
        begin_(std::chrono::steady_clock::now()),
        bundle_(make_engine(s, std::move(weights))),
        prompts_(make_prompts(s.plan.prompts, bundle_.config.vocab_size, s.source_file)) {
    lap("engine");
  }

  std::vector<TraceEntry> trace(int batch_size, int prompt, int step, bool warm = false) {
    if (prompt < 0 || prompt >= static_cast<int>(prompts_.size())) {
      throw InputError("prompt " + std::to_string(prompt) + " is not in the scenario's " +
                       std::to_string(prompts_.size()) + " prompts");
    }
    const int first = prompt / batch_size * batch_size;
    const int last = std::min<int>(static_cast<int>(prompts_.size()), first + batch_size);
    const std::vector<std::vector<int32_t>> group(prompts_.begin() + first,
                                                  prompts_.begin() + last);
    TraceSink sink;
    if (!warm) bundle_.engine->reset_prefix_cache();
    bundle_.engine->set_trace(TraceRequest{prompt - first, step}, &sink);
    bundle_.engine->generate(group, step + 1);
    bundle_.engine->set_trace({}, nullptr);
    lap(fmt::format("bs={}{}", batch_size, warm ? " warm" : ""));
    return sink.sorted();
  }

 private:
  void lap(const std::string& what) {
    const auto now = std::chrono::steady_clock::now();
    if (timings_) {
      *timings_ += fmt::format("{}{} {:.2f} s", timings_->empty() ? "" : ", ", what,
                               std::chrono::duration<double>(now - begin_).count());
    }
    begin_ = now;
  }

  std::string* timings_;
  std::chrono::steady_clock::time_point begin_;
  EngineBundle bundle_;
  std::vector<std::vector<int32_t>> prompts_;
};

// One context traced in an engine of its own (a fresh process's, or another configuration's).
std::vector<TraceEntry> trace_alone(const Scenario& s, std::shared_ptr<const ModelWeights> weights,
                                    int batch_size, int prompt, int step, std::string* timings) {
  Tracer tracer(s, std::move(weights), timings);
  return tracer.trace(batch_size, prompt, step);
}

uint64_t bf16_ulp(uint16_t a, uint16_t b) {
  return ulp_distance(std::bit_cast<float>(static_cast<uint32_t>(a) << 16),
                      std::bit_cast<float>(static_cast<uint32_t>(b) << 16)) >>
         16;
}

std::string where(const Localization& l) {
  std::string s = l.layer >= 0 ? fmt::format("layer {} {}", l.layer, l.op) : l.op;
  s += l.rank >= 0 ? fmt::format(" on rank {}", l.rank) : " (residual stream)";
  return s + fmt::format(", position {} of prompt {}", l.position, l.prompt);
}

// `residual_only`: compare only the residual stream (rank -1: full rows, one value per row), as
// for two TP sizes, whose shards hold different slices of a row and cannot be paired.
void compare_traces(const std::vector<TraceEntry>& a, const std::vector<TraceEntry>& b,
                    Localization& l, bool residual_only = false) {
  using Key = std::tuple<int, std::string, int, int>;
  std::map<Key, const TraceEntry*> in_b;
  for (const TraceEntry& e : b) in_b[{e.layer, e.op, e.rank, e.position}] = &e;
  for (const TraceEntry& ea : a) {
    if (residual_only && ea.rank >= 0) continue;
    auto it = in_b.find({ea.layer, ea.op, ea.rank, ea.position});
    if (it == in_b.end()) continue;  // e.g. a padding-only difference in which rank holds a row
    const TraceEntry& eb = *it->second;
    ++l.entries_compared;
    size_t i = 0;
    while (i < ea.bits.size() && i < eb.bits.size() && ea.bits[i] == eb.bits[i]) ++i;
    const bool attention_context_differs =
        ea.op == "attention" && ea.context_hash != eb.context_hash;
    if (i == ea.bits.size() && i == eb.bits.size() && !attention_context_differs) continue;
    l.diverged = true;
    l.layer = ea.layer;
    l.op = ea.op;
    l.rank = ea.rank;
    l.position = ea.position;
    l.element = static_cast<int>(i);
    l.float32 = ea.float32;
    l.detail_a = ea.detail;
    l.detail_b = eb.detail;
    l.inputs_equal = !attention_context_differs;
    if (i < ea.bits.size() && i < eb.bits.size()) {
      l.bits_a = ea.bits[i];
      l.bits_b = eb.bits[i];
      l.ulp = ea.float32
                  ? ulp_distance(std::bit_cast<float>(ea.bits[i]), std::bit_cast<float>(eb.bits[i]))
                  : bf16_ulp(static_cast<uint16_t>(ea.bits[i]), static_cast<uint16_t>(eb.bits[i]));
    }
    return;
  }
}

std::string summarize_localization(const Localization& l) {
  if (!l.diverged) {
    return fmt::format(
        "no divergence: prompt {} token {} went through {} traced op outputs bitwise equal in "
        "{} and {}",
        l.prompt, l.step, l.entries_compared, l.a_label, l.b_label);
  }
  const std::string a = fmt::format("0x{:0{}x}", l.bits_a, l.float32 ? 8 : 4);
  const std::string b = fmt::format("0x{:0{}x}", l.bits_b, l.float32 ? 8 : 4);
  std::string s = fmt::format(
      "first divergence of prompt {} token {} ({} vs {}): {}, element {}: {} {} vs {} {} ({} {} "
      "ulp).\n  {}: {}\n  {}: {}\n  ",
      l.prompt, l.step, l.a_label, l.b_label, where(l), l.element, l.a_label, a, l.b_label, b,
      l.ulp, l.float32 ? "fp32" : "bf16", l.a_label, l.detail_a, l.b_label, l.detail_b);
  if (l.inputs_equal) {
    s += "Its inputs were bitwise equal in both contexts: this op broke it.";
  } else {
    s += "Its inputs were already different: the K/V cache it attends to was written "
         "differently by an earlier step; explain that step.";
  }
  return s;
}

// For a token the run saw differ and the re-run did not: what that means and how to chase it.
std::string not_reproduced_hint(const Scenario& s) {
  std::string hint =
      ". But the run saw this token differ: the re-run (one engine, the two contexts one after "
      "the other, every op traced) did not reproduce it, so the run's bits depended on something "
      "the re-run lacks, such as timing, concurrent work on the device or a race in a kernel. "
      "Run the scenario again (a count that changes from run to run says so)";
  if (s.plan.solo_lanes > 1) {
    hint += fmt::format(
        ", and with --set plan.solo_lanes=1 (the run had {} engines generating alone at once)",
        s.plan.solo_lanes);
  }
  return hint + ".";
}

}  // namespace

Localization localize(const Scenario& scenario, const std::string& kind, const std::string& a_label,
                      const std::string& b_label, int prompt, int step) {
  // Capture needs every rank in this process: NCCL ranks (one process per GPU) are re-run as
  // emulated ranks of the same order models on one GPU, and the summary says so.
  Scenario s = scenario;
  const bool emulated_instead = s.ranks == RankKind::nccl;
  if (emulated_instead) s.ranks = RankKind::emulated;
  Localization l;
  l.kind = kind;
  l.a_label = a_label;
  l.b_label = b_label;
  l.prompt = prompt;
  l.step = step;
  const Context ca = parse_label(a_label), cb = parse_label(b_label);
  // Host weights are built once for the CPU backend; the CUDA backend makes its own on the GPU.
  auto weights = resolved_backend(s) == Backend::cpu ? build_model(s) : nullptr;
  std::vector<TraceEntry> ta, tb;
  if (!ca.fresh && !cb.fresh) {
    // Both contexts in one engine, as the worker ran the plan's generations: run to run for the
    // repeat and cache comparisons, bs=1 then the batch for the batch comparison.
    Tracer tracer(s, weights, &l.timings);
    ta = tracer.trace(ca.batch_size, prompt, step);
    tb = tracer.trace(cb.batch_size, prompt, step, kind == "cache");
  } else {
    ta = trace_alone(s, weights, ca.batch_size, prompt, step, &l.timings);
    tb = trace_alone(s, weights, cb.batch_size, prompt, step, &l.timings);
  }
  if (ta.empty() || tb.empty()) {
    throw InputError(fmt::format("prompt {} never produced token {} in the re-run", prompt, step));
  }
  compare_traces(ta, tb, l);
  l.summary = summarize_localization(l);
  if (emulated_instead) {
    l.summary +=
        " (re-run with emulated ranks of the same order models on one GPU: capture needs "
        "every rank in one process, and NCCL ranks are one process per GPU)";
  }
  return l;
}

Localization localize_config(const Scenario& configuration, const Scenario& reference,
                             const std::string& a_label, const std::string& b_label, int prompt,
                             int step) {
  Scenario sa = reference, sb = configuration;
  const bool emulated_instead = sa.ranks == RankKind::nccl || sb.ranks == RankKind::nccl;
  sa.ranks = sb.ranks = RankKind::emulated;
  Localization l;
  l.kind = "config";
  l.a_label = a_label;
  l.b_label = b_label;
  l.prompt = prompt;
  l.step = step;
  const Context ca = parse_label(strip_reference_prefix(a_label)), cb = parse_label(b_label);
  auto weights_of = [](const Scenario& s) {
    return resolved_backend(s) == Backend::cpu ? build_model(s) : nullptr;
  };
  std::vector<TraceEntry> ta =
      trace_alone(sa, weights_of(sa), ca.batch_size, prompt, step, &l.timings);
  std::vector<TraceEntry> tb =
      trace_alone(sb, weights_of(sb), cb.batch_size, prompt, step, &l.timings);
  if (ta.empty() || tb.empty()) {
    throw InputError(fmt::format("prompt {} never produced token {} in the re-run", prompt, step));
  }
  const bool residual_only = sa.tp != sb.tp;
  compare_traces(ta, tb, l, residual_only);
  l.summary = summarize_localization(l);
  if (residual_only) {
    l.summary += fmt::format(
        " (TP={} vs TP={}: only the residual stream, full rows every TP size has, is compared; "
        "rank shards hold different slices of a row and cannot be paired, so the op named is the "
        "first residual-stream op whose bits moved, and the sharded ops before it are where to "
        "look)",
        sa.tp, sb.tp);
  }
  if (emulated_instead) {
    l.summary +=
        " (re-run with emulated ranks of the same order models: capture needs every rank in "
        "one process)";
  }
  return l;
}

Localization explain_report(const nlohmann::json& report, const std::optional<std::string>& kind) {
  const Scenario s = scenario_from_json(report.at("scenario"), "report " + report.value("id", ""));
  if (!s.engine.is_bih()) {
    // Tracing re-runs the token with every op captured: only bih's own engine can. Running bih's
    // engine on the same model instead would explain an engine that was never tested.
    throw InputError("report " + report.value("id", ""), "/scenario/engine",
                     "engine " + s.engine.name + " (kind " + s.engine.kind +
                         ") is not traceable: bih explain re-runs tokens in bih's own engine "
                         "only; valid: a report of engine kind bih");
  }
  const auto& comparisons = report.at("comparisons");
  if (comparisons.empty()) throw InputError("the report has no comparisons to explain");
  const nlohmann::json* chosen = nullptr;
  const std::string verdict = report.value("verdict", "");
  for (const auto& c : comparisons) {
    const std::string k = c.at("kind");
    const bool differs = !c.at("first_divergences").empty();
    if (kind) {
      if (k == *kind) {
        chosen = &c;
        break;
      }
      continue;
    }
    // nondeterministic rests on repeat/fresh; batch_variant on batch, else on cache (warm vs
    // cold), taken below when no batch comparison differs.
    const bool wanted = verdict == "nondeterministic" ? (k == "repeat" || k == "fresh")
                        : verdict == "config_variant" ? k == "config"
                                                      : k == "batch";
    if (wanted && differs) {
      chosen = &c;
      break;
    }
  }
  if (!chosen && kind) throw InputError("the report has no '" + *kind + "' comparison");
  for (const auto& c : comparisons) {
    if (chosen || kind) break;
    if (c.at("kind") == "cache" && !c.at("first_divergences").empty()) chosen = &c;
  }
  if (!chosen) chosen = &comparisons.at(0);
  int prompt = 0, step = 0;
  if (!chosen->at("first_divergences").empty()) {
    prompt = chosen->at("first_divergences")[0].at("prompt");
    step = chosen->at("first_divergences")[0].at("step");
  }
  if (chosen->at("kind") == "config") {
    const nlohmann::json reference = report.value("config_reference", nlohmann::json());
    if (!reference.is_object() || !reference.contains("scenario")) {
      throw InputError("report " + report.value("id", ""), "/config_reference",
                       "a config comparison without its reference's scenario; valid: a report "
                       "written by bih run from a matrix with a compare block");
    }
    const Scenario r = scenario_from_json(reference.at("scenario"),
                                          "report " + report.value("id", "") + " (reference)");
    return localize_config(s, r, chosen->at("a"), chosen->at("b"), prompt, step);
  }
  Localization l = localize(s, chosen->at("kind"), chosen->at("a"), chosen->at("b"), prompt, step);
  if (!l.diverged && !chosen->at("first_divergences").empty()) l.summary += not_reproduced_hint(s);
  return l;
}

nlohmann::json to_json(const Localization& l) {
  nlohmann::json j = {{"comparison", l.kind},
                      {"a", l.a_label},
                      {"b", l.b_label},
                      {"prompt", l.prompt},
                      {"step", l.step},
                      {"diverged", l.diverged},
                      {"entries_compared", l.entries_compared},
                      {"summary", l.summary}};
  if (l.diverged) {
    const int digits = l.float32 ? 8 : 4;
    j["first"] = {{"layer", l.layer},
                  {"op", l.op},
                  {"rank", l.rank < 0 ? nlohmann::json() : nlohmann::json(l.rank)},
                  {"position", l.position},
                  {"element", l.element},
                  {"dtype", l.float32 ? "fp32" : "bf16"},
                  {"bits_a", fmt::format("0x{:0{}x}", l.bits_a, digits)},
                  {"bits_b", fmt::format("0x{:0{}x}", l.bits_b, digits)},
                  {"ulp", l.ulp},
                  {"detail_a", l.detail_a},
                  {"detail_b", l.detail_b},
                  {"inputs_equal", l.inputs_equal}};
  }
  return j;
}

}  // namespace bih
