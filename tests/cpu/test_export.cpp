// test_export.cpp: `bih export` through the binary: hf and gguf outputs, the round trip of an HF
// export back to the same weights, checkpoint conversion, and the usage errors (exit 2, naming
// the flag).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "models/config.hpp"
#include "models/gguf.hpp"
#include "models/weights.hpp"
#include "run_bih.hpp"

namespace bih::test_export {
namespace {

namespace fs = std::filesystem;
using bih::testing::fresh_dir;
using bih::testing::run_bih;

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(std::string("export-") +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(ExportTest, HfExportLoadsBackBitwiseEqual) {
  const auto r =
      run_bih({"export", "--preset", "tiny", "--seed", "5", "--format", "hf", "--out", path("hf")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const ModelWeights expected = synthetic_weights(*preset_config("tiny"), 5);
  const std::string hash = weights_hash(expected);
  EXPECT_NE(r.output.find(hash), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::to_string(tensor_specs(expected.config).size()) + " tensors"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(path("hf/config.json")));
  EXPECT_TRUE(fs::exists(path("hf/model.safetensors")));
  EXPECT_EQ(weights_hash(load_checkpoint(path("hf"))), hash);
}

TEST_F(ExportTest, GgufExportAndCheckpointConversionCarryTheSameWeights) {
  auto r = run_bih({"export", "--preset", "tiny", "--format", "gguf", "--out", path("a.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const ModelWeights w = synthetic_weights(*preset_config("tiny"), 0);
  EXPECT_NE(r.output.find(weights_hash(w)), std::string::npos) << r.output;
  const GgufFile a = read_gguf(path("a.gguf"));
  EXPECT_EQ(a.tensors.size(), tensor_specs(w.config).size());
  EXPECT_EQ(a.tensor_bytes("blk.1.ffn_up.weight"),
            std::string(reinterpret_cast<const char*>(w.layers[1].up_proj.data()),
                        2 * w.layers[1].up_proj.size()));

  // --model: the HF export converted to GGUF gives the same tensors' bytes.
  r = run_bih({"export", "--preset", "tiny", "--format", "hf", "--out", path("hf")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_bih({"export", "--model", path("hf"), "--format", "gguf", "--out", path("b.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(weights_hash(w)), std::string::npos) << r.output;
  const GgufFile b = read_gguf(path("b.gguf"));
  ASSERT_EQ(b.tensors.size(), a.tensors.size());
  for (const GgufTensorInfo& t : a.tensors) {
    EXPECT_EQ(b.tensor_bytes(t.name), a.tensor_bytes(t.name)) << t.name;
  }
}

// A usage error: exit 2, and the message names `needle` (the flag or value at fault).
void expect_usage_error(const std::vector<std::string>& args, const std::string& needle) {
  const auto r = run_bih(args);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

TEST_F(ExportTest, BadArgumentsExitTwoNamingTheFlag) {
  const std::string out = path("x.gguf");
  expect_usage_error({"export", "--format", "gguf", "--out", out}, "--preset");
  expect_usage_error(
      {"export", "--preset", "tiny", "--model", path("m"), "--format", "gguf", "--out", out},
      "--model");
  expect_usage_error({"export", "--preset", "huge", "--format", "gguf", "--out", out},
                     "--preset 'huge' is unknown; valid: tiny");
  expect_usage_error({"export", "--preset", "tiny", "--format", "onnx", "--out", out},
                     "--format 'onnx' is unknown; valid: hf, gguf");
  expect_usage_error({"export", "--preset", "tiny", "--out", out}, "--format");
  expect_usage_error({"export", "--preset", "tiny", "--format", "gguf"}, "--out");
  expect_usage_error({"export", "--model", path("absent"), "--format", "gguf", "--out", out},
                     "--model");
  expect_usage_error(
      {"export", "--model", path("absent"), "--seed", "3", "--format", "gguf", "--out", out},
      "--seed");
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(ExportTest, OutOfTheWrongKindIsAnError) {
  fs::create_directories(path("folder"));
  expect_usage_error({"export", "--preset", "tiny", "--format", "gguf", "--out", path("folder")},
                     "not a regular file");
  ASSERT_EQ(run_bih({"export", "--preset", "tiny", "--format", "gguf", "--out", path("f.gguf")})
                .exit_code,
            0);
  expect_usage_error({"export", "--preset", "tiny", "--format", "hf", "--out", path("f.gguf")},
                     "not a folder");
}

TEST_F(ExportTest, HelpShowsAnExample) {
  const auto r = run_bih({"export", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("bih export --preset tiny --format gguf --out"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace bih::test_export
