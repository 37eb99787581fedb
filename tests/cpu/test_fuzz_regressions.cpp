// test_fuzz_regressions.cpp: inputs that the fuzz/ targets (or the sanitizer review behind them)
// found crashing a reader, each fed back to the reader that must now refuse it with InputError.
//
// One test per finding, named after what the input does; the bytes are spelled out here rather
// than kept as files so that each test says what was wrong with its input.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/safetensors.hpp"
#include "run_bih.hpp"
#include "test_util.hpp"

namespace bih {
namespace {

// Writes `bytes` to a fresh file in its own folder and returns the path.
std::string write_case(const std::string& name, const std::string& bytes) {
  const auto path = testing::fresh_dir("fuzz-" + name) / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

// A safetensors file: u64 little-endian header length, the header, the data.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

// [2^62] F32 needs 2^64 bytes, which wrapped to 0 and matched data_offsets [0, 0]; reading it then
// asked for 2^62 elements (std::length_error, not an InputError).
TEST(FuzzRegressions, SafetensorsByteCountThatWrapsIsRefused) {
  const std::string path = write_case(
      "wrap.safetensors",
      safetensors_bytes(
          R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""));
  const std::string msg = testing::input_error_of([&] {
    SafetensorsFile f(path);
    std::vector<bf16> out;
    f.read_bf16("w", {uint64_t{1} << 62}, out);
  });
  EXPECT_NE(msg.find("overflows"), std::string::npos) << msg;
}

}  // namespace
}  // namespace bih
