// model_handoff.cpp: the model in the adapter's format, exported once and cached
// (model_handoff.hpp).
#include "engines/model_handoff.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "base/errors.hpp"
#include "engines/bih_engine.hpp"
#include "models/export.hpp"
#include "models/weights.hpp"

namespace bih {
namespace fs = std::filesystem;
namespace {

// Bumped whenever an exporter's output changes for the same weights.
constexpr int kExportVersion = 1;

void export_to(const ModelWeights& weights, const std::string& format, const std::string& path) {
  export_model(weights, *parse_export_format(format), path);
}

// What determines a checkpoint's bits, cheaply: its files' names, sizes and modification times.
std::string checkpoint_fingerprint(const std::string& folder) {
  std::string text = fs::absolute(folder).lexically_normal().string();
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(folder)) {
    if (!e.is_regular_file()) continue;
    const auto ext = e.path().extension().string();
    if (ext != ".json" && ext != ".safetensors") continue;
    entries.push_back(fmt::format("{}:{}:{}", e.path().filename().string(), e.file_size(),
                                  e.last_write_time().time_since_epoch().count()));
  }
  std::sort(entries.begin(), entries.end());
  for (const auto& e : entries) text += "|" + e;
  return fmt::format("{:016x}", std::hash<std::string>{}(text));
}

std::string cache_name(const Scenario& s) {
  const std::string ext = s.engine.model_format == "gguf" ? ".gguf" : ".hf";
  if (s.model.path.empty()) {
    return fmt::format("{}-seed{}-v{}{}", s.model.preset, s.model.seed, kExportVersion, ext);
  }
  return fmt::format("{}-{}-v{}{}", fs::path(s.model.path).filename().string(),
                     checkpoint_fingerprint(s.model.path), kExportVersion, ext);
}

}  // namespace

std::string bih_cache_dir() {
  fs::path root;
  if (const char* dir = std::getenv("BIH_CACHE_DIR"); dir != nullptr && *dir != '\0') {
    root = dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    root = fs::path(xdg) / "bih";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    root = fs::path(home) / ".cache" / "bih";
  } else {
    root = fs::temp_directory_path() / "bih-cache";
  }
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) {
    throw InfraError("cannot create bih's cache folder " + root.string() + ": " + ec.message() +
                     " (set BIH_CACHE_DIR to a writable folder)");
  }
  return fs::absolute(root).string();
}

protocol::ModelHandle hand_off_model(const Scenario& s) {
  protocol::ModelHandle h;
  h.format = s.engine.model_format;
  h.config = model_config(s);
  h.id = s.model.path.empty() ? fmt::format("preset:{}(seed={})", s.model.preset, s.model.seed)
                              : s.model.path;
  if (!s.model.path.empty() && h.format == "hf") {
    h.path = s.model.path;
    return h;
  }
  const fs::path models = fs::path(bih_cache_dir()) / "models";
  fs::create_directories(models);
  const fs::path target = models / cache_name(s);
  h.path = target.string();
  if (fs::exists(target)) return h;
  // Export beside the target, then rename: a concurrent run either wins the rename or finds the
  // finished export; nobody ever sees half of one.
  const fs::path temp = models / fmt::format(".{}.tmp-{}", target.filename().string(), getpid());
  std::error_code ec;
  fs::remove_all(temp, ec);
  const auto weights = build_model(s);
  export_to(*weights, h.format, temp.string());
  fs::rename(temp, target, ec);
  if (ec) {
    fs::remove_all(temp);
    if (!fs::exists(target)) {
      throw InfraError("cannot move the exported model to " + target.string() + ": " +
                       ec.message());
    }
  }
  return h;
}

std::string handed_off_weights_hash(const Scenario& s) { return weights_hash(*build_model(s)); }

}  // namespace bih
