// fuzz_report.cpp: libFuzzer target for reading reports (harness/report.hpp, read_report).
//
// The input is a report file's text. A report that read_report accepts is what the matrix, the
// gate and `bih explain` then trust, so its file name is derived from its id as they do.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_input.hpp"
#include "harness/report.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = bih::fuzz::write_input(data, size, ".json");
  bih::fuzz::rejects([&] {
    const nlohmann::json report = bih::read_report(path);
    (void)bih::report_file_name(report.at("id").get<std::string>());
  });
  return 0;
}
