// cmd_export.cpp: `bih export`: a preset's synthetic weights, or a checkpoint, as HF or GGUF.
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "base/errors.hpp"
#include "cli/commands.hpp"
#include "models/config.hpp"
#include "models/export.hpp"
#include "models/weights.hpp"

namespace bih::cli {
namespace {

constexpr const char* kExportExamples = R"(Examples:
  bih export --preset tiny --format gguf --out /tmp/tiny.gguf     the tiny preset for llama.cpp
  bih export --preset qwen3-1.7b --seed 7 --format hf --out ckpt/  an HF folder for transformers/vLLM
  bih export --model ckpt/ --format gguf --out ckpt.gguf            convert a checkpoint folder
  bih export --preset qwen3-1.7b --norm-weights perturbed --format hf --out ckpt/
                                                  norms around 1, for fidelity checks

hf writes a folder (config.json + model.safetensors, bf16); gguf writes one GGUF v3 file that
llama.cpp loads as qwen3 (bf16 matrices, f32 norms, a synthetic SPM vocabulary: 0 <unk>, 1 <s>,
2 </s>, 3..258 the byte tokens, then "\u2581t<id>"). Exports of the same weights carry the same
weights hash. An export never deletes anything; without --force it refuses a non-empty folder
or an existing file.)";

std::string list_presets() {
  std::string out;
  for (const std::string& name : preset_names()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Bytes the export wrote: the file, or the files it writes into the folder (others may be there
// with --force).
uint64_t bytes_written(const std::string& path, ExportFormat format) {
  namespace fs = std::filesystem;
  if (format == ExportFormat::gguf) return fs::file_size(path);
  uint64_t total = 0;
  for (const std::string& name : export_file_names(format))
    total += fs::file_size(fs::path(path) / name);
  return total;
}

// --seed as the integer it must be: CLI11 would take -1 (and 2^64, saturated) as 2^64-1.
uint64_t parse_seed(const std::string& text) {
  const std::string valid = "valid: an integer in 0..18446744073709551615";
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
    throw InputError("--seed '" + text + "' is not a non-negative integer; " + valid);
  }
  uint64_t seed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw InputError("--seed '" + text + "' is out of range; " + valid);
  }
  return seed;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  struct Args {
    std::string preset, model, format, out, norm_weights = "ones", seed = "0";
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "Write a preset's synthetic weights or a checkpoint as an HF folder or a GGUF file");
  cmd->add_option("--preset", args->preset, "Synthetic weights of this preset: " + list_presets());
  cmd->add_option("--seed", args->seed, "Seed of the preset's weights (with --preset)")
      ->capture_default_str();
  cmd->add_option("--norm-weights", args->norm_weights,
                  "Norm weights of the preset: ones (as HF's init) or perturbed (1 + 0.1 N(0,1), "
                  "so that a norm applied to the wrong heads shows)")
      ->capture_default_str();
  cmd->add_option("--model", args->model,
                  "Convert this checkpoint folder (config.json + *.safetensors) instead");
  cmd->add_option("--format", args->format, "hf (a checkpoint folder) or gguf (one file)")
      ->required();
  cmd->add_option("--out", args->out, "Folder (hf) or file (gguf) to write")->required();
  cmd->add_flag("--force", args->force,
                "Write into a non-empty folder (replacing config.json, generation_config.json and "
                "model.safetensors; other files are kept) or over an existing GGUF file");
  cmd->footer(kExportExamples);
  return {cmd, [args, cmd] {
            const bool has_preset = cmd->count("--preset") > 0;
            const bool has_model = cmd->count("--model") > 0;
            if (has_preset == has_model) {
              throw InputError(std::string(has_preset ? "both --preset and --model given"
                                                      : "neither --preset nor --model given") +
                               "; valid: exactly one (--preset NAME [--seed N] or --model DIR)");
            }
            const auto norms = norm_init_from_name(args->norm_weights);
            if (!norms) {
              throw InputError("--norm-weights '" + args->norm_weights +
                               "' is unknown; valid: ones, perturbed");
            }
            if (has_model && cmd->count("--norm-weights") > 0) {
              throw InputError(
                  "--norm-weights applies to --preset only; a checkpoint's norms "
                  "are its own");
            }
            if (has_model && cmd->count("--seed") > 0) {
              throw InputError("--seed applies to --preset only; a checkpoint's weights are fixed");
            }
            const auto format = parse_export_format(args->format);
            if (!format) {
              throw InputError("--format '" + args->format + "' is unknown; valid: hf, gguf");
            }
            ModelWeights weights;
            if (has_preset) {
              const auto config = preset_config(args->preset);
              if (!config) {
                throw InputError("--preset '" + args->preset +
                                 "' is unknown; valid: " + list_presets());
              }
              weights = synthetic_weights(*config, parse_seed(args->seed), *norms);
            } else {
              if (!std::filesystem::is_directory(args->model)) {
                throw InputError(args->model, "",
                                 "--model is not a folder; valid: a checkpoint folder with "
                                 "config.json and *.safetensors");
              }
              weights = load_checkpoint(args->model);
            }
            export_model(
                weights, *format, args->out,
                args->force ? ExistingDestination::replace_own_files : ExistingDestination::refuse);
            std::printf("wrote %s %s: %zu tensors, %llu bytes, weights hash %s\n",
                        export_format_name(*format), args->out.c_str(),
                        tensor_specs(weights.config).size(),
                        static_cast<unsigned long long>(bytes_written(args->out, *format)),
                        weights_hash(weights).c_str());
            return 0;
          }};
}

}  // namespace bih::cli
