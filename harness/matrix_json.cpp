// matrix_json.cpp: the matrix as a JSON document ("bih.matrix/1") for other tools.
#include "harness/matrix_render.hpp"

namespace bih {
namespace {

using json = nlohmann::json;

json axis_key_json(const AxisKey& key, const std::vector<std::string>& dotted_keys) {
  json values = json::object();
  for (size_t i = 0; i < dotted_keys.size(); ++i) values[dotted_keys[i]] = key.values[i];
  return {{"label", key.label}, {"values", values}};
}

json comparison_json(const ComparisonView& c) {
  return {{"kind", c.kind},
          {"a", c.a},
          {"b", c.b},
          {"summary", c.summary},
          {"logprobs_differ", c.logprobs_differ},
          {"logprobs_compared", c.logprobs_compared},
          {"tokens_differ", c.tokens_differ},
          {"tokens_compared", c.tokens_compared},
          {"sequences_diverged", c.sequences_diverged},
          {"sequences_compared", c.sequences_compared},
          {"max_ulp", c.max_ulp ? json(*c.max_ulp) : json(nullptr)},
          {"first_divergences", c.first_divergences},
          {"first_divergences_capped", c.heat_map.capped}};
}

json entry_json(const CellEntry& e) {
  json comparisons = json::array();
  for (const auto& c : e.comparisons) comparisons.push_back(comparison_json(c));
  return {{"id", e.id},
          {"verdict", e.verdict},
          {"counts", e.counts},
          {"distinguishing", e.distinguishing.empty() ? json(nullptr) : json(e.distinguishing)},
          {"expect", e.expect ? json(*e.expect) : json(nullptr)},
          {"expect_met", e.expect_met ? json(*e.expect_met) : json(nullptr)},
          {"unchecked", e.unchecked},
          {"reason", e.reason.empty() ? json(nullptr) : json(e.reason)},
          {"localization", e.localization.empty() ? json(nullptr) : json(e.localization)},
          {"report", e.report_path},
          {"comparisons", comparisons}};
}

}  // namespace

json render_json(const MatrixView& view) {
  json environment = json::object();
  for (const auto& [key, value] : view.environment) environment[key] = value;
  json tables = json::array();
  for (const MatrixTable& table : view.tables) {
    json rows = json::array(), cols = json::array(), cells = json::array();
    for (const auto& r : table.rows) rows.push_back(axis_key_json(r, view.options.rows));
    for (const auto& c : table.cols) cols.push_back(axis_key_json(c, view.options.cols));
    for (size_t r = 0; r < table.rows.size(); ++r) {
      for (size_t c = 0; c < table.cols.size(); ++c) {
        const MatrixCell& cell = table.cells[r][c];
        if (cell.entries.empty()) continue;
        json entries = json::array();
        for (const CellEntry& e : cell.entries) entries.push_back(entry_json(e));
        cells.push_back({{"row", r}, {"column", c}, {"entries", entries}});
      }
    }
    tables.push_back({{"split", axis_key_json(table.split, view.options.split)},
                      {"rows", rows},
                      {"columns", cols},
                      {"cells", cells}});
  }
  json config_rows = json::array();
  for (const ConfigRow& r : view.config_rows) {
    config_rows.push_back({{"id", r.id},
                           {"reference", r.reference_id},
                           {"is_reference", r.is_reference},
                           {"differs_in", r.knobs},
                           {"verdict", r.verdict},
                           {"counts", r.counts}});
  }
  return {{"schema", "bih.matrix/1"},
          {"config_comparisons", config_rows},
          {"title", view.title},
          {"axes",
           {{"rows", view.options.rows},
            {"columns", view.options.cols},
            {"split", view.options.split}}},
          {"environment", environment},
          {"mixed_environment", !view.environment_differences.empty()},
          {"environment_differences", view.environment_differences},
          {"report_count", view.report_count},
          {"missing_ids", view.missing_ids},
          {"duplicate_ids", view.duplicate_ids},
          {"totals", view.verdict_totals},
          {"tables", tables}};
}

}  // namespace bih
