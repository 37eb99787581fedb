// export.hpp: write a model in the format an engine reads: an HF checkpoint folder or a GGUF file.
//
// `bih export` and the engine layer (which hands adapters their model) both go through here, so
// every engine of a scenario runs the same bits.
#pragma once

#include <optional>
#include <string>

#include "models/weights.hpp"

namespace bih {

enum class ExportFormat { hf, gguf };

// "hf" or "gguf"; nullopt for anything else.
std::optional<ExportFormat> parse_export_format(const std::string& name);
const char* export_format_name(ExportFormat format);

// hf: `path` is a folder (config.json + model.safetensors, see save_checkpoint); gguf: `path` is
// one file (see write_gguf). Throws InputError when `path` exists as the other kind (a folder
// for gguf, a file for hf), InfraError when it cannot be written.
void export_model(const ModelWeights& weights, ExportFormat format, const std::string& path);

}  // namespace bih
