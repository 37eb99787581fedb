// matrix_html.cpp: the matrix as one self-contained HTML page (styles inline, no script, no
// network). Each report is a coloured <details> block in its cell: the summary shows the verdict
// and its counts, expanding it shows the comparisons, the first divergences and an SVG heat map.
#include <string>

#include "harness/matrix_render.hpp"

namespace bih {
namespace {

// Colours per verdict; the verdict word is always printed too (colour is never the only signal).
constexpr const char* kStyle = R"css(
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em; color: #1d1d1d; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.5em; }
code, pre { font: 12px/1.3 ui-monospace, "DejaVu Sans Mono", monospace; }
table { border-collapse: collapse; }
th, td { border: 1px solid #bbb; padding: 4px 6px; vertical-align: top; text-align: left; }
table.matrix th { background: #f2f2f2; }
table.env td:first-child { font-weight: 600; }
.banner { border: 2px solid #b26a00; background: #fff4ce; padding: 0.6em 1em; margin: 1em 0; }
.banner.missing { border-color: #666; background: #f4f4f4; }
.entry { margin: 2px 0; border-radius: 3px; }
.entry > summary { padding: 3px 6px; cursor: pointer; }
.entry .verdict { font-weight: 700; }
.v-invariant { background-color: rgb(166, 219, 160); color: #0b3d14; }
.v-batch_variant { background-color: rgb(244, 162, 97); color: #4a1f00; }
.v-nondeterministic { background-color: rgb(195, 166, 224); color: #2e0f4d; }
.v-config_variant { background-color: rgb(233, 150, 200); color: #4d0f33; }
.v-prefill_variant { background-color: rgb(146, 197, 222); color: #0a2f45; }
.v-error { background-color: rgb(139, 0, 0); color: #ffffff; }
.v-unsupported { background-color: rgb(208, 208, 208); color: #333333; }
.no-report { color: #888; }
.legend span { display: inline-block; padding: 2px 8px; margin-right: 6px; border-radius: 3px; }
.details { background: #ffffff; color: #1d1d1d; padding: 6px 8px; border: 1px solid #999; }
.details table { margin: 4px 0; }
.details td, .details th { font-size: 12px; padding: 2px 4px; }
figure.heatmap { margin: 6px 0; }
figure.heatmap figcaption { font-size: 12px; color: #444; }
pre.reason { white-space: pre-wrap; max-width: 60em; }
)css";

std::string verdict_class(const std::string& verdict) { return "v-" + verdict; }

// Prompt across, step down; one square per first divergence, dark red where the greedy token
// changed, orange where only the logprob bits moved. Grid lines every 8 prompts and steps.
std::string heat_map_svg(const HeatMap& map) {
  constexpr int kCell = 8, kLeft = 34, kTop = 18;
  const int width = kLeft + map.prompts * kCell + 4, height = kTop + map.steps * kCell + 4;
  std::string svg = "<svg class=\"heatmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(width) + "\" height=\"" + std::to_string(height) +
                    "\" role=\"img\" aria-label=\"first divergences, prompt by step\">";
  svg += "<text x=\"" + std::to_string(kLeft) + "\" y=\"12\" font-size=\"10\">prompt 0.." +
         std::to_string(map.prompts - 1) + " &#8594;</text>";
  svg += "<text x=\"2\" y=\"" + std::to_string(kTop + 10) + "\" font-size=\"10\">step</text>";
  svg += "<rect x=\"" + std::to_string(kLeft) + "\" y=\"" + std::to_string(kTop) + "\" width=\"" +
         std::to_string(map.prompts * kCell) + "\" height=\"" + std::to_string(map.steps * kCell) +
         "\" fill=\"#f1f1f1\" stroke=\"#999\"/>";
  for (int p = 8; p < map.prompts; p += 8) {
    const int x = kLeft + p * kCell;
    svg += "<line x1=\"" + std::to_string(x) + "\" y1=\"" + std::to_string(kTop) + "\" x2=\"" +
           std::to_string(x) + "\" y2=\"" + std::to_string(kTop + map.steps * kCell) +
           "\" stroke=\"#ddd\"/>";
  }
  for (int s = 8; s < map.steps; s += 8) {
    const int y = kTop + s * kCell;
    svg += "<line x1=\"" + std::to_string(kLeft) + "\" y1=\"" + std::to_string(y) + "\" x2=\"" +
           std::to_string(kLeft + map.prompts * kCell) + "\" y2=\"" + std::to_string(y) +
           "\" stroke=\"#ddd\"/>";
    svg += "<text x=\"2\" y=\"" + std::to_string(y + 8) + "\" font-size=\"9\">" +
           std::to_string(s) + "</text>";
  }
  for (const auto& m : map.marks) {
    svg += "<rect class=\"mark\" x=\"" + std::to_string(kLeft + m.prompt * kCell) + "\" y=\"" +
           std::to_string(kTop + m.step * kCell) + "\" width=\"" + std::to_string(kCell) +
           "\" height=\"" + std::to_string(kCell) + "\" fill=\"" +
           (m.token_differs ? "#b30000" : "#f08c00") + "\"><title>" + escape_html(m.tooltip) +
           "</title></rect>";
  }
  return svg + "</svg>";
}

std::string divergence_table(const nlohmann::json& divergences) {
  std::string out =
      "<table class=\"divergences\"><tr><th>prompt</th><th>step</th><th>token a</th>"
      "<th>token b</th><th>logprob a bits</th><th>logprob b bits</th><th>ulp</th></tr>";
  for (const auto& d : divergences) {
    out += "<tr><td>" + d.at("prompt").dump() + "</td><td>" + d.at("step").dump() + "</td><td>" +
           d.at("token_a").dump() + "</td><td>" + d.at("token_b").dump() + "</td><td><code>" +
           escape_html(d.at("logprob_a_bits").get<std::string>()) + "</code></td><td><code>" +
           escape_html(d.at("logprob_b_bits").get<std::string>()) + "</code></td><td>" +
           (d.at("ulp").is_null() ? "NaN" : d.at("ulp").dump()) + "</td></tr>";
  }
  return out + "</table>";
}

std::string entry_html(const CellEntry& e) {
  std::string out = "<details class=\"entry " + verdict_class(e.verdict) + "\" id=\"" + e.anchor +
                    "\" data-id=\"" + escape_html(e.id) + "\" data-verdict=\"" + e.verdict +
                    "\"><summary>";
  if (!e.distinguishing.empty()) {
    out += "<span class=\"knobs\">" + escape_html(e.distinguishing) + ":</span> ";
  }
  out += "<span class=\"verdict\">" + e.verdict + "</span> <span class=\"counts\">" +
         escape_html(e.counts) + "</span>";
  if (e.expect_met == false) out += " <span class=\"unmet\">(expected " + *e.expect + ")</span>";
  out += "</summary><div class=\"details\"><p><code>" + escape_html(e.id) + "</code></p>";
  if (e.expect) {
    out += "<p>expected " + escape_html(*e.expect) +
           (e.unchecked                    ? ": not checked on this machine"
            : e.expect_met.value_or(false) ? ": met"
                                           : ": <strong>not met</strong>") +
           "</p>";
  }
  if (!e.reason.empty()) out += "<pre class=\"reason\">" + escape_html(e.reason) + "</pre>";
  if (!e.localization.empty()) {
    out +=
        "<p><strong>Where the bits first moved</strong> (bih explain):</p><pre class=\"reason "
        "localization\">" +
        escape_html(e.localization) + "</pre>";
  }
  if (!e.comparisons.empty()) {
    out += "<table class=\"comparisons\"><tr><th>comparison</th><th>result</th></tr>";
    for (const auto& c : e.comparisons) {
      out += "<tr><td>" + escape_html(c.kind + ": " + c.a + " vs " + c.b) + "</td><td>" +
             escape_html(c.summary) + "</td></tr>";
    }
    out += "</table>";
  }
  for (const auto& c : e.comparisons) {
    if (c.heat_map.marks.empty()) continue;
    out += "<figure class=\"heatmap\"><figcaption>First divergences, " +
           escape_html(c.kind + " (" + c.a + " vs " + c.b + ")") +
           ": one per prompt that differs, " + std::to_string(c.heat_map.marks.size()) + " kept" +
           (c.heat_map.capped ? " (capped: a report keeps at most 16 per comparison by default)"
                              : "") +
           ". Dark red: the token changed first here; orange: only the logprob bits." +
           "</figcaption>" + heat_map_svg(c.heat_map) + "</figure>";
    out += divergence_table(c.first_divergences);
  }
  if (!e.report_path.empty()) {
    out += "<p><a href=\"" + escape_html(e.report_path) + "\">report JSON</a></p>";
  }
  return out + "</div></details>";
}

std::string axis_header(const std::vector<std::string>& keys) {
  std::string h;
  for (const auto& k : keys) h += (h.empty() ? "" : ", ") + short_axis_name(k);
  return h;
}

}  // namespace

std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_html(const MatrixView& view) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" +
                    escape_html(view.title) + "</title><style>" + kStyle +
                    "</style></head><body>\n<h1>" + escape_html(view.title) + "</h1>\n";
  if (!view.environment_differences.empty()) {
    out +=
        "<div class=\"banner\" id=\"mixed-environment\" role=\"alert\"><strong>Warning: these "
        "reports come from different environments.</strong> Their cells are not comparable "
        "side by side. Fields that differ:<ul>";
    for (const auto& d : view.environment_differences) out += "<li>" + escape_html(d) + "</li>";
    out += "</ul></div>\n";
  }
  out += "<h2>Environment</h2><table class=\"env\" id=\"environment\">";
  for (const auto& [key, value] : view.environment) {
    out += "<tr><td>" + escape_html(key) + "</td><td>" + escape_html(value) + "</td></tr>";
  }
  out += "</table>\n<p class=\"totals\">" + std::to_string(view.report_count) + " reports:";
  for (const auto& [verdict, n] : view.verdict_totals) {
    out += " " + std::to_string(n) + " " + escape_html(verdict) + ";";
  }
  out += "</p>\n";
  if (!view.missing_ids.empty()) {
    out +=
        "<div class=\"banner missing\" id=\"missing\"><strong>Missing scenarios</strong> "
        "(named by a run manifest, no report found):<ul>";
    for (const auto& id : view.missing_ids) out += "<li><code>" + escape_html(id) + "</code></li>";
    out += "</ul></div>\n";
  }
  if (!view.duplicate_ids.empty()) {
    out += "<p>Scenarios with several reports (the newest is shown):</p><ul>";
    for (const auto& id : view.duplicate_ids)
      out += "<li><code>" + escape_html(id) + "</code></li>";
    out += "</ul>\n";
  }
  out += "<p class=\"legend\">";
  for (const char* v : {"invariant", "batch_variant", "nondeterministic", "config_variant",
                        "prefill_variant", "error", "unsupported"}) {
    out += "<span class=\"" + verdict_class(v) + "\">" + v + "</span>";
  }
  out +=
      "<br>Counts: logprobs whose bits differ / logprobs compared, bs=1 vs the batch (\"run to "
      "run\": the same batch twice). Click a cell for its details.</p>\n";

  for (const MatrixTable& table : view.tables) {
    out += "<section class=\"split\" data-split=\"" + escape_html(table.split.label) + "\"><h2>" +
           escape_html(table.split.label) + "</h2><table class=\"matrix\"><thead><tr><th>" +
           escape_html(axis_header(view.options.rows)) + " \\ " +
           escape_html(axis_header(view.options.cols)) + "</th>";
    for (const auto& col : table.cols) out += "<th>" + escape_html(col.label) + "</th>";
    out += "</tr></thead><tbody>\n";
    for (size_t r = 0; r < table.rows.size(); ++r) {
      out += "<tr><th>" + escape_html(table.rows[r].label) + "</th>";
      for (size_t c = 0; c < table.cols.size(); ++c) {
        const MatrixCell& cell = table.cells[r][c];
        out += "<td class=\"cell\">";
        if (cell.entries.empty()) out += "<span class=\"no-report\">no report</span>";
        for (const CellEntry& e : cell.entries) out += entry_html(e);
        out += "</td>";
      }
      out += "</tr>\n";
    }
    out += "</tbody></table></section>\n";
  }
  if (!view.config_rows.empty()) {
    out +=
        "<section id=\"config-comparisons\"><h2>Against the reference</h2><table "
        "class=\"matrix\"><thead><tr><th>configuration</th><th>differs in</th><th>verdict</th>"
        "<th>counts</th></tr></thead><tbody>\n";
    for (const ConfigRow& r : view.config_rows) {
      std::string counts;
      for (const auto& c : r.counts) counts += (counts.empty() ? "" : "<br>") + escape_html(c);
      out += "<tr><td><code>" + escape_html(r.id) + "</code></td><td>" + escape_html(r.knobs) +
             "</td><td class=\"" + verdict_class(r.verdict) + "\">" + escape_html(r.verdict) +
             "</td><td>" + (counts.empty() ? std::string("—") : counts) + "</td></tr>\n";
    }
    out += "</tbody></table></section>\n";
  }
  return out + "</body></html>\n";
}

}  // namespace bih
