// test_audit_engines.cpp: gaps a mutation audit found in engines/ and spec/ (issue 20), each
// checked over a whole set rather than one member:
//   - parse_result refuses a sequence with more tokens or values than max_tokens (not only fewer);
//   - every knob only bih's engine has makes a command engine's scenario unsupported, and every
//     other knob does not;
//   - every scenario field that maps to an engine option reaches bih's engine and changes what it
//     does (a table, one row per EngineOptions field);
//   - the cached export of a preset is one per seed, holding that seed's weights.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engines/bih_engine.hpp"
#include "engines/command_engine.hpp"
#include "engines/engine_protocol.hpp"
#include "engines/model_handoff.hpp"
#include "models/weights.hpp"
#include "spec/scenario.hpp"

namespace bih::test_audit_engines {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- parse_result: exactly max_tokens, not at least ----------------------------------------

json result_with(int tokens, int values, int sequences = 2) {
  json seqs = json::array();
  for (int i = 0; i < sequences; ++i) {
    json t = json::array(), v = json::array();
    for (int k = 0; k < tokens; ++k) t.push_back(k);
    for (int k = 0; k < values; ++k) v.push_back("0xbf800000");
    seqs.push_back({{"tokens", t}, {"values", v}});
  }
  return {{"type", "result"}, {"id", 1}, {"sequences", seqs}};
}

TEST(AuditProtocol, ResultCountsMustBeExactEitherWay) {
  constexpr int kMax = 4;
  EXPECT_EQ(protocol::parse_result(result_with(kMax, kMax), 1, 2, kMax, 100, nullptr).size(), 2u);
  struct Case {
    int tokens, values, sequences;
    const char* what;
  };
  const std::vector<Case> refused{{kMax + 1, kMax, 2, "5 tokens"},
                                  {kMax, kMax + 1, 2, "5 values"},
                                  {kMax + 1, kMax + 1, 2, "5 tokens"},
                                  {kMax - 1, kMax, 2, "3 tokens"},
                                  {kMax, kMax - 1, 2, "3 values"},
                                  {kMax, kMax, 3, "3 sequences for 2 prompts"},
                                  {kMax, kMax, 1, "1 sequences for 2 prompts"}};
  for (const Case& c : refused) {
    try {
      protocol::parse_result(result_with(c.tokens, c.values, c.sequences), 1, 2, kMax, 100,
                             nullptr);
      ADD_FAILURE() << c.what << " accepted";
    } catch (const protocol::ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(c.what), std::string::npos) << e.what();
    }
  }
}

// ---- knobs only bih's engine has -------------------------------------------------------------

json command_engine() { return {{"kind", "command"}, {"name", "probe"}, {"command", {"true"}}}; }

// A command engine's scenario setting `knobs` (a scenario object's knob sections).
Scenario command_scenario(const json& knobs) {
  json j = knobs;
  j["engine"] = command_engine();
  return scenario_from_json(j, "mem.json");
}

// Every leaf knob a scenario can set, with a valid value other than its default. The bih-only
// ones are, by DESIGN.md, every collective's order model and the rank layout.
struct KnobCase {
  std::string dotted;
  json knobs;
  bool bih_only;
};

std::vector<KnobCase> every_knob() {
  return {
      {"collectives.all_reduce", {{"collectives", {{"all_reduce", "ring"}}}}, true},
      {"collectives.reduce_scatter", {{"collectives", {{"reduce_scatter", "fixed"}}}}, true},
      {"collectives.all_gather", {{"collectives", {{"all_gather", "arrival"}}}}, true},
      {"parallel.ranks", {{"parallel", {{"ranks", "emulated"}}}}, true},
      {"parallel.ring_order", {{"parallel", {{"tp", 2}, {"ring_order", {1, 0}}}}}, true},
      {"parallel.tp", {{"parallel", {{"tp", 2}}}}, false},
      {"backend", {{"backend", "cpu"}}, false},
      {"sequence_parallel.enabled", {{"sequence_parallel", {{"enabled", true}}}}, false},
      {"sequence_parallel.min_tokens", {{"sequence_parallel", {{"min_tokens", 8}}}}, false},
      {"nccl_env.NCCL_ALGO", {{"nccl_env", {{"NCCL_ALGO", "Ring"}}}}, false},
      {"kernels", {{"kernels", "vendor"}}, false},
      {"cudagraph.mode", {{"cudagraph", {{"mode", "full"}}}}, false},
      {"cudagraph.capture_sizes", {{"cudagraph", {{"capture_sizes", {1, 8}}}}}, false},
      {"prefix_caching.enabled", {{"prefix_caching", {{"enabled", true}}}}, false},
      {"prefix_caching.block_size", {{"prefix_caching", {{"block_size", 32}}}}, false},
      {"chunked_prefill.max_tokens", {{"chunked_prefill", {{"max_tokens", 64}}}}, false},
  };
}

// The table covers every leaf of every knob section that scenario_dotted_keys() lists.
TEST(AuditBihOnlyKnobs, TheTableCoversEveryKnobLeaf) {
  const std::vector<std::string> sections{"backend",     "parallel",       "sequence_parallel",
                                          "collectives", "nccl_env",       "kernels",
                                          "cudagraph",   "prefix_caching", "chunked_prefill"};
  std::vector<std::string> covered;
  for (const KnobCase& k : every_knob()) covered.push_back(k.dotted);
  const std::vector<std::string> keys = scenario_dotted_keys();
  for (const std::string& key : keys) {
    const std::string section = key.substr(0, key.find('.'));
    const bool is_leaf = std::none_of(keys.begin(), keys.end(), [&](const std::string& other) {
      return other.size() > key.size() && other.compare(0, key.size() + 1, key + ".") == 0;
    });
    if (!is_leaf || std::find(sections.begin(), sections.end(), section) == sections.end()) {
      continue;
    }
    if (section == "nccl_env") continue;  // free names, covered by NCCL_ALGO
    EXPECT_NE(std::find(covered.begin(), covered.end(), key), covered.end())
        << key << " is a knob the table does not cover";
  }
}

TEST(AuditBihOnlyKnobs, EachBihOnlyKnobAloneMakesACommandScenarioUnsupported) {
  for (const KnobCase& k : every_knob()) {
    const Scenario s = command_scenario(k.knobs);
    ASSERT_NE(std::find(s.knobs_set.begin(), s.knobs_set.end(), k.dotted), s.knobs_set.end())
        << k.dotted << " not recorded as set";
    const std::string reason = command_engine_unsupported_reason(s);
    if (k.bih_only) {
      EXPECT_NE(reason.find(k.dotted), std::string::npos) << k.dotted << ": '" << reason << "'";
      EXPECT_NE(reason.find("engine probe"), std::string::npos) << reason;
    } else {
      EXPECT_EQ(reason, "") << k.dotted << " is handed to the adapter, not refused";
    }
  }
}

// ---- every scenario field that maps to an engine option -------------------------------------

// What bih's engine did with fixed prompts: stats and the bits of every value, for two batches
// (the second repeats the first: prefix cache hits), then one long prompt (max_model_len) and a
// batch of 4 (max_num_seqs). A refusal is part of what it did.
std::string behaviour(const Scenario& s) {
  EngineBundle b = make_engine(s, nullptr, {});
  std::vector<std::vector<int32_t>> prompts;
  for (int len : {20, 13, 7, 30}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back((len * 31 + i * 7) % 2000 + 3);
    prompts.push_back(p);
  }
  std::string out;
  const auto run = [&](const std::vector<std::vector<int32_t>>& batch, int max_tokens) {
    GenerateStats stats;
    try {
      for (const SequenceResult& r : b.engine->generate(batch, max_tokens, &stats)) {
        for (int32_t t : r.tokens) out += std::to_string(t) + " ";
        for (float v : r.logprobs) out += std::to_string(std::bit_cast<uint32_t>(v)) + " ";
      }
    } catch (const std::exception& e) {
      out += std::string("refused: ") + e.what();
    }
    out += "| steps " + std::to_string(stats.steps) + " rows " + std::to_string(stats.rows) +
           " real " + std::to_string(stats.real_rows) + " hits " +
           std::to_string(stats.prefix_hit_tokens) + " sp " + std::to_string(stats.sp_steps) + "\n";
  };
  run({prompts[0], prompts[1]}, 3);
  run({prompts[0], prompts[1]}, 3);
  run({std::vector<int32_t>(100, 5)}, 2);
  run(prompts, 2);
  return out;
}

// The EngineOptions fields that differ between a and b.
std::vector<std::string> differing_options(const EngineOptions& a, const EngineOptions& b) {
  std::vector<std::string> d;
  if (a.kernels != b.kernels) d.push_back("kernels");
  if (a.tp != b.tp) d.push_back("tp");
  if (a.sp_enabled != b.sp_enabled) d.push_back("sp_enabled");
  if (a.sp_min_tokens != b.sp_min_tokens) d.push_back("sp_min_tokens");
  if (a.graph_mode != b.graph_mode) d.push_back("graph_mode");
  if (a.capture_sizes != b.capture_sizes) d.push_back("capture_sizes");
  if (a.prefix_caching != b.prefix_caching) d.push_back("prefix_caching");
  if (a.block_size != b.block_size) d.push_back("block_size");
  if (a.chunked_prefill_max_tokens != b.chunked_prefill_max_tokens) {
    d.push_back("chunked_prefill_max_tokens");
  }
  if (a.max_model_len != b.max_model_len) d.push_back("max_model_len");
  if (a.max_num_seqs != b.max_num_seqs) d.push_back("max_num_seqs");
  return d;
}

TEST(AuditEngineOptions, EveryScenarioFieldReachesTheEngineAndChangesWhatItDoes) {
  struct Row {
    std::string option;  // the EngineOptions field
    json base;           // scenario knobs both sides share
    json change;         // merged into base: the one field changed
  };
  const json tp2 = {{"parallel", {{"tp", 2}}}};
  const json sp = {{"parallel", {{"tp", 2}}}, {"sequence_parallel", {{"enabled", true}}}};
  const json graphs = {{"cudagraph", {{"mode", "full"}}}};
  const json prefix = {{"prefix_caching", {{"enabled", true}}}};
  const std::vector<Row> rows{
      {"kernels", json::object(), {{"kernels", "vendor"}}},
      {"tp", json::object(), tp2},
      {"sp_enabled", tp2, {{"sequence_parallel", {{"enabled", true}}}}},
      {"sp_min_tokens", sp, {{"sequence_parallel", {{"min_tokens", 40}}}}},
      {"graph_mode", json::object(), graphs},
      {"capture_sizes", graphs, {{"cudagraph", {{"capture_sizes", {8, 64}}}}}},
      {"prefix_caching", json::object(), prefix},
      {"block_size", prefix, {{"prefix_caching", {{"block_size", 4}}}}},
      {"chunked_prefill_max_tokens", json::object(), {{"chunked_prefill", {{"max_tokens", 8}}}}},
      {"max_model_len", json::object(), {{"plan", {{"max_model_len", 64}}}}},
      {"max_num_seqs", json::object(), {{"plan", {{"max_num_seqs", 2}}}}},
  };
  // A plan small enough for every row's max_model_len and max_num_seqs.
  const json plan = {{"plan",
                      {{"prompts", {{"count", 2}, {"min_len", 4}, {"max_len", 8}}},
                       {"max_tokens", 2},
                       {"batch_sizes", {1, 2}}}}};
  std::vector<std::string> covered;
  for (const Row& row : rows) {
    json base = plan;
    base.merge_patch(row.base);
    json changed = base;
    changed.merge_patch(row.change);
    const Scenario a = scenario_from_json(base, "mem.json");
    const Scenario b = scenario_from_json(changed, "mem.json");
    const EngineBundle ea = make_engine(a, nullptr, {});
    const EngineBundle eb = make_engine(b, nullptr, {});
    EXPECT_EQ(differing_options(ea.engine->options(), eb.engine->options()),
              std::vector<std::string>{row.option})
        << row.option << ": " << changed.dump();
    EXPECT_NE(behaviour(a), behaviour(b))
        << row.option << " reached the engine but changed nothing it did: " << changed.dump();
    covered.push_back(row.option);
  }
  // Every field differing_options knows is a row: a new option needs a row too.
  EngineOptions all_changed;
  all_changed.kernels = KernelFamily::vendor;
  all_changed.tp = 2;
  all_changed.sp_enabled = true;
  all_changed.sp_min_tokens = 2;
  all_changed.graph_mode = GraphMode::full;
  all_changed.capture_sizes = {1};
  all_changed.prefix_caching = true;
  all_changed.block_size = 1;
  all_changed.chunked_prefill_max_tokens = 1;
  all_changed.max_model_len = 1;
  all_changed.max_num_seqs = 1;
  EXPECT_EQ(differing_options(EngineOptions{}, all_changed), covered);
}

// ---- the cached export: one per seed -------------------------------------------------------

TEST(AuditModelHandoff, EachSeedGetsItsOwnExportHoldingItsWeights) {
  const fs::path cache =
      fs::temp_directory_path() / ("bih_audit_handoff_" + std::to_string(::getpid()));
  fs::remove_all(cache);
  setenv("BIH_CACHE_DIR", cache.c_str(), 1);
  for (const std::string format : {"hf", "gguf"}) {
    std::vector<std::string> paths;
    for (const uint64_t seed : {uint64_t{0}, uint64_t{1}}) {
      json j = {{"model", {{"preset", "tiny"}, {"seed", seed}}}, {"engine", command_engine()}};
      j["engine"]["model_format"] = format;
      const Scenario s = scenario_from_json(j, "mem.json");
      const protocol::ModelHandle h = hand_off_model(s);
      paths.push_back(h.path);
      ASSERT_TRUE(fs::exists(h.path)) << h.path;
      if (format == "hf") {
        // What an adapter loads from the folder is this seed's weights, bit for bit.
        EXPECT_EQ(weights_hash(load_checkpoint(h.path)),
                  weights_hash(synthetic_weights(*preset_config("tiny"), seed)))
            << "seed " << seed << " at " << h.path;
      }
    }
    EXPECT_NE(paths[0], paths[1]) << format << ": two seeds share one export";
  }
  unsetenv("BIH_CACHE_DIR");
  fs::remove_all(cache);
}

}  // namespace
}  // namespace bih::test_audit_engines
