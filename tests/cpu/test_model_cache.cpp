// test_model_cache.cpp: bih's model cache is checked, not trusted (issue 15 item 5): an altered
// or unrecorded entry is exported again, the report's weights hash is computed from what the
// adapter was handed, stale temps of dead exports are removed, and a cache that cannot be used
// says which folder and BIH_CACHE_DIR.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/atomic_file.hpp"
#include "base/content_hash.hpp"
#include "base/errors.hpp"
#include "base/json_file.hpp"
#include "engines/model_handoff.hpp"
#include "models/config.hpp"
#include "models/gguf.hpp"
#include "models/weights.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"

namespace bih::test_model_cache {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::fresh_dir;
using testing::report_files;
using testing::run_bih;

const std::string kAdapter = std::string(BIH_SOURCE_DIR) + "/tests/data/adapters/faulty_adapter.py";

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

json scenario_json(const std::string& format, int seed) {
  return {{"engine",
           {{"kind", "command"},
            {"name", "faulty"},
            {"command", {"python3", kAdapter}},
            {"options", {{"fault", ""}}},
            {"model_format", format}}},
          {"model", {{"preset", "tiny"}, {"seed", seed}}},
          {"plan", {{"prompts", {{"count", 2}}}, {"max_tokens", 2}}}};
}

class ModelCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(std::string("model-cache-") +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    setenv("BIH_CACHE_DIR", (dir_ / "cache").c_str(), 1);
  }
  void TearDown() override {
    unsetenv("BIH_CACHE_DIR");
    fs::remove_all(dir_);
  }
  Scenario scenario(const std::string& format, int seed = 0) {
    std::ofstream(dir_ / "s.json") << scenario_json(format, seed).dump();
    return load_scenarios((dir_ / "s.json").string()).scenarios.at(0);
  }
  fs::path dir_;
};

TEST_F(ModelCache, AnEntryIsRecordedAndReusedAsIs) {
  const Scenario s = scenario("gguf");
  const auto h = hand_off_model(s);
  ASSERT_TRUE(fs::is_regular_file(h.path));
  const json record = read_json_file(h.path + ".verify.json");
  const FileDigest d = digest_file(h.path);
  EXPECT_EQ(record["bytes"], d.bytes);
  EXPECT_EQ(record["content_hash"], d.hash);
  EXPECT_EQ(cache_entry_mismatch(h.path), "");
  const auto written = fs::last_write_time(h.path);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(hand_off_model(s).path, h.path);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(fs::last_write_time(h.path), written);
}

TEST_F(ModelCache, AnAlteredGgufEntryIsExportedAgain) {
  const Scenario s = scenario("gguf");
  const auto h = hand_off_model(s);
  const std::string original = read_all(h.path);
  {
    std::fstream f(h.path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(original.size() - 100));
    f.put(static_cast<char>(original[original.size() - 100] ^ 0x40));
  }
  EXPECT_NE(cache_entry_mismatch(h.path), "");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(hand_off_model(s).path, h.path);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(h.path), std::string::npos) << err;
  EXPECT_NE(err.find("exporting it again"), std::string::npos) << err;
  EXPECT_TRUE(read_all(h.path) == original) << "the entry is the export again, bit for bit";
}

TEST_F(ModelCache, TheReportSaysTheEntryWasExportedAgain) {
  std::ofstream(dir_ / "s.json") << scenario_json("gguf", 0).dump();
  auto run = [&](const std::string& out) {
    const auto r = run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / out).string()});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return read_json_file(report_files(dir_ / out).at(0).string());
  };
  const json first = run("a");
  EXPECT_FALSE(first["engine"].contains("model_cache_notice")) << first["engine"].dump();
  const std::string path = first["engine"]["model_path"];
  std::ofstream(path, std::ios::binary | std::ios::app) << "x";  // one byte more
  const json second = run("b");
  const std::string notice = second["engine"].value("model_cache_notice", std::string());
  EXPECT_NE(notice.find("exporting it again"), std::string::npos) << second["engine"].dump();
  EXPECT_EQ(second["model"]["weights_hash"], first["model"]["weights_hash"]);
  EXPECT_EQ(second["engine"]["model_content"], first["engine"]["model_content"]);
}

TEST_F(ModelCache, AnHfEntryWithAnExtraOrMissingFileOrNoRecordIsExportedAgain) {
  const Scenario s = scenario("hf");
  const auto h = hand_off_model(s);
  const std::string weights = read_all(fs::path(h.path) / "model.safetensors");
  // Same size, other bytes.
  {
    std::fstream f(fs::path(h.path) / "model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-8, std::ios::end);
    f.write("\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f", 8);
  }
  EXPECT_NE(cache_entry_mismatch(h.path).find("digests differ"), std::string::npos);
  ::testing::internal::CaptureStderr();
  hand_off_model(s);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("exporting it again"), std::string::npos);
  EXPECT_TRUE(read_all(fs::path(h.path) / "model.safetensors") == weights);
  // An extra file is not what was exported either.
  std::ofstream(fs::path(h.path) / "model.safetensors.index.json") << "{}";
  EXPECT_NE(cache_entry_mismatch(h.path), "");
  // No record (an entry of an older bih, or someone's copy): not trusted.
  fs::remove(h.path + ".verify.json");
  EXPECT_NE(cache_entry_mismatch(h.path).find("no readable record"), std::string::npos);
  ::testing::internal::CaptureStderr();
  hand_off_model(s);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("exporting it again"), std::string::npos);
  EXPECT_FALSE(fs::exists(fs::path(h.path) / "model.safetensors.index.json"));
  EXPECT_EQ(cache_entry_mismatch(h.path), "");
}

// The report's weights hash is the hash of what the adapter was given: here an entry replaced,
// record and all, by the export of another seed is what the adapter loads, and the report must
// say so rather than repeat the scenario preset's hash.
TEST_F(ModelCache, TheReportsWeightsHashIsOfTheFileHandedOver) {
  for (const std::string format : {"gguf", "hf"}) {
    SCOPED_TRACE(format);
    const Scenario s = scenario(format, 0);
    const auto h = hand_off_model(s);
    const std::string seed0 = weights_hash(synthetic_weights(*preset_config("tiny"), 0));
    const std::string seed1 = weights_hash(synthetic_weights(*preset_config("tiny"), 1));
    EXPECT_EQ(handed_off_weights_hash(h), seed0);
    fs::remove_all(h.path);
    ASSERT_EQ(
        run_bih({"export", "--preset", "tiny", "--seed", "1", "--format", format, "--out", h.path})
            .exit_code,
        0);
    json record = handed_off_content(h);
    record["schema"] = "bih.model-cache-entry/1";
    std::ofstream(h.path + ".verify.json") << record.dump();
    ASSERT_EQ(cache_entry_mismatch(h.path), "");
    EXPECT_EQ(handed_off_weights_hash(h), seed1);

    const auto r = run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / "out").string()});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json report = read_json_file(report_files(dir_ / "out").at(0).string());
    EXPECT_EQ(report["model"]["weights_hash"], seed1) << report["model"].dump();
    EXPECT_EQ(report["engine"]["model_content"], handed_off_content(h));
    fs::remove_all(dir_ / "out");
  }
}

TEST_F(ModelCache, StaleTempsOfDeadExportsAreRemoved) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const fs::path models = dir_ / "cache" / "models";
  fs::create_directories(models);
  const fs::path dead = models / (".tiny-seed0-v1.hf.bih-tmp-" + std::to_string(child) + "-export");
  fs::create_directories(dead);
  std::ofstream(dead / "model.safetensors") << std::string(100000, 'x');
  const fs::path old_style = models / (".tiny-seed0-v1.gguf.tmp-" + std::to_string(child));
  std::ofstream(old_style) << "partial";
  const fs::path alive =
      models / (".tiny-seed0-v1.gguf.bih-tmp-" + std::to_string(getppid()) + "-1");
  std::ofstream(alive) << "in progress";
  hand_off_model(scenario("gguf"));
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_FALSE(fs::exists(old_style));
  EXPECT_TRUE(fs::exists(alive)) << "a live process's export is left alone";
  for (const auto& e : fs::directory_iterator(models)) {
    if (e.path() == alive) continue;
    EXPECT_FALSE(temp_name_pid(e.path().filename().string()).has_value()) << e.path();
  }
}

TEST_F(ModelCache, AReadOnlyCacheNamesTheFolderAndBihCacheDir) {
  const fs::path ro = dir_ / "ro";
  fs::create_directories(ro);
  if (::mount("tmpfs", ro.c_str(), "tmpfs", MS_RDONLY, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a read-only tmpfs here (needs root / CAP_SYS_ADMIN)";
  }
  setenv("BIH_CACHE_DIR", ro.c_str(), 1);
  std::string error;
  try {
    hand_off_model(scenario("gguf"));
  } catch (const InfraError& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = std::string("not an InfraError: ") + e.what();
  }
  ::umount(ro.c_str());
  EXPECT_NE(error.find(ro.string()), std::string::npos) << error;
  EXPECT_NE(error.find("BIH_CACHE_DIR"), std::string::npos) << error;
  EXPECT_EQ(error.find("not an InfraError"), std::string::npos) << error;
}

TEST_F(ModelCache, ANonUtf8CacheFolderIsAnInputErrorNamingBihCacheDir) {
  const std::string bad = (dir_ / "caf\xe9").string();
  setenv("BIH_CACHE_DIR", bad.c_str(), 1);
  std::string error;
  try {
    hand_off_model(scenario("gguf"));
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("BIH_CACHE_DIR"), std::string::npos) << error;
  EXPECT_NE(error.find("UTF-8"), std::string::npos) << error;
  // Through the binary: a message, not "internal error".
  std::ofstream(dir_ / "s.json") << scenario_json("gguf", 0).dump();
  const auto r = run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / "out").string()});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("BIH_CACHE_DIR"), std::string::npos) << r.output;
}

TEST(ContentHash, EveryByteCounts) {
  std::string bytes(1000, 'a');
  const std::string base = digest_bytes(bytes);
  EXPECT_EQ(base.rfind("fnv64w:", 0), 0u);
  for (size_t i : {size_t{0}, size_t{7}, size_t{8}, size_t{999}}) {
    std::string other = bytes;
    other[i] ^= 1;
    EXPECT_NE(digest_bytes(other), base) << i;
  }
  EXPECT_NE(digest_bytes(bytes + std::string(1, '\0')), base) << "the length counts";
  const auto dir = fresh_dir("content-hash");
  std::ofstream(dir / "f", std::ios::binary) << bytes;
  EXPECT_EQ(digest_file((dir / "f").string()).hash, base);
  EXPECT_EQ(digest_file((dir / "f").string()).bytes, 1000u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bih::test_model_cache
