// matrix_view.hpp: the pivot of `bih matrix`: a set of reports -> tables of cells.
//
// One report is one cell entry. Its row and column are read from the resolved scenario in the
// report (dotted keys such as "parallel.tp"); the split keys pick which table it lands in (one per
// kernel family and backend by default). Reports that land in one cell (they differ in a knob on
// no axis, e.g. the collectives) are all kept, each labelled by the knobs that tell them apart.
// The renderers (matrix_render.hpp) only format this view; every decision is made here.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/report_set.hpp"

namespace bih {

struct MatrixOptions {
  std::vector<std::string> rows{"parallel.tp", "sequence_parallel.enabled"};
  std::vector<std::string> cols{"cudagraph.mode", "prefix_caching.enabled"};
  std::vector<std::string> split{"kernels", "backend"};
  std::string title = "bih compatibility matrix";
};

// Where one comparison's first divergences fall, prompt x step. Reports keep only the first
// divergence of each prompt and at most a fixed number of prompts per comparison (16 by
// default), so a marked cell is where a prompt's bits first moved, and the map may be capped.
struct HeatMap {
  struct Mark {
    int prompt = 0;
    int step = 0;
    bool token_differs = false;  // the greedy token changed here, not only the logprob bits
    std::string tooltip;         // "prompt 3, step 5: token 17 vs 17, 0xbf.. vs 0xbf.. (2 ulp)"
  };
  int prompts = 0;  // sequences compared
  int steps = 0;    // tokens compared per sequence
  std::vector<Mark> marks;
  // The report kept fewer first divergences than there are diverged sequences, or exactly the
  // default cap: more prompts may differ than are marked.
  bool capped = false;
};

struct ComparisonView {
  std::string kind;  // batch | repeat | fresh | cache | config
  std::string a, b;  // generation labels
  std::string summary;
  int64_t logprobs_differ = 0, logprobs_compared = 0;
  int64_t tokens_differ = 0, tokens_compared = 0;
  int64_t sequences_diverged = 0, sequences_compared = 0;
  std::optional<uint64_t> max_ulp;   // null in the report when a NaN is involved
  nlohmann::json first_divergences;  // the report's array, as is
  HeatMap heat_map;
};

// One report placed in a cell.
struct CellEntry {
  std::string id;
  std::string anchor;   // "s-" + 12 hex digits of the id's hash: stable link target
  std::string verdict;  // invariant | batch_variant | nondeterministic | error | unsupported
  // "1522/1536 logprobs" from the comparison that decided the verdict (", run to run" added when
  // that is a repeat or fresh comparison); the first line of the reason for error/unsupported.
  std::string counts;
  // The knobs (short names, "rs=ring") that tell this entry from the others in the same cell;
  // empty when the cell holds only this entry.
  std::string distinguishing;
  std::optional<std::string> expect;
  std::optional<bool> expect_met;  // check_expectation's met/missed; nullopt: none or unchecked
  bool unchecked = false;          // unsupported here while `expect` named another verdict
  std::string reason;
  std::string localization;  // bih explain's summary: the first op whose bits moved
  std::string report_path;
  std::vector<ComparisonView> comparisons;
};

struct MatrixCell {
  std::vector<CellEntry> entries;  // empty: no report for this combination
};

// An axis value combination: ("tp", "4"), ("sp", "on").
struct AxisKey {
  std::vector<nlohmann::json> values;  // raw values, in axis order; null where a key is absent
  std::string label;                   // "tp=4, sp=on"
};

struct MatrixTable {
  AxisKey split;
  std::vector<AxisKey> rows;                   // sorted by value (numbers numerically)
  std::vector<AxisKey> cols;                   // sorted likewise
  std::vector<std::vector<MatrixCell>> cells;  // [row][col]
};

// One configuration of a matrix with a "compare" block, against its reference (the
// configuration-vs-reference view of docs/config-comparison.md).
struct ConfigRow {
  std::string id;
  std::string reference_id;
  std::string knobs;    // "TP=4 vs TP=1"; "the reference" for the reference itself
  std::string verdict;  // the configuration's own verdict
  std::string anchor;   // its entry in the details
  // summarize() of each config comparison, "bs=1: ..." and "bs=64: ..."; empty for the reference
  // and for a configuration that ended in error or unsupported (its reason's first line instead)
  std::vector<std::string> counts;
  bool is_reference = false;
};

struct MatrixView {
  std::string title;
  MatrixOptions options;
  // The environment of the reports, "key: value" lines (GPU, driver, CUDA, NCCL, NCCL env, bih
  // commit, CPU, OS, compiler), from the first report; see environment_differences.
  std::vector<std::pair<std::string, std::string>> environment;
  // Environment fields whose values differ between reports (from load_report_set): when not
  // empty, the matrix mixes environments and every renderer says so prominently.
  std::vector<std::string> environment_differences;
  std::vector<std::string> missing_ids;    // named by a run manifest, no report found
  std::vector<std::string> duplicate_ids;  // several reports; the newest is shown
  std::map<std::string, int> verdict_totals;
  int report_count = 0;
  std::vector<MatrixTable> tables;
  // Reports that carry config_reference, in report order; empty when none does.
  std::vector<ConfigRow> config_rows;
};

// The short name a dotted key has in canonical ids and labels ("parallel.tp" -> "tp",
// "sequence_parallel.enabled" -> "sp"); unknown keys keep their dotted form.
std::string short_axis_name(const std::string& dotted_key);

// A scenario value as a label shows it: booleans on/off, strings bare, anything else as JSON.
std::string axis_value_text(const nlohmann::json& value);

// Throws InputError when an axis key is not a scenario key (listing the valid ones), or appears
// on two axes. build_matrix_view checks the same; a caller may check before reading reports.
void check_matrix_axes(const MatrixOptions& options);

// Pivots the reports. Throws InputError when an axis key is empty or appears on two axes.
MatrixView build_matrix_view(const ReportSet& set, const MatrixOptions& options);

}  // namespace bih
