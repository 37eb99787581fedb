// test_audit_models.cpp: gaps a mutation audit found in models/ (issue 20): every refused
// config.json value at its boundary (0, negative, past the 32-bit limit) in every place it can
// appear, and the GGUF metadata of a model whose head_dim is not hidden / heads (the tiny preset
// has hidden / heads = head_dim, so it cannot tell the two apart).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "models/config.hpp"
#include "models/gguf.hpp"
#include "models/weights.hpp"
#include "test_util.hpp"

namespace bih::test_audit_models {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using bih::testing::input_error_of;

class AuditModels : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bih_audit_models_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `config` as DIR/config.json and loads it.
  ModelConfig load(const json& config) const {
    const fs::path path = dir_ / "config.json";
    std::ofstream(path) << config.dump(2);
    return load_config_json(path.string());
  }
  std::string config_path() const { return (dir_ / "config.json").string(); }

  fs::path dir_;
};

// A small valid Qwen3 config.json (transformers 4 form, every field the parser reads present).
json small_config() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "intermediate_size": 256, "vocab_size": 512, "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000, "tie_word_embeddings": true,
    "use_sliding_window": false, "torch_dtype": "bfloat16"})");
}

// Sets the field at `pointer` ("/rope_parameters/rope_theta") of `config`, creating objects on the
// way (a rope object gets rope_type "default", as transformers writes it).
json with_value(json config, const std::string& pointer, const json& value) {
  const json::json_pointer p(pointer);
  if (p.parent_pointer() != json::json_pointer("") && !config.contains(p.parent_pointer())) {
    config[p.parent_pointer()] = json{{"rope_type", "default"}};
  }
  config[p] = value;
  return config;
}

TEST_F(AuditModels, TheBaseConfigLoads) {
  const ModelConfig c = load(small_config());
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope_theta, 1e6);
}

// Every positive integer field, refused at 0, at -1, one past INT_MAX and as a fraction, with the
// field named. max_window_layers is read only when a sliding window is on.
TEST_F(AuditModels, EveryIntegerFieldIsRefusedAtItsBoundaries) {
  struct Field {
    std::string key;
    json context;  // merged into the base config first
  };
  const std::vector<Field> fields{
      {"hidden_size", json::object()},
      {"num_hidden_layers", json::object()},
      {"num_attention_heads", json::object()},
      {"num_key_value_heads", json::object()},
      {"head_dim", json::object()},
      {"intermediate_size", json::object()},
      {"vocab_size", json::object()},
      {"max_position_embeddings", json::object()},
      {"max_window_layers", {{"use_sliding_window", true}, {"sliding_window", 64}}},
  };
  const std::vector<json> refused{0, -1, int64_t{2147483648}, 1.5, "8"};
  for (const Field& f : fields) {
    for (const json& value : refused) {
      json config = small_config();
      config.merge_patch(f.context);
      config[f.key] = value;
      const std::string message = input_error_of([&] { load(config); });
      EXPECT_EQ(message.rfind(config_path() + ": at /" + f.key + ":", 0), 0u)
          << f.key << " = " << value.dump() << ": " << message;
    }
  }
}

// rope_theta and rms_norm_eps: refused at 0, -0.0 and below, in every place a theta can sit
// (top level, transformers 5's rope_parameters, the older rope_scaling); the smallest positive
// values load. theta 0 once reached the engine and ended in "internal error" (exit 3).
TEST_F(AuditModels, EveryPositiveNumberIsRefusedAtZeroAndBelowWherever) {
  const std::vector<std::string> pointers{"/rope_theta", "/rope_parameters/rope_theta",
                                          "/rope_scaling/rope_theta", "/rms_norm_eps"};
  for (const std::string& pointer : pointers) {
    for (const json& value : {json(0), json(0.0), json(-0.0), json(-1), json(-1e-300)}) {
      json config = with_value(small_config(), pointer, value);
      if (pointer != "/rope_theta" && pointer != "/rms_norm_eps") config.erase("rope_theta");
      const std::string message = input_error_of([&] { load(config); });
      EXPECT_EQ(message.rfind(config_path() + ": at " + pointer + ":", 0), 0u)
          << pointer << " = " << value.dump() << ": " << message;
      EXPECT_NE(message.find("positive"), std::string::npos) << message;
    }
    json smallest = with_value(small_config(), pointer, 1e-30);
    if (pointer != "/rope_theta" && pointer != "/rms_norm_eps") smallest.erase("rope_theta");
    EXPECT_NO_THROW(load(smallest)) << pointer << " = 1e-30";
  }
}

// A model where head_dim (64) is not hidden / heads (128 / 4 = 32), as in Qwen3-0.6B (128 vs 64):
// llama.cpp reads the RoPE width from rope.dimension_count and defaults it to hidden / heads.
ModelConfig wide_head_config() {
  ModelConfig c;
  c.name = "audit-wide-head";
  c.hidden_size = 128;
  c.num_layers = 1;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.intermediate_size = 64;
  c.vocab_size = kSyntheticVocabMinSize + 41;
  c.max_position_embeddings = 256;
  return c;
}

TEST_F(AuditModels, GgufRopeWidthIsHeadDimWhenItDiffersFromHiddenOverHeads) {
  const ModelConfig c = wide_head_config();
  ASSERT_NE(c.hidden_size / c.num_heads, c.head_dim) << "the shape must tell the two apart";
  const std::string path = (dir_ / "m.gguf").string();
  write_gguf(synthetic_weights(c, 5), path);
  const GgufFile f = read_gguf(path);
  for (const char* key : {"qwen3.rope.dimension_count", "qwen3.attention.key_length",
                          "qwen3.attention.value_length"}) {
    const GgufValue* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(v->integer, c.head_dim) << key;
  }
  // The projections carry the head_dim too: q is heads x head_dim wide, not hidden.
  const GgufTensorInfo* q = f.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dims, (std::vector<uint64_t>{128, 4 * 64}));
}

}  // namespace
}  // namespace bih::test_audit_models
