// matrix_markdown.cpp: the matrix as a Markdown page for a docs site.
#include <map>
#include <string>

#include "harness/matrix_render.hpp"

namespace bih {
namespace {

// Colour squares next to the verdict word: colour helps, the word carries the meaning.
std::string verdict_square(const std::string& verdict) {
  static const std::map<std::string, std::string> squares{
      {"invariant", "🟩"},      {"batch_variant", "🟧"},   {"nondeterministic", "🟪"},
      {"config_variant", "🟫"}, {"prefill_variant", "🟦"}, {"error", "🟥"},
      {"unsupported", "⬜"},
  };
  const auto it = squares.find(verdict);
  return it == squares.end() ? "?" : it->second;
}

std::string code(const std::string& text) { return "`" + text + "`"; }

// Prompt across, step down: 'X' where the greedy token first changed, 'o' where only the logprob
// bits first moved, '.' elsewhere.
std::string text_heat_map(const HeatMap& map) {
  std::vector<std::string> grid(map.steps, std::string(map.prompts, '.'));
  for (const auto& m : map.marks) grid[m.step][m.prompt] = m.token_differs ? 'X' : 'o';
  std::string out = "```text\nstep \\ prompt 0.." + std::to_string(map.prompts - 1) + "\n";
  for (int s = 0; s < map.steps; ++s) {
    std::string label = std::to_string(s);
    out += std::string(4 - std::min<size_t>(4, label.size()), ' ') + label + "  " + grid[s] + "\n";
  }
  return out + "```\n";
}

void details_section(const CellEntry& e, std::string& out) {
  out += "<a id=\"" + e.anchor + "\"></a>\n\n### " + code(e.id) + "\n\n";
  out += verdict_square(e.verdict) + " **" + e.verdict + "**";
  if (e.expect) {
    out += " (expected " + *e.expect +
           (e.unchecked                    ? ": not checked on this machine"
            : e.expect_met.value_or(false) ? ": met"
                                           : ": NOT met") +
           ")";
  }
  out += " · report " + code(e.report_path) + "\n\n";
  if (!e.reason.empty()) out += "Reason:\n\n```text\n" + e.reason + "\n```\n\n";
  if (!e.localization.empty()) {
    out += "Where the bits first moved (bih explain):\n\n```text\n" + e.localization + "\n```\n\n";
  }
  for (const ComparisonView& c : e.comparisons) {
    out += "- **" + c.kind + "** " + escape_markdown(c.a) + " vs " + escape_markdown(c.b) + ": " +
           escape_markdown(c.summary) + "\n";
  }
  if (!e.comparisons.empty()) out += "\n";
  for (const ComparisonView& c : e.comparisons) {
    if (c.heat_map.marks.empty()) continue;
    out += "First divergences, " + c.kind + " (" + escape_markdown(c.a) + " vs " +
           escape_markdown(c.b) + "), one per prompt that differs, " +
           std::to_string(c.heat_map.marks.size()) + " kept" +
           (c.heat_map.capped ? " (capped: a report keeps at most 16 per comparison by default)"
                              : "") +
           ":\n\n";
    out += "| prompt | step | token a | token b | logprob a bits | logprob b bits | ulp |\n";
    out += "| ---: | ---: | ---: | ---: | --- | --- | ---: |\n";
    for (const auto& d : c.first_divergences) {
      out += "| " + d.at("prompt").dump() + " | " + d.at("step").dump() + " | " +
             d.at("token_a").dump() + " | " + d.at("token_b").dump() + " | " +
             code(d.at("logprob_a_bits").get<std::string>()) + " | " +
             code(d.at("logprob_b_bits").get<std::string>()) + " | " +
             (d.at("ulp").is_null() ? "NaN" : d.at("ulp").dump()) + " |\n";
    }
    out += "\nHeat map (X: token changed first here, o: only logprob bits):\n\n";
    out += text_heat_map(c.heat_map) + "\n";
  }
}

}  // namespace

std::string escape_markdown(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '\n':
      case '\r':
        out += ' ';
        break;
      case '|':
      case '\\':
      case '*':
      case '_':
      case '`':
      case '[':
      case ']':
        out += '\\';
        out += c;
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_markdown(const MatrixView& view) {
  std::string out = "# " + escape_markdown(view.title) + "\n\n";
  if (!view.environment_differences.empty()) {
    out +=
        "> **Warning: these reports come from different environments.** Their cells are not "
        "comparable side by side. Fields that differ:\n>\n";
    for (const auto& d : view.environment_differences) out += "> - " + escape_markdown(d) + "\n";
    out += "\n";
  }
  out += "## Environment\n\n| field | value |\n| --- | --- |\n";
  for (const auto& [key, value] : view.environment) {
    out += "| " + escape_markdown(key) + " | " + escape_markdown(value) + " |\n";
  }
  out += "\n" + std::to_string(view.report_count) + " reports:";
  for (const auto& [verdict, n] : view.verdict_totals) {
    out += " " + verdict_square(verdict) + " " + std::to_string(n) + " " + verdict;
  }
  out += ".\n\n";
  if (!view.missing_ids.empty()) {
    out += "**Missing scenarios** (named by a run manifest, no report found):\n\n";
    for (const auto& id : view.missing_ids) out += "- " + code(id) + "\n";
    out += "\n";
  }
  if (!view.duplicate_ids.empty()) {
    out += "Scenarios with several reports (the newest is shown):\n\n";
    for (const auto& id : view.duplicate_ids) out += "- " + code(id) + "\n";
    out += "\n";
  }
  out +=
      "Legend: 🟩 invariant · 🟧 batch_variant · 🟪 nondeterministic · "
      "🟫 config_variant · 🟦 prefill_variant · 🟥 error · ⬜ unsupported. "
      "Counts: logprobs whose bits differ / logprobs compared, bs=1 vs the batch "
      "(\"run to run\": the same batch twice). Each cell links to its details.\n\n";

  auto axis_header = [](const std::vector<std::string>& keys) {
    std::string h;
    for (const auto& k : keys) h += (h.empty() ? "" : ", ") + short_axis_name(k);
    return h;
  };
  for (const MatrixTable& table : view.tables) {
    out += "## " + escape_markdown(table.split.label) + "\n\n";
    out += "| " + escape_markdown(axis_header(view.options.rows)) + " \\\\ " +
           escape_markdown(axis_header(view.options.cols)) + " |";
    for (const auto& col : table.cols) out += " " + escape_markdown(col.label) + " |";
    out += "\n| --- |";
    for (size_t c = 0; c < table.cols.size(); ++c) out += " --- |";
    out += "\n";
    for (size_t r = 0; r < table.rows.size(); ++r) {
      out += "| " + escape_markdown(table.rows[r].label) + " |";
      for (size_t c = 0; c < table.cols.size(); ++c) {
        std::string cell;
        for (const CellEntry& e : table.cells[r][c].entries) {
          if (!cell.empty()) cell += "<br>";
          if (!e.distinguishing.empty()) cell += escape_markdown(e.distinguishing) + ": ";
          cell += verdict_square(e.verdict) + " [" + e.verdict + " " + escape_markdown(e.counts) +
                  "](#" + e.anchor + ")";
        }
        out += " " + (cell.empty() ? std::string("—") : cell) + " |";
      }
      out += "\n";
    }
    out += "\n";
  }

  if (!view.config_rows.empty()) {
    out +=
        "## Against the reference\n\n| configuration | differs in | verdict | counts |\n"
        "| --- | --- | --- | --- |\n";
    for (const ConfigRow& r : view.config_rows) {
      std::string counts;
      for (const auto& c : r.counts) counts += (counts.empty() ? "" : "<br>") + escape_markdown(c);
      out += "| [" + code(r.id) + "](#" + r.anchor + ") | " + escape_markdown(r.knobs) + " | " +
             verdict_square(r.verdict) + " " + r.verdict + " | " +
             (counts.empty() ? std::string("—") : counts) + " |\n";
    }
    out += "\n";
  }

  out += "## Details\n\n";
  for (const MatrixTable& table : view.tables) {
    for (const auto& row : table.cells) {
      for (const MatrixCell& cell : row) {
        for (const CellEntry& e : cell.entries) details_section(e, out);
      }
    }
  }
  return out;
}

}  // namespace bih
