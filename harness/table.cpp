// table.cpp: column layout by display width (UTF-8 aware; colour codes added after padding).
#include "harness/table.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>

namespace bih {
namespace {

constexpr std::array<Verdict, 7> kAllVerdicts{Verdict::invariant,        Verdict::batch_variant,
                                              Verdict::nondeterministic, Verdict::config_variant,
                                              Verdict::prefill_variant,  Verdict::error,
                                              Verdict::unsupported};

// Terminal columns a string takes: one per code point (no wide characters appear in our cells),
// so UTF-8 continuation bytes do not count.
size_t display_width(const std::string& s) {
  size_t width = 0;
  for (unsigned char c : s) width += (c & 0xc0) != 0x80;
  return width;
}

std::string pad(const std::string& s, size_t width) {
  const size_t w = display_width(s);
  return w >= width ? s : s + std::string(width - w, ' ');
}

const char* ansi_color(Verdict v) {
  switch (v) {
    case Verdict::invariant:
      return "\x1b[32m";  // green
    case Verdict::batch_variant:
      return "\x1b[33m";  // yellow
    case Verdict::nondeterministic:
      return "\x1b[31m";  // red
    case Verdict::config_variant:
    case Verdict::prefill_variant:
      return "\x1b[35m";  // magenta
    case Verdict::error:
      return "\x1b[1;31m";  // bold red
    case Verdict::unsupported:
      return "\x1b[2m";  // dim
  }
  return "";
}

}  // namespace

Expected expected_of(const TableRow& row) {
  return Expected{.verdict = row.expect.value_or(kDefaultExpectation),
                  .declared = row.expect.has_value(),
                  .must_run = row.must_run};
}

bool should_use_color(int fd) {
  const char* no_color = std::getenv("NO_COLOR");
  if (no_color && *no_color) return false;
  const char* term = std::getenv("TERM");
  if (term && std::strcmp(term, "dumb") == 0) return false;
  return ::isatty(fd) == 1;
}

std::string render_table(const std::vector<TableRow>& rows, bool color) {
  enum Column { kMark, kId, kVerdict, kExpect, kBatch, kRepeat, kConfig, kWall, kColumns };
  const std::array<std::string, kColumns> header{"",
                                                 "scenario",
                                                 "verdict",
                                                 "expect",
                                                 "batch (bs=1 vs bs=N)",
                                                 "repeat or fresh (new process)",
                                                 "vs reference",
                                                 "wall"};
  // The vs-reference column and the config_variant count only where a matrix compares
  // configurations: other tables stay as they were.
  const bool any_config = std::any_of(rows.begin(), rows.end(), [](const TableRow& r) {
    return !r.config_summary.empty() || r.verdict == Verdict::config_variant;
  });
  std::vector<std::array<std::string, kColumns>> cells;
  std::map<Verdict, int> totals;
  int unmet = 0;
  std::vector<std::string> unchecked_reasons;
  for (const TableRow& r : rows) {
    const ExpectationCheck check = check_expectation(r.verdict, expected_of(r));
    unmet += is_failure(check);
    if (check == ExpectationCheck::unchecked) unchecked_reasons.push_back(r.reason);
    ++totals[r.verdict];
    const char* mark = is_failure(check)                      ? "✗"
                       : check == ExpectationCheck::unchecked ? "○"
                       : r.expect                             ? "✓"
                                                              : "";
    // Name the comparison: a repeat in the same process and a fresh process fail differently.
    std::string repeat = r.repeat_summary.empty() ? "-" : r.repeat_summary;
    if (!r.repeat_summary.empty() && !r.repeat_kind.empty()) repeat = r.repeat_kind + ": " + repeat;
    cells.push_back({mark, r.id, to_string(r.verdict), r.expect ? to_string(*r.expect) : "-",
                     r.batch_summary.empty() ? "-" : r.batch_summary, repeat,
                     r.config_summary.empty() ? "-" : r.config_summary,
                     fmt::format("{:.1f}s", r.wall_s)});
  }
  std::array<size_t, kColumns> widths{};
  for (int c = 0; c < kColumns; ++c) {
    widths[c] = display_width(header[c]);
    for (const auto& row : cells) widths[c] = std::max(widths[c], display_width(row[c]));
  }
  auto line = [&](const std::array<std::string, kColumns>& row, const Verdict* verdict) {
    std::string out;
    for (int c = 0; c < kColumns; ++c) {
      if (c == kConfig && !any_config) continue;
      // The last column is not padded (no trailing blanks); wall times are right-aligned.
      std::string cell = c == kWall ? std::string(widths[c] - display_width(row[c]), ' ') + row[c]
                                    : pad(row[c], widths[c]);
      if (c == kVerdict && verdict && color) {
        cell = ansi_color(*verdict) + row[c] + "\x1b[0m" + cell.substr(row[c].size());
      }
      out += cell;
      out += c + 1 < kColumns ? "  " : "\n";
    }
    return out;
  };
  std::string out = line(header, nullptr);
  for (size_t i = 0; i < cells.size(); ++i) {
    out += line(cells[i], &rows[i].verdict);
    for (const std::string& note : rows[i].notes) out += "    " + note + "\n";
  }

  std::string summary = fmt::format("{} scenario{}:", rows.size(), rows.size() == 1 ? "" : "s");
  for (size_t i = 0; i < kAllVerdicts.size(); ++i) {
    if (kAllVerdicts[i] == Verdict::config_variant && !any_config) continue;
    // Only scenarios with compare.prefill can be prefill_variant: other runs' totals stay as they
    // were.
    if (kAllVerdicts[i] == Verdict::prefill_variant && totals[kAllVerdicts[i]] == 0) continue;
    summary +=
        fmt::format("{} {} {}", i ? "," : "", totals[kAllVerdicts[i]], to_string(kAllVerdicts[i]));
  }
  summary += fmt::format("; {} not as expected", unmet);
  if (!unchecked_reasons.empty()) summary += "; " + unchecked_summary(unchecked_reasons);
  return out + summary + "\n";
}

}  // namespace bih
