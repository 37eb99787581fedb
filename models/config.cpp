// config.cpp: presets of DESIGN.md and the Hugging Face config.json parser.
#include "models/config.hpp"

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/errors.hpp"

namespace bih {
namespace {

ModelConfig make_preset(const std::string& name, int hidden, int layers, int heads, int kv_heads,
                        int head_dim, int intermediate, int vocab) {
  ModelConfig c;
  c.name = name;
  c.hidden_size = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  c.rope_theta = 1e6;
  c.rms_norm_eps = 1e-6f;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 40960;
  return c;
}

using Json = nlohmann::json;

// A positive int field; `required` false means "absent is fine" (returns nullopt).
std::optional<int> int_field(const Json& j, const std::string& file, const std::string& key,
                             bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) {
      throw InputError(file, "/" + key, "missing field; expected a positive integer");
    }
    return std::nullopt;
  }
  if (!it->is_number_integer()) {
    throw InputError(file, "/" + key, "expected a positive integer, got " + it->dump());
  }
  int64_t v = it->get<int64_t>();
  if (v <= 0 || v > std::numeric_limits<int>::max()) {
    throw InputError(file, "/" + key,
                     "expected a positive integer that fits in 32 bits, got " + it->dump());
  }
  return static_cast<int>(v);
}

std::optional<double> positive_number_field(const Json& j, const std::string& file,
                                            const std::string& key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number() || it->get<double>() <= 0.0) {
    throw InputError(file, "/" + key, "expected a positive number, got " + it->dump());
  }
  return it->get<double>();
}

}  // namespace

std::optional<ModelConfig> preset_config(const std::string& name) {
  if (name == "tiny") return make_preset(name, 256, 4, 16, 8, 16, 768, 2048);
  if (name == "qwen3-0.6b") return make_preset(name, 1024, 28, 16, 8, 128, 3072, 151936);
  if (name == "qwen3-1.7b") return make_preset(name, 2048, 28, 16, 8, 128, 6144, 151936);
  return std::nullopt;
}

std::vector<std::string> preset_names() { return {"tiny", "qwen3-0.6b", "qwen3-1.7b"}; }

ModelConfig load_config_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "", "cannot open the model config (config.json)");
  Json j;
  try {
    j = Json::parse(in, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    throw InputError(path, "", std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw InputError(path, "", "expected a JSON object");

  auto model_type = j.find("model_type");
  if (model_type == j.end() || !model_type->is_string()) {
    throw InputError(path, "/model_type", "missing or not a string; expected \"qwen3\"");
  }
  if (model_type->get<std::string>() != "qwen3") {
    throw InputError(path, "/model_type",
                     "unsupported model_type " + model_type->dump() +
                         "; bih implements only the Qwen3 dense decoder (\"qwen3\")");
  }

  ModelConfig c;
  c.name = std::filesystem::path(path).parent_path().string();
  c.hidden_size = *int_field(j, path, "hidden_size", true);
  c.num_layers = *int_field(j, path, "num_hidden_layers", true);
  c.num_heads = *int_field(j, path, "num_attention_heads", true);
  c.num_kv_heads = int_field(j, path, "num_key_value_heads", false).value_or(c.num_heads);
  c.intermediate_size = *int_field(j, path, "intermediate_size", true);
  c.vocab_size = *int_field(j, path, "vocab_size", true);
  auto head_dim = int_field(j, path, "head_dim", false);
  if (!head_dim && c.hidden_size % c.num_heads != 0) {
    throw InputError(path, "/head_dim",
                     "absent, and hidden_size is not a multiple of num_attention_heads; give "
                     "head_dim explicitly");
  }
  c.head_dim = head_dim.value_or(c.hidden_size / c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0) {
    throw InputError(path, "/num_key_value_heads",
                     "must divide num_attention_heads (" + std::to_string(c.num_heads) + ")");
  }
  if (c.head_dim % 2 != 0) {
    throw InputError(path, "/head_dim", "must be even: RoPE rotates pairs of dimensions");
  }
  // Absent optional fields take Qwen3Config's defaults (transformers), as HF would load them.
  c.rope_theta = positive_number_field(j, path, "rope_theta").value_or(10000.0);
  c.rms_norm_eps =
      static_cast<float>(positive_number_field(j, path, "rms_norm_eps").value_or(1e-6));
  c.max_position_embeddings =
      int_field(j, path, "max_position_embeddings", false).value_or(c.max_position_embeddings);
  auto tie = j.find("tie_word_embeddings");
  if (tie != j.end() && !tie->is_null()) {
    if (!tie->is_boolean()) {
      throw InputError(path, "/tie_word_embeddings", "expected true or false, got " + tie->dump());
    }
    c.tie_word_embeddings = tie->get<bool>();
  } else {
    c.tie_word_embeddings = false;  // Qwen3Config's default
  }
  // Features the engine does not implement: refuse rather than compute something else.
  auto scaling = j.find("rope_scaling");
  if (scaling != j.end() && !scaling->is_null()) {
    throw InputError(path, "/rope_scaling",
                     "unsupported (bih implements plain RoPE); expected null");
  }
  auto sliding = j.find("use_sliding_window");
  if (sliding != j.end() && !sliding->is_null() && *sliding != Json(false)) {
    throw InputError(path, "/use_sliding_window", "unsupported; expected false");
  }
  return c;
}

std::vector<LinearShape> linear_shapes(const ModelConfig& c) {
  const int H = c.hidden_size;
  return {{"qkv", c.q_size() + 2 * c.kv_size(), H},
          {"o_proj", H, c.q_size()},
          {"gate_up", 2 * c.intermediate_size, H},
          {"down", H, c.intermediate_size},
          {"lm_head", c.vocab_size, H}};
}

}  // namespace bih
