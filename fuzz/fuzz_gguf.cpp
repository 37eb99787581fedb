// fuzz_gguf.cpp: libFuzzer target for the GGUF reader (models/gguf.hpp, read_gguf).
//
// The input is a whole GGUF file. read_gguf promises that no allocation exceeds the file's size,
// so the fuzzer's RSS limit doubles as a check of that promise. Every tensor's bytes are then
// read back, as the tests do.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_input.hpp"
#include "models/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = bih::fuzz::write_input(data, size, ".gguf");
  bih::fuzz::rejects([&] {
    const bih::GgufFile file = bih::read_gguf(path);
    for (const bih::GgufTensorInfo& t : file.tensors) {
      bih::fuzz::rejects([&] { (void)file.tensor_bytes(t.name); });
    }
  });
  return 0;
}
