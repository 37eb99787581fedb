// export.cpp: the format dispatch of export.hpp, with the checks on the destination.
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

std::vector<std::string> export_file_names(ExportFormat format) {
  if (format == ExportFormat::gguf) return {};
  return {"config.json", "generation_config.json", "model.safetensors"};
}

namespace {

namespace fs = std::filesystem;

void check_hf_folder(const std::string& path, ExistingDestination existing) {
  std::error_code ec;
  fs::directory_iterator it(path, ec);
  if (ec) return;                              // cannot be listed: the write reports why
  if (it == fs::directory_iterator()) return;  // empty
  const std::string own = "config.json, generation_config.json and model.safetensors";
  if (existing == ExistingDestination::refuse) {
    throw InputError(path, "",
                     "the folder is not empty; an export refuses to write over files; valid: a "
                     "new or empty folder, or --force to replace " +
                         own + " in it (other files are kept)");
  }
  // A sharded checkpoint's index takes precedence over model.safetensors in every loader: the
  // folder would keep loading the old shards. Deleting them is not the export's to do.
  if (fs::exists(fs::path(path) / "model.safetensors.index.json", ec)) {
    throw InputError(path, "",
                     "holds model.safetensors.index.json, which loaders prefer over the "
                     "model.safetensors this export writes, and --force deletes nothing; valid: "
                     "a new or empty folder (or remove the index and its shards first)");
  }
  for (const std::string& name : export_file_names(ExportFormat::hf)) {
    const fs::path file = fs::path(path) / name;
    // The rename of the new file would fail on a folder; a file or a link to one is replaced.
    if (fs::is_directory(fs::status(file, ec))) {
      throw InputError(file.string(), "",
                       "is a folder; --force replaces files only; valid: a new or empty folder");
    }
  }
}

}  // namespace

void export_model(const ModelWeights& weights, ExportFormat format, const std::string& path,
                  ExistingDestination existing) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (format == ExportFormat::gguf) {
    if (fs::exists(status) && !fs::is_regular_file(status)) {
      throw InputError(path, "", "exists and is not a regular file; a GGUF export is one file");
    }
    if (fs::exists(status) && existing == ExistingDestination::refuse) {
      throw InputError(path, "",
                       "the file exists; an export refuses to write over it; valid: a new path, "
                       "or --force to replace it");
    }
    write_gguf(weights, path);
  } else {
    if (fs::exists(status) && !fs::is_directory(status)) {
      throw InputError(path, "", "exists and is not a folder; an HF export is a folder");
    }
    if (fs::exists(status)) check_hf_folder(path, existing);
    save_checkpoint(weights, path, 0);
  }
}

}  // namespace bih
