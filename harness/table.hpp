// table.hpp: the terminal summary of a run, one row per scenario, and a totals line.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spec/verdict.hpp"

namespace bih {

struct TableRow {
  std::string id;
  Verdict verdict = Verdict::error;
  std::optional<Verdict> expect;
  std::string batch_summary;   // summarize() of the batch comparison; empty: none ran
  std::string repeat_summary;  // summarize() of the repeat comparison; empty: none ran
  double wall_s = 0;
};

// True when output on file descriptor `fd` should carry ANSI colours: it is a terminal, NO_COLOR
// is unset or empty (https://no-color.org), and TERM is not "dumb".
bool should_use_color(int fd);

// Aligned columns: a mark ('✗' when the verdict does not meet the expectation, '✓' when it does,
// blank without one), scenario id, verdict (coloured when `color`), expect, batch and repeat
// summaries ('-' when empty), wall time. The last line counts rows per verdict and unmet
// expectations. Every line ends with '\n'.
// The scenario expects a verdict this machine cannot produce (it answered `unsupported`): the
// claim is unchecked here, neither met nor a failure.
bool unchecked_here(Verdict verdict, const std::optional<Verdict>& expect);

// Whether a scenario missed what was expected of it: its `expect`, or invariant when none is
// given (an unsupported verdict with another expectation claims nothing here). The run's exit
// code and the table's "not as expected" count both follow this one rule.
bool misses_expectation(Verdict verdict, const std::optional<Verdict>& expect);

std::string render_table(const std::vector<TableRow>& rows, bool color = false);

}  // namespace bih
