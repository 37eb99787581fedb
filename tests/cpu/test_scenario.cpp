// Scenario files: defaults, canonical ids, round trips, matrix expansion, overrides, filters,
// validation messages, and the JSON Schema.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/edit_distance.hpp"
#include "base/errors.hpp"
#include "schema_check.hpp"
#include "spec/scenario.hpp"
#include "spec/scenario_file.hpp"
#include "test_util.hpp"

namespace bih::test_scenario {
namespace {

using testing::input_error_of;

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kDataDir = std::string(BIH_SOURCE_DIR) + "/tests/data/scenarios";

std::string fixture(const std::string& name) { return kDataDir + "/" + name; }

std::vector<std::string> ids_of(const std::vector<Scenario>& scenarios) {
  std::vector<std::string> ids;
  for (const Scenario& s : scenarios) ids.push_back(s.id());
  return ids;
}

// Runs `action`, requires an InputError, and returns its message.

// Requires that parsing `scenario` (as if from mem.json) fails with a message holding each piece.
void expect_rejected(const json& scenario, const std::vector<std::string>& pieces) {
  const std::string message = input_error_of([&] { scenario_from_json(scenario, "mem.json"); });
  EXPECT_EQ(message.rfind("mem.json: at /", 0), 0u) << message;
  EXPECT_NE(message.find("; valid: "), std::string::npos) << message;
  for (const std::string& piece : pieces) {
    EXPECT_NE(message.find(piece), std::string::npos)
        << "missing '" << piece << "' in: " << message;
  }
}

// A scenario with every knob away from its default, for ids and round trips.
json everything_changed() {
  return json::parse(R"({
    "name": "all knobs",
    "model": {"preset": "qwen3-0.6b", "seed": 7},
    "backend": "cuda",
    "parallel": {"tp": 4, "ranks": "nccl", "ring_order": [0, 2, 1, 3]},
    "sequence_parallel": {"enabled": true, "min_tokens": 128},
    "collectives": {"all_reduce": "ring", "reduce_scatter": "fixed", "all_gather": "arrival"},
    "nccl_env": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"},
    "kernels": "vendor",
    "cudagraph": {"mode": "piecewise", "capture_sizes": [1, 8, 64]},
    "prefix_caching": {"enabled": true, "block_size": 32},
    "chunked_prefill": {"max_tokens": 256},
    "plan": {"prompts": {"count": 16, "min_len": 4, "max_len": 20, "seed": 5},
             "max_tokens": 12, "batch_sizes": [1, 4, 16], "repeats": 3, "fresh_process": true,
             "max_model_len": 64, "max_num_seqs": 16},
    "timeout_s": 90.5,
    "expect": "nondeterministic",
    "debug": {"fault": "hang"}
  })");
}

// ---- defaults and ids -----------------------------------------------------------------------

TEST(ScenarioDefaults, EmptyObjectIsTheMeasurementSetting) {
  const Scenario s = scenario_from_json(json::object(), "mem.json");
  // The issue's setting: 64 prompts x 24 greedy tokens, bs=1 against bs=64, repeated.
  EXPECT_EQ(s.plan.prompts.count, 64);
  EXPECT_EQ(s.plan.max_tokens, 24);
  EXPECT_EQ(s.plan.prompts.count * s.plan.max_tokens, 1536);
  EXPECT_EQ(s.plan.batch_sizes, (std::vector<int>{1, 64}));
  EXPECT_EQ(s.plan.repeats, 2);
  EXPECT_EQ(s.model.preset, "tiny");
  EXPECT_EQ(s.tp, 1);
  EXPECT_FALSE(s.expect.has_value());
  EXPECT_EQ(s.fault, "");
  // Every default matches a default-constructed Scenario, key by key.
  Scenario defaults;
  defaults.source_file = "mem.json";
  EXPECT_EQ(s.to_json(), defaults.to_json());
  EXPECT_EQ(s.id(),
            "tp=1,sp=off,ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny");
}

TEST(ScenarioId, DesignExampleFile) {
  const ScenarioSet set = load_scenarios(fixture("tp4_sp_ring.json"));
  ASSERT_EQ(set.scenarios.size(), 1u);
  const Scenario& s = set.scenarios[0];
  EXPECT_EQ(set.name, "tp4-sp-ring");
  EXPECT_EQ(s.id(),
            "tp=4,sp=on(min=1),ar=tree,rs=ring,graph=full,prefix=off,kernels=invariant,"
            "model=tiny");
  EXPECT_EQ(s.expect, Verdict::batch_variant);
  EXPECT_EQ(s.nccl_env.at("NCCL_PROTO"), "Simple");
  EXPECT_EQ(s.source_file, fixture("tp4_sp_ring.json"));
}

TEST(ScenarioId, OptionalPartsAppearInOrderOnlyWhenNotDefault) {
  const Scenario s = scenario_from_json(everything_changed(), "mem.json");
  EXPECT_EQ(s.id(),
            "tp=4,sp=on(min=128),ar=ring,rs=fixed,graph=piecewise,prefix=on,kernels=vendor,"
            "model=qwen3-0.6b(seed=7),ag=arrival,chunk=256,ranks=nccl,ring=0-2-1-3,backend=cuda,"
            "block=32,fault=hang");

  // Defaults of the optional parts leave them out: identity ring, block 16, auto backend shows.
  json j = everything_changed();
  j["parallel"]["ring_order"] = {0, 1, 2, 3};
  j["prefix_caching"]["block_size"] = 16;
  j["collectives"]["all_gather"] = "ring";
  j["chunked_prefill"]["max_tokens"] = 0;
  j["backend"] = "auto";
  j["debug"]["fault"] = "none";
  j["model"]["seed"] = 0;
  EXPECT_EQ(scenario_from_json(j, "mem.json").id(),
            "tp=4,sp=on(min=128),ar=ring,rs=fixed,graph=piecewise,prefix=on,kernels=vendor,"
            "model=qwen3-0.6b,ranks=nccl,backend=auto");

  // A block size only matters, and so only shows, when prefix caching is on.
  json off = json::parse(R"({"prefix_caching": {"enabled": false, "block_size": 64}})");
  EXPECT_EQ(scenario_from_json(off, "mem.json").id(),
            "tp=1,sp=off,ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny");
}

TEST(ScenarioId, CheckpointModelIsNamedByItsFolder) {
  const ScenarioSet set = load_scenarios(fixture("checkpoint_model.json"));
  ASSERT_EQ(set.scenarios.size(), 1u);
  const Scenario& s = set.scenarios[0];
  EXPECT_EQ(s.id(),
            "tp=2,sp=off,ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,"
            "model=ckpt-small(seed=3)");
  // Relative to the scenario file's folder, not the working directory.
  EXPECT_TRUE(fs::exists(fs::path(s.model.path) / "config.json")) << s.model.path;
  EXPECT_TRUE(s.model.preset.empty());
}

// ---- round trip -----------------------------------------------------------------------------

TEST(ScenarioRoundTrip, ToJsonReparsesToTheSameScenario) {
  std::vector<json> inputs{json::object(), everything_changed(),
                           read_json_file(fixture("tp4_sp_ring.json"))};
  for (const json& input : inputs) {
    const Scenario first = scenario_from_json(input, "mem.json");
    const json written = first.to_json();
    const Scenario second = scenario_from_json(written, "other.json");
    EXPECT_EQ(second.id(), first.id());
    EXPECT_EQ(second.to_json(), written);
  }
  // Files and checkpoints resolve to absolute paths, so the round trip holds from any folder.
  for (const std::string& name : {"prompts_file.json", "checkpoint_model.json"}) {
    const Scenario first = load_scenarios(fixture(name)).scenarios.at(0);
    const Scenario second = scenario_from_json(first.to_json(), "/elsewhere/x.json");
    EXPECT_EQ(second.to_json(), first.to_json()) << name;
    EXPECT_EQ(second.id(), first.id()) << name;
  }
}

TEST(ScenarioRoundTrip, ToJsonHasEveryKeyNestedAsInTheFile) {
  const json j = Scenario{}.to_json();
  for (const std::string& dotted : scenario_dotted_keys()) {
    // Alternatives to keys that are set: present only when used (see below).
    if (dotted == "model.path" || dotted == "plan.prompts.file") continue;
    // compare (docs/prefill-and-top-k.md): only when something is on, so that the resolved form
    // of every scenario without it stays as it was (below).
    if (dotted.rfind("compare", 0) == 0) continue;
    // plan.solo_lanes (docs/solo-lanes.md): only above 1, for the same reason (below).
    if (dotted == "plan.solo_lanes") continue;
    // An adapter's keys are present when engine.kind is command (below).
    if (dotted.rfind("engine.", 0) == 0 && dotted != "engine.kind") continue;
    json::json_pointer pointer("/" + [&] {
      std::string p = dotted;
      for (char& c : p) c = c == '.' ? '/' : c;
      return p;
    }());
    EXPECT_TRUE(j.contains(pointer)) << dotted;
  }
  EXPECT_TRUE(j["expect"].is_null());
  EXPECT_FALSE(j["plan"].contains("solo_lanes"));
  Scenario lanes;
  lanes.plan.solo_lanes = 4;
  EXPECT_EQ(lanes.to_json()["plan"]["solo_lanes"], 4);
  EXPECT_EQ(lanes.id(), Scenario{}.id()) << "lanes change the wall time, not the scenario";
  EXPECT_EQ(scenario_from_json(lanes.to_json(), "/elsewhere/x.json").plan.solo_lanes, 4);
  EXPECT_EQ(j["debug"]["fault"], "none");
  EXPECT_EQ(j["parallel"]["ring_order"], json::array({0}));

  const Scenario checkpoint = load_scenarios(fixture("checkpoint_model.json")).scenarios.at(0);
  const json c = checkpoint.to_json();
  EXPECT_TRUE(c["model"].contains("path"));
  EXPECT_FALSE(c["model"].contains("preset"));
  const Scenario from_file = load_scenarios(fixture("prompts_file.json")).scenarios.at(0);
  EXPECT_TRUE(from_file.to_json()["plan"]["prompts"].contains("file"));

  EXPECT_FALSE(j.contains("compare"));
  const Scenario compared = scenario_from_json(json{{"compare", {{"top_k", 4}}}}, "compare.json");
  EXPECT_EQ(compared.to_json()["compare"],
            (json{{"prefill", false}, {"top_k", 4}, {"row_digest", false}}));
  EXPECT_EQ(scenario_from_json(compared.to_json(), "again.json").id(), compared.id());
  EXPECT_EQ(compared.id(), Scenario{}.id() + ",top_k=4");
}

// ---- matrix files ---------------------------------------------------------------------------

TEST(ScenarioMatrix, AxesExpandToTheCartesianProductLastAxisFastest) {
  const ScenarioSet set = load_scenarios(fixture("matrix_tp_sp.json"));
  EXPECT_EQ(set.name, "tp-sp-grid");
  const std::string tail = ",ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny";
  EXPECT_EQ(ids_of(set.scenarios),
            (std::vector<std::string>{"tp=1,sp=off" + tail, "tp=1,sp=on(min=1)" + tail,
                                      "tp=2,sp=off" + tail, "tp=2,sp=on(min=1)" + tail,
                                      "tp=4,sp=off" + tail, "tp=4,sp=on(min=1)" + tail}));
}

TEST(ScenarioMatrix, CasesSetNameExpectAndKnobsBeforeTheAxes) {
  const ScenarioSet set = load_scenarios(fixture("matrix_cases.json"));
  ASSERT_EQ(set.scenarios.size(), 4u);
  const std::string head = "tp=4,sp=on(min=1),ar=tree,";
  EXPECT_EQ(ids_of(set.scenarios),
            (std::vector<std::string>{
                head + "rs=ring,graph=none,prefix=off,kernels=invariant,model=tiny",
                head + "rs=fixed,graph=none,prefix=off,kernels=invariant,model=tiny",
                head + "rs=ring,graph=none,prefix=off,kernels=vendor,model=tiny",
                head + "rs=fixed,graph=none,prefix=off,kernels=vendor,model=tiny"}));
  EXPECT_EQ(set.scenarios[0].name, "invariant-kernels");
  EXPECT_EQ(set.scenarios[1].expect, Verdict::invariant);
  EXPECT_EQ(set.scenarios[2].name, "vendor-kernels");
  EXPECT_EQ(set.scenarios[3].expect, Verdict::batch_variant);
  EXPECT_EQ(set.scenarios[3].plan.max_tokens, 8);
  EXPECT_EQ(set.scenarios[0].plan.max_tokens, 24);
}

TEST(ScenarioMatrix, SetOverridesApplyToEveryScenarioAfterAxes) {
  const ScenarioSet set = load_scenarios(
      fixture("matrix_tp_sp.json"), {"kernels=vendor", "sequence_parallel.min_tokens=32",
                                     "plan.batch_sizes=[1,8]", "model.seed=9", "expect=invariant"});
  ASSERT_EQ(set.scenarios.size(), 6u);
  for (const Scenario& s : set.scenarios) {
    EXPECT_EQ(s.kernels, KernelFamily::vendor);
    EXPECT_EQ(s.sp_min_tokens, 32);
    EXPECT_EQ(s.plan.batch_sizes, (std::vector<int>{1, 8}));
    EXPECT_EQ(s.model.seed, 9u);
    EXPECT_EQ(s.expect, Verdict::invariant);
  }
  EXPECT_EQ(set.scenarios[1].id(),
            "tp=1,sp=on(min=32),ar=tree,rs=ring,graph=none,prefix=off,kernels=vendor,"
            "model=tiny(seed=9)");

  // A --set wins over the axis it overlaps: all six collapse onto tp=2, so the ids clash.
  const std::string message =
      input_error_of([&] { load_scenarios(fixture("matrix_tp_sp.json"), {"parallel.tp=2"}); });
  EXPECT_NE(message.find("same id"), std::string::npos) << message;

  // On a single scenario, a nested override, and model.path replacing the preset.
  const ScenarioSet single = load_scenarios(
      fixture("tp4_sp_ring.json"),
      {"parallel.tp=2", "model.path=" + kDataDir + "/data/ckpt-small", "cudagraph.mode=none"});
  EXPECT_EQ(single.scenarios.at(0).id(),
            "tp=2,sp=on(min=1),ar=tree,rs=ring,graph=none,prefix=off,kernels=invariant,"
            "model=ckpt-small");
}

TEST(ScenarioMatrix, PromptsFileIsRelativeToTheScenarioFile) {
  const Scenario s = load_scenarios(fixture("prompts_file.json")).scenarios.at(0);
  EXPECT_EQ(fs::path(s.plan.prompts.file),
            fs::absolute(fixture("data/prompts.json")).lexically_normal());
}

// ---- filters --------------------------------------------------------------------------------

TEST(ScenarioFilter, SubstringGlobAndEmpty) {
  const std::vector<Scenario> all = load_scenarios(fixture("matrix_tp_sp.json")).scenarios;
  EXPECT_EQ(filter_scenarios(all, {}).size(), 6u);
  // Substring anywhere in the id.
  EXPECT_EQ(ids_of(filter_scenarios(all, {"sp=on"})),
            (std::vector<std::string>{all[1].id(), all[3].id(), all[5].id()}));
  // A glob must match the whole id: "tp=4*" matches, "tp=4" as a glob-free substring too, but
  // "sp=on*" as a glob does not (no id starts with it).
  EXPECT_EQ(ids_of(filter_scenarios(all, {"tp=4*"})),
            (std::vector<std::string>{all[4].id(), all[5].id()}));
  EXPECT_TRUE(filter_scenarios(all, {"sp=on*"}).empty());
  EXPECT_EQ(filter_scenarios(all, {"*sp=on*"}).size(), 3u);
  EXPECT_EQ(ids_of(filter_scenarios(all, {"tp=?,sp=off*"})),
            (std::vector<std::string>{all[0].id(), all[2].id(), all[4].id()}));
  // Any filter may match; order is kept.
  EXPECT_EQ(ids_of(filter_scenarios(all, {"tp=4,sp=off", "tp=1,sp=on"})),
            (std::vector<std::string>{all[1].id(), all[4].id()}));
  EXPECT_TRUE(filter_scenarios(all, {"kernels=vendor"}).empty());
}

// ---- validation -----------------------------------------------------------------------------

TEST(ScenarioErrors, UnknownKeysSuggestTheNearest) {
  const std::string file = fixture("bad/unknown_key.json");
  const std::string message = input_error_of([&] { load_scenarios(file); });
  EXPECT_NE(message.find(file + ": at /kernals: "), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'kernels'?"), std::string::npos) << message;
  EXPECT_NE(message.find("valid: keys name, model,"), std::string::npos) << message;

  expect_rejected(json::parse(R"({"parallel": {"tpp": 2}})"),
                  {"at /parallel/tpp:", "did you mean 'tp'?"});
  expect_rejected(json::parse(R"({"plan": {"prompts": {"cuont": 2}}})"),
                  {"at /plan/prompts/cuont:", "did you mean 'count'?"});
  expect_rejected(json::parse(R"({"collectives": {"all_reduce": "tre"}})"),
                  {"at /collectives/all_reduce:", "did you mean 'tree'?", "'arrival'"});
  expect_rejected(json::parse(R"({"model": {"preset": "tiny2"}})"),
                  {"at /model/preset:", "did you mean 'tiny'?", "'qwen3-1.7b'"});
  expect_rejected(json::parse(R"({"expect": "batch-variant"})"),
                  {"at /expect:", "did you mean 'batch_variant'?"});
  expect_rejected(json::parse(R"({"debug": {"fault": "segfault"}})"),
                  {"at /debug/fault:", "'crash'"});
  // Nothing near: no suggestion, but the valid keys are listed.
  const std::string far =
      input_error_of([&] { scenario_from_json(json::parse(R"({"zzzzzzzz": 1})"), "mem.json"); });
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_NE(far.find("valid: keys name, model"), std::string::npos) << far;
}

TEST(ScenarioErrors, WrongTypes) {
  expect_rejected(json::parse(R"({"parallel": {"tp": "4"}})"),
                  {"at /parallel/tp:", "expected an integer", "1..64"});
  expect_rejected(json::parse(R"({"parallel": {"tp": 4.0}})"), {"at /parallel/tp:", "integer"});
  expect_rejected(json::parse(R"({"sequence_parallel": {"enabled": "yes"}})"),
                  {"at /sequence_parallel/enabled:", "true or false"});
  expect_rejected(json::parse(R"({"kernels": 1})"), {"at /kernels:", "'invariant'"});
  expect_rejected(json::parse(R"({"plan": []})"), {"at /plan:", "expected an object"});
  expect_rejected(json::parse(R"({"plan": {"batch_sizes": 64}})"),
                  {"at /plan/batch_sizes:", "expected an array"});
  expect_rejected(json::parse(R"({"nccl_env": {"NCCL_MIN_NCHANNELS": 4}})"),
                  {"at /nccl_env/NCCL_MIN_NCHANNELS:", "a string"});
  expect_rejected(json::parse(R"({"model": {"seed": -1}})"), {"at /model/seed:", ">= 0"});
  const std::string not_object =
      input_error_of([&] { scenario_from_json(json::array(), "mem.json"); });
  EXPECT_NE(not_object.find("mem.json: at /: expected an object"), std::string::npos) << not_object;
}

TEST(ScenarioErrors, ValuesOutOfRange) {
  expect_rejected(json::parse(R"({"parallel": {"tp": 0}})"), {"at /parallel/tp:", "1..64"});
  expect_rejected(json::parse(R"({"parallel": {"tp": 128}})"), {"at /parallel/tp:", "1..64"});
  expect_rejected(json::parse(R"({"sequence_parallel": {"min_tokens": 0}})"),
                  {"at /sequence_parallel/min_tokens:", ">= 1"});
  expect_rejected(json::parse(R"({"cudagraph": {"capture_sizes": []}})"),
                  {"at /cudagraph/capture_sizes:", "empty", "strictly increasing"});
  expect_rejected(json::parse(R"({"cudagraph": {"capture_sizes": [1, 4, 4]}})"),
                  {"at /cudagraph/capture_sizes/2:", "strictly increasing"});
  expect_rejected(json::parse(R"({"cudagraph": {"capture_sizes": [0, 4]}})"),
                  {"at /cudagraph/capture_sizes/0:"});
  expect_rejected(json::parse(R"({"prefix_caching": {"block_size": 24}})"),
                  {"at /prefix_caching/block_size:", "power of two", "128"});
  expect_rejected(json::parse(R"({"prefix_caching": {"block_size": 512}})"),
                  {"at /prefix_caching/block_size:"});
  expect_rejected(json::parse(R"({"chunked_prefill": {"max_tokens": -1}})"),
                  {"at /chunked_prefill/max_tokens:", ">= 0"});
  expect_rejected(json::parse(R"({"plan": {"prompts": {"count": 0}}})"),
                  {"at /plan/prompts/count:", "1..4096"});
  expect_rejected(json::parse(R"({"plan": {"prompts": {"count": 5000}}})"),
                  {"at /plan/prompts/count:", "1..4096"});
  expect_rejected(json::parse(R"({"plan": {"prompts": {"min_len": 30, "max_len": 20}}})"),
                  {"at /plan/prompts/min_len:", "1 <= min_len <= max_len"});
  expect_rejected(json::parse(R"({"plan": {"max_tokens": 0}})"), {"at /plan/max_tokens:", ">= 1"});
  expect_rejected(json::parse(R"({"plan": {"batch_sizes": []}})"),
                  {"at /plan/batch_sizes:", "empty"});
  expect_rejected(json::parse(R"({"plan": {"batch_sizes": [1, 128]}})"),
                  {"at /plan/batch_sizes/1:", "max_num_seqs", "1..64"});
  expect_rejected(json::parse(R"({"plan": {"repeats": 0}})"), {"at /plan/repeats:", "1..100"});
  expect_rejected(json::parse(R"({"timeout_s": 0})"), {"at /timeout_s:", "> 0"});
  expect_rejected(json::parse(R"({"timeout_s": "10m"})"), {"at /timeout_s:", "> 0"});
  expect_rejected(json::parse(R"({"plan": {"max_model_len": 64}})"),
                  {"at /plan/max_model_len:", "48", "24", "72", "max_model_len >= 72"});
}

TEST(ScenarioErrors, ImpossibleCombinations) {
  // tiny: 16 heads, 8 KV heads, intermediate 768, vocab 2048; 3 divides only 768.
  const std::string file = fixture("bad/tp3_tiny.json");
  const std::string message = input_error_of([&] { load_scenarios(file); });
  EXPECT_NE(message.find(file + ": at /parallel/tp: "), std::string::npos) << message;
  EXPECT_NE(message.find("tp=3 does not divide num_heads=16, num_kv_heads=8, vocab_size=2048"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("valid: a tp that divides all of them: 1, 2, 4, 8"), std::string::npos)
      << message;
  // tp=16 divides the heads but not the 8 KV heads.
  expect_rejected(json::parse(R"({"parallel": {"tp": 16}})"),
                  {"at /parallel/tp:", "num_kv_heads=8", "divide"});

  const std::string nccl_file = fixture("bad/nccl_on_cpu.json");
  const std::string nccl = input_error_of([&] { load_scenarios(nccl_file); });
  EXPECT_NE(nccl.find(nccl_file + ": at /parallel/ranks: "), std::string::npos) << nccl;
  EXPECT_NE(nccl.find("backend is 'cpu'"), std::string::npos) << nccl;
  // The same ranks on a GPU backend are fine (whether this machine can run them is the driver's
  // question: unsupported, never an input error).
  EXPECT_NO_THROW(scenario_from_json(
      json::parse(R"({"backend": "cuda", "parallel": {"tp": 2, "ranks": "nccl"}})"), "mem.json"));

  expect_rejected(json::parse(R"({"parallel": {"tp": 4, "ring_order": [0, 1, 1, 3]}})"),
                  {"at /parallel/ring_order:", "permutation of 0..3"});
  expect_rejected(json::parse(R"({"parallel": {"tp": 2, "ring_order": [0, 1, 2]}})"),
                  {"at /parallel/ring_order:", "permutation of 0..1"});
  expect_rejected(json::parse(R"({"model": {"preset": "tiny", "path": "/ckpt"}})"),
                  {"at /model:", "exactly one of 'preset' and 'path'"});
  expect_rejected(json::parse(R"({"model": {"path": "/no/such/checkpoint"}})"),
                  {"at /model/path:", "config.json"});
  expect_rejected(json{{"model", {{"path", kDataDir + "/data/ckpt-broken"}}}},
                  {"at /model/path:", "bad model config", "checkpoint folder holding config.json"});
  expect_rejected(json::parse(R"({"nccl_env": {"ALGO": "Ring"}})"),
                  {"at /nccl_env/ALGO:", "NCCL_"});

  // A checkpoint's own shape decides: ckpt-small has 6 heads and 2 KV heads.
  const std::string ckpt_message =
      input_error_of([&] { load_scenarios(fixture("checkpoint_model.json"), {"parallel.tp=3"}); });
  EXPECT_NE(ckpt_message.find("num_kv_heads=2"), std::string::npos) << ckpt_message;
  EXPECT_NE(ckpt_message.find("(--set parallel.tp=3): at /parallel/tp: "), std::string::npos)
      << ckpt_message;
}

TEST(ScenarioErrors, PromptsFileMustExistAndHoldTokenLists) {
  const std::string file = fixture("bad/missing_prompts_file.json");
  const std::string message = input_error_of([&] { load_scenarios(file); });
  EXPECT_NE(message.find(file + ": at /plan/prompts/file: "), std::string::npos) << message;
  EXPECT_NE(message.find("no_such_prompts.json' does not exist"), std::string::npos) << message;

  // The file's longest prompt (6 tokens) counts against max_model_len.
  const std::string too_long = input_error_of(
      [&] { load_scenarios(fixture("prompts_file.json"), {"plan.max_model_len=9"}); });
  EXPECT_NE(too_long.find("longest prompt (6) + max_tokens (4) = 10"), std::string::npos)
      << too_long;

  // Token ids beyond the vocabulary.
  const fs::path temp = fs::temp_directory_path() / "bih_test_scenario_bad_prompts.json";
  std::ofstream(temp) << "[[1, 2], [3, 4096]]";
  expect_rejected(json{{"plan", {{"prompts", {{"file", temp.string()}}}}}},
                  {"at /plan/prompts/file:", "4096", "token ids in 0..2047"});
  fs::remove(temp);
}

TEST(ScenarioErrors, MatrixErrorsPointAtTheAxisOrCase) {
  const std::string axis_file = fixture("bad/matrix_bad_axis.json");
  const std::string axis = input_error_of([&] { load_scenarios(axis_file); });
  EXPECT_NE(axis.find(axis_file + ": at /axes/parallel.tpp: "), std::string::npos) << axis;
  EXPECT_NE(axis.find("did you mean 'parallel.tp'?"), std::string::npos) << axis;

  // The bad value is the axis' second entry, not the base.
  const std::string value_file = fixture("bad/matrix_axis_value.json");
  const std::string value = input_error_of([&] { load_scenarios(value_file); });
  EXPECT_NE(value.find(value_file + ": at /axes/parallel.tp/1: "), std::string::npos) << value;
  EXPECT_NE(value.find("divide"), std::string::npos) << value;

  // A misspelt --set key names the --set.
  const std::string base =
      input_error_of([&] { load_scenarios(fixture("matrix_tp_sp.json"), {"parallel.tpp=2"}); });
  EXPECT_NE(base.find("(--set parallel.tpp=2): at /parallel/tpp: "), std::string::npos) << base;
  EXPECT_NE(base.find("did you mean 'parallel.tp'?"), std::string::npos) << base;

  const std::string dup_file = fixture("bad/duplicate_ids.json");
  const std::string dup = input_error_of([&] { load_scenarios(dup_file); });
  EXPECT_NE(dup.find(dup_file + ": at /cases/1: "), std::string::npos) << dup;
  EXPECT_NE(dup.find("case 0 'short'"), std::string::npos) << dup;
  EXPECT_NE(dup.find("case 1 'long'"), std::string::npos) << dup;
  EXPECT_NE(dup.find("same id"), std::string::npos) << dup;

  const std::string set_syntax =
      input_error_of([&] { load_scenarios(fixture("matrix_tp_sp.json"), {"kernels"}); });
  EXPECT_NE(set_syntax.find("expected key=value"), std::string::npos) << set_syntax;
}

TEST(ScenarioErrors, MatrixBaseErrorsPointUnderBase) {
  const fs::path temp = fs::temp_directory_path() / "bih_test_scenario_matrix_base.json";
  std::ofstream(temp) << R"({"base": {"plan": {"repeats": 0}}, "axes": {"kernels": ["vendor"]},
                            "cases": [{"expect": "invariant"}], "bases": 1})";
  const std::string unknown = input_error_of([&] { load_scenarios(temp.string()); });
  EXPECT_NE(unknown.find(": at /bases: unknown matrix key 'bases' (did you mean 'base'?)"),
            std::string::npos)
      << unknown;
  std::ofstream(temp) << R"({"base": {"plan": {"repeats": 0}}, "axes": {"kernels": ["vendor"]}})";
  const std::string message = input_error_of([&] { load_scenarios(temp.string()); });
  EXPECT_NE(message.find(temp.string() + ": at /base/plan/repeats: "), std::string::npos)
      << message;
  fs::remove(temp);
}

TEST(ScenarioErrors, SyntaxErrorsNameFileLineAndColumn) {
  const std::string file = fixture("bad/syntax_error.json");
  const std::string message = input_error_of([&] { read_json_file(file); });
  EXPECT_EQ(message.rfind(file + ": ", 0), 0u) << message;
  EXPECT_NE(message.find("line 2, column 24"), std::string::npos) << message;
  const std::string missing = input_error_of([&] { read_json_file(fixture("no_such.json")); });
  EXPECT_NE(missing.find("no_such.json"), std::string::npos) << missing;
  // Comments are allowed.
  EXPECT_EQ(read_json_file(fixture("matrix_tp_sp.json"))["name"], "tp-sp-grid");
}

// ---- helpers --------------------------------------------------------------------------------

TEST(ScenarioEditDistance, CountsEditsAndPicksTheNearestTypo) {
  EXPECT_EQ(edit_distance("kernels", "kernels"), 0u);
  EXPECT_EQ(edit_distance("kernals", "kernels"), 1u);
  EXPECT_EQ(edit_distance("tp", "pt"), 1u);  // one transposition
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(nearest_key("kernals", {"backend", "kernels", "name"}), "kernels");
  EXPECT_EQ(nearest_key("parallel.tpp", scenario_dotted_keys()), "parallel.tp");
  EXPECT_EQ(nearest_key("xyz", {"backend", "kernels"}), std::nullopt);
}

TEST(ScenarioKeys, DottedKeysCoverEveryLeafAndNcclEnvEntries) {
  EXPECT_TRUE(is_scenario_dotted_key("parallel.tp"));
  EXPECT_TRUE(is_scenario_dotted_key("plan.prompts.count"));
  EXPECT_TRUE(is_scenario_dotted_key("sequence_parallel"));
  EXPECT_TRUE(is_scenario_dotted_key("nccl_env.NCCL_ALGO"));
  EXPECT_FALSE(is_scenario_dotted_key("nccl_env.ALGO"));
  EXPECT_FALSE(is_scenario_dotted_key("parallel.tpp"));
  EXPECT_FALSE(is_scenario_dotted_key("plan.prompts.count.x"));
}

// ---- the JSON Schema ------------------------------------------------------------------------

class ScenarioSchema : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_json_ = read_json_file(std::string(BIH_SOURCE_DIR) + "/scenarios/scenario.schema.json");
  }
  // Empty when valid, else the validator's complaints.
  std::string errors_of(const json& document) { return checker_.errors(document); }

  json schema_json_;
  testing::SchemaChecker checker_{std::string(BIH_SOURCE_DIR) + "/scenarios/scenario.schema.json"};
};

TEST_F(ScenarioSchema, EveryScenarioFileValidates) {
  std::vector<fs::path> files;
  const fs::path scenarios_dir = fs::path(BIH_SOURCE_DIR) / "scenarios";
  for (const auto& entry : fs::recursive_directory_iterator(scenarios_dir)) {
    if (entry.path().extension() == ".json" && entry.path().filename() != "scenario.schema.json") {
      files.push_back(entry.path());
    }
  }
  for (const auto& entry : fs::directory_iterator(kDataDir)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  ASSERT_GE(files.size(), 5u);
  for (const fs::path& file : files) {
    EXPECT_EQ(errors_of(read_json_file(file.string())), "") << file;
  }
  // A resolved scenario, with every key, is itself a valid scenario file.
  EXPECT_EQ(errors_of(scenario_from_json(everything_changed(), "mem.json").to_json()), "");
  EXPECT_EQ(errors_of(Scenario{}.to_json()), "");
}

TEST_F(ScenarioSchema, RejectsWhatTheLoaderRejects) {
  for (const char* text : {
           R"({"kernals": "vendor"})",
           R"({"parallel": {"tp": 0}})",
           R"({"parallel": {"tp": "2"}})",
           R"({"model": {"preset": "tiny", "path": "/ckpt"}})",
           R"({"prefix_caching": {"block_size": 24}})",
           R"({"collectives": {"all_reduce": "tre"}})",
           R"({"nccl_env": {"ALGO": "Ring"}})",
           R"({"expect": "bad"})",
           R"({"base": {}, "axes": {"parallel.tpp": [2]}})",
           R"({"base": {}, "axes": {"parallel.tp": []}})",
           R"({"base": {"kernals": "vendor"}})",
           R"({"base": {}, "cases": [{"kernals": "vendor"}]})",
       }) {
    EXPECT_NE(errors_of(json::parse(text)), "") << text;
  }
}

TEST_F(ScenarioSchema, DottedKeysMatchTheLoader) {
  const json& enumerated = schema_json_["definitions"]["dotted_key"]["anyOf"][0]["enum"];
  EXPECT_EQ(enumerated.get<std::vector<std::string>>(), scenario_dotted_keys());
}

}  // namespace
}  // namespace bih::test_scenario
