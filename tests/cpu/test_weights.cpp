// test_weights.cpp: model config, safetensors I/O, synthetic weights, checkpoints, weights hash,
// and the fp64 reference forward.
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "models/config.hpp"
#include "models/safetensors.hpp"
#include "models/weights.hpp"
#include "test_files.hpp"
#include "test_util.hpp"

namespace bih::test_weights {
namespace {

namespace fs = std::filesystem;
using testing::write_text;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("bih_weights_" + std::string(info->test_suite_name()) +
                                         "_" + info->name() + "_" + std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A safetensors file assembled by hand (independent of write_safetensors_bf16).
std::string raw_safetensors(const std::string& header_json, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header_json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header_json + data;
}

template <class T>
std::string as_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

bool bitwise_equal(const ModelWeights& a, const ModelWeights& b) {
  auto same = [](const std::vector<bf16>& x, const std::vector<bf16>& y) { return x == y; };
  if (!same(a.embed_tokens, b.embed_tokens) || !same(a.norm, b.norm) ||
      !same(a.lm_head, b.lm_head) || a.layers.size() != b.layers.size()) {
    return false;
  }
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const LayerWeights &x = a.layers[l], &y = b.layers[l];
    if (!same(x.input_layernorm, y.input_layernorm) || !same(x.q_proj, y.q_proj) ||
        !same(x.k_proj, y.k_proj) || !same(x.v_proj, y.v_proj) || !same(x.q_norm, y.q_norm) ||
        !same(x.k_norm, y.k_norm) || !same(x.o_proj, y.o_proj) ||
        !same(x.post_attention_layernorm, y.post_attention_layernorm) ||
        !same(x.gate_proj, y.gate_proj) || !same(x.up_proj, y.up_proj) ||
        !same(x.down_proj, y.down_proj)) {
      return false;
    }
  }
  return true;
}

void expect_same_shape(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
}

// A small config for tests that need several shapes quickly.
ModelConfig small_config(int kv_heads = 2, bool tied = true) {
  ModelConfig c;
  c.name = "small";
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = kv_heads;
  c.head_dim = 8;
  c.intermediate_size = 48;
  c.vocab_size = 50;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  return c;
}

// ---- Config ----------------------------------------------------------------------------------

TEST(ConfigPresets, TinyMatchesDesign) {
  auto c = preset_config("tiny");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->name, "tiny");
  EXPECT_EQ(c->hidden_size, 256);
  EXPECT_EQ(c->num_layers, 4);
  EXPECT_EQ(c->num_heads, 16);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->intermediate_size, 768);
  EXPECT_EQ(c->vocab_size, 2048);
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->max_position_embeddings, 40960);
  EXPECT_EQ(c->q_size(), 256);
  EXPECT_EQ(c->kv_size(), 128);
}

TEST(ConfigPresets, QwenPresetsHaveTheReleasedShapes) {
  auto small = preset_config("qwen3-0.6b");
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(small->hidden_size, 1024);
  EXPECT_EQ(small->num_layers, 28);
  EXPECT_EQ(small->intermediate_size, 3072);
  EXPECT_EQ(small->head_dim, 128);
  EXPECT_EQ(small->vocab_size, 151936);
  auto large = preset_config("qwen3-1.7b");
  ASSERT_TRUE(large.has_value());
  EXPECT_EQ(large->hidden_size, 2048);
  EXPECT_EQ(large->num_layers, 28);
  EXPECT_EQ(large->num_heads, 16);
  EXPECT_EQ(large->num_kv_heads, 8);
  EXPECT_EQ(large->head_dim, 128);
  EXPECT_EQ(large->intermediate_size, 6144);
  EXPECT_EQ(large->vocab_size, 151936);
  EXPECT_EQ(large->rope_theta, 1e6);
  EXPECT_TRUE(large->tie_word_embeddings);
}

TEST(ConfigPresets, NamesResolveAndUnknownIsNullopt) {
  const auto names = preset_names();
  EXPECT_EQ(names.size(), 3u);
  for (const auto& n : names) {
    auto c = preset_config(n);
    ASSERT_TRUE(c.has_value()) << n;
    EXPECT_EQ(c->name, n);
  }
  EXPECT_FALSE(preset_config("qwen3-8b").has_value());
  EXPECT_FALSE(preset_config("").has_value());
}

// Qwen3-0.6B's config.json as published on the Hugging Face hub.
nlohmann::json qwen3_0_6b_config_json() {
  return nlohmann::json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

TEST(ConfigJson, ParsesTheHubConfigOfQwen3_0_6B) {
  TempDir dir;
  write_text(dir.file("config.json"), qwen3_0_6b_config_json().dump(2));
  ModelConfig c = load_config_json(dir.file("config.json"));
  expect_same_shape(c, *preset_config("qwen3-0.6b"));
}

TEST(ConfigJson, HeadDimDefaultsToHiddenOverHeads) {
  TempDir dir;
  auto j = qwen3_0_6b_config_json();
  j.erase("head_dim");
  write_text(dir.file("config.json"), j.dump());
  EXPECT_EQ(load_config_json(dir.file("config.json")).head_dim, 1024 / 16);
}

TEST(ConfigJson, MissingFieldNamesFileAndPointer) {
  TempDir dir;
  auto j = qwen3_0_6b_config_json();
  j.erase("hidden_size");
  write_text(dir.file("config.json"), j.dump());
  std::string msg = testing::input_error_of([&] { load_config_json(dir.file("config.json")); });
  EXPECT_NE(msg.find(dir.file("config.json")), std::string::npos) << msg;
  EXPECT_NE(msg.find("/hidden_size"), std::string::npos) << msg;
}

TEST(ConfigJson, MistypedFieldNamesPointer) {
  TempDir dir;
  auto j = qwen3_0_6b_config_json();
  j["num_hidden_layers"] = "28";
  write_text(dir.file("config.json"), j.dump());
  std::string msg = testing::input_error_of([&] { load_config_json(dir.file("config.json")); });
  EXPECT_NE(msg.find("/num_hidden_layers"), std::string::npos) << msg;
  j = qwen3_0_6b_config_json();
  j["tie_word_embeddings"] = 1;
  write_text(dir.file("config.json"), j.dump());
  msg = testing::input_error_of([&] { load_config_json(dir.file("config.json")); });
  EXPECT_NE(msg.find("/tie_word_embeddings"), std::string::npos) << msg;
}

TEST(ConfigJson, RejectsOtherModelTypes) {
  TempDir dir;
  auto j = qwen3_0_6b_config_json();
  j["model_type"] = "llama";
  write_text(dir.file("config.json"), j.dump());
  std::string msg = testing::input_error_of([&] { load_config_json(dir.file("config.json")); });
  EXPECT_NE(msg.find("/model_type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("qwen3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama"), std::string::npos) << msg;
}

TEST(ConfigJson, RejectsBadJsonAndMissingFile) {
  TempDir dir;
  write_text(dir.file("config.json"), "{\"model_type\": \"qwen3\",");
  std::string msg = testing::input_error_of([&] { load_config_json(dir.file("config.json")); });
  EXPECT_NE(msg.find(dir.file("config.json")), std::string::npos) << msg;
  msg = testing::input_error_of([&] { load_config_json(dir.file("absent.json")); });
  EXPECT_NE(msg.find("absent.json"), std::string::npos) << msg;
}

// ---- Safetensors -----------------------------------------------------------------------------

TEST(SafetensorsRoundTrip, WriteThenReadIsBitwise) {
  TempDir dir;
  std::vector<bf16> a(6), b(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = to_bf16(0.37f * static_cast<float>(i) - 1.0f);
  b = {bf16{0x7fc1}, bf16{0xff80}, bf16{0x0001}, bf16{0x8000}, bf16{0x3f80}};  // NaN, -inf, ...
  const std::string path = dir.file("t.safetensors");
  write_safetensors_bf16(path, {{"a", {2, 3}, &a}, {"b.x", {5}, &b}},
                         {{"format", "pt"}, {"note", "test"}});
  const std::string bytes = read_bytes(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ((8 + header_len) % 8, 0u) << "data section should start 8-byte aligned";
  EXPECT_EQ(bytes.size(), 8 + header_len + 2 * (a.size() + b.size()));

  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("note"), "test");
  ASSERT_EQ(f.entries().size(), 2u);
  EXPECT_EQ(f.entries().at("a").dtype, "BF16");
  std::vector<bf16> ra, rb;
  f.read_bf16("a", {2, 3}, ra);
  f.read_bf16("b.x", {5}, rb);
  EXPECT_EQ(ra, a);
  EXPECT_EQ(rb, b);
}

TEST(SafetensorsRead, F32RoundsToNearestEvenBf16) {
  TempDir dir;
  // bf16 keeps 7 mantissa bits: around 1.0 its spacing is 2^-7.
  const std::vector<float> values = {
      1.0f,
      1.0f + 0x1p-8f,            // halfway 1 | 1+2^-7: ties to even -> 1.0 (0x3f80)
      1.0f + 3 * 0x1p-8f,        // halfway 1+2^-7 | 1+2^-6: ties to even -> 1+2^-6 (0x3f82)
      1.0f + 0x1p-8f + 0x1p-20f  // just above halfway -> 1+2^-7 (0x3f81)
  };
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  write_text(dir.file("f.safetensors"), raw_safetensors(header, as_bytes(values)));
  std::vector<bf16> out;
  SafetensorsFile(dir.file("f.safetensors")).read_bf16("w", {2, 2}, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].bits, 0x3f80);
  EXPECT_EQ(out[1].bits, 0x3f80);
  EXPECT_EQ(out[2].bits, 0x3f82);
  EXPECT_EQ(out[3].bits, 0x3f81);
}

TEST(SafetensorsRead, F16WidensExactlyThenRounds) {
  TempDir dir;
  // 1.0, smallest subnormal 2^-24, -inf, 0x3555 (= 0x3eaaa000 as float: rounds up in bf16), NaN
  const std::vector<uint16_t> halves = {0x3c00, 0x0001, 0xfc00, 0x3555, 0x7e00};
  const std::string header = R"({"h":{"dtype":"F16","shape":[5],"data_offsets":[0,10]}})";
  write_text(dir.file("h.safetensors"), raw_safetensors(header, as_bytes(halves)));
  std::vector<bf16> out;
  SafetensorsFile(dir.file("h.safetensors")).read_bf16("h", {5}, out);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].bits, 0x3f80);
  EXPECT_EQ(to_float(out[1]), std::ldexp(1.0f, -24));
  EXPECT_EQ(out[2].bits, 0xff80);
  EXPECT_EQ(out[3].bits, 0x3eab);
  EXPECT_TRUE(std::isnan(to_float(out[4])));
  EXPECT_EQ(half_bits_to_float(0x3555), std::bit_cast<float>(0x3eaaa000u));
}

TEST(SafetensorsErrors, TruncatedFileNamesFileAndTensor) {
  TempDir dir;
  std::vector<bf16> a(100, bf16{0x3f80});
  const std::string path = dir.file("t.safetensors");
  write_safetensors_bf16(path, {{"layer.weight", {10, 10}, &a}});
  fs::resize_file(path, fs::file_size(path) - 3);
  std::string msg = testing::input_error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(SafetensorsErrors, BadHeaderLengthNamesFile) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  std::string bytes = raw_safetensors(R"({"w":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]}})",
                                      std::string(2, '\0'));
  bytes[5] = '\x7f';  // header length now ~2^47
  write_text(path, bytes);
  std::string msg = testing::input_error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("header length"), std::string::npos) << msg;

  write_text(path, "abc");  // shorter than the length field itself
  msg = testing::input_error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;

  write_text(path, raw_safetensors("{not json", ""));
  msg = testing::input_error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("JSON"), std::string::npos) << msg;
}

TEST(SafetensorsErrors, InconsistentEntriesNameTheTensor) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  auto expect_rejected = [&](const std::string& header, const std::string& data,
                             const std::string& tensor, const std::string& hint) {
    write_text(path, raw_safetensors(header, data));
    std::string msg = testing::input_error_of([&] { SafetensorsFile f(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(tensor), std::string::npos) << msg;
    EXPECT_NE(msg.find(hint), std::string::npos) << msg;
  };
  // Size disagrees with dtype x shape.
  expect_rejected(R"({"w.size":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})",
                  std::string(8, '\0'), "w.size", "needs 6");
  // Two tensors share bytes.
  expect_rejected(R"({"w1":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
                  R"("w2":{"dtype":"BF16","shape":[2],"data_offsets":[2,6]}})",
                  std::string(8, '\0'), "w2", "overlaps");
  // Unknown dtype, begin > end, negative dim.
  expect_rejected(R"({"w.d":{"dtype":"Q4","shape":[2],"data_offsets":[0,4]}})",
                  std::string(4, '\0'), "w.d", "dtype");
  expect_rejected(R"({"w.o":{"dtype":"BF16","shape":[0],"data_offsets":[4,0]}})",
                  std::string(4, '\0'), "w.o", "begin > end");
  expect_rejected(R"({"w.n":{"dtype":"BF16","shape":[-2],"data_offsets":[0,4]}})",
                  std::string(4, '\0'), "w.n", "non-negative");
}

TEST(SafetensorsErrors, ReadChecksPresenceShapeAndDtype) {
  TempDir dir;
  const std::string path = dir.file("r.safetensors");
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                             R"("i":{"dtype":"I64","shape":[1],"data_offsets":[24,32]}})";
  write_text(path, raw_safetensors(header, std::string(32, '\0')));
  SafetensorsFile f(path);
  std::vector<bf16> out;
  std::string msg = testing::input_error_of([&] { f.read_bf16("absent.weight", {1}, out); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("absent.weight"), std::string::npos) << msg;
  msg = testing::input_error_of([&] { f.read_bf16("w", {3, 2}, out); });
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
  msg = testing::input_error_of([&] { f.read_bf16("i", {1}, out); });
  EXPECT_NE(msg.find("I64"), std::string::npos) << msg;
}

// ---- Weights ---------------------------------------------------------------------------------

TEST(WeightsSynthetic, DeterministicAndSeedDependent) {
  const ModelConfig c = small_config();
  ModelWeights a = synthetic_weights(c, 7), b = synthetic_weights(c, 7),
               other = synthetic_weights(c, 8);
  EXPECT_TRUE(bitwise_equal(a, b));
  EXPECT_FALSE(bitwise_equal(a, other));
  EXPECT_EQ(weights_hash(a), weights_hash(b));
  EXPECT_NE(weights_hash(a), weights_hash(other));
}

TEST(WeightsSynthetic, ShapesNormsAndValuesFollowTheFormula) {
  const ModelConfig c = small_config(2, /*tied=*/false);
  const uint64_t seed = 11;
  ModelWeights w = synthetic_weights(c, seed);
  const size_t H = 32, Q = 32, KV = 16, I = 48, V = 50, D = 8;
  EXPECT_EQ(w.embed_tokens.size(), V * H);
  EXPECT_EQ(w.lm_head.size(), V * H);
  ASSERT_EQ(w.layers.size(), 2u);
  const LayerWeights& L = w.layers[1];
  EXPECT_EQ(L.q_proj.size(), Q * H);
  EXPECT_EQ(L.k_proj.size(), KV * H);
  EXPECT_EQ(L.v_proj.size(), KV * H);
  EXPECT_EQ(L.o_proj.size(), H * Q);
  EXPECT_EQ(L.gate_proj.size(), I * H);
  EXPECT_EQ(L.up_proj.size(), I * H);
  EXPECT_EQ(L.down_proj.size(), H * I);
  ASSERT_EQ(L.q_norm.size(), D);
  ASSERT_EQ(L.k_norm.size(), D);
  for (const std::vector<bf16>* norm : std::initializer_list<const std::vector<bf16>*>{
           &L.input_layernorm, &L.post_attention_layernorm, &L.q_norm, &L.k_norm, &w.norm}) {
    for (bf16 v : *norm) ASSERT_EQ(v.bits, 0x3f80) << "norm weights are 1.0";
  }
  for (uint64_t i : {0ull, 1ull, 777ull, static_cast<unsigned long long>(I * H - 1)}) {
    EXPECT_EQ(L.down_proj[i],
              to_bf16(synthetic_normal(seed, "model.layers.1.mlp.down_proj.weight", i)));
  }
  EXPECT_EQ(w.embed_tokens[123], to_bf16(synthetic_normal(seed, "model.embed_tokens.weight", 123)));
  EXPECT_EQ(w.lm_head[5], to_bf16(synthetic_normal(seed, "lm_head.weight", 5)));
  EXPECT_EQ(L.k_proj[9],
            to_bf16(synthetic_normal(seed, "model.layers.1.self_attn.k_proj.weight", 9)));
}

// The formula documented in weights.hpp, re-implemented from the comment: a CUDA port follows
// that comment, so code and comment must agree bit for bit.
float documented_synthetic_normal(uint64_t seed, const std::string& name, uint64_t i) {
  auto mix64 = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t name_hash = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) name_hash = (name_hash ^ ch) * 0x100000001b3ull;
  const uint64_t key = mix64(seed ^ mix64(name_hash));
  const uint64_t golden = 0x9e3779b97f4a7c15ull;
  const uint64_t r1 = mix64(key + (2 * i + 1) * golden), r2 = mix64(key + (2 * i + 2) * golden);
  const double u1 = static_cast<double>((r1 >> 11) + 1) * std::ldexp(1.0, -53);
  const double u2 = static_cast<double>(r2 >> 11) * std::ldexp(1.0, -53);
  return static_cast<float>(0.02 *
                            (std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2)));
}

TEST(WeightsSynthetic, DocumentedFormulaMatchesBitwise) {
  for (uint64_t seed : {0ull, 1ull, 0xdeadbeefcafef00dull}) {
    for (const std::string name :
         {"model.embed_tokens.weight", "model.layers.3.mlp.up_proj.weight"}) {
      for (uint64_t i : {0ull, 1ull, 2ull, 1000003ull, 0xffffffffffull}) {
        EXPECT_EQ(std::bit_cast<uint32_t>(synthetic_normal(seed, name, i)),
                  std::bit_cast<uint32_t>(documented_synthetic_normal(seed, name, i)))
            << seed << " " << name << " " << i;
      }
    }
  }
}

TEST(WeightsSynthetic, NormalWithStd002) {
  // Tolerances: mean within 5 standard errors; std and the 1-sigma mass within ~5x their sampling
  // error for n = 200000.
  const int n = 200000;
  double sum = 0.0, sum_sq = 0.0, cross = 0.0;
  int within_sigma = 0;
  for (int i = 0; i < n; ++i) {
    const double v = synthetic_normal(3, "model.layers.0.mlp.gate_proj.weight", i);
    const double other = synthetic_normal(3, "model.layers.0.mlp.up_proj.weight", i);
    sum += v;
    sum_sq += v * v;
    cross += v * other;
    within_sigma += std::abs(v) < 0.02;
  }
  const double mean = sum / n, stddev = std::sqrt(sum_sq / n - mean * mean);
  EXPECT_LT(std::abs(mean), 5 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(stddev, 0.02, 0.02 * 0.01);
  EXPECT_NEAR(static_cast<double>(within_sigma) / n, 0.6827, 0.005);
  // Different tensor names give independent streams: correlation ~ N(0, 1/sqrt(n)).
  EXPECT_LT(std::abs(cross / n) / (0.02 * 0.02), 5 / std::sqrt(n));
}

TEST(WeightsSynthetic, TinyPresetIsQuick) {
  auto start = std::chrono::steady_clock::now();
  ModelWeights w = synthetic_weights(*preset_config("tiny"), 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("synthetic tiny weights: %.3f s\n", seconds);
  EXPECT_EQ(w.embed_tokens.size(), 2048u * 256u);
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_LT(seconds, 3.0) << "generous bound on a shared machine; expected well under 1 s";
}

TEST(WeightsHash, OneFlippedBitChangesIt) {
  ModelWeights w = synthetic_weights(small_config(), 1);
  const std::string original = weights_hash(w);
  EXPECT_EQ(original.size(), 16u);
  for (auto* tensor : {&w.embed_tokens, &w.layers[1].v_proj, &w.norm}) {
    for (uint16_t bit : {uint16_t{1}, uint16_t{0x8000}}) {
      (*tensor)[3].bits ^= bit;
      EXPECT_NE(weights_hash(w), original);
      (*tensor)[3].bits ^= bit;
      EXPECT_EQ(weights_hash(w), original);
    }
  }
  // Sign flips of two values cancel in plain word-FNV; not here.
  w.layers[0].up_proj[0].bits ^= 0x8000;
  w.layers[0].up_proj[4].bits ^= 0x8000;
  EXPECT_NE(weights_hash(w), original);
}

TEST(WeightsCheckpoint, SingleFileRoundTripIsBitwise) {
  TempDir dir;
  ModelWeights w = synthetic_weights(*preset_config("tiny"), 5);
  save_checkpoint(w, dir.str());
  EXPECT_TRUE(fs::exists(dir.file("model.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("config.json")));
  ModelWeights loaded = load_checkpoint(dir.str());
  expect_same_shape(loaded.config, w.config);
  EXPECT_EQ(loaded.config.name, dir.str());
  EXPECT_TRUE(bitwise_equal(loaded, w));
  EXPECT_EQ(weights_hash(loaded), weights_hash(w));
  // The written config.json carries eps as the decimal it was given.
  auto config = nlohmann::json::parse(read_bytes(dir.file("config.json")));
  EXPECT_EQ(config["rms_norm_eps"].get<double>(), 1e-6);
  EXPECT_EQ(config["model_type"], "qwen3");
}

TEST(WeightsCheckpoint, ShardedRoundTripIsBitwise) {
  TempDir dir;
  ModelWeights w = synthetic_weights(*preset_config("tiny"), 6);
  save_checkpoint(w, dir.str(), /*max_shard_bytes=*/1 << 20);
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors")));
  auto index = nlohmann::json::parse(read_bytes(dir.file("model.safetensors.index.json")));
  std::set<std::string> shards;
  for (auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  EXPECT_GT(shards.size(), 2u);
  for (const auto& s : shards) {
    EXPECT_TRUE(fs::exists(dir.file(s))) << s;
    EXPECT_NE(s.find("-of-"), std::string::npos) << s;
  }
  EXPECT_EQ(index["weight_map"].size(), 1u + 4u * 11u + 1u);
  ModelWeights loaded = load_checkpoint(dir.str());
  EXPECT_TRUE(bitwise_equal(loaded, w));
  EXPECT_EQ(weights_hash(loaded), weights_hash(w));
}

TEST(WeightsCheckpoint, UntiedLmHeadRoundTrips) {
  TempDir dir;
  ModelWeights w = synthetic_weights(small_config(2, /*tied=*/false), 9);
  save_checkpoint(w, dir.str(), 4096);
  ModelWeights loaded = load_checkpoint(dir.str());
  EXPECT_FALSE(loaded.config.tie_word_embeddings);
  EXPECT_EQ(loaded.lm_head.size(), 50u * 32u);
  EXPECT_TRUE(bitwise_equal(loaded, w));
  EXPECT_EQ(weights_hash(loaded), weights_hash(w));
}

TEST(WeightsCheckpoint, F32CheckpointLoadsRoundedToBf16) {
  TempDir dir;
  ModelWeights reference = synthetic_weights(small_config(), 4);  // for config.json and names
  save_checkpoint(reference, dir.str());
  SafetensorsFile written(dir.file("model.safetensors"));
  // Rewrite every tensor as F32 by hand with values that are not bf16-representable.
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  std::map<std::string, std::vector<float>> values;
  for (const auto& [name, entry] : written.entries()) {
    std::vector<float>& v = values[name];
    for (uint64_t i = 0; i < entry.element_count(); ++i) {
      v.push_back(std::sin(static_cast<float>(i) + static_cast<float>(name.size())) * 0.1f);
    }
    header[name] = {{"dtype", "F32"},
                    {"shape", entry.shape},
                    {"data_offsets", {data.size(), data.size() + 4 * v.size()}}};
    data += as_bytes(v);
  }
  write_text(dir.file("model.safetensors"), raw_safetensors(header.dump(), data));
  ModelWeights loaded = load_checkpoint(dir.str());
  const auto& q = values.at("model.layers.1.self_attn.q_proj.weight");
  ASSERT_EQ(loaded.layers[1].q_proj.size(), q.size());
  size_t inexact = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    ASSERT_EQ(loaded.layers[1].q_proj[i], to_bf16(q[i])) << i;
    inexact += to_float(to_bf16(q[i])) != q[i];
  }
  EXPECT_GT(inexact, q.size() / 2) << "the test values should need rounding";
  const auto& e = values.at("model.embed_tokens.weight");
  for (size_t i = 0; i < e.size(); ++i) ASSERT_EQ(loaded.embed_tokens[i], to_bf16(e[i]));
}

TEST(WeightsCheckpoint, CorruptCheckpointsNameFileAndTensor) {
  TempDir dir;
  ModelWeights w = synthetic_weights(small_config(), 2);
  const std::string st = dir.file("model.safetensors");

  // Truncated data section.
  save_checkpoint(w, dir.str());
  fs::resize_file(st, fs::file_size(st) - 10);
  std::string msg = testing::input_error_of([&] { load_checkpoint(dir.str()); });
  EXPECT_NE(msg.find(st), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor '"), std::string::npos) << msg;

  // Bad header length.
  save_checkpoint(w, dir.str());
  {
    std::fstream f(st, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(6);
    f.put('\x01');
  }
  msg = testing::input_error_of([&] { load_checkpoint(dir.str()); });
  EXPECT_NE(msg.find(st), std::string::npos) << msg;
  EXPECT_NE(msg.find("header length"), std::string::npos) << msg;

  // Wrong shape: config.json says intermediate 40 but the file holds 48.
  save_checkpoint(w, dir.str());
  auto config = nlohmann::json::parse(read_bytes(dir.file("config.json")));
  config["intermediate_size"] = 40;
  write_text(dir.file("config.json"), config.dump());
  msg = testing::input_error_of([&] { load_checkpoint(dir.str()); });
  EXPECT_NE(msg.find(st), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[40, 32]"), std::string::npos) << msg;

  // Missing tensor: a file without one layer's k_norm.
  save_checkpoint(w, dir.str());
  {
    SafetensorsFile full(st);
    std::vector<std::vector<bf16>> keep;
    std::vector<TensorToWrite> tensors;
    keep.reserve(full.entries().size());
    for (const auto& [name, entry] : full.entries()) {
      if (name == "model.layers.1.self_attn.k_norm.weight") continue;
      keep.emplace_back();
      full.read_bf16(name, entry.shape, keep.back());
      tensors.push_back({name, entry.shape, &keep.back()});
    }
    write_safetensors_bf16(st, tensors);
  }
  msg = testing::input_error_of([&] { load_checkpoint(dir.str()); });
  EXPECT_NE(msg.find(st), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.layers.1.self_attn.k_norm.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;

  // Sharded: a tensor absent from the weight map names the index file.
  fs::remove(st);
  save_checkpoint(w, dir.str(), 2048);
  auto index = nlohmann::json::parse(read_bytes(dir.file("model.safetensors.index.json")));
  index["weight_map"].erase("model.norm.weight");
  write_text(dir.file("model.safetensors.index.json"), index.dump());
  msg = testing::input_error_of([&] { load_checkpoint(dir.str()); });
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.norm.weight"), std::string::npos) << msg;

  // No weights at all.
  TempDir empty_dir;
  write_text(empty_dir.file("config.json"), config.dump());
  msg = testing::input_error_of([&] { load_checkpoint(empty_dir.str()); });
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

// ---- Reference forward -----------------------------------------------------------------------

bool bitwise_equal_rows(const std::vector<double>& a, const std::vector<double>& b, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (std::bit_cast<uint64_t>(a[i]) != std::bit_cast<uint64_t>(b[i])) return false;
  }
  return true;
}

TEST(ReferenceForward, CausalPrefixIsBitwiseIndependentOfLaterTokens) {
  const ModelWeights w = synthetic_weights(*preset_config("tiny"), 0);
  const size_t V = 2048;
  std::vector<int32_t> tokens = {1, 17, 2047, 5, 300, 300, 9, 1024, 0, 77};
  const std::vector<double> full = reference_logits_fp64(w, tokens);
  ASSERT_EQ(full.size(), tokens.size() * V);
  for (double v : full) ASSERT_TRUE(std::isfinite(v));

  const size_t prefix = 6;
  std::vector<int32_t> changed = tokens;
  for (size_t t = prefix; t < changed.size(); ++t) changed[t] = (changed[t] + 13) % 2048;
  const std::vector<double> other = reference_logits_fp64(w, changed);
  EXPECT_TRUE(bitwise_equal_rows(full, other, prefix * V));
  EXPECT_FALSE(bitwise_equal_rows(full, other, (prefix + 1) * V)) << "later rows must change";

  const std::vector<double> shorter =
      reference_logits_fp64(w, std::vector<int32_t>(tokens.begin(), tokens.begin() + prefix));
  ASSERT_EQ(shorter.size(), prefix * V);
  EXPECT_TRUE(bitwise_equal_rows(full, shorter, prefix * V));
}

// One layer, one head, hidden = head_dim = vocab = n; identity embedding and q/k/v/o, the MLP
// reading and writing dimension a only. Tokens [a, b] with b = a + n/2, so that a and b form one
// RoPE pair, rotated at position 1 by angle theta^(-2a/n).
ModelWeights micro_model(int n, int a, double theta) {
  ModelConfig c;
  c.name = "micro";
  c.hidden_size = c.head_dim = c.vocab_size = n;
  c.num_layers = c.num_heads = c.num_kv_heads = c.intermediate_size = 1;
  c.rope_theta = theta;
  c.rms_norm_eps = 1e-6f;
  c.tie_word_embeddings = true;
  auto identity = [n] {
    std::vector<bf16> m(n * n, to_bf16(0.0f));
    for (int i = 0; i < n; ++i) m[i * n + i] = to_bf16(1.0f);
    return m;
  };
  ModelWeights w;
  w.config = c;
  w.embed_tokens = identity();
  w.norm.assign(n, to_bf16(1.0f));
  LayerWeights L;
  L.input_layernorm = L.post_attention_layernorm = L.q_norm = L.k_norm = w.norm;
  L.q_proj = L.k_proj = L.v_proj = L.o_proj = identity();
  L.gate_proj.assign(n, to_bf16(0.0f));
  L.gate_proj[a] = to_bf16(1.0f);
  L.up_proj = L.down_proj = L.gate_proj;  // [1, n] and [n, 1]: e_a both ways
  w.layers.push_back(L);
  return w;
}

void check_micro_model(int n, int a, double theta) {
  SCOPED_TRACE("n=" + std::to_string(n) + " a=" + std::to_string(a));
  const int b = a + n / 2;
  const double eps = 1e-6, N = n;
  const double f = std::pow(theta, -2.0 * a / N);  // rotation of the (a, b) pair per position
  // By hand. rmsnorm of a unit vector: s e_j. q_norm of s e_j (head_dim n): r e_j.
  const double s = 1.0 / std::sqrt(1.0 / N + eps);
  const double r = s / std::sqrt(s * s / N + eps);
  // Position 0 attends to itself only: attention output v0 = s e_a.
  // Position 1: q1 = k1 = r (-sin f e_a + cos f e_b), k0 = r e_a; scores scaled by 1/sqrt(n).
  const double score0 = -r * r * std::sin(f) / std::sqrt(N), score1 = r * r / std::sqrt(N);
  const double p0 = 1.0 / (1.0 + std::exp(score1 - score0)), p1 = 1.0 - p0;
  std::vector<std::vector<double>> h(2, std::vector<double>(n, 0.0));
  h[0][a] = 1.0 + s;
  h[1][a] = p0 * s;
  h[1][b] = 1.0 + p1 * s;
  std::vector<double> expected;
  for (auto& x : h) {
    auto inv_rms = [&](const std::vector<double>& v) {
      double sq = 0.0;
      for (double e : v) sq += e * e;
      return 1.0 / std::sqrt(sq / N + eps);
    };
    const double g = x[a] * inv_rms(x);  // gate = up = normed[a]
    x[a] += g * g / (1.0 + std::exp(-g));
    const double k = inv_rms(x);
    for (double e : x) expected.push_back(e * k);  // identity lm_head: logits = final normed
  }
  const std::vector<double> logits = reference_logits_fp64(micro_model(n, a, theta), {a, b});
  ASSERT_EQ(logits.size(), expected.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(logits[i], expected[i], 1e-12 * (1.0 + std::abs(expected[i]))) << i;
  }
}

TEST(ReferenceForward, MicroModelMatchesHandComputation) {
  check_micro_model(2, 0, 1e6);    // angle 1 rad: the first RoPE frequency is always 1
  check_micro_model(4, 1, 100.0);  // angle 100^(-1/2) = 0.1: theta and the pair layout matter
  check_micro_model(8, 3, 500.0);
}

TEST(ReferenceForward, GqaEqualsMhaWithRepeatedKvHeads) {
  const ModelWeights gqa = synthetic_weights(small_config(/*kv_heads=*/2), 21);
  ModelWeights mha = synthetic_weights(small_config(/*kv_heads=*/4), 22);
  const size_t H = 32, D = 8, group = 2;
  mha.embed_tokens = gqa.embed_tokens;
  for (size_t l = 0; l < mha.layers.size(); ++l) {
    const LayerWeights& src = gqa.layers[l];
    LayerWeights& dst = mha.layers[l];
    const std::vector<bf16> k = dst.k_proj;  // keep the size
    dst = src;
    dst.k_proj.resize(k.size());
    dst.v_proj.resize(k.size());
    for (size_t head = 0; head < 4; ++head) {  // MHA KV head `head` = GQA KV head head / group
      for (size_t i = 0; i < D * H; ++i) {
        dst.k_proj[head * D * H + i] = src.k_proj[(head / group) * D * H + i];
        dst.v_proj[head * D * H + i] = src.v_proj[(head / group) * D * H + i];
      }
    }
  }
  const std::vector<int32_t> tokens = {3, 49, 0, 12, 12, 7};
  const auto a = reference_logits_fp64(gqa, tokens);
  const auto b = reference_logits_fp64(mha, tokens);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(bitwise_equal_rows(a, b, a.size()));
}

TEST(ReferenceForward, UntiedHeadEqualToEmbeddingMatchesTied) {
  const ModelWeights tied = synthetic_weights(small_config(2, true), 30);
  ModelWeights untied = tied;
  untied.config.tie_word_embeddings = false;
  untied.lm_head = tied.embed_tokens;
  const std::vector<int32_t> tokens = {4, 8, 15, 16, 23, 42};
  EXPECT_TRUE(bitwise_equal_rows(reference_logits_fp64(tied, tokens),
                                 reference_logits_fp64(untied, tokens), tokens.size() * 50));
  untied.lm_head[0].bits ^= 0x0100;
  EXPECT_FALSE(bitwise_equal_rows(reference_logits_fp64(tied, tokens),
                                  reference_logits_fp64(untied, tokens), tokens.size() * 50));
}

TEST(ReferenceForward, RejectsOutOfVocabularyTokens) {
  const ModelWeights w = synthetic_weights(small_config(), 1);
  EXPECT_THROW(reference_logits_fp64(w, {1, 50}), std::out_of_range);
  EXPECT_THROW(reference_logits_fp64(w, {-1}), std::out_of_range);
}

}  // namespace
}  // namespace bih::test_weights
