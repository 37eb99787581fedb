// matrix_render.hpp: a MatrixView (matrix_view.hpp) as Markdown, CSV, JSON or one HTML page.
//
// Each format lives in its own thin file (matrix_markdown.cpp, matrix_csv.cpp, matrix_json.cpp,
// matrix_html.cpp) and only formats: what goes in which cell was decided by build_matrix_view.
// Every format shows the missing scenarios, and says so prominently when the reports come from
// different environments. The verdict is always written as text; colour is never the only signal.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/matrix_view.hpp"

namespace bih {

// A page for a docs site: environment, warnings, one table per split with a colour square and the
// verdict with its counts per entry, each linking to a details section (comparisons, first
// divergences, a text heat map).
std::string render_markdown(const MatrixView& view);

// One row per report (and one per missing scenario, verdict "missing"), header first, RFC 4180
// quoting. Columns: csv_columns().
std::string render_csv(const MatrixView& view);
const std::vector<std::string>& csv_columns();

// Schema "bih.matrix/1": title, axes, environment, environment_differences, mixed_environment,
// missing_ids, duplicate_ids, totals, tables[{split, rows, columns, cells[{row, column,
// entries[...]}]}].
nlohmann::json render_json(const MatrixView& view);

// One self-contained page (styles inline, no script or network): coloured cells that expand
// (<details>) to the scenario's comparisons, first divergences and an SVG heat map.
std::string render_html(const MatrixView& view);

// Escaping, one helper per format.
std::string escape_html(const std::string& text);      // & < > " '
std::string escape_markdown(const std::string& text);  // table-safe: | \ * _ ` [ ] < > and newlines
std::string csv_field(const std::string& text);        // quoted when it holds , " CR or LF

// The formats `bih matrix --format` accepts and the file each writes.
const std::vector<std::string>& matrix_formats();         // md, csv, json, html
std::string matrix_file_name(const std::string& format);  // "matrix.md", ...

// Renders `formats` into `out_dir` (created if missing), each file written atomically. Returns
// the paths written. Throws InputError for an unknown format.
std::vector<std::string> write_matrix_files(const MatrixView& view,
                                            const std::vector<std::string>& formats,
                                            const std::string& out_dir);

}  // namespace bih
