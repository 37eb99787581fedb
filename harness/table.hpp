// table.hpp: the terminal summary of a run, one row per scenario, and a totals line.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/expectations.hpp"
#include "spec/verdict.hpp"

namespace bih {

struct TableRow {
  std::string id;
  Verdict verdict = Verdict::error;
  std::optional<Verdict> expect;
  std::string batch_summary;   // summarize() of the batch comparison; empty: none ran
  std::string repeat_summary;  // summarize() of the repeat or fresh comparison; empty: none ran
  double wall_s = 0;
  // Which comparison repeat_summary shows: "repeat" (the batch again, same process) or "fresh"
  // (a new process); the cell names it, since the two fail for different reasons.
  std::string repeat_kind;
  std::string reason;     // why error/unsupported; the summary names what could not run
  bool must_run = false;  // bih run --require-all: unsupported fails instead of unchecked
  // A matrix with a "compare" block: summarize() of the config comparison that differs (else the
  // first), or "the reference" for the reference itself; empty: not compared.
  std::string config_summary;
  // Lines shown indented under the row: compare.prefill's comparisons ("prefill vs decode: ..."),
  // and what compare.top_k / row_digest could not compare.
  std::vector<std::string> notes;
};

// The expectation a run row is judged by: its `expect` (declared), else the default invariant.
Expected expected_of(const TableRow& row);

// True when output on file descriptor `fd` should carry ANSI colours: it is a terminal, NO_COLOR
// is unset or empty (https://no-color.org), and TERM is not "dumb".
bool should_use_color(int fd);

// Aligned columns: a mark from check_expectation ('✗' missed or required but unchecked, '✓' met
// a declared expect, '○' unchecked here, blank for an undeclared invariant), scenario id, verdict
// (coloured when `color`), expect, batch and repeat summaries ('-' when empty; a fresh-process
// comparison says "fresh: "), a "vs reference" column when any row has a config_summary or is
// config_variant, wall time. The totals count config_variant only in such a table. The last line
// counts rows per verdict, the failures of check_expectation ("not as expected") and, when any, the
// unchecked ones with their reasons. A row's notes follow it, each on its own line indented by four
// blanks. prefill_variant is counted only when some row has it. Every line ends with '\n'.
std::string render_table(const std::vector<TableRow>& rows, bool color = false);

}  // namespace bih
