// gguf.cpp: the GGUF v3 writer (streamed to a temp file, renamed into place) and a defensive
// reader.
#include "models/gguf.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"
#include "models/safetensors.hpp"

namespace bih {
namespace {

namespace fs = std::filesystem;

// Values are copied with memcpy in host order; GGUF (v3 without the big-endian variant) is LE.
static_assert(std::endian::native == std::endian::little, "the GGUF code assumes a LE host");
static_assert(sizeof(bf16) == 2, "bf16 is stored as its 16 bits");

constexpr uint32_t kVersion = 3;
constexpr uint64_t kAlignment = 32;
constexpr int kMaxDims = 4;  // GGML_MAX_DIMS: llama.cpp rejects more

uint64_t align_up(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// ---- writing ----------------------------------------------------------------------------------

// The metadata and tensor infos, assembled in memory (a few MB for a 152k vocabulary).
class HeaderBuilder {
 public:
  std::string bytes;
  uint64_t kv_count = 0;

  template <class T>
  void raw(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    raw<uint64_t>(s.size());
    bytes += s;
  }
  void key(const std::string& k, GgufValueType type) {
    ++kv_count;
    str(k);
    raw<uint32_t>(static_cast<uint32_t>(type));
  }
  void kv_u32(const std::string& k, uint32_t v) {
    key(k, GgufValueType::uint32);
    raw(v);
  }
  void kv_f32(const std::string& k, float v) {
    key(k, GgufValueType::float32);
    raw(v);
  }
  void kv_bool(const std::string& k, bool v) {
    key(k, GgufValueType::boolean);
    raw<uint8_t>(v ? 1 : 0);
  }
  void kv_str(const std::string& k, const std::string& v) {
    key(k, GgufValueType::string);
    str(v);
  }
  void array_header(const std::string& k, GgufValueType element, uint64_t count) {
    key(k, GgufValueType::array);
    raw<uint32_t>(static_cast<uint32_t>(element));
    raw<uint64_t>(count);
  }
};

// Zero bytes up to the next multiple of `alignment`.
void pad_to(AtomicFileWriter& out, uint64_t offset_now, uint64_t alignment) {
  static const char zeros[64] = {};
  out.write(zeros, align_up(offset_now, alignment) - offset_now);
}

// A config value as the float32 GGUF stores: refused (InputError naming the field) when it does
// not fit, or when narrowing would lose what makes it nonzero, since llama.cpp would then run
// another model (freq_base inf, epsilon 0) without a word.
float checked_float32(const ModelConfig& c, const std::string& field, double value) {
  const float narrowed = static_cast<float>(value);
  std::string why;
  if (!std::isfinite(value)) {
    why = "is not finite";
  } else if (!std::isfinite(narrowed)) {
    why = "overflows float32 (largest finite 3.4028235e38)";
  } else if (value != 0 && (narrowed == 0 || !std::isnormal(narrowed))) {
    why = "underflows float32 (smallest normal 1.1754944e-38)";
  }
  if (why.empty()) return narrowed;
  // A checkpoint's config is named by its folder; the field is in its config.json.
  std::error_code ec;
  const std::string file = c.name.empty() ? std::string("the model config")
                           : fs::is_directory(c.name, ec)
                               ? (fs::path(c.name) / "config.json").string()
                               : c.name;
  throw InputError(file, "/" + field,
                   fmt::format("{} {} {}: GGUF stores it as float32; valid: a finite value "
                               "whose magnitude is in 1.1754944e-38..3.4028235e38",
                               field, value, why));
}

struct PlannedTensor {
  std::string name;            // llama.cpp's
  std::vector<uint64_t> dims;  // innermost first
  GgmlType type;
  const std::vector<bf16>* data;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

void add_model_metadata(HeaderBuilder& h, const ModelConfig& c) {
  h.kv_str("general.architecture", "qwen3");
  h.kv_str("general.name", c.name.empty() ? std::string("bih") : c.name);
  h.kv_u32("general.alignment", static_cast<uint32_t>(kAlignment));
  h.kv_u32("general.file_type", 32);  // LLAMA_FTYPE_MOSTLY_BF16: informational only
  h.kv_u32("qwen3.context_length", static_cast<uint32_t>(c.max_position_embeddings));
  h.kv_u32("qwen3.embedding_length", static_cast<uint32_t>(c.hidden_size));
  h.kv_u32("qwen3.block_count", static_cast<uint32_t>(c.num_layers));
  h.kv_u32("qwen3.feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  h.kv_u32("qwen3.attention.head_count", static_cast<uint32_t>(c.num_heads));
  h.kv_u32("qwen3.attention.head_count_kv", static_cast<uint32_t>(c.num_kv_heads));
  h.kv_u32("qwen3.attention.key_length", static_cast<uint32_t>(c.head_dim));
  h.kv_u32("qwen3.attention.value_length", static_cast<uint32_t>(c.head_dim));
  // llama.cpp defaults the rope width to hidden / heads, which is not head_dim for every Qwen3
  // (0.6B: 1024 / 16 = 64, head_dim 128); Qwen3 rotates the whole head.
  h.kv_u32("qwen3.rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  h.kv_f32("qwen3.rope.freq_base", checked_float32(c, "rope_theta", c.rope_theta));
  h.kv_f32("qwen3.attention.layer_norm_rms_epsilon",
           checked_float32(c, "rms_norm_eps", c.rms_norm_eps));
}

void add_tokenizer_metadata(HeaderBuilder& h, int vocab_size) {
  const uint64_t v = static_cast<uint64_t>(vocab_size);
  h.kv_str("tokenizer.ggml.model", "llama");
  h.array_header("tokenizer.ggml.tokens", GgufValueType::string, v);
  for (int id = 0; id < vocab_size; ++id) h.str(synthetic_vocab_token(id).text);
  h.array_header("tokenizer.ggml.scores", GgufValueType::float32, v);
  for (int id = 0; id < vocab_size; ++id) h.raw<float>(0.0f);
  h.array_header("tokenizer.ggml.token_type", GgufValueType::int32, v);
  for (int id = 0; id < vocab_size; ++id) h.raw<int32_t>(synthetic_vocab_token(id).type);
  h.kv_u32("tokenizer.ggml.bos_token_id", kSyntheticBosId);
  h.kv_u32("tokenizer.ggml.eos_token_id", kSyntheticEosId);
  h.kv_u32("tokenizer.ggml.unknown_token_id", kSyntheticUnkId);
  // Prompts are token ids: nothing may be prepended or appended behind bih's back.
  h.kv_bool("tokenizer.ggml.add_bos_token", false);
  h.kv_bool("tokenizer.ggml.add_eos_token", false);
}

// ---- reading ----------------------------------------------------------------------------------

// Sequential reads that never go past the file's end and name what they were reading.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw InputError(path, "", "cannot open the file");
    std::error_code ec;
    size_ = fs::file_size(path, ec);
    if (ec) throw InputError(path, "", "cannot read its size: " + ec.message());
  }

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t left() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const { throw InputError(path_, "", what); }

  void need(uint64_t n, const std::string& what) const {
    if (n > left()) {
      fail("truncated: " + what + " needs " + std::to_string(n) + " bytes at offset " +
           std::to_string(pos_) + ", the file has " + std::to_string(left()) + " left");
    }
  }
  void bytes(void* out, uint64_t n, const std::string& what) {
    need(n, what);
    in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
    if (!in_) fail("read failed at offset " + std::to_string(pos_) + " (" + what + ")");
    pos_ += n;
  }
  template <class T>
  T get(const std::string& what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  std::string str(const std::string& what) {
    const uint64_t n = get<uint64_t>(what + " length");
    need(n, what + " of " + std::to_string(n) + " bytes");
    std::string s(n, '\0');
    bytes(s.data(), n, what);
    return s;
  }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
  uint64_t pos_ = 0;
};

// Bytes one element of `type` takes at least in the file (0: not a known scalar type).
uint64_t min_element_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::uint8:
    case GgufValueType::int8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::uint16:
    case GgufValueType::int16:
      return 2;
    case GgufValueType::uint32:
    case GgufValueType::int32:
    case GgufValueType::float32:
      return 4;
    case GgufValueType::uint64:
    case GgufValueType::int64:
    case GgufValueType::float64:
    case GgufValueType::string:  // the u64 length
      return 8;
    case GgufValueType::array:
      return 0;
  }
  return 0;
}

const char* kValueTypes =
    "valid value types: 0..12 (uint8, int8, uint16, int16, uint32, int32, "
    "float32, bool, string, array, uint64, int64, float64)";

// One scalar of `type` into v.integer / v.real / v.text.
void read_scalar(Reader& r, GgufValueType type, const std::string& what, GgufValue& v) {
  switch (type) {
    case GgufValueType::uint8:
      v.integer = r.get<uint8_t>(what);
      return;
    case GgufValueType::int8:
      v.integer = r.get<int8_t>(what);
      return;
    case GgufValueType::uint16:
      v.integer = r.get<uint16_t>(what);
      return;
    case GgufValueType::int16:
      v.integer = r.get<int16_t>(what);
      return;
    case GgufValueType::uint32:
      v.integer = r.get<uint32_t>(what);
      return;
    case GgufValueType::int32:
      v.integer = r.get<int32_t>(what);
      return;
    case GgufValueType::uint64:
      v.integer = static_cast<int64_t>(r.get<uint64_t>(what));
      return;
    case GgufValueType::int64:
      v.integer = r.get<int64_t>(what);
      return;
    case GgufValueType::boolean: {
      const uint8_t b = r.get<uint8_t>(what);
      if (b > 1) r.fail(what + ": bool value " + std::to_string(b) + "; valid: 0, 1");
      v.integer = b;
      return;
    }
    case GgufValueType::float32:
      v.real = r.get<float>(what);
      return;
    case GgufValueType::float64:
      v.real = r.get<double>(what);
      return;
    case GgufValueType::string:
      v.text = r.str(what);
      return;
    case GgufValueType::array:
      break;
  }
  r.fail(what + ": unexpected value type");
}

GgufValueType value_type(Reader& r, const std::string& what) {
  const uint32_t t = r.get<uint32_t>(what);
  if (t > static_cast<uint32_t>(GgufValueType::float64)) {
    r.fail(what + ": unknown value type " + std::to_string(t) + "; " + kValueTypes);
  }
  return static_cast<GgufValueType>(t);
}

GgufValue read_value(Reader& r, const std::string& key) {
  GgufValue v;
  const std::string what = "metadata '" + key + "'";
  v.type = value_type(r, what + " type");
  if (v.type != GgufValueType::array) {
    read_scalar(r, v.type, what, v);
    return v;
  }
  v.element_type = value_type(r, what + " element type");
  if (v.element_type == GgufValueType::array) r.fail(what + ": arrays of arrays are not supported");
  const uint64_t count = r.get<uint64_t>(what + " element count");
  const uint64_t min_size = min_element_size(v.element_type);
  if (count > r.left() / min_size) {
    r.fail("truncated or corrupt: " + what + ": " + std::to_string(count) +
           " elements cannot fit in the " + std::to_string(r.left()) + " bytes left in the file");
  }
  GgufValue element;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string item = what + "[" + std::to_string(i) + "]";
    read_scalar(r, v.element_type, item, element);
    if (v.element_type == GgufValueType::string) {
      v.texts.push_back(std::move(element.text));
    } else if (v.element_type == GgufValueType::float32 ||
               v.element_type == GgufValueType::float64) {
      v.reals.push_back(element.real);
    } else {
      v.integers.push_back(element.integer);
    }
  }
  return v;
}

uint64_t element_bytes(GgmlType type) { return type == GgmlType::f32 ? 4 : 2; }

}  // namespace

// ---- public -----------------------------------------------------------------------------------

VocabToken synthetic_vocab_token(int id) {
  if (id == kSyntheticUnkId) return {"<unk>", 2};
  if (id == kSyntheticBosId) return {"<s>", 3};
  if (id == kSyntheticEosId) return {"</s>", 3};
  if (id >= 3 && id < 3 + 256) {
    static const char* hex = "0123456789ABCDEF";
    const int b = id - 3;
    // Typed NORMAL (1), not BYTE (6): a byte token detokenizes to its raw byte, and llama-server
    // answers HTTP 500 for a completion whose text is not UTF-8 (docs/llama-server-notes.md).
    // Prompts and results are token ids, so nothing reads these pieces as text.
    return {std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 1};
  }
  return {"\xE2\x96\x81t" + std::to_string(id), 1};  // U+2581, SentencePiece's word marker
}

std::string gguf_tensor_name(const std::string& hf_name) {
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  static const std::map<std::string, std::string> per_layer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  const std::string prefix = "model.layers.";
  if (hf_name.rfind(prefix, 0) == 0) {
    const size_t dot = hf_name.find('.', prefix.size());
    const std::string layer = hf_name.substr(prefix.size(), dot - prefix.size());
    if (dot != std::string::npos && !layer.empty() &&
        layer.find_first_not_of("0123456789") == std::string::npos) {
      auto it = per_layer.find(hf_name.substr(dot + 1));
      if (it != per_layer.end()) return "blk." + layer + "." + it->second;
    }
  }
  throw std::invalid_argument("gguf_tensor_name: no llama.cpp name for '" + hf_name + "'");
}

void write_gguf(const ModelWeights& weights, const std::string& path) {
  const ModelConfig& c = weights.config;
  if (c.vocab_size < kSyntheticVocabMinSize) {
    throw InputError(path, "",
                     "vocab_size " + std::to_string(c.vocab_size) +
                         " is too small for the GGUF's SPM vocabulary; valid: >= " +
                         std::to_string(kSyntheticVocabMinSize) +
                         " (3 special tokens and 256 byte tokens)");
  }
  const auto data_of = tensors_by_name(weights);  // checks every tensor's size
  std::vector<PlannedTensor> planned;
  uint64_t offset = 0;
  for (const TensorSpec& spec : tensor_specs(c)) {
    PlannedTensor t;
    t.name = gguf_tensor_name(spec.name);
    t.dims.assign(spec.shape.rbegin(), spec.shape.rend());
    t.type = spec.shape.size() == 1 ? GgmlType::f32 : GgmlType::bf16;
    t.data = data_of.at(spec.name);
    t.byte_size = t.data->size() * element_bytes(t.type);
    t.offset = offset;
    offset = align_up(offset + t.byte_size, kAlignment);
    planned.push_back(std::move(t));
  }

  HeaderBuilder kv;
  add_model_metadata(kv, c);
  add_tokenizer_metadata(kv, c.vocab_size);
  HeaderBuilder infos;
  for (const PlannedTensor& t : planned) {
    infos.str(t.name);
    infos.raw<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) infos.raw<uint64_t>(d);
    infos.raw<uint32_t>(static_cast<uint32_t>(t.type));
    infos.raw<uint64_t>(t.offset);
  }
  HeaderBuilder head;
  head.bytes = "GGUF";
  head.raw<uint32_t>(kVersion);
  head.raw<uint64_t>(planned.size());
  head.raw<uint64_t>(kv.kv_count);

  AtomicFileWriter out(path);
  out.write(head.bytes.data(), head.bytes.size());
  out.write(kv.bytes.data(), kv.bytes.size());
  out.write(infos.bytes.data(), infos.bytes.size());
  pad_to(out, head.bytes.size() + kv.bytes.size() + infos.bytes.size(), kAlignment);
  std::vector<float> widened;
  for (const PlannedTensor& t : planned) {
    if (t.type == GgmlType::f32) {
      widened.resize(t.data->size());
      for (size_t i = 0; i < widened.size(); ++i) widened[i] = to_float((*t.data)[i]);  // exact
      out.write(widened.data(), t.byte_size);
    } else {
      out.write(t.data->data(), t.byte_size);
    }
    pad_to(out, t.offset + t.byte_size, kAlignment);
  }
  out.commit();
}

std::string gguf_weights_hash(const GgufFile& file, const ModelConfig& config) {
  WeightsHasher hasher;
  std::vector<bf16> values;
  for (const TensorSpec& spec : tensor_specs(config)) {
    const std::string name = gguf_tensor_name(spec.name);
    const GgufTensorInfo* info = file.find_tensor(name);
    if (info == nullptr) throw InputError(file.path, "", "no tensor named '" + name + "'");
    const std::vector<uint64_t> dims(spec.shape.rbegin(), spec.shape.rend());
    if (info->dims != dims) {
      throw InputError(file.path, "", "tensor '" + name + "' does not have the config's shape");
    }
    const std::string bytes = file.tensor_bytes(name);
    const uint64_t count = spec.element_count();
    values.resize(count);
    if (info->type == GgmlType::bf16 && bytes.size() == 2 * count) {
      std::memcpy(values.data(), bytes.data(), bytes.size());
    } else if (info->type == GgmlType::f32 && bytes.size() == 4 * count) {
      for (uint64_t i = 0; i < count; ++i) {
        float f;
        std::memcpy(&f, bytes.data() + 4 * i, 4);
        values[i] = to_bf16(f);
      }
    } else if (info->type == GgmlType::f16 && bytes.size() == 2 * count) {
      for (uint64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        values[i] = to_bf16(half_bits_to_float(h));
      }
    } else {
      throw InputError(file.path, "", "tensor '" + name + "' has an unexpected type or size");
    }
    hasher.begin_tensor(spec.name, spec.shape);
    hasher.absorb_values(values.data(), values.size());
  }
  return hasher.digest();
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  for (const GgufTensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string GgufFile::tensor_bytes(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (t == nullptr) throw InputError(path, "", "no tensor named '" + name + "'");
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start + t->offset));
  std::string bytes(t->byte_size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw InputError(path, "", "cannot read tensor '" + name + "': the file changed");
  return bytes;
}

GgufFile read_gguf(const std::string& path) {
  Reader r(path);
  GgufFile f;
  f.path = path;
  char magic[4];
  r.bytes(magic, 4, "the magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) r.fail("not a GGUF file: the magic is not \"GGUF\"");
  f.version = r.get<uint32_t>("the version");
  if (f.version != 2 && f.version != 3) {
    r.fail("unsupported GGUF version " + std::to_string(f.version) +
           "; valid: 2, 3 (little-endian)");
  }
  const uint64_t tensor_count = r.get<uint64_t>("the tensor count");
  const uint64_t kv_count = r.get<uint64_t>("the metadata count");
  // Every pair takes >= 13 bytes (key length, type, 1-byte value); every tensor info >= 32.
  if (kv_count > r.left() / 13) {
    r.fail("truncated or corrupt: metadata count " + std::to_string(kv_count) +
           " cannot fit in the file");
  }
  if (tensor_count > r.left() / 32) {
    r.fail("truncated or corrupt: tensor count " + std::to_string(tensor_count) +
           " cannot fit in the file");
  }
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = r.str("metadata key #" + std::to_string(i));
    if (f.metadata.count(key) != 0) r.fail("duplicate metadata key '" + key + "'");
    GgufValue value = read_value(r, key);
    f.keys.push_back(key);
    f.metadata.emplace(std::move(key), std::move(value));
  }
  if (const GgufValue* a = f.find("general.alignment")) {
    if (a->type != GgufValueType::uint32 || a->integer == 0 || (a->integer & (a->integer - 1))) {
      r.fail("general.alignment must be a uint32 power of two");
    }
    f.alignment = static_cast<uint64_t>(a->integer);
  }
  std::set<std::string> names;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    t.name = r.str("tensor info #" + std::to_string(i) + " name");
    if (!names.insert(t.name).second) r.fail("duplicate tensor '" + t.name + "'");
    const std::string what = "tensor '" + t.name + "'";
    const uint32_t n_dims = r.get<uint32_t>(what + " dimension count");
    if (n_dims < 1 || n_dims > kMaxDims) {
      r.fail(what + ": " + std::to_string(n_dims) + " dimensions; valid: 1.." +
             std::to_string(kMaxDims));
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = r.get<uint64_t>(what + " dimension");
      if (n == 0 || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / elements) {
        r.fail(what + ": dimension " + std::to_string(n) + " is zero or overflows the size");
      }
      elements *= n;
      t.dims.push_back(n);
    }
    const uint32_t type = r.get<uint32_t>(what + " type");
    if (type != 0 && type != 1 && type != 30) {
      r.fail(what + ": ggml type " + std::to_string(type) +
             " is not read here; valid: 0 (F32), "
             "1 (F16), 30 (BF16)");
    }
    t.type = static_cast<GgmlType>(type);
    if (elements > std::numeric_limits<uint64_t>::max() / 4) r.fail(what + ": size overflows");
    t.byte_size = elements * element_bytes(t.type);
    t.offset = r.get<uint64_t>(what + " offset");
    f.tensors.push_back(std::move(t));
  }
  f.data_start = align_up(r.pos(), f.alignment);
  if (f.data_start > r.size()) r.fail("truncated: the data section starts past the end");
  const uint64_t data_size = r.size() - f.data_start;
  uint64_t previous_end = 0;
  for (const GgufTensorInfo& t : f.tensors) {
    const std::string what = "tensor '" + t.name + "'";
    if (t.offset % f.alignment != 0) {
      r.fail(what + ": offset " + std::to_string(t.offset) +
             " is not a multiple of the alignment " + std::to_string(f.alignment));
    }
    if (t.offset > data_size || t.byte_size > data_size - t.offset) {
      r.fail("truncated: " + what + " (" + std::to_string(t.byte_size) + " bytes at offset " +
             std::to_string(t.offset) + ") ends past the data section's " +
             std::to_string(data_size) + " bytes");
    }
    if (t.offset < previous_end) r.fail(what + " overlaps the tensor before it");
    previous_end = t.offset + t.byte_size;
  }
  return f;
}

}  // namespace bih
