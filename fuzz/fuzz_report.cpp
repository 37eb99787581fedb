// fuzz_report.cpp: libFuzzer target for reading reports (harness/report.hpp) and for what reads
// them next.
//
// The input is a report file's text. read_report checks the few keys it promises; a report it
// accepts is then gathered by load_report_set and judged by `bih gate` (verdict_evidence,
// decide_gate, render_gate_text), so the target walks those with this one report. The matrix
// view is left out on purpose: it reads every comparison field that reports/report.schema.json
// defines and read_report does not check (a report without "sequences_compared" ends in
// nlohmann's out_of_range), which needs a schema-checked reader first.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_input.hpp"
#include "harness/expectations.hpp"
#include "harness/gate.hpp"
#include "harness/report.hpp"
#include "harness/report_set.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = bih::fuzz::write_input(data, size, ".json");
  bih::fuzz::rejects([&] {
    const nlohmann::json report = bih::read_report(path);
    (void)bih::report_file_name(report.at("id").get<std::string>());
    (void)bih::verdict_evidence(report);
    if (report.contains("environment")) (void)bih::comparable_environment(report["environment"]);

    const bih::ReportSet set = bih::load_report_set({path});
    const bih::GateResult gate = bih::decide_gate(bih::ExpectationsFile{}, set);
    (void)bih::render_gate_text(gate);
  });
  return 0;
}
