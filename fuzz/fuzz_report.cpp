// fuzz_report.cpp: libFuzzer target for reading reports (harness/report.hpp) and for what reads
// them next.
//
// The input is a report file's text. read_report checks the few keys it promises; a report it
// accepts is then trusted by `bih gate` (verdict_evidence, decide_gate), `bih matrix`
// (load_report_set, build_matrix_view, every renderer) and the environment comparison, so the
// target walks all of them with this one report: a check that read_report should have made
// shows up as a crash there.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_input.hpp"
#include "harness/expectations.hpp"
#include "harness/gate.hpp"
#include "harness/matrix_render.hpp"
#include "harness/matrix_view.hpp"
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
    const bih::MatrixView view = bih::build_matrix_view(set, bih::MatrixOptions{});
    (void)bih::render_markdown(view);
    (void)bih::render_csv(view);
    (void)bih::render_json(view).dump();
    (void)bih::render_html(view);
    const bih::GateResult gate = bih::decide_gate(bih::ExpectationsFile{}, set);
    (void)bih::render_gate_text(gate);
  });
  return 0;
}
