// gguf.hpp: write our Qwen3 weights as a GGUF v3 file that llama.cpp loads as `qwen3`, and read
// GGUF files back (tests, fuzzing).
//
// GGUF v3 layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; the
// metadata key/value pairs (key: u64 length + bytes; u32 value type; value); the tensor infos
// (name, u32 n_dims, u64 dims innermost first, u32 ggml type, u64 offset into the data section);
// padding to general.alignment; the data section, each tensor starting at an aligned offset.
//
// The writer maps HF names to llama.cpp's (model.layers.3.mlp.up_proj.weight ->
// blk.3.ffn_up.weight) and reverses dims (an HF [out, in] matrix is ne = [in, out]). Q and K are
// not permuted: llama.cpp runs qwen3 with NEOX (half-split) rope, the same rotation as HF. Matrices
// stay BF16; 1-D norm weights are written as F32, widened exactly from bf16 (what llama.cpp's own
// converter does). The tokenizer is the synthetic SPM vocabulary of synthetic_vocab_token: enough
// for token-id use.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/weights.hpp"

namespace bih {

// GGUF metadata value types (the numbers are the file format's).
enum class GgufValueType : uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};

// The ggml tensor types this code writes or reads (numbers as in ggml.h).
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, bf16 = 30 };

// One metadata value. Which fields hold it depends on `type` (and `element_type` for arrays):
// integers and bool in `integer` (unsigned ones widened), floats in `real`, a string in `text`;
// arrays in `integers`, `reals` or `texts`. Arrays of arrays are rejected by the reader.
struct GgufValue {
  GgufValueType type = GgufValueType::uint32;
  GgufValueType element_type = GgufValueType::uint32;  // arrays only
  int64_t integer = 0;  // a uint64 above INT64_MAX is stored as its bit pattern
  double real = 0;
  std::string text;
  std::vector<int64_t> integers;
  std::vector<double> reals;
  std::vector<std::string> texts;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // innermost first (ggml's ne)
  GgmlType type = GgmlType::f32;
  uint64_t offset = 0;  // into the data section
  uint64_t byte_size = 0;
};

// A parsed GGUF file: header, metadata and tensor infos in memory, tensor data on disk.
class GgufFile {
 public:
  std::string path;
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;        // file offset of the data section
  std::vector<std::string> keys;  // metadata keys in file order
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order

  // nullptr when absent.
  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // The tensor's bytes as stored. Throws InputError when absent or the file has changed size.
  std::string tensor_bytes(const std::string& name) const;
};

// Parses `path`. Every defect (bad magic or version, truncation, a count or length larger than the
// file could hold, an unknown value or tensor type, a misaligned or out-of-range tensor, duplicate
// names) throws InputError(path, "", ...) naming it; no allocation exceeds the file's size.
GgufFile read_gguf(const std::string& path);

// The llama.cpp name of an HF tensor name ("model.norm.weight" -> "output_norm.weight").
// Throws std::invalid_argument for a name that is not one of tensor_specs's.
std::string gguf_tensor_name(const std::string& hf_name);

// The synthetic SPM vocabulary written into every GGUF (llama.cpp's "llama" tokenizer needs the
// 256 byte pieces, or loading aborts; the ids stay what bih's prompts use):
//   id 0         "<unk>"                 UNKNOWN (2), tokenizer.ggml.unknown_token_id
//   id 1         "<s>"                   CONTROL (3), tokenizer.ggml.bos_token_id
//   id 2         "</s>"                  CONTROL (3), tokenizer.ggml.eos_token_id
//   ids 3..258   "<0x00>".."<0xFF>"      NORMAL (1), upper-case hex as llama.cpp looks them up;
//                                        not BYTE (6), whose raw bytes make llama-server fail
//                                        a completion that is not UTF-8
//   ids 259..    "\u2581t<id>" ("▁t259")  NORMAL (1)
// Scores are all 0. The vocabulary needs at least kSyntheticVocabMinSize tokens.
struct VocabToken {
  std::string text;
  int32_t type = 1;
};
inline constexpr int kSyntheticVocabMinSize = 259;
inline constexpr int kSyntheticUnkId = 0;
inline constexpr int kSyntheticBosId = 1;
inline constexpr int kSyntheticEosId = 2;
VocabToken synthetic_vocab_token(int id);

// weights_hash of the weights stored in `file`, read as bih reads them: every tensor of
// tensor_specs(config) by its llama.cpp name, its dims checked against the HF shape reversed,
// BF16 bits as they are, F32 (norms) and F16 rounded to bf16. What a GGUF handed to an engine
// holds, for the report. Throws InputError naming the tensor when one is missing or mis-shaped.
std::string gguf_weights_hash(const GgufFile& file, const ModelConfig& config);

// Writes `weights` to `path` as GGUF v3 (through a temp file in the same folder, renamed into
// place; nothing half-written is ever left at `path`). Throws InputError for a vocabulary smaller
// than kSyntheticVocabMinSize, InfraError when the file cannot be written.
void write_gguf(const ModelWeights& weights, const std::string& path);

}  // namespace bih
