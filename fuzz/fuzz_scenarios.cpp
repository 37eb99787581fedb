// fuzz_scenarios.cpp: libFuzzer target for the scenario and matrix loader (load_scenarios).
//
// The input is a scenario or matrix file's text. It goes through the public entry point, file
// and all, so that every guard the loader has (or gains, such as a nesting limit in
// base/json_file.hpp) is the one exercised here. Each loaded scenario's id is derived too:
// that is the next thing bih does with a scenario.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_input.hpp"
#include "spec/scenario_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = bih::fuzz::write_input(data, size, ".json");
  bih::fuzz::rejects([&] {
    const bih::ScenarioSet set = bih::load_scenarios(path);
    for (const bih::Scenario& s : set.scenarios) (void)s.id();
  });
  return 0;
}
