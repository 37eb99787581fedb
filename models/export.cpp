// export.cpp: the format dispatch of export.hpp, with the check that `path` is of the right kind.
#include "models/export.hpp"

#include <filesystem>

#include "base/errors.hpp"
#include "models/gguf.hpp"

namespace bih {

std::optional<ExportFormat> parse_export_format(const std::string& name) {
  if (name == "hf") return ExportFormat::hf;
  if (name == "gguf") return ExportFormat::gguf;
  return std::nullopt;
}

const char* export_format_name(ExportFormat format) {
  return format == ExportFormat::hf ? "hf" : "gguf";
}

void export_model(const ModelWeights& weights, ExportFormat format, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (format == ExportFormat::gguf) {
    if (fs::exists(status) && !fs::is_regular_file(status)) {
      throw InputError(path, "", "exists and is not a regular file; a GGUF export is one file");
    }
    write_gguf(weights, path);
  } else {
    if (fs::exists(status) && !fs::is_directory(status)) {
      throw InputError(path, "", "exists and is not a folder; an HF export is a folder");
    }
    save_checkpoint(weights, path, 0);
  }
}

}  // namespace bih
