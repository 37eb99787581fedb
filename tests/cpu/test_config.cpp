// test_config.cpp: config.json as transformers 4 and 5 write it, the fields bih refuses, the
// checkpoint bih writes (transformers 5 format), and synthetic norms that are not all ones.
//
// The RoPE forms are checked down to the engine: the same weights saved in either form generate
// bitwise the same tokens and logprobs, and a wrong theta (the transformers-5 checkpoint read with
// the default 10000) visibly does not.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "models/comm/emulated.hpp"
#include "models/config.hpp"
#include "models/engine.hpp"
#include "models/weights.hpp"
#include "run_bih.hpp"
#include "test_util.hpp"

namespace bih::test_config {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

void write_json(const fs::path& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2);
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// Qwen3-0.6B's config.json as published on the hub (transformers 4.51 form).
json hub_config_v4() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// The same model as transformers 5 writes it: RoPE in rope_parameters, no top-level rope_theta.
json hub_config_v5() {
  json j = hub_config_v4();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j.erase("torch_dtype");
  j["dtype"] = "bfloat16";
  j["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  j["layer_types"] = std::vector<std::string>(28, "full_attention");
  j["transformers_version"] = "5.17.0";
  return j;
}

// The config parsed from `j`, written to a fresh file.
ModelConfig parse(const json& j, const std::string& name = "cfg") {
  const auto dir = testing::fresh_dir("config-" + name);
  write_json(dir / "config.json", j);
  return load_config_json((dir / "config.json").string());
}

// The InputError message for `j`; also checks that it names the file.
std::string refusal(const json& j, const std::string& name = "refused") {
  const auto dir = testing::fresh_dir("config-" + name);
  const std::string file = (dir / "config.json").string();
  write_json(file, j);
  const std::string msg = testing::input_error_of([&] { load_config_json(file); });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  return msg;
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(std::bit_cast<uint64_t>(a.rope_theta), std::bit_cast<uint64_t>(b.rope_theta));
  EXPECT_EQ(std::bit_cast<uint32_t>(a.rms_norm_eps), std::bit_cast<uint32_t>(b.rms_norm_eps));
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
}

// ---- RoPE forms --------------------------------------------------------------------------------

TEST(ConfigRope, BothFormsGiveTheSameConfig) {
  const ModelConfig v4 = parse(hub_config_v4(), "v4");
  const ModelConfig v5 = parse(hub_config_v5(), "v5");
  EXPECT_EQ(v4.rope_theta, 1e6);
  expect_same_config(v4, v5);
  expect_same_config(v5, *preset_config("qwen3-0.6b"));
  // Both places set and agreeing, and the older rope_scaling of the default type, are fine too.
  json both = hub_config_v5();
  both["rope_theta"] = 1e6;
  expect_same_config(parse(both, "both"), v4);
  json legacy = hub_config_v4();
  legacy["rope_scaling"] = {{"rope_type", "default"}};
  expect_same_config(parse(legacy, "legacy"), v4);
  legacy.erase("rope_scaling");
  expect_same_config(parse(legacy, "absent"), v4);
}

TEST(ConfigRope, ThetaAbsentEverywhereIsQwen3ConfigsDefault) {
  json j = hub_config_v5();
  j.erase("rope_parameters");
  EXPECT_EQ(parse(j).rope_theta, 10000.0);
  j["rope_parameters"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse(j).rope_theta, 10000.0);
}

TEST(ConfigRope, DisagreeingThetasAreRefused) {
  json j = hub_config_v5();
  j["rope_theta"] = 1e6;
  j["rope_parameters"]["rope_theta"] = 1e4;
  const std::string msg = refusal(j);
  EXPECT_NE(msg.find("/rope_parameters/rope_theta"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/rope_theta"), std::string::npos) << msg;
  EXPECT_NE(msg.find("disagrees"), std::string::npos) << msg;
}

// ---- Refused and accepted fields ---------------------------------------------------------------

struct Refused {
  const char* what;
  json patch;           // merged into hub_config_v5()
  const char* pointer;  // what the message must name
};

TEST(ConfigRefuses, EveryFieldThatChangesTheMath) {
  const std::vector<Refused> cases = {
      {"yarn",
       {{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}}}},
       "/rope_parameters/rope_type"},
      {"linear", {{"rope_parameters", {{"rope_type", "linear"}}}}, "/rope_parameters/rope_type"},
      {"dynamic", {{"rope_parameters", {{"rope_type", "dynamic"}}}}, "/rope_parameters/rope_type"},
      {"llama3", {{"rope_parameters", {{"rope_type", "llama3"}}}}, "/rope_parameters/rope_type"},
      {"legacy yarn",
       {{"rope_scaling",
         {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}}},
       "/rope_scaling/rope_type"},
      {"legacy type",
       {{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}}},
       "/rope_scaling/type"},
      {"factor", {{"rope_parameters", {{"factor", 2.0}}}}, "/rope_parameters/factor"},
      {"partial in rope",
       {{"rope_parameters", {{"partial_rotary_factor", 0.5}}}},
       "/rope_parameters/partial_rotary_factor"},
      {"partial", {{"partial_rotary_factor", 0.25}}, "/partial_rotary_factor"},
      {"unknown rope key",
       {{"rope_parameters", {{"mrope_section", {1, 2}}}}},
       "/rope_parameters/mrope_section"},
      {"per layer type rope",
       {{"rope_parameters", {{"full_attention", {{"rope_theta", 1e6}}}}}},
       "/rope_parameters/full_attention"},
      {"sliding",
       {{"use_sliding_window", true}, {"sliding_window", 4096}, {"max_window_layers", 20}},
       "/use_sliding_window"},
      {"sliding by default layers",
       {{"use_sliding_window", true},
        {"sliding_window", 4096},
        {"max_window_layers", nullptr},
        {"num_hidden_layers", 36},
        {"layer_types", nullptr}},
       "/use_sliding_window"},
      {"layer type", {{"layer_types", {"full_attention", "sliding_attention"}}}, "/layer_types"},
      {"attention bias", {{"attention_bias", true}}, "/attention_bias"},
      {"mlp bias", {{"mlp_bias", true}}, "/mlp_bias"},
      {"gelu", {{"hidden_act", "gelu"}}, "/hidden_act"},
      {"model type", {{"model_type", "qwen3_moe"}}, "/model_type"},
      {"architecture", {{"architectures", {"Qwen3MoeForCausalLM"}}}, "/architectures/0"},
      {"fp8 dtype", {{"dtype", "float8_e4m3fn"}}, "/dtype"},
      {"int8 torch_dtype", {{"torch_dtype", "int8"}}, "/torch_dtype"},
      {"quantized", {{"quantization_config", {{"quant_method", "fp8"}}}}, "/quantization_config"},
  };
  for (const auto& c : cases) {
    json j = hub_config_v5();
    j.merge_patch(c.patch);
    if (c.patch.contains("layer_types") && c.patch["layer_types"].is_array()) {
      j["layer_types"] = std::vector<std::string>(28, "full_attention");
      j["layer_types"][27] = "sliding_attention";
    }
    const std::string msg = refusal(j);
    EXPECT_NE(msg.find(std::string("at ") + c.pointer), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find("bih implements"), std::string::npos) << c.what << ": " << msg;
  }
}

TEST(ConfigRefuses, LayerTypesOfTheWrongLength) {
  json j = hub_config_v5();
  j["layer_types"] = {"full_attention"};
  const std::string msg = refusal(j);
  EXPECT_NE(msg.find("at /layer_types:"), std::string::npos) << msg;
}

TEST(ConfigAccepts, FieldsThatDoNotChangeTheMath) {
  const ModelConfig reference = parse(hub_config_v5(), "reference");
  const std::vector<json> patches = {
      // Real Qwen3 configs carry a window with sliding off.
      {{"sliding_window", 32768}, {"use_sliding_window", false}},
      // Sliding on but nothing to slide over, or no layer at or past max_window_layers.
      {{"use_sliding_window", true}, {"sliding_window", nullptr}},
      {{"use_sliding_window", true}, {"sliding_window", 4096}, {"max_window_layers", 28}},
      {{"attention_dropout", 0.1}},  // dropout is off at inference
      {{"mlp_bias", false}, {"attention_bias", false}},
      {{"dtype", "float32"}, {"torch_dtype", "float16"}},  // the reader converts these to bf16
      {{"bos_token_id", 7}, {"eos_token_id", {8, 9}}, {"use_cache", false}, {"pad_token_id", 0}},
      {{"rope_parameters", {{"rope_theta", 1e6}, {"rope_type", "default"}, {"factor", 1.0}}}},
      {{"architectures", nullptr}},
  };
  for (const auto& patch : patches) {
    json j = hub_config_v5();
    j.merge_patch(patch);
    SCOPED_TRACE(patch.dump());
    expect_same_config(parse(j, "accepted"), reference);
  }
}

// ---- The engine reads both forms the same way --------------------------------------------------

ModelConfig small_config() {
  ModelConfig c;
  c.name = "small";
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.vocab_size = 128;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = true;
  return c;
}

std::vector<SequenceResult> generate(const std::string& folder) {
  auto weights = std::make_shared<const ModelWeights>(load_checkpoint(folder));
  EmulatedGroup group(1, {});
  std::vector<Communicator*> comms{&group.rank(0)};
  Engine engine(weights, EngineOptions{}, comms);
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < 3; ++p) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < 12 + 5 * p; ++t) prompt.push_back((37 * t + 11 * p + 3) % 128);
    prompts.push_back(prompt);
  }
  return engine.generate(prompts, /*max_tokens=*/16);
}

bool bitwise_equal(const std::vector<SequenceResult>& a, const std::vector<SequenceResult>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].tokens != b[i].tokens || a[i].logprobs.size() != b[i].logprobs.size() ||
        std::memcmp(a[i].logprobs.data(), b[i].logprobs.data(),
                    a[i].logprobs.size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

TEST(ConfigRope, OldAndNewFormGenerateBitwiseTheSame) {
  const ModelWeights w = synthetic_weights(small_config(), 3, NormInit::perturbed);
  const auto v5 = testing::fresh_dir("rope-v5");
  save_checkpoint(w, v5.string());  // transformers 5 form
  const json written = read_json(v5 / "config.json");
  ASSERT_FALSE(written.contains("rope_theta"));
  ASSERT_EQ(written["rope_parameters"]["rope_theta"], 1e6);

  // The same checkpoint in the transformers 4 form: a top-level theta, rope_scaling null.
  const auto v4 = testing::fresh_dir("rope-v4");
  fs::copy_file(v5 / "model.safetensors", v4 / "model.safetensors");
  json old_form = written;
  old_form.erase("rope_parameters");
  old_form.erase("layer_types");
  old_form.erase("dtype");
  old_form["rope_theta"] = 1e6;
  old_form["rope_scaling"] = nullptr;
  old_form["torch_dtype"] = "bfloat16";
  write_json(v4 / "config.json", old_form);

  // The bug this guards against: the transformers-5 file read with theta 10000.
  const auto wrong = testing::fresh_dir("rope-wrong");
  fs::copy_file(v5 / "model.safetensors", wrong / "model.safetensors");
  json wrong_form = old_form;
  wrong_form.erase("rope_theta");
  write_json(wrong / "config.json", wrong_form);

  const auto a = generate(v5.string());
  const auto b = generate(v4.string());
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(a[0].tokens.size(), 16u);
  EXPECT_TRUE(bitwise_equal(a, b));
  EXPECT_FALSE(bitwise_equal(a, generate(wrong.string())))
      << "theta 1e6 and 1e4 generated the same bits: the comparison above has no teeth";
}

TEST(ConfigRefuses, BihRunExitsTwoNamingTheField) {
  const auto dir = testing::fresh_dir("config-run-yarn");
  const auto ckpt = dir / "ckpt";
  save_checkpoint(synthetic_weights(small_config(), 1), ckpt.string());
  json config = read_json(ckpt / "config.json");
  config["rope_parameters"]["rope_type"] = "yarn";
  write_json(ckpt / "config.json", config);
  write_json(dir / "s.json", {{"model", {{"path", ckpt.string()}}}});
  const auto r =
      testing::run_bih({"run", (dir / "s.json").string(), "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/rope_parameters/rope_type"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("yarn"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find((ckpt / "config.json").string()), std::string::npos) << r.output;
}

// ---- The checkpoint bih writes -----------------------------------------------------------------

TEST(SaveCheckpoint, WritesTheTransformers5Format) {
  ModelConfig c = small_config();
  c.tie_word_embeddings = false;
  const ModelWeights w = synthetic_weights(c, 2);
  const auto dir = testing::fresh_dir("save-v5");
  save_checkpoint(w, dir.string());
  const json j = read_json(dir / "config.json");
  // Keys sorted, as transformers' to_json_string (sort_keys=True) writes them.
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  std::ifstream raw(dir / "config.json");
  const std::string text((std::istreambuf_iterator<char>(raw)), {});
  EXPECT_LT(text.find("\"architectures\""), text.find("\"vocab_size\""));
  EXPECT_EQ(j["dtype"], "bfloat16");
  EXPECT_FALSE(j.contains("torch_dtype"));
  EXPECT_FALSE(j.contains("rope_theta"));
  EXPECT_FALSE(j.contains("rope_scaling"));
  EXPECT_EQ(j["rope_parameters"], json({{"rope_theta", 1e6}, {"rope_type", "default"}}));
  EXPECT_EQ(j["layer_types"], json(std::vector<std::string>(2, "full_attention")));
  EXPECT_EQ(j["use_sliding_window"], false);
  EXPECT_TRUE(j["sliding_window"].is_null());
  EXPECT_EQ(j["max_window_layers"], 2);
  EXPECT_EQ(j["attention_dropout"], 0.0);
  EXPECT_EQ(j["bos_token_id"], 1);
  EXPECT_EQ(j["eos_token_id"], 2);
  EXPECT_EQ(j["transformers_version"], "5.17.0");
  EXPECT_EQ(j["use_cache"], true);
  EXPECT_EQ(j["initializer_range"], 0.02);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_EQ(j["attention_bias"], false);
  EXPECT_EQ(j["architectures"], json({"Qwen3ForCausalLM"}));
  const json g = read_json(dir / "generation_config.json");
  EXPECT_EQ(g, json({{"bos_token_id", 1},
                     {"do_sample", false},
                     {"eos_token_id", 2},
                     {"transformers_version", "5.17.0"}}));
  // bih reads its own save back bit for bit.
  const ModelWeights loaded = load_checkpoint(dir.string());
  expect_same_config(loaded.config, w.config);
  EXPECT_EQ(weights_hash(loaded), weights_hash(w));
}

// ---- Perturbed norms ---------------------------------------------------------------------------

TEST(SyntheticNorms, PerturbedDifferFromOneAndAreReproducible) {
  const ModelConfig c = small_config();
  const ModelWeights ones = synthetic_weights(c, 5);
  const ModelWeights a = synthetic_weights(c, 5, NormInit::perturbed);
  const ModelWeights b = synthetic_weights(c, 5, NormInit::perturbed);
  const ModelWeights other = synthetic_weights(c, 6, NormInit::perturbed);
  EXPECT_EQ(weights_hash(a), weights_hash(b));
  EXPECT_NE(weights_hash(a), weights_hash(ones));
  EXPECT_NE(weights_hash(a), weights_hash(other));
  EXPECT_EQ(weights_hash(ones), weights_hash(synthetic_weights(c, 5, NormInit::ones)));

  const auto perturbed = tensors_by_name(a), plain = tensors_by_name(ones);
  double sum = 0, sum_sq = 0;
  size_t n = 0;
  for (const auto& spec : tensor_specs(c)) {
    const auto& values = *perturbed.at(spec.name);
    if (!spec.is_norm) {  // everything but the norms keeps the default bits
      EXPECT_TRUE(values == *plain.at(spec.name)) << spec.name;
      continue;
    }
    size_t not_one = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const float v = to_float(values[i]);
      // The documented formula, bit for bit.
      EXPECT_EQ(values[i].bits, to_bf16(synthetic_norm(5, spec.name, i)).bits) << spec.name;
      not_one += v != 1.0f;
      sum += v;
      sum_sq += (v - 1.0) * (v - 1.0);
      ++n;
    }
    EXPECT_GT(not_one, values.size() * 3 / 4) << spec.name;
  }
  // 1 + 0.1 z over 2*(64+64+16+16)+64 = 384 values: mean within ~5 sigma, std within 20%.
  EXPECT_NEAR(sum / n, 1.0, 0.03);
  EXPECT_NEAR(std::sqrt(sum_sq / n), 0.1, 0.02);
  EXPECT_EQ(norm_init_from_name("perturbed"), NormInit::perturbed);
  EXPECT_EQ(norm_init_from_name("ones"), NormInit::ones);
  EXPECT_FALSE(norm_init_from_name("random").has_value());
  EXPECT_STREQ(norm_init_name(NormInit::perturbed), "perturbed");
}

TEST(SyntheticNorms, PerturbedCheckpointRoundTripsBitwise) {
  const ModelWeights w = synthetic_weights(small_config(), 8, NormInit::perturbed);
  const auto dir = testing::fresh_dir("save-perturbed");
  save_checkpoint(w, dir.string(), /*max_shard_bytes=*/8192);
  EXPECT_EQ(weights_hash(load_checkpoint(dir.string())), weights_hash(w));
}

}  // namespace
}  // namespace bih::test_config
