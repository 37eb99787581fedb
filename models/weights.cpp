// weights.cpp: synthetic weights, checkpoint load/save (safetensors) and the weights hash.
#include "models/weights.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"
#include "base/json_file.hpp"
#include "base/mix64.hpp"
#include "models/safetensors.hpp"

namespace bih {
namespace {

namespace fs = std::filesystem;
using Shape = std::vector<uint64_t>;

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;

// bih's synthetic vocabulary: 0 <unk>, 1 <s>, 2 </s>.
constexpr int kBosTokenId = 1;
constexpr int kEosTokenId = 2;
// The transformers release whose config.json format save_checkpoint writes.
constexpr const char* kTransformersVersion = "5.17.0";

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = kFnvOffset;
  for (unsigned char c : s) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

// The standard normal z of the formula in weights.hpp for counter i of a tensor's key.
double standard_normal_from_key(uint64_t key, uint64_t i) {
  const uint64_t r1 = mix64(key + (2 * i + 1) * kGolden);
  const uint64_t r2 = mix64(key + (2 * i + 2) * kGolden);
  const double u1 = static_cast<double>((r1 >> 11) + 1) * 0x1.0p-53;
  const double u2 = static_cast<double>(r2 >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// synthetic_normal with the key already derived (the per-element part of the formula).
float normal_from_key(uint64_t key, uint64_t i) {
  return static_cast<float>(0.02 * standard_normal_from_key(key, i));
}

// synthetic_norm with the key already derived.
float norm_from_key(uint64_t key, uint64_t i) {
  return static_cast<float>(1.0 + 0.1 * standard_normal_from_key(key, i));
}

// One tensor of a model: its HF name, shape and storage. The order of tensor_list is the
// canonical order (hash, file layout).
template <class Vec>
struct TensorRef {
  std::string name;
  Shape shape;
  Vec* data;
};

template <class Model, class Vec = std::conditional_t<std::is_const_v<Model>,
                                                      const std::vector<bf16>, std::vector<bf16>>>
std::vector<TensorRef<Vec>> tensor_list(Model& w) {
  const ModelConfig& c = w.config;
  const uint64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const uint64_t Q = c.q_size(), KV = c.kv_size(), D = c.head_dim;
  std::vector<TensorRef<Vec>> list;
  list.push_back({"model.embed_tokens.weight", {V, H}, &w.embed_tokens});
  for (size_t l = 0; l < w.layers.size(); ++l) {
    auto& L = w.layers[l];
    auto name = [l](const char* suffix) { return layer_tensor_name(static_cast<int>(l), suffix); };
    list.push_back({name("input_layernorm.weight"), {H}, &L.input_layernorm});
    list.push_back({name("self_attn.q_proj.weight"), {Q, H}, &L.q_proj});
    list.push_back({name("self_attn.k_proj.weight"), {KV, H}, &L.k_proj});
    list.push_back({name("self_attn.v_proj.weight"), {KV, H}, &L.v_proj});
    list.push_back({name("self_attn.o_proj.weight"), {H, Q}, &L.o_proj});
    list.push_back({name("self_attn.q_norm.weight"), {D}, &L.q_norm});
    list.push_back({name("self_attn.k_norm.weight"), {D}, &L.k_norm});
    list.push_back({name("post_attention_layernorm.weight"), {H}, &L.post_attention_layernorm});
    list.push_back({name("mlp.gate_proj.weight"), {I, H}, &L.gate_proj});
    list.push_back({name("mlp.up_proj.weight"), {I, H}, &L.up_proj});
    list.push_back({name("mlp.down_proj.weight"), {H, I}, &L.down_proj});
  }
  list.push_back({"model.norm.weight", {H}, &w.norm});
  if (!c.tie_word_embeddings) list.push_back({"lm_head.weight", {V, H}, &w.lm_head});
  return list;
}

uint64_t element_count(const Shape& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

bool is_norm_weight(const std::string& name) {
  const std::string suffix = "norm.weight";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The decimal a float was written from (1e-6f -> 1e-6 as a double), so config.json shows "1e-06"
// rather than the float's binary expansion.
double shortest_decimal(float f) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f);
  double d = 0.0;
  std::from_chars(buf, end, d);
  return d;
}

void validate_config(const ModelConfig& c) {
  if (c.hidden_size <= 0 || c.num_layers < 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.head_dim <= 0 || c.intermediate_size <= 0 || c.vocab_size <= 0 ||
      c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0) {
    throw std::invalid_argument("model config '" + c.name + "' has an invalid shape");
  }
}

}  // namespace

uint64_t TensorSpec::element_count() const { return bih::element_count(shape); }

std::vector<TensorSpec> tensor_specs(const ModelConfig& config) {
  validate_config(config);
  ModelWeights shapes_only;  // tensor_list reads the config and the layer count, not the data
  shapes_only.config = config;
  shapes_only.layers.resize(config.num_layers);
  std::vector<TensorSpec> specs;
  for (auto& t : tensor_list(shapes_only)) {
    specs.push_back({t.name, t.shape, is_norm_weight(t.name)});
  }
  return specs;
}

std::string layer_tensor_name(int layer, const std::string& suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::map<std::string, const std::vector<bf16>*> tensors_by_name(const ModelWeights& weights) {
  std::map<std::string, const std::vector<bf16>*> by_name;
  for (const auto& t : tensor_list(weights)) {
    if (t.data->size() != element_count(t.shape)) {
      throw std::invalid_argument("tensor '" + t.name + "' holds " +
                                  std::to_string(t.data->size()) + " values; its shape needs " +
                                  std::to_string(element_count(t.shape)));
    }
    by_name.emplace(t.name, t.data);
  }
  return by_name;
}

uint64_t synthetic_key(uint64_t seed, const std::string& tensor_name) {
  return mix64(seed ^ mix64(fnv1a64(tensor_name)));
}

float synthetic_normal(uint64_t seed, const std::string& tensor_name, uint64_t i) {
  return normal_from_key(synthetic_key(seed, tensor_name), i);
}

float synthetic_norm(uint64_t seed, const std::string& tensor_name, uint64_t i) {
  return norm_from_key(synthetic_key(seed, tensor_name), i);
}

std::optional<NormInit> norm_init_from_name(const std::string& name) {
  if (name == "ones") return NormInit::ones;
  if (name == "perturbed") return NormInit::perturbed;
  return std::nullopt;
}

const char* norm_init_name(NormInit init) {
  return init == NormInit::perturbed ? "perturbed" : "ones";
}

ModelWeights synthetic_weights(const ModelConfig& config, uint64_t seed, NormInit norms) {
  validate_config(config);
  ModelWeights w;
  w.config = config;
  w.layers.resize(config.num_layers);
  auto tensors = tensor_list(w);

  // Work items of at most kChunk elements, spread over the cores: a 1.7B model is ~2e9 values.
  struct Item {
    std::vector<bf16>* data;
    uint64_t key, begin, end;
    bool norm;  // norm_from_key rather than normal_from_key
  };
  constexpr uint64_t kChunk = 1 << 18;
  std::vector<Item> items;
  for (auto& t : tensors) {
    const uint64_t n = element_count(t.shape);
    const bool norm = is_norm_weight(t.name);
    if (norm && norms == NormInit::ones) {
      t.data->assign(n, to_bf16(1.0f));
      continue;
    }
    t.data->resize(n);
    const uint64_t key = synthetic_key(seed, t.name);
    for (uint64_t b = 0; b < n; b += kChunk)
      items.push_back({t.data, key, b, std::min(n, b + kChunk), norm});
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k = next++; k < items.size(); k = next++) {
      const Item& it = items[k];
      bf16* out = it.data->data();
      for (uint64_t i = it.begin; i < it.end; ++i) {
        out[i] = to_bf16(it.norm ? norm_from_key(it.key, i) : normal_from_key(it.key, i));
      }
    }
  };
  const size_t threads =
      std::min<size_t>({std::max(1u, std::thread::hardware_concurrency()), 16, items.size()});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return w;
}

namespace {

// The decoder layer of an HF tensor name ("model.layers.3.mlp.up_proj.weight" -> 3).
std::optional<long> layer_index(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  size_t i = prefix.size();
  long layer = 0;
  const size_t first = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i - first < 9) {
    layer = layer * 10 + (name[i++] - '0');
  }
  if (i == first || i >= name.size() || name[i] != '.') return std::nullopt;
  return layer;
}

// num_hidden_layers against the layers the weights hold, both ways: fewer layers in the config
// would run (and export) a truncated model without a word; more would be found missing tensor by
// tensor, or blamed on the KV cache's size before the weights are even looked at.
void check_layer_count(const std::vector<std::string>& names, int num_layers,
                       const std::string& config_file) {
  long held = 0;  // 1 + the highest layer index present
  std::vector<std::string> extra;
  for (const std::string& name : names) {
    const auto layer = layer_index(name);
    if (!layer) continue;
    held = std::max(held, *layer + 1);
    if (*layer >= num_layers) extra.push_back(name);
  }
  if (!extra.empty()) {
    std::string list;
    for (size_t i = 0; i < extra.size() && i < 3; ++i) list += (i ? ", " : "") + extra[i];
    if (extra.size() > 3) list += fmt::format(" and {} more", extra.size() - 3);
    throw InputError(config_file, "/num_hidden_layers",
                     fmt::format("num_hidden_layers is {}, but the weights hold {} layers: {} "
                                 "extra tensor(s) would be ignored ({}); valid: num_hidden_layers "
                                 "{}, or weights without the extra layers",
                                 num_layers, held, extra.size(), list, held));
  }
  if (held < num_layers) {
    throw InputError(config_file, "/num_hidden_layers",
                     fmt::format("num_hidden_layers is {}, but the weights hold only {} layers "
                                 "(no model.layers.{}.* tensor); valid: num_hidden_layers {}",
                                 num_layers, held, held, held));
  }
}

// Opens the checkpoint's config and safetensors headers and checks every tensor the config
// needs; reads the tensors' bytes only when `read` is set. One walk for loading and validating,
// so that a checkpoint validate_checkpoint passes is one load_checkpoint reads.
ModelWeights open_checkpoint(const std::string& folder, bool read) {
  const fs::path dir(folder);
  ModelWeights w;
  w.config = load_config_json((dir / "config.json").string());
  w.config.name = folder;
  w.layers.resize(w.config.num_layers);

  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single_path = dir / "model.safetensors";
  std::map<std::string, std::string> file_of;  // tensor name -> file path (sharded only)
  const bool sharded = fs::exists(index_path);
  if (sharded) {
    const nlohmann::json index = read_json_file(index_path.string());
    auto map = index.is_object() ? index.find("weight_map") : index.end();
    if (map == index.end() || !map->is_object()) {
      throw InputError(index_path.string(), "/weight_map",
                       "missing; expected an object mapping tensor names to shard files");
    }
    for (auto it = map->begin(); it != map->end(); ++it) {
      if (!it.value().is_string()) {
        throw InputError(index_path.string(), "/weight_map/" + it.key(),
                         "expected a shard file name (string)");
      }
      file_of[it.key()] = (dir / it.value().get<std::string>()).string();
    }
  } else if (!fs::exists(single_path)) {
    throw InputError(folder, "",
                     "no model.safetensors or model.safetensors.index.json in the checkpoint");
  }

  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_files;
  auto file_for = [&](const std::string& path) -> const SafetensorsFile& {
    auto& f = open_files[path];
    if (!f) f = std::make_unique<SafetensorsFile>(path);
    return *f;
  };
  std::vector<std::string> names;
  if (sharded) {
    for (const auto& [name, file] : file_of) names.push_back(name);
  } else {
    for (const auto& [name, entry] : file_for(single_path.string()).entries())
      names.push_back(name);
  }
  check_layer_count(names, w.config.num_layers, (dir / "config.json").string());
  for (auto& t : tensor_list(w)) {
    std::string path = single_path.string();
    if (sharded) {
      auto it = file_of.find(t.name);
      if (it == file_of.end()) {
        throw InputError(index_path.string(), "/weight_map/" + t.name,
                         "tensor '" + t.name + "' is missing from the weight map");
      }
      path = it->second;
    }
    if (read) {
      file_for(path).read_bf16(t.name, t.shape, *t.data);
    } else {
      file_for(path).check_tensor(t.name, t.shape);
    }
  }
  return w;
}

}  // namespace

ModelWeights load_checkpoint(const std::string& folder) { return open_checkpoint(folder, true); }

void validate_checkpoint(const std::string& folder) { open_checkpoint(folder, false); }

void save_checkpoint(const ModelWeights& weights, const std::string& folder,
                     uint64_t max_shard_bytes) {
  const ModelConfig& c = weights.config;
  const fs::path dir(folder);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InfraError("cannot create " + folder + ": " + ec.message());

  // config.json as transformers 5.x writes a Qwen3 model (Qwen3Config.save_pretrained: keys
  // sorted, as its json.dumps(sort_keys=True); RoPE in rope_parameters with no top-level
  // rope_theta; torch_dtype renamed dtype), so that every engine reads the same model from it.
  // nlohmann::json's objects are std::maps: dump() writes the keys sorted too.
  const nlohmann::json config = {
      {"architectures", {"Qwen3ForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"bos_token_id", kBosTokenId},
      {"dtype", "bfloat16"},
      {"eos_token_id", kEosTokenId},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", c.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", c.intermediate_size},
      {"layer_types", std::vector<std::string>(c.num_layers, "full_attention")},
      {"max_position_embeddings", c.max_position_embeddings},
      {"max_window_layers", c.num_layers},
      {"model_type", "qwen3"},
      {"num_attention_heads", c.num_heads},
      {"num_hidden_layers", c.num_layers},
      {"num_key_value_heads", c.num_kv_heads},
      {"rms_norm_eps", shortest_decimal(c.rms_norm_eps)},
      {"rope_parameters", {{"rope_theta", c.rope_theta}, {"rope_type", "default"}}},
      {"sliding_window", nullptr},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"transformers_version", kTransformersVersion},
      {"use_cache", true},
      {"use_sliding_window", false},
      {"vocab_size", c.vocab_size}};
  // Greedy decoding with bih's synthetic special tokens, as HF's GenerationConfig would be saved.
  const nlohmann::json generation = {{"bos_token_id", kBosTokenId},
                                     {"do_sample", false},
                                     {"eos_token_id", kEosTokenId},
                                     {"transformers_version", kTransformersVersion}};
  for (const auto& [name, json] :
       {std::pair{"config.json", &config}, std::pair{"generation_config.json", &generation}}) {
    write_file_atomically((dir / name).string(), json->dump(2) + "\n");
  }

  std::vector<TensorToWrite> all;
  for (const auto& t : tensor_list(weights)) all.push_back({t.name, t.shape, t.data});

  if (max_shard_bytes == 0) {
    write_safetensors_bf16((dir / "model.safetensors").string(), all);
    fs::remove(dir / "model.safetensors.index.json", ec);  // a stale index would take precedence
    return;
  }
  // Greedy packing in canonical order; a tensor larger than the limit gets a shard of its own.
  std::vector<std::vector<TensorToWrite>> shards;
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& t : all) {
    const uint64_t bytes = 2 * t.data->size();
    if (shards.empty() || (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(t);
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name =
        fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    write_safetensors_bf16((dir / name).string(), shards[s]);
    for (const auto& t : shards[s]) weight_map[t.name] = name;
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}},
                                  {"weight_map", weight_map}};
  write_file_atomically((dir / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  fs::remove(dir / "model.safetensors", ec);  // the index names the files; drop a stale single
}

// Digest: h = 0xcbf29ce484222325; absorb(w) is h ^= w; h *= 0x100000001b3; h ^= h >> 32 (FNV-1a
// over 64-bit words; the fold lets high bits reach low ones, and every step is a bijection, so
// any single changed word changes the digest). Per tensor in canonical order: absorb(name length),
// each name byte, absorb(rank), each dim, then the bf16 bits four at a time, little-endian, the
// last word zero-padded. Output: mix64(h) as 16 lower-case hex digits.
void WeightsHasher::absorb(uint64_t word) {
  state_ ^= word;
  state_ *= kFnvPrime;
  state_ ^= state_ >> 32;
}

void WeightsHasher::flush_partial_word() {
  if (partial_count_ > 0) absorb(partial_word_);
  partial_word_ = 0;
  partial_count_ = 0;
}

void WeightsHasher::begin_tensor(const std::string& name, const std::vector<uint64_t>& shape) {
  flush_partial_word();  // the previous tensor's last word, zero-padded
  absorb(name.size());
  for (unsigned char ch : name) absorb(ch);
  absorb(shape.size());
  for (uint64_t d : shape) absorb(d);
}

void WeightsHasher::absorb_values(const bf16* values, size_t count) {
  size_t i = 0;
  for (; i < count && partial_count_ > 0; ++i) {  // complete a word left open by the last chunk
    partial_word_ |= uint64_t{values[i].bits} << (16 * partial_count_);
    if (++partial_count_ == 4) flush_partial_word();
  }
  for (; i + 4 <= count; i += 4) {
    absorb(uint64_t{values[i].bits} | uint64_t{values[i + 1].bits} << 16 |
           uint64_t{values[i + 2].bits} << 32 | uint64_t{values[i + 3].bits} << 48);
  }
  for (; i < count; ++i) partial_word_ |= uint64_t{values[i].bits} << (16 * partial_count_++);
}

std::string WeightsHasher::digest() {
  flush_partial_word();
  return fmt::format("{:016x}", mix64(state_));
}

std::string weights_hash(const ModelWeights& weights) {
  WeightsHasher hasher;
  for (const auto& t : tensor_list(weights)) {
    hasher.begin_tensor(t.name, t.shape);
    hasher.absorb_values(t.data->data(), t.data->size());
  }
  return hasher.digest();
}

}  // namespace bih
