// model_handoff.cpp: the model in the adapter's format, exported once, cached and checked at every
// reuse (model_handoff.hpp).
#include "engines/model_handoff.hpp"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "base/atomic_file.hpp"
#include "base/content_hash.hpp"
#include "base/errors.hpp"
#include "base/json_file.hpp"
#include "engines/bih_engine.hpp"
#include "models/export.hpp"
#include "models/gguf.hpp"
#include "models/weights.hpp"

namespace bih {
namespace fs = std::filesystem;
using nlohmann::json;
namespace {

// Bumped whenever an exporter's output changes for the same weights.
constexpr int kExportVersion = 2;  // 2: the byte tokens of the GGUF vocabulary typed NORMAL
constexpr const char* kRecordSchema = "bih.model-cache-entry/1";
constexpr const char* kCacheHint = "set BIH_CACHE_DIR to a writable folder whose path is UTF-8";

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

std::string record_path(const fs::path& entry) { return entry.string() + ".verify.json"; }

// A path as JSON can carry it: bytes that are not UTF-8 become U+FFFD (for messages only).
std::string printable(const std::string& path) {
  return json(path).dump(-1, ' ', false, json::error_handler_t::replace);
}

bool is_utf8(const std::string& text) {
  try {
    (void)json(text).dump();
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

// Sizes and digests of a file, or of a folder's regular files by name.
json content_of(const fs::path& path) {
  if (!fs::is_directory(path)) {
    const FileDigest d = digest_file(path.string());
    return {{"bytes", d.bytes}, {"content_hash", d.hash}};
  }
  json files = json::object();
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(path)) {
    if (!e.is_regular_file()) {
      files[e.path().filename().string()] = "not a regular file";
      continue;
    }
    const FileDigest d = digest_file(e.path().string());
    files[e.path().filename().string()] = {{"bytes", d.bytes}, {"content_hash", d.hash}};
    total += d.bytes;
  }
  return {{"files", files}, {"bytes", total}};
}

// Moves a damaged entry out of the way (to a temp name, which remove_stale_temps would also
// collect) and removes it.
void discard(const fs::path& entry) {
  const fs::path aside = entry.parent_path() / temp_name_for(entry.filename().string(), "discard");
  std::error_code ec;
  fs::rename(entry, aside, ec);
  fs::remove_all(ec ? entry : aside, ec);
}

// Exports the scenario's model to `target` through a temp beside it and records its content.
void export_entry(const Scenario& s, const fs::path& target) {
  const fs::path models = target.parent_path();
  const fs::path temp = models / temp_name_for(target.filename().string(), "export");
  std::error_code ec;
  fs::remove_all(temp, ec);
  const auto weights = build_model(s);
  try {
    export_model(*weights, *parse_export_format(s.engine.model_format), temp.string());
    // The record first, then the entry: an entry in place always has its record (a reader that
    // finds the record without the entry exports again, which writes the same bits).
    json record = content_of(temp);
    record["schema"] = kRecordSchema;
    write_file_atomically(record_path(target), record.dump(2) + "\n");
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
  fs::rename(temp, target, ec);
  if (ec) {
    // A concurrent run put its export there first (a folder is not renamed over): use it if it
    // is sound.
    const int error = ec.value();
    fs::remove_all(temp, ec);
    if (!fs::exists(target) || !cache_entry_mismatch(target.string()).empty()) {
      throw InfraError("cannot move the exported model to " + target.string() + ": " +
                       std::error_code(error, std::generic_category()).message());
    }
  }
}

}  // namespace

namespace {

// The cache folder's path, neither created nor checked.
fs::path cache_root() {
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
  return fs::absolute(root, ec);
}

}  // namespace

std::string bih_cache_dir() {
  const fs::path root = cache_root();
  std::error_code ec;
  // The model's path travels in the engine protocol and the report, both JSON text.
  if (!is_utf8(root.string())) {
    throw InputError("bih's cache folder " + printable(root.string()) +
                     " is not UTF-8 text, and the model's path in it must travel in JSON "
                     "(engine protocol, report); valid: " +
                     kCacheHint);
  }
  fs::create_directories(root, ec);
  if (ec) {
    throw InfraError("cannot create bih's cache folder " + root.string() + ": " + ec.message() +
                     " (" + kCacheHint + ")");
  }
  return root.string();
}

std::string cache_entry_mismatch(const std::string& entry) {
  json record;
  try {
    record = read_json_file(record_path(entry));
  } catch (const std::exception& e) {
    return "has no readable record " + record_path(entry) + " (" + e.what() + ")";
  }
  if (!record.is_object() || record.value("schema", std::string()) != kRecordSchema) {
    return "has a record " + record_path(entry) + " that is not a " + kRecordSchema;
  }
  record.erase("schema");
  json now;
  try {
    now = content_of(entry);
  } catch (const std::exception& e) {
    return std::string("cannot be read (") + e.what() + ")";
  }
  if (now == record) return "";
  if (now.value("bytes", uint64_t{0}) != record.value("bytes", uint64_t{0})) {
    return fmt::format("holds {} bytes, its record {}", now.value("bytes", uint64_t{0}),
                       record.value("bytes", uint64_t{0}));
  }
  return "does not hold the bytes its record " + record_path(entry) +
         " describes (sizes or digests differ)";
}

std::string handed_off_model_path(const Scenario& s) {
  if (!s.model.path.empty() && s.engine.model_format == "hf") return s.model.path;
  return (cache_root() / "models" / cache_name(s)).string();
}

protocol::ModelHandle hand_off_model(const Scenario& s, std::string* notice) {
  protocol::ModelHandle h;
  h.format = s.engine.model_format;
  h.config = model_config(s);
  h.id = s.model.path.empty() ? fmt::format("preset:{}(seed={})", s.model.preset, s.model.seed)
                              : s.model.path;
  if (!s.model.path.empty() && h.format == "hf") {
    h.path = s.model.path;
    if (!is_utf8(h.path)) {
      throw InputError("the checkpoint folder " + printable(h.path) +
                       " is not UTF-8 text, and its path must travel in JSON (engine protocol, "
                       "report); valid: a checkpoint folder whose path is UTF-8");
    }
    return h;
  }
  const fs::path models = fs::path(bih_cache_dir()) / "models";
  const fs::path target = models / cache_name(s);
  h.path = target.string();
  try {
    std::error_code ec;
    fs::create_directories(models, ec);
    if (ec) throw InfraError("cannot create " + models.string() + ": " + ec.message());
    remove_stale_temps(models.string());
    if (fs::exists(target)) {
      const std::string mismatch = cache_entry_mismatch(target.string());
      if (mismatch.empty()) return h;
      const std::string text =
          "the cached model " + target.string() + " " + mismatch + "; exporting it again";
      std::fprintf(stderr, "bih: %s\n", text.c_str());
      if (notice != nullptr) *notice = text;
      discard(target);
    }
    export_entry(s, target);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    // A read-only or full cache: say which folder, and how to point bih at another.
    throw InfraError(std::string(e.what()) + " (in bih's model cache " + models.string() + "; " +
                     kCacheHint + ")");
  }
  return h;
}

std::string handed_off_weights_hash(const protocol::ModelHandle& h) {
  if (h.format == "gguf") return gguf_weights_hash(read_gguf(h.path), h.config);
  return weights_hash(load_checkpoint(h.path));
}

json handed_off_content(const protocol::ModelHandle& h) { return content_of(h.path); }

}  // namespace bih
