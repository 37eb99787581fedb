// scenario.hpp: one fully resolved configuration, and its canonical id.
//
// A Scenario is what a scenario file (DESIGN.md, "A scenario file") resolves to once defaults are
// filled in, --set overrides applied and everything validated. Its id() is the stable string of
// its knobs, e.g. "tp=4,sp=on(min=1),ar=tree,rs=ring,graph=full,prefix=off,kernels=invariant,
// model=tiny": the scenario's name in file names, report keys, filters and JUnit cases.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "models/knobs.hpp"
#include "spec/verdict.hpp"

namespace bih {

struct ModelSpec {
  std::string preset = "tiny";  // empty when path is set
  std::string path;             // Hugging Face checkpoint folder
  uint64_t seed = 0;            // synthetic weights' seed
};

struct PromptSpec {
  int count = 64;
  int min_len = 8;
  int max_len = 48;
  uint64_t seed = 0;
  std::string file;  // JSON: [[token ids], ...]; when set, count/min_len/max_len/seed are unused
};

struct PlanSpec {
  PromptSpec prompts;
  int max_tokens = 24;                  // greedy tokens generated per prompt, EOS ignored
  std::vector<int> batch_sizes{1, 64};  // the first is the reference; the last is repeated
  int repeats = 2;                      // runs of the last batch size in one process
  bool fresh_process = false;           // one more run of the last batch size in a new process
  int max_model_len = 512;
  int max_num_seqs = 64;
  // At most this many engines run the bs=1 generation at once, each request still alone in its
  // engine (one batch of one at a time): lane k takes prompts k, k + lanes, ... Only the wall
  // time changes (docs/solo-lanes.md). bih's own engine with emulated ranks only; elsewhere one
  // lane. 1 (the default) leaves ids and resolved scenarios as they were.
  int solo_lanes = 1;
};

// What is compared beyond the sampled tokens and their logprobs (docs/prefill-and-top-k.md).
// All off by default, and then absent from ids and the resolved scenario.
struct CompareSpec {
  bool prefill = false;     // score the generations in one prefill: comparison kind "prefill"
  int top_k = 0;            // per step the k best ids and their values (0: off, at most 20)
  bool row_digest = false;  // per step a 64-bit digest of the whole logits row
  bool any() const { return prefill || top_k > 0 || row_digest; }
};

// Which engine runs the plan (DESIGN.md, "Engines under test"). kind "bih" is our own engine and
// leaves every id as it was; kind "command" runs an adapter speaking bih.engine/1
// (docs/engine-protocol.md) and its ids end in ",engine=<name>".
struct EngineSpec {
  std::string kind = "bih";                // bih | command | http
  std::string name;                        // command: required; the id's engine=<name>
  std::vector<std::string> command;        // command: argv, run in `cwd`, argv[0] looked up in PATH
  std::string cwd;                         // command: default the scenario file's folder (absolute)
  std::map<std::string, std::string> env;  // added to the adapter's environment
  nlohmann::json options = nlohmann::json::object();  // handed to the adapter, recorded
  std::string model_format = "hf";                    // what the adapter loads: hf | gguf
  double reply_timeout_s = 0;  // longest wait for one answer; 0: 90% of timeout_s

  // http: a server under test, either one already running (`url`) or one bih launches from a
  // profile (spec/server_profile.hpp). `name` defaults to the profile's name, or "http".
  std::string url;      // "http://127.0.0.1:8000": a running server; exclusive with `profile`
  std::string profile;  // a shipped profile's name ("vllm") or a profile file (absolute)
  std::string dialect;  // openai | sglang | llama.cpp; default: the profile's first
  std::string batching = "request";  // request (one request, every prompt) | concurrent
  std::string served_model;          // the request's "model" field; default: the profile's
  std::vector<std::string> args;     // server arguments after the profile's own
  std::string reset_cache;           // url: "POST /path" that empties the prefix cache
  double ready_timeout_s = 0;        // profile: longest wait for readiness; 0: the profile's

  bool is_bih() const { return kind == "bih"; }
  bool is_http() const { return kind == "http"; }
};

struct Scenario {
  std::string name;         // free text
  std::string source_file;  // where it came from, for messages
  ModelSpec model;
  Backend backend = Backend::cpu;
  int tp = 1;
  RankKind ranks = RankKind::emulated;
  std::vector<int> ring_order;  // empty: 0..tp-1
  bool sp_enabled = false;
  int sp_min_tokens = 1;
  ReduceOrder all_reduce = ReduceOrder::tree;
  ReduceOrder reduce_scatter = ReduceOrder::ring;
  ReduceOrder all_gather = ReduceOrder::ring;
  std::map<std::string, std::string> nccl_env;
  KernelFamily kernels = KernelFamily::invariant;
  GraphMode graph_mode = GraphMode::none;
  std::vector<int> capture_sizes{1, 2, 4, 8, 16, 32, 64};
  bool prefix_caching = false;
  int block_size = 16;
  int chunked_prefill_max_tokens = 0;  // 0: off
  PlanSpec plan;
  EngineSpec engine;
  // The knobs the input set, as dotted leaves ("parallel.tp", "nccl_env.NCCL_ALGO"): an external
  // engine gets these and keeps its own defaults for the rest.
  std::vector<std::string> knobs_set;
  double timeout_s = 600;
  std::optional<Verdict> expect;
  CompareSpec compare;
  bool localize = false;  // run `bih explain` on the report when the verdict is not invariant
  std::string fault;      // test-only ("debug.fault"): "", "crash", "abort", "hang", "exit"
  // A configuration of a matrix file with a "compare" block (docs/config-comparison.md): the
  // reference configuration its generations are diffed against (itself when it is the reference),
  // and the dotted keys whose values name a difference (compare.across, then the reference's other
  // knobs). Null and empty for any other scenario; neither is part of id() or to_json().
  std::shared_ptr<const Scenario> config_reference;
  std::vector<std::string> compare_keys;

  std::string id() const;
  // The resolved scenario: every key present for engine kind bih; for other kinds only the knobs
  // in knobs_set (so a re-read gives the same scenario).
  nlohmann::json to_json() const;
  // The knobs_set with their resolved values, for an adapter's init message.
  nlohmann::json knobs_json() const;
};

// The InputError scenario_from_json throws, with its pieces kept so that a matrix loader can point
// the message at where the offending value came from (an axis, a case, a --set).
class ScenarioError : public InputError {
 public:
  ScenarioError(const std::string& file, const std::string& pointer, const std::string& detail)
      : InputError(file, pointer, detail), file_(file), pointer_(pointer), detail_(detail) {}
  const std::string& file() const { return file_; }
  const std::string& pointer() const { return pointer_; }  // includes scenario_from_json's prefix
  const std::string& detail() const { return detail_; }    // "what is wrong; valid: ..."

 private:
  std::string file_, pointer_, detail_;
};

// Every key of a scenario object in dotted form, objects and leaves ("parallel", "parallel.tp",
// "plan.prompts.count", ...). nccl_env's entries are free: "nccl_env.NCCL_<anything>".
std::vector<std::string> scenario_dotted_keys();

// The request dialects an HTTP engine speaks: engine.dialect's values, a server profile's
// dialects.
const std::vector<std::string>& http_dialects();

// The scenario sections an external engine is handed when the input sets them; a server
// profile's knobs map each to flags.
const std::vector<std::string>& knob_sections();
bool is_scenario_dotted_key(const std::string& dotted);

// kernels tp_invariant reduces the row-parallel partials by its chunk tree over fp32
// (models/tree_sum.hpp), whatever collectives.* say; scenario_from_json resolves unset all_reduce
// and reduce_scatter orders to `fixed` under it. At tp > 1 an order other than `fixed` or `tree`
// (the two that name a fixed order the tree continues) cannot be honoured: the reason, for the
// engine to answer `unsupported`; "" otherwise. all_gather is a copy: any order.
std::string tp_invariant_collectives_refusal(const Scenario& s);

// Parses and validates one scenario object. `file` names the source in errors; `pointer` is the
// JSON pointer of `j` inside that file. Throws InputError.
Scenario scenario_from_json(const nlohmann::json& j, const std::string& file,
                            const std::string& pointer = "");

}  // namespace bih
