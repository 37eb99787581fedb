#include "harness/report_set.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"
#include "harness/report.hpp"
#include "spec/scenario_file.hpp"

namespace fs = std::filesystem;

namespace bih {
namespace {

bool is_manifest_name(const std::string& name) {
  return name == "manifest.json" || name.rfind("manifest-shard-", 0) == 0;
}

RunManifest read_manifest(const std::string& path) {
  const nlohmann::json j = read_json_file(path);
  if (!j.is_object() || j.value("schema", "") != kManifestSchema) {
    throw InputError(path, "/schema",
                     std::string("not a run manifest; valid: \"") + kManifestSchema + "\"");
  }
  RunManifest m;
  m.path = path;
  try {
    m.all_ids = j.at("all_ids").get<std::vector<std::string>>();
    m.shard_ids = j.at("shard_ids").get<std::vector<std::string>>();
    m.shard_index = j.at("shard").at("index").get<int>();
    m.shard_count = j.at("shard").at("count").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, "", std::string("malformed run manifest: ") + e.what());
  }
  return m;
}

std::string flatten(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

std::vector<std::string> comparable_environment(const nlohmann::json& env) {
  std::vector<std::string> lines;
  auto get = [&](const nlohmann::json::json_pointer& p) {
    return env.contains(p) ? flatten(env.at(p)) : std::string("null");
  };
  lines.push_back("bih.commit: " + get("/bih/commit"_json_pointer));
  for (const char* key :
       {"name", "count", "driver", "cuda_runtime", "nccl_version", "cublas_version"}) {
    lines.push_back(std::string("gpu.") + key + ": " +
                    get(nlohmann::json::json_pointer(std::string("/gpu/") + key)));
  }
  lines.push_back("nccl_env: " + get("/nccl_env"_json_pointer));
  return lines;
}

ReportSet load_report_set(const std::vector<std::string>& folders_or_files) {
  std::vector<std::string> report_files, manifest_files;
  for (const std::string& item : folders_or_files) {
    if (fs::is_directory(item)) {
      std::vector<fs::path> entries;
      for (const auto& e : fs::directory_iterator(item)) {
        if (e.is_regular_file() && e.path().extension() == ".json") entries.push_back(e.path());
      }
      std::sort(entries.begin(), entries.end());
      for (const auto& p : entries) {
        (is_manifest_name(p.filename().string()) ? manifest_files : report_files)
            .push_back(p.string());
      }
    } else if (fs::is_regular_file(item)) {
      (is_manifest_name(fs::path(item).filename().string()) ? manifest_files : report_files)
          .push_back(item);
    } else {
      throw InputError(item, "", "no such report folder or file");
    }
  }

  ReportSet set;
  std::map<std::string, std::pair<nlohmann::json, std::string>> by_id;
  for (const std::string& path : report_files) {
    nlohmann::json report = read_report(path);
    const std::string id = report.at("id");
    auto it = by_id.find(id);
    if (it != by_id.end()) {
      set.duplicate_ids.push_back(id);
      if (report.value("created_at", "") < it->second.first.value("created_at", "")) continue;
    }
    by_id[id] = {std::move(report), path};
  }
  for (auto& [id, entry] : by_id) {
    set.reports.push_back(std::move(entry.first));
    set.paths.push_back(entry.second);
  }
  std::sort(set.duplicate_ids.begin(), set.duplicate_ids.end());
  set.duplicate_ids.erase(std::unique(set.duplicate_ids.begin(), set.duplicate_ids.end()),
                          set.duplicate_ids.end());

  std::set<std::string> expected;
  for (const std::string& path : manifest_files) {
    set.manifests.push_back(read_manifest(path));
    expected.insert(set.manifests.back().all_ids.begin(), set.manifests.back().all_ids.end());
  }
  for (const std::string& id : expected) {
    if (!by_id.contains(id)) set.missing_ids.push_back(id);
  }

  // Every environment line that is not the same in all reports.
  std::map<std::string, std::set<std::string>> values;  // key -> values seen
  for (const auto& report : set.reports) {
    // read_report does not require "environment": a report without one compares as all-null.
    const nlohmann::json env = report.value("environment", nlohmann::json());
    for (const std::string& line : comparable_environment(env)) {
      const auto colon = line.find(": ");
      values[line.substr(0, colon)].insert(line.substr(colon + 2));
    }
  }
  for (const auto& [key, seen] : values) {
    if (seen.size() < 2) continue;
    std::string joined;
    for (const auto& v : seen) joined += (joined.empty() ? "" : " | ") + v;
    set.environment_differences.push_back(key + ": " + joined);
  }
  return set;
}

void write_manifest(const std::string& out_dir, const RunManifest& m) {
  nlohmann::json j = {{"schema", kManifestSchema},
                      {"all_ids", m.all_ids},
                      {"shard_ids", m.shard_ids},
                      {"shard", {{"index", m.shard_index}, {"count", m.shard_count}}},
                      {"created_at", utc_now_iso8601()}};
  const std::string name = m.shard_count == 1
                               ? "manifest.json"
                               : "manifest-shard-" + std::to_string(m.shard_index) + "-of-" +
                                     std::to_string(m.shard_count) + ".json";
  write_file_atomically((fs::path(out_dir) / name).string(), j.dump(2) + "\n");
}

}  // namespace bih
