// export.hpp: write a model in the format an engine reads: an HF checkpoint folder or a GGUF file.
//
// `bih export` and the engine layer (which hands adapters their model) both go through here, so
// every engine of a scenario runs the same bits. An export never deletes anything and, unless
// told to, never writes over anything: a destination that already holds files is refused.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/weights.hpp"

namespace bih {

enum class ExportFormat { hf, gguf };

// What an export may do to a destination that already exists.
enum class ExistingDestination {
  refuse,             // a non-empty folder (hf) or an existing file (gguf) is an InputError
  replace_own_files,  // replace the files the export writes (export_file_names); keep the rest
};

// "hf" or "gguf"; nullopt for anything else.
std::optional<ExportFormat> parse_export_format(const std::string& name);
const char* export_format_name(ExportFormat format);

// The files an hf export writes into its folder (a gguf export writes only its one file).
std::vector<std::string> export_file_names(ExportFormat format);

// hf: `path` is a folder (config.json, generation_config.json, model.safetensors; see
// save_checkpoint); gguf: `path` is one file (see write_gguf). Throws InputError when `path`
// exists as the other kind (a folder for gguf, a file for hf), when it exists and `existing` is
// refuse (naming the path and bih export's --force), when a replace would leave the folder
// loading other weights than the export's (a model.safetensors.index.json in it), and when the
// weights cannot be stored in the format (a GGUF float32 field that does not fit); InfraError
// when it cannot be written. Validation happens before anything is written.
void export_model(const ModelWeights& weights, ExportFormat format, const std::string& path,
                  ExistingDestination existing = ExistingDestination::refuse);

}  // namespace bih
