// fuzz_expectations.cpp: libFuzzer target for expectations files (harness/expectations.hpp).
//
// parse_expectations takes the text itself, so no file is needed. Every entry that parses is
// matched against its own id: an exact id must find its own entry (ids are unique, and exact
// beats glob). A glob need not match itself ("\*" matches only "*"), so it is only matched.
// Each entry is then written back as the gate suggests it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_input.hpp"
#include "harness/expectations.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  bih::fuzz::rejects([&] {
    const bih::ExpectationsFile file = bih::parse_expectations(text, "fuzz.json");
    for (const bih::Expectation& e : file.entries) {
      const bih::Expectation* found = bih::match_expectation(file, e.id);
      if (!e.glob && found != &e) std::abort();
      (void)bih::entry_json(e.id, e.verdict, e.why);
    }
  });
  return 0;
}
