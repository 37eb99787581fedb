// test_export_safety.cpp: what `bih export` and the model writers must never do: write over or
// delete files they did not write, narrow a config value GGUF cannot hold, take a seed that is not
// one, leave partial temp files behind on a full disk, fail on a legal long file name, or export
// a checkpoint whose config does not describe its weights.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"
#include "base/json_file.hpp"
#include "models/config.hpp"
#include "models/export.hpp"
#include "models/gguf.hpp"
#include "models/safetensors.hpp"
#include "models/weights.hpp"
#include "run_bih.hpp"
#include "test_files.hpp"

namespace bih::test_export_safety {
namespace {

namespace fs = std::filesystem;
using bih::testing::fresh_dir;
using bih::testing::run_bih;
using nlohmann::json;
using testing::write_text;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class ExportSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(std::string("export-safety-") +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Exit 2 and a first line holding every one of `needles`.
  static void expect_usage(const testing::BihResult& r, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    for (const auto& n : needles)
      EXPECT_NE(r.output.find(n), std::string::npos) << n << "\n" << r.output;
  }
  // Names of the entries of `folder`, sorted.
  static std::vector<std::string> listing(const fs::path& folder) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

// Issue 15 item 3: an hf export into an existing checkpoint overwrote its config.json and
// deleted its index, exit 0.
TEST_F(ExportSafety, NonEmptyHfFolderIsRefusedAndLeftAlone) {
  ASSERT_EQ(run_bih({"export", "--preset", "tiny", "--seed", "1", "--format", "hf", "--out",
                     path("ckpt")})
                .exit_code,
            0);
  write_text(dir_ / "ckpt/model.safetensors.index.json", "{\"weight_map\": {}}\n");
  write_text(dir_ / "ckpt/README.md", "mine\n");
  const std::string config_before = read_all(dir_ / "ckpt/config.json");
  const auto before = listing(dir_ / "ckpt");
  const auto r = run_bih({"export", "--preset", "tiny", "--format", "hf", "--out", path("ckpt")});
  expect_usage(r, {path("ckpt"), "not empty", "--force"});
  EXPECT_EQ(listing(dir_ / "ckpt"), before);
  EXPECT_EQ(read_all(dir_ / "ckpt/config.json"), config_before);
  // --force deletes nothing either: the index (which loaders prefer) makes it a refusal.
  const auto forced =
      run_bih({"export", "--preset", "tiny", "--format", "hf", "--out", path("ckpt"), "--force"});
  expect_usage(forced, {path("ckpt"), "model.safetensors.index.json"});
  EXPECT_EQ(listing(dir_ / "ckpt"), before);
}

TEST_F(ExportSafety, ForceReplacesOnlyTheExportsOwnFiles) {
  fs::create_directories(dir_ / "out");
  write_text(dir_ / "out/README.md", "keep me\n");
  write_text(dir_ / "out/tokenizer.json", "{}\n");
  auto r = run_bih({"export", "--preset", "tiny", "--format", "hf", "--out", path("out")});
  expect_usage(r, {"--force"});
  r = run_bih({"export", "--preset", "tiny", "--seed", "3", "--format", "hf", "--out", path("out"),
               "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_all(dir_ / "out/README.md"), "keep me\n");
  EXPECT_EQ(read_all(dir_ / "out/tokenizer.json"), "{}\n");
  EXPECT_EQ(listing(dir_ / "out"),
            (std::vector<std::string>{"README.md", "config.json", "generation_config.json",
                                      "model.safetensors", "tokenizer.json"}));
  EXPECT_EQ(weights_hash(load_checkpoint(path("out"))),
            weights_hash(synthetic_weights(*preset_config("tiny"), 3)));
  // The byte count is what the export wrote, not the folder's.
  const uint64_t own = fs::file_size(dir_ / "out/config.json") +
                       fs::file_size(dir_ / "out/generation_config.json") +
                       fs::file_size(dir_ / "out/model.safetensors");
  EXPECT_NE(r.output.find(std::to_string(own) + " bytes"), std::string::npos) << r.output;
}

TEST_F(ExportSafety, ExistingGgufFileNeedsForce) {
  write_text(dir_ / "m.gguf", "not yours");
  auto r = run_bih({"export", "--preset", "tiny", "--format", "gguf", "--out", path("m.gguf")});
  expect_usage(r, {path("m.gguf"), "--force"});
  EXPECT_EQ(read_all(dir_ / "m.gguf"), "not yours");
  r = run_bih(
      {"export", "--preset", "tiny", "--format", "gguf", "--out", path("m.gguf"), "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_gguf(path("m.gguf")).tensors.size(), tensor_specs(*preset_config("tiny")).size());
}

// Issue 15 item 4: rope_theta and rms_norm_eps narrowed to float32 without a check.
class GgufNarrowing : public ExportSafety {
 protected:
  // A tiny checkpoint whose config.json gets `key` = `value` (rope_theta at both places).
  testing::BihResult export_with(const std::string& key, double value) {
    fs::remove_all(path("ckpt"));  // an export refuses a non-empty folder
    EXPECT_EQ(
        run_bih({"export", "--preset", "tiny", "--format", "hf", "--out", path("ckpt")}).exit_code,
        0);
    json config = read_json_file(path("ckpt/config.json"));
    if (key == "rope_theta") {
      config["rope_parameters"]["rope_theta"] = value;
    } else {
      config[key] = value;
    }
    write_text(dir_ / "ckpt/config.json", config.dump(2));
    return run_bih(
        {"export", "--model", path("ckpt"), "--format", "gguf", "--out", path("m.gguf")});
  }
};

TEST_F(GgufNarrowing, RopeThetaBeyondFloat32IsRefused) {
  for (double theta : {1e39, 1e308}) {
    SCOPED_TRACE(theta);
    const auto r = export_with("rope_theta", theta);
    expect_usage(r, {path("ckpt/config.json"), "/rope_theta", "float32"});
    EXPECT_FALSE(fs::exists(path("m.gguf")));
  }
}

TEST_F(GgufNarrowing, RopeThetaBelowFloat32IsRefused) {
  const auto r = export_with("rope_theta", 1e-308);
  expect_usage(r, {"/rope_theta", "underflows float32"});
  EXPECT_FALSE(fs::exists(path("m.gguf")));
}

TEST_F(GgufNarrowing, RmsNormEpsThatBecomesZeroIsRefused) {
  const auto r = export_with("rms_norm_eps", 1e-50);
  expect_usage(r, {"/rms_norm_eps", "float32"});
  EXPECT_FALSE(fs::exists(path("m.gguf")));
}

TEST_F(GgufNarrowing, ValuesThatFitAreWrittenExactly) {
  const auto r = export_with("rope_theta", 1e38);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto gguf = read_gguf(path("m.gguf"));  // kept: find() points into it
  const GgufValue* base = gguf.find("qwen3.rope.freq_base");
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(base->real, static_cast<double>(1e38f));
}

// Weak item: --seed -1 and 2^64 both became 2^64-1.
TEST_F(ExportSafety, SeedOutsideUint64IsRefused) {
  for (const std::string seed : {"-1", "18446744073709551616", "1e3", "+5", "0x10"}) {
    SCOPED_TRACE(seed);
    const auto r = run_bih({"export", "--preset", "tiny", "--seed=" + seed, "--format", "gguf",
                            "--out", path("m.gguf")});
    expect_usage(r, {"--seed", "0..18446744073709551615"});
    EXPECT_FALSE(fs::exists(path("m.gguf")));
  }
  const auto r = run_bih({"export", "--preset", "tiny", "--seed", "18446744073709551615",
                          "--format", "hf", "--out", path("max")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(weights_hash(load_checkpoint(path("max"))),
            weights_hash(synthetic_weights(*preset_config("tiny"), UINT64_MAX)));
}

// Weak item: a legal 255-byte name failed because the temp name is longer.
TEST_F(ExportSafety, LongestLegalFileNameIsWritten) {
  const std::string name = std::string(250, 'g') + ".gguf";
  ASSERT_EQ(name.size(), 255u);
  auto r = run_bih({"export", "--preset", "tiny", "--format", "gguf", "--out", path(name)});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_regular_file(path(name)));
  const std::string st = std::string(243, 's') + ".safetensors";
  ASSERT_EQ(st.size(), 255u);
  std::vector<bf16> v(4);
  write_safetensors_bf16(path(st), {{"x", {4}, &v}});
  EXPECT_EQ(SafetensorsFile(path(st)).entries().size(), 1u);
  EXPECT_EQ(listing(dir_), (std::vector<std::string>{name, st}));
}

TEST(TempNames, FitNameMaxAndCarryThePid) {
  const std::string t = temp_name_for(std::string(255, 'x'), "7-123");
  EXPECT_LE(t.size(), 255u);
  ASSERT_TRUE(temp_name_pid(t).has_value());
  EXPECT_EQ(*temp_name_pid(t), ::getpid());
  EXPECT_EQ(temp_name_pid(".a.gguf.tmp-42"), 42);
  EXPECT_FALSE(temp_name_pid("a.gguf").has_value());
  EXPECT_FALSE(temp_name_pid(".a.tmp-x").has_value());
}

// Weak item: on a full disk the partial .tmp stayed and the message did not say ENOSPC. A tmpfs
// of 1 MiB is a full disk; RLIMIT_FSIZE (EFBIG with SIGXFSZ ignored) stands in where mounting is
// not allowed.
class FullDisk : public ExportSafety {
 protected:
  void TearDown() override {
    if (mounted_) ::umount(path("small").c_str());
    ExportSafety::TearDown();
  }
  bool mount_small() {
    fs::create_directories(path("small"));
    mounted_ = ::mount("tmpfs", path("small").c_str(), "tmpfs", 0, "size=1m") == 0;
    return mounted_;
  }
  bool mounted_ = false;
};

TEST_F(FullDisk, NoSpaceLeavesNoTempAndSaysSo) {
  if (!mount_small()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)";
  // tiny's model.safetensors is ~1.3 MB: it does not fit in 1 MiB; a GGUF neither.
  const auto r =
      run_bih({"export", "--preset", "tiny", "--format", "hf", "--out", path("small/ckpt")});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
  for (const auto& e : fs::recursive_directory_iterator(path("small"))) {
    EXPECT_EQ(e.path().filename().string().find("tmp"), std::string::npos) << e.path();
  }
  const auto g =
      run_bih({"export", "--preset", "tiny", "--format", "gguf", "--out", path("small/m.gguf")});
  EXPECT_EQ(g.exit_code, 3) << g.output;
  EXPECT_NE(g.output.find("No space left on device"), std::string::npos) << g.output;
  EXPECT_FALSE(fs::exists(path("small/m.gguf")));
}

TEST_F(FullDisk, FileSizeLimitLeavesNoTemp) {
  // In this process: the limit applies to its writes (SIGXFSZ ignored, write returns EFBIG).
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* previous = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 100000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const ModelWeights w = synthetic_weights(*preset_config("tiny"), 0);
  std::string error;
  try {
    export_model(w, ExportFormat::hf, path("ckpt"));
  } catch (const InfraError& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, previous);
  EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
  EXPECT_EQ(listing(dir_ / "ckpt"),
            (std::vector<std::string>{"config.json", "generation_config.json"}));
}

// Weak items: a config of 2 layers over 3 layers of weights exported (and ran) without a word; a
// config of far more layers than the weights was blamed on plan.max_model_len.
class LayerCount : public ExportSafety {
 protected:
  void SetUp() override {
    ExportSafety::SetUp();
    ASSERT_EQ(
        run_bih({"export", "--preset", "tiny", "--format", "hf", "--out", path("ckpt")}).exit_code,
        0);
  }
  void set_layers(int n) {
    json config = read_json_file(path("ckpt/config.json"));
    config["num_hidden_layers"] = n;
    config["max_window_layers"] = n;
    config["layer_types"] = std::vector<std::string>(n, "full_attention");
    write_text(dir_ / "ckpt/config.json", config.dump(2));
  }
};

TEST_F(LayerCount, ConfigWithFewerLayersThanTheWeightsIsRefused) {
  const int layers = preset_config("tiny")->num_layers;
  set_layers(layers - 1);
  const auto r =
      run_bih({"export", "--model", path("ckpt"), "--format", "gguf", "--out", path("m.gguf")});
  expect_usage(r, {"/num_hidden_layers", "model.layers." + std::to_string(layers - 1) + ".",
                   "would be ignored"});
  EXPECT_FALSE(fs::exists(path("m.gguf")));
  write_text(dir_ / "s.json",
             "{\"model\": {\"path\": \"ckpt\"}, \"plan\": {\"prompts\": "
             "{\"count\": 2, \"min_len\": 2, \"max_len\": 4}, \"max_tokens\": 2, "
             "\"batch_sizes\": [1, 2]}}");
  expect_usage(run_bih({"run", path("s.json"), "--out", path("out")}),
               {"/model/path", "num_hidden_layers"});
}

TEST_F(LayerCount, ConfigWithFarMoreLayersBlamesTheCheckpoint) {
  set_layers(100000);
  write_text(dir_ / "s.json",
             "{\"model\": {\"path\": \"ckpt\"}, \"plan\": {\"prompts\": "
             "{\"count\": 2, \"min_len\": 2, \"max_len\": 4}, \"max_tokens\": 2, "
             "\"batch_sizes\": [1, 2], \"max_model_len\": 40960, "
             "\"max_num_seqs\": 64}}");
  const auto r = run_bih({"run", path("s.json"), "--out", path("out")});
  expect_usage(r, {"/model/path", "num_hidden_layers is 100000", "hold only 4 layers"});
  EXPECT_EQ(r.output.find("max_model_len"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace bih::test_export_safety
