// test_gguf.cpp: the GGUF writer read back by read_gguf (keys, tensor names, reversed dims, bits),
// and the reader's answers to hostile files (truncations, bad magic, absurd counts).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "models/config.hpp"
#include "models/gguf.hpp"
#include "models/weights.hpp"
#include "test_util.hpp"

namespace bih::test_gguf {
namespace {

namespace fs = std::filesystem;
using bih::testing::input_error_of;

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bih_gguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

ModelWeights tiny(bool tied = true) {
  ModelConfig c = *preset_config("tiny");
  c.tie_word_embeddings = tied;
  return synthetic_weights(c, 3);
}

int64_t uint_of(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  EXPECT_NE(v, nullptr) << key;
  if (v == nullptr) return -1;
  EXPECT_EQ(v->type, GgufValueType::uint32) << key;
  return v->integer;
}

TEST_F(GgufTest, MetadataHoldsWhatLlamaCppsQwen3LoaderReads) {
  const ModelWeights w = tiny();
  const ModelConfig& c = w.config;
  write_gguf(w, file("m.gguf"));
  const GgufFile f = read_gguf(file("m.gguf"));
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.alignment, 32u);
  EXPECT_EQ(f.data_start % 32, 0u);
  ASSERT_NE(f.find("general.architecture"), nullptr);
  EXPECT_EQ(f.find("general.architecture")->text, "qwen3");
  ASSERT_NE(f.find("general.name"), nullptr);
  EXPECT_EQ(uint_of(f, "general.alignment"), 32);
  EXPECT_EQ(uint_of(f, "qwen3.context_length"), c.max_position_embeddings);
  EXPECT_EQ(uint_of(f, "qwen3.embedding_length"), c.hidden_size);
  EXPECT_EQ(uint_of(f, "qwen3.block_count"), c.num_layers);
  EXPECT_EQ(uint_of(f, "qwen3.feed_forward_length"), c.intermediate_size);
  EXPECT_EQ(uint_of(f, "qwen3.attention.head_count"), c.num_heads);
  EXPECT_EQ(uint_of(f, "qwen3.attention.head_count_kv"), c.num_kv_heads);
  EXPECT_EQ(uint_of(f, "qwen3.attention.key_length"), c.head_dim);
  EXPECT_EQ(uint_of(f, "qwen3.attention.value_length"), c.head_dim);
  EXPECT_EQ(uint_of(f, "qwen3.rope.dimension_count"), c.head_dim);
  ASSERT_NE(f.find("qwen3.rope.freq_base"), nullptr);
  EXPECT_EQ(f.find("qwen3.rope.freq_base")->type, GgufValueType::float32);
  EXPECT_EQ(f.find("qwen3.rope.freq_base")->real, static_cast<float>(c.rope_theta));
  ASSERT_NE(f.find("qwen3.attention.layer_norm_rms_epsilon"), nullptr);
  EXPECT_EQ(f.find("qwen3.attention.layer_norm_rms_epsilon")->real, c.rms_norm_eps);

  // The synthetic SPM vocabulary: specials, the 256 byte pieces "<0xNN>", then "▁t<id>".
  ASSERT_NE(f.find("tokenizer.ggml.model"), nullptr);
  EXPECT_EQ(f.find("tokenizer.ggml.model")->text, "llama");
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  const GgufValue* scores = f.find("tokenizer.ggml.scores");
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  ASSERT_TRUE(tokens && scores && types);
  EXPECT_EQ(tokens->element_type, GgufValueType::string);
  EXPECT_EQ(scores->element_type, GgufValueType::float32);
  EXPECT_EQ(types->element_type, GgufValueType::int32);
  ASSERT_EQ(tokens->texts.size(), static_cast<size_t>(c.vocab_size));
  ASSERT_EQ(scores->reals.size(), static_cast<size_t>(c.vocab_size));
  ASSERT_EQ(types->integers.size(), static_cast<size_t>(c.vocab_size));
  EXPECT_EQ(tokens->texts[0], "<unk>");
  EXPECT_EQ(tokens->texts[1], "<s>");
  EXPECT_EQ(tokens->texts[2], "</s>");
  EXPECT_EQ(tokens->texts[3], "<0x00>");
  EXPECT_EQ(tokens->texts[3 + 0x0A], "<0x0A>");  // llama.cpp looks up the newline's byte token
  EXPECT_EQ(tokens->texts[258], "<0xFF>");
  EXPECT_EQ(tokens->texts[259], "\xE2\x96\x81t259");
  // No BYTE-typed token (6): one decodes to a raw byte, and llama-server fails a reply whose text
  // is not UTF-8.
  for (size_t i = 0; i < types->integers.size(); ++i) {
    EXPECT_NE(types->integers[i], 6) << "token " << i;
  }
  EXPECT_EQ(std::set<std::string>(tokens->texts.begin(), tokens->texts.end()).size(),
            tokens->texts.size())
      << "token texts must be unique";
  EXPECT_EQ(types->integers[0], 2);
  EXPECT_EQ(types->integers[1], 3);
  EXPECT_EQ(types->integers[2], 3);
  for (int id = 3; id < 259; ++id) EXPECT_EQ(types->integers[id], 1) << id;  // "<0xNN>" as text
  EXPECT_EQ(types->integers[259], 1);
  EXPECT_EQ(types->integers[c.vocab_size - 1], 1);
  EXPECT_EQ(uint_of(f, "tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(uint_of(f, "tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(uint_of(f, "tokenizer.ggml.unknown_token_id"), 0);
  ASSERT_NE(f.find("tokenizer.ggml.add_bos_token"), nullptr);
  EXPECT_EQ(f.find("tokenizer.ggml.add_bos_token")->type, GgufValueType::boolean);
  EXPECT_EQ(f.find("tokenizer.ggml.add_bos_token")->integer, 0);
}

// Every tensor under its llama.cpp name, dims reversed, matrices BF16 with the weights' bits,
// norms F32 widened exactly from them.
void expect_tensors_match(const GgufFile& f, const ModelWeights& w) {
  const auto by_name = tensors_by_name(w);
  const auto specs = tensor_specs(w.config);
  ASSERT_EQ(f.tensors.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    const GgufTensorInfo& t = f.tensors[i];
    SCOPED_TRACE(spec.name);
    EXPECT_EQ(t.name, gguf_tensor_name(spec.name));
    EXPECT_EQ(t.dims, std::vector<uint64_t>(spec.shape.rbegin(), spec.shape.rend()));
    EXPECT_EQ(t.offset % 32, 0u);
    const std::vector<bf16>& data = *by_name.at(spec.name);
    const std::string bytes = f.tensor_bytes(t.name);
    if (spec.shape.size() == 1) {
      ASSERT_EQ(t.type, GgmlType::f32);
      ASSERT_EQ(bytes.size(), 4 * data.size());
      for (size_t k = 0; k < data.size(); ++k) {
        uint32_t bits;
        std::memcpy(&bits, bytes.data() + 4 * k, 4);
        ASSERT_EQ(bits, static_cast<uint32_t>(data[k].bits) << 16) << "element " << k;
      }
    } else {
      ASSERT_EQ(t.type, GgmlType::bf16);
      ASSERT_EQ(bytes.size(), 2 * data.size());
      EXPECT_EQ(std::memcmp(bytes.data(), data.data(), bytes.size()), 0) << "bits differ";
    }
  }
}

TEST_F(GgufTest, TensorsHaveLlamaCppNamesReversedDimsAndTheWeightsBits) {
  const ModelWeights w = tiny();
  write_gguf(w, file("m.gguf"));
  const GgufFile f = read_gguf(file("m.gguf"));
  expect_tensors_match(f, w);
  const int L = w.config.num_layers;
  for (const char* name : {"token_embd.weight", "output_norm.weight"}) {
    EXPECT_NE(f.find_tensor(name), nullptr) << name;
  }
  for (int l = 0; l < L; ++l) {
    for (const char* suffix :
         {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm",
          "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"}) {
      const std::string name = "blk." + std::to_string(l) + "." + suffix + ".weight";
      EXPECT_NE(f.find_tensor(name), nullptr) << name;
    }
  }
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr) << "tied: llama.cpp reuses token_embd";
  const GgufTensorInfo* q = f.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dims, (std::vector<uint64_t>{static_cast<uint64_t>(w.config.hidden_size),
                                            static_cast<uint64_t>(w.config.q_size())}));
}

TEST_F(GgufTest, UntiedModelCarriesOutputWeight) {
  const ModelWeights w = tiny(/*tied=*/false);
  write_gguf(w, file("untied.gguf"));
  const GgufFile f = read_gguf(file("untied.gguf"));
  expect_tensors_match(f, w);
  const GgufTensorInfo* out = f.find_tensor("output.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->dims, (std::vector<uint64_t>{static_cast<uint64_t>(w.config.hidden_size),
                                              static_cast<uint64_t>(w.config.vocab_size)}));
}

TEST_F(GgufTest, WriteReplacesAtomicallyAndLeavesNoTempFile) {
  write_gguf(tiny(), file("m.gguf"));
  write_gguf(tiny(/*tied=*/false), file("m.gguf"));  // over an existing file
  EXPECT_NE(read_gguf(file("m.gguf")).find_tensor("output.weight"), nullptr);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "m.gguf");
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(GgufTest, TooSmallVocabularyIsAnInputError) {
  ModelConfig c = *preset_config("tiny");
  c.vocab_size = 200;
  const std::string message =
      input_error_of([&] { write_gguf(synthetic_weights(c, 0), file("small.gguf")); });
  EXPECT_NE(message.find("vocab_size 200"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(file("small.gguf")));
}

TEST_F(GgufTest, TensorNamesMapOneToOne) {
  EXPECT_EQ(gguf_tensor_name("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.12.mlp.down_proj.weight"), "blk.12.ffn_down.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.0.self_attn.o_proj.weight"), "blk.0.attn_output.weight");
  EXPECT_EQ(gguf_tensor_name("lm_head.weight"), "output.weight");
  EXPECT_THROW(gguf_tensor_name("model.layers.x.mlp.up_proj.weight"), std::invalid_argument);
  EXPECT_THROW(gguf_tensor_name("model.layers.0.mlp.bias"), std::invalid_argument);
}

// ---- hostile files ----------------------------------------------------------------------------

class GgufHostileTest : public GgufTest {
 protected:
  void SetUp() override {
    GgufTest::SetUp();
    write_gguf(tiny(), file("good.gguf"));
    good_ = read_bytes(file("good.gguf"));
  }
  // The reader's InputError message for `bytes`; it must name the file.
  std::string error_for(const std::string& bytes) {
    write_bytes(file("bad.gguf"), bytes);
    const std::string message = input_error_of([&] { read_gguf(file("bad.gguf")); });
    EXPECT_NE(message.find("bad.gguf"), std::string::npos) << message;
    return message;
  }
  std::string with_u64_at(size_t offset, uint64_t v) const {
    std::string b = good_;
    std::memcpy(b.data() + offset, &v, 8);
    return b;
  }

  std::string good_;
};

TEST_F(GgufHostileTest, TruncationAnywhereIsAnInputError) {
  const GgufFile f = read_gguf(file("good.gguf"));
  // Inside the header, the counts, the metadata, the vocabulary, the tensor infos, the data.
  const std::vector<size_t> cuts = {0,
                                    3,
                                    4,
                                    7,
                                    12,
                                    20,
                                    24,
                                    30,
                                    100,
                                    5000,
                                    40000,
                                    static_cast<size_t>(f.data_start) - 1,
                                    static_cast<size_t>(f.data_start) + 1,
                                    good_.size() / 2,
                                    good_.size() - 1};
  for (size_t cut : cuts) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    const std::string message = error_for(good_.substr(0, cut));
    EXPECT_TRUE(message.find("truncated") != std::string::npos ||
                message.find("magic") != std::string::npos)
        << message;
  }
}

TEST_F(GgufHostileTest, BadMagicAndVersion) {
  std::string b = good_;
  b[0] = 'X';
  EXPECT_NE(error_for(b).find("magic"), std::string::npos);
  b = good_;
  b[4] = 9;
  EXPECT_NE(error_for(b).find("version 9"), std::string::npos);
  b = good_;
  std::memcpy(b.data() + 4, "\0\0\0\3", 4);  // a big-endian file's version
  EXPECT_NE(error_for(b).find("unsupported GGUF version"), std::string::npos);
}

TEST_F(GgufHostileTest, AbsurdCountsAndLengthsAllocateNothing) {
  EXPECT_NE(error_for(with_u64_at(8, ~0ull)).find("tensor count"), std::string::npos);
  EXPECT_NE(error_for(with_u64_at(16, 1ull << 60)).find("metadata count"), std::string::npos);
  // The first key's length (right after the 24-byte header).
  EXPECT_NE(error_for(with_u64_at(24, 1ull << 62)).find("truncated"), std::string::npos);
}

TEST_F(GgufHostileTest, AbsurdArrayLengthIsAnInputError) {
  // The vocabulary array's element count sits right after its key and two u32 types.
  const std::string key = "tokenizer.ggml.tokens";
  const size_t at = good_.find(key);
  ASSERT_NE(at, std::string::npos);
  const std::string message = error_for(with_u64_at(at + key.size() + 8, 1ull << 61));
  EXPECT_NE(message.find("cannot fit"), std::string::npos) << message;
}

TEST_F(GgufHostileTest, UnknownValueTypeIsAnInputError) {
  const std::string key = "general.architecture";
  const size_t at = good_.find(key);
  ASSERT_NE(at, std::string::npos);
  std::string b = good_;
  const uint32_t type = 77;
  std::memcpy(b.data() + at + key.size(), &type, 4);
  EXPECT_NE(error_for(b).find("unknown value type 77"), std::string::npos);
}

TEST_F(GgufHostileTest, TensorOffsetPastTheEndOrMisaligned) {
  const GgufFile f = read_gguf(file("good.gguf"));
  const GgufTensorInfo& last = f.tensors.back();
  // A tensor info ends with its u64 offset; the last one's ends at the tensor-info section's end.
  const std::string name_bytes = last.name;
  const size_t info = good_.rfind(name_bytes, f.data_start);
  ASSERT_NE(info, std::string::npos);
  const size_t offset_at = info + name_bytes.size() + 4 + 8 * last.dims.size() + 4;
  EXPECT_NE(error_for(with_u64_at(offset_at, 1ull << 40)).find("past the data section"),
            std::string::npos);
  EXPECT_NE(error_for(with_u64_at(offset_at, last.offset + 1)).find("not a multiple"),
            std::string::npos);
  EXPECT_NE(error_for(with_u64_at(offset_at, 0)).find("overlaps"), std::string::npos);
}

TEST_F(GgufHostileTest, RandomByteFlipsNeverCrash) {
  // Not a fuzzer, but every flip must end in a parse or an InputError, nothing else.
  uint64_t state = 12345;
  for (int i = 0; i < 300; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::string b = good_.substr(0, 60000);  // header, vocabulary and more: where parsing is
    const size_t at = static_cast<size_t>(state >> 33) % b.size();
    b[at] = static_cast<char>(b[at] ^ static_cast<char>(1 + (state >> 20) % 255));
    write_bytes(file("flip.gguf"), b);
    try {
      read_gguf(file("flip.gguf"));
    } catch (const InputError&) {
    }
  }
}

TEST_F(GgufHostileTest, MissingFileIsAnInputError) {
  EXPECT_NE(input_error_of([&] { read_gguf(file("absent.gguf")); }).find("cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace bih::test_gguf
