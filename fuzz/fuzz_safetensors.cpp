// fuzz_safetensors.cpp: libFuzzer target for the safetensors reader (models/safetensors.hpp).
//
// The input is a whole .safetensors file. Opening it validates the header; then every tensor
// the header lists is read with its own shape, which walks the data-section checks and the
// dtype conversions the header validation has vouched for.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_input.hpp"
#include "models/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = bih::fuzz::write_input(data, size, ".safetensors");
  bih::fuzz::rejects([&] {
    const bih::SafetensorsFile file(path);
    std::vector<bih::bf16> out;
    for (const auto& item : file.entries()) {  // no structured binding: clang 14 cannot capture one
      bih::fuzz::rejects([&] { file.read_bf16(item.first, item.second.shape, out); });
    }
  });
  return 0;
}
