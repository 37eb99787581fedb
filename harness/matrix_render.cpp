// matrix_render.cpp: what the four matrix formats share: their names, their files, writing them.
#include "harness/matrix_render.hpp"

#include <filesystem>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"

namespace fs = std::filesystem;

namespace bih {

const std::vector<std::string>& matrix_formats() {
  static const std::vector<std::string> formats{"md", "csv", "json", "html"};
  return formats;
}

std::string matrix_file_name(const std::string& format) { return "matrix." + format; }

std::vector<std::string> write_matrix_files(const MatrixView& view,
                                            const std::vector<std::string>& formats,
                                            const std::string& out_dir) {
  // Links from the matrix to the reports must work where the matrix is published, so report
  // paths become relative to the output folder.
  MatrixView relative = view;
  const fs::path base = fs::absolute(out_dir).lexically_normal();
  for (MatrixTable& table : relative.tables) {
    for (auto& row : table.cells) {
      for (MatrixCell& cell : row) {
        for (CellEntry& e : cell.entries) {
          if (e.report_path.empty()) continue;
          const fs::path rel =
              fs::absolute(e.report_path).lexically_normal().lexically_relative(base);
          if (!rel.empty()) e.report_path = rel.string();
        }
      }
    }
  }
  std::vector<std::string> written;
  for (const std::string& format : formats) {
    std::string content;
    if (format == "md") {
      content = render_markdown(relative);
    } else if (format == "csv") {
      content = render_csv(relative);
    } else if (format == "json") {
      content = render_json(relative).dump(2) + "\n";
    } else if (format == "html") {
      content = render_html(relative);
    } else {
      throw InputError("--format: unknown format \"" + format + "\"; valid: md, csv, json, html");
    }
    const std::string path = (fs::path(out_dir) / matrix_file_name(format)).string();
    write_file_atomically(path, content);
    written.push_back(path);
  }
  return written;
}

}  // namespace bih
