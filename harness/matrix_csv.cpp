// matrix_csv.cpp: the matrix as CSV, one row per report (and per missing scenario).
#include <string>

#include "harness/matrix_render.hpp"

namespace bih {
namespace {

const ComparisonView* first_of_kind(const CellEntry& e, const std::string& kind) {
  for (const auto& c : e.comparisons) {
    if (c.kind == kind) return &c;
  }
  return nullptr;
}

std::string count_or_empty(const ComparisonView* c, int64_t ComparisonView::*field) {
  return c ? std::to_string(c->*field) : std::string();
}

// The run-to-run comparison with the most differing logprobs (repeat or fresh).
const ComparisonView* worst_run_to_run(const CellEntry& e) {
  const ComparisonView* worst = nullptr;
  for (const auto& c : e.comparisons) {
    if (c.kind == "batch") continue;
    if (!worst || c.logprobs_differ > worst->logprobs_differ) worst = &c;
  }
  return worst;
}

std::string join_row(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) line += (i ? "," : "") + csv_field(fields[i]);
  return line + "\r\n";
}

}  // namespace

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> columns{"table",
                                                "row",
                                                "column",
                                                "id",
                                                "verdict",
                                                "counts",
                                                "distinguishing",
                                                "expect",
                                                "expect_met",
                                                "batch_logprobs_differ",
                                                "batch_logprobs_compared",
                                                "batch_tokens_differ",
                                                "batch_sequences_diverged",
                                                "run_to_run_logprobs_differ",
                                                "run_to_run_logprobs_compared",
                                                "reason",
                                                "report"};
  return columns;
}

std::string render_csv(const MatrixView& view) {
  std::string out = join_row(csv_columns());
  for (const MatrixTable& table : view.tables) {
    for (size_t r = 0; r < table.rows.size(); ++r) {
      for (size_t c = 0; c < table.cols.size(); ++c) {
        for (const CellEntry& e : table.cells[r][c].entries) {
          const ComparisonView* batch = first_of_kind(e, "batch");
          const ComparisonView* rerun = worst_run_to_run(e);
          out += join_row({table.split.label, table.rows[r].label, table.cols[c].label, e.id,
                           e.verdict, e.counts, e.distinguishing, e.expect.value_or(""),
                           e.expect_met ? (*e.expect_met ? "true" : "false") : "",
                           count_or_empty(batch, &ComparisonView::logprobs_differ),
                           count_or_empty(batch, &ComparisonView::logprobs_compared),
                           count_or_empty(batch, &ComparisonView::tokens_differ),
                           count_or_empty(batch, &ComparisonView::sequences_diverged),
                           count_or_empty(rerun, &ComparisonView::logprobs_differ),
                           count_or_empty(rerun, &ComparisonView::logprobs_compared), e.reason,
                           e.report_path});
        }
      }
    }
  }
  for (const std::string& id : view.missing_ids) {
    std::vector<std::string> fields(csv_columns().size());
    fields[3] = id;
    fields[4] = "missing";
    fields[15] = "named by a run manifest, no report found";
    out += join_row(fields);
  }
  return out;
}

}  // namespace bih
