#include "harness/weights_hash_cache.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "base/atomic_file.hpp"
#include "base/child_process.hpp"
#include "base/errors.hpp"

namespace bih {

namespace fs = std::filesystem;

std::string weights_hash_cache_file(const std::string& run_work_dir) {
  return (fs::path(run_work_dir) / "weights-hashes.json").string();
}

namespace {

nlohmann::json read_cache(const std::string& cache_file) {
  std::ifstream in(cache_file);
  if (!in) return nlohmann::json::object();
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json cache = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  return cache.is_object() ? cache : nlohmann::json::object();
}

}  // namespace

std::string cached_weights_hash(const std::string& cache_file, const std::string& key,
                                const std::function<std::string()>& compute) {
  nlohmann::json cache = read_cache(cache_file);
  if (auto it = cache.find(key);
      it != cache.end() && it->is_string() && !it->get_ref<const std::string&>().empty()) {
    return it->get<std::string>();
  }
  const std::string hash = compute();
  if (hash.empty()) return hash;
  // Re-read: another worker of the run (a shard beside this one) may have added its own key.
  cache = read_cache(cache_file);
  cache[key] = hash;
  try {
    write_file_atomically(cache_file, cache.dump(2) + "\n");
  } catch (const InfraError&) {
    // Only the saving is lost.
  }
  return hash;
}

std::string weights_hash_key(const std::string& engine_kind, const nlohmann::json& model) {
  const std::string exe = self_executable();
  std::error_code size_error;
  std::error_code time_error;
  const uintmax_t size = fs::file_size(exe, size_error);
  const auto modified = fs::last_write_time(exe, time_error).time_since_epoch().count();
  return nlohmann::json{{"engine", engine_kind},
                        {"model", model},
                        {"executable", exe},
                        {"size", size_error ? 0 : size},
                        {"modified", time_error ? 0 : modified}}
      .dump();
}

}  // namespace bih
