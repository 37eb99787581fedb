// config.cpp: presets of DESIGN.md and the Hugging Face config.json parser.
//
// The parser reads both config.json dialects: transformers 4 (top-level rope_theta, rope_scaling
// null) and transformers 5 (rope_parameters {rope_theta, rope_type}, dtype, layer_types). Every
// field that would change the forward pass is either read into ModelConfig or checked to hold the
// value bih implements; anything else is refused by name, never replaced by a silent default.
#include "models/config.hpp"

#include <fmt/core.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <vector>

#include "base/errors.hpp"
#include "base/json_file.hpp"

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

// ---- Fields that change the math ---------------------------------------------------------------
// Each check below owns one fact of the checkpoint: it parses the field(s), resolves the HF
// default when absent, and refuses (InputError naming the field, what was found and what bih
// implements) every value bih would otherwise compute differently from transformers. Fields that
// do not change a forward pass (token ids, use_cache, initializer_range, transformers_version,
// attention_dropout at inference, ...) are not read at all.

[[noreturn]] void refuse(const std::string& file, const std::string& pointer, const Json& found,
                         const std::string& implemented) {
  throw InputError(file, pointer,
                   "unsupported value " + found.dump() + "; bih implements " + implemented);
}

// A boolean field that must be false (or absent/null) for the math bih implements.
void check_false(const Json& j, const std::string& file, const std::string& key,
                 const std::string& implemented) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null() || *it == Json(false)) return;
  refuse(file, "/" + key, *it, implemented + "; expected false");
}

// model_type "qwen3" and, when present, architectures ["Qwen3ForCausalLM"].
void check_architecture(const Json& j, const std::string& file) {
  auto model_type = j.find("model_type");
  if (model_type == j.end() || !model_type->is_string()) {
    throw InputError(file, "/model_type", "missing or not a string; expected \"qwen3\"");
  }
  if (model_type->get<std::string>() != "qwen3") {
    throw InputError(file, "/model_type",
                     "unsupported model_type " + model_type->dump() +
                         "; bih implements only the Qwen3 dense decoder (\"qwen3\")");
  }
  auto arch = j.find("architectures");
  if (arch == j.end() || arch->is_null()) return;
  if (!arch->is_array() || arch->empty()) {
    refuse(file, "/architectures", *arch, "[\"Qwen3ForCausalLM\"]");
  }
  for (size_t i = 0; i < arch->size(); ++i) {
    if ((*arch)[i] != Json("Qwen3ForCausalLM")) {
      refuse(file, "/architectures/" + std::to_string(i), (*arch)[i],
             "only Qwen3ForCausalLM (the dense causal LM head)");
    }
  }
}

// One RoPE parameter object: `rope_parameters` (transformers 5) or the older `rope_scaling`.
// bih implements the default rotation only: every key that would select or scale another one is
// refused, including keys bih does not know (they are all about the rotation). Its rope_theta, if
// any, is appended to `thetas` as (pointer, value).
void check_rope_object(const Json& rope, const std::string& file, const std::string& pointer,
                       std::vector<std::pair<std::string, double>>& thetas) {
  if (!rope.is_object()) {
    refuse(file, pointer, rope,
           "plain RoPE: an object {\"rope_theta\", \"rope_type\": \"default\"}");
  }
  // The type first: a scaled variant is named for what it is, not for its first parameter.
  for (const char* key : {"rope_type", "type"}) {
    auto type = rope.find(key);
    if (type != rope.end() && *type != Json("default")) {
      refuse(file, pointer + "/" + key, *type,
             "only the default RoPE (rope_type \"default\"), not scaled variants");
    }
  }
  for (auto it = rope.begin(); it != rope.end(); ++it) {
    const std::string at = pointer + "/" + json_pointer_token(it.key());
    const Json& v = it.value();
    if (it.key() == "rope_type" || it.key() == "type") continue;  // checked above
    if (it.key() == "rope_theta") {
      if (v.is_null()) continue;
      if (!v.is_number() || v.get<double>() <= 0.0) {
        throw InputError(file, at, "expected a positive number, got " + v.dump());
      }
      thetas.emplace_back(at, v.get<double>());
    } else if (it.key() == "partial_rotary_factor" || it.key() == "factor") {
      if (!v.is_number() || v.get<double>() != 1.0) {
        refuse(file, at, v, "RoPE over the full head_dim with no scaling; expected 1.0");
      }
    } else {
      refuse(file, at, v,
             "plain RoPE only: rope_theta, rope_type \"default\" (no scaling parameters)");
    }
  }
}

// RoPE's theta, from the top-level rope_theta (transformers 4) and/or rope_parameters.rope_theta
// (transformers 5, which writes no top-level one); absent everywhere, Qwen3Config's default 10000.
// Two places that disagree are refused: bih cannot know which one the model was trained with.
double resolve_rope_theta(const Json& j, const std::string& file) {
  std::vector<std::pair<std::string, double>> thetas;
  if (auto top = positive_number_field(j, file, "rope_theta"))
    thetas.emplace_back("/rope_theta", *top);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_null())
      check_rope_object(*it, file, std::string("/") + key, thetas);
  }
  auto partial = j.find("partial_rotary_factor");
  if (partial != j.end() && !partial->is_null() &&
      (!partial->is_number() || partial->get<double>() != 1.0)) {
    refuse(file, "/partial_rotary_factor", *partial, "RoPE over the full head_dim; expected 1.0");
  }
  if (thetas.empty()) return 10000.0;
  for (size_t i = 1; i < thetas.size(); ++i) {
    if (thetas[i].second != thetas[0].second) {
      throw InputError(file, thetas[i].first,
                       "rope_theta " + Json(thetas[i].second).dump() + " disagrees with " +
                           thetas[0].first + " = " + Json(thetas[0].second).dump() +
                           "; give one theta (or the same value in both places)");
    }
  }
  return thetas[0].second;
}

// Every layer attends causally over the whole context. transformers decides per layer from
// layer_types when the config has it; otherwise (Qwen3Config) a layer slides when
// use_sliding_window is true, sliding_window is set and the layer index >= max_window_layers
// (default 28). Real Qwen3 configs carry sliding_window with use_sliding_window false: accepted.
void check_full_attention(const Json& j, const std::string& file, int num_layers) {
  auto types = j.find("layer_types");
  if (types != j.end() && !types->is_null()) {
    if (!types->is_array() || types->size() != static_cast<size_t>(num_layers)) {
      refuse(file, "/layer_types", *types,
             "a list of num_hidden_layers (" + std::to_string(num_layers) +
                 ") entries, all \"full_attention\"");
    }
    for (size_t i = 0; i < types->size(); ++i) {
      if ((*types)[i] != Json("full_attention")) {
        refuse(file, "/layer_types/" + std::to_string(i), (*types)[i],
               "only full causal attention (\"full_attention\")");
      }
    }
  }
  auto use = j.find("use_sliding_window");
  if (use == j.end() || use->is_null() || *use == Json(false)) return;
  if (!use->is_boolean())
    refuse(file, "/use_sliding_window", *use, "full attention; expected false");
  auto window = j.find("sliding_window");
  if (window == j.end() || window->is_null()) return;  // nothing to slide over: full attention
  const int max_window_layers = int_field(j, file, "max_window_layers", false).value_or(28);
  if (max_window_layers < num_layers) {
    refuse(file, "/use_sliding_window", *use,
           "full attention on every layer; with sliding_window " + window->dump() +
               " and max_window_layers " + std::to_string(max_window_layers) + " < " +
               std::to_string(num_layers) + " layers, layers from " +
               std::to_string(max_window_layers) + " on would slide; expected false");
  }
}

// Bias-free projections, SiLU-gated MLP, no quantization.
void check_mlp_and_projections(const Json& j, const std::string& file) {
  check_false(j, file, "attention_bias", "q/k/v/o projections without bias");
  check_false(j, file, "mlp_bias", "gate/up/down projections without bias");
  auto act = j.find("hidden_act");
  if (act != j.end() && !act->is_null() && *act != Json("silu")) {
    refuse(file, "/hidden_act", *act, "the SiLU-gated MLP (\"silu\")");
  }
  auto quant = j.find("quantization_config");
  if (quant != j.end() && !quant->is_null()) {
    refuse(file, "/quantization_config", *quant, "unquantized bf16/f16/f32 weights; expected none");
  }
}

// The checkpoint's declared dtype (torch_dtype, renamed dtype in transformers 5): the safetensors
// reader converts BF16, F16 and F32 tensors to bf16 (what bih computes with), nothing else.
void check_dtype(const Json& j, const std::string& file) {
  for (const char* key : {"dtype", "torch_dtype"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (*it != Json("bfloat16") && *it != Json("float16") && *it != Json("float32")) {
      refuse(file, std::string("/") + key, *it,
             "bf16 weights (read from \"bfloat16\", \"float16\" or \"float32\" tensors)");
    }
  }
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
  const Json j =
      parse_json_text<Json>(read_text_file(path, "the model config (config.json)"), path);
  if (!j.is_object()) throw InputError(path, "", "expected a JSON object");

  check_architecture(j, path);

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
  c.head_dim = head_dim.value_or(c.hidden_size / c.num_heads);  // as HF: hidden / heads
  if (c.num_heads % c.num_kv_heads != 0) {
    throw InputError(path, "/num_key_value_heads",
                     "must divide num_attention_heads (" + std::to_string(c.num_heads) + ")");
  }
  if (c.head_dim % 2 != 0) {
    throw InputError(path, "/head_dim", "must be even: RoPE rotates pairs of dimensions");
  }
  // Absent optional fields take Qwen3Config's defaults (transformers), as HF would load them.
  c.rope_theta = resolve_rope_theta(j, path);
  const double eps = positive_number_field(j, path, "rms_norm_eps").value_or(1e-6);
  c.rms_norm_eps = static_cast<float>(eps);
  // bih, HF's bf16 path and GGUF all hold the epsilon as float32: one that narrows to 0, a
  // subnormal or inf would silently run another model.
  if (!std::isnormal(c.rms_norm_eps)) {
    throw InputError(path, "/rms_norm_eps",
                     fmt::format("rms_norm_eps {} does not fit float32 (it would become {}); "
                                 "valid: a value in 1.1754944e-38..3.4028235e38",
                                 eps, c.rms_norm_eps));
  }
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
  check_full_attention(j, path, c.num_layers);
  check_mlp_and_projections(j, path);
  check_dtype(j, path);
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
