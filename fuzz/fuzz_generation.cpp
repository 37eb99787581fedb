// fuzz_generation.cpp: libFuzzer target for generation dumps (harness/generation.hpp).
//
// The input is a dump file's text, read as the driver and `bih diff` read it: read_json_file,
// then generation_from_json. A dump that parses is written back with to_json and read again,
// which must give the same JSON (the dump is the driver's only channel from a worker).
#include <cstddef>
#include <cstdint>

#include "base/json_file.hpp"
#include "fuzz/fuzz_input.hpp"
#include "harness/generation.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = bih::fuzz::write_input(data, size, ".json");
  bih::fuzz::rejects([&] {
    const bih::Generation g = bih::generation_from_json(bih::read_json_file(path), path);
    const nlohmann::json once = bih::to_json(g);
    if (bih::to_json(bih::generation_from_json(once, path)) != once) std::abort();
  });
  return 0;
}
