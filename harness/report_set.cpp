#include "harness/report_set.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "base/atomic_file.hpp"
#include "base/errors.hpp"
#include "harness/diff.hpp"
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

int64_t count_at(const nlohmann::json& c, const char* key, const std::string& path,
                 const std::string& pointer) {
  if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<int64_t>() < 0) {
    throw InputError(path, pointer + "/" + key,
                     std::string("expected a count (an integer >= 0), found ") +
                         (c.contains(key) ? c[key].dump() : "nothing") +
                         "; the verdict is re-derived from the counts");
  }
  return c[key].get<int64_t>();
}

}  // namespace

Verdict derive_verdict(const nlohmann::json& report, const std::string& path) {
  const Verdict stored = *parse_verdict(report.at("verdict").get<std::string>());
  const nlohmann::json& list = report.at("comparisons");
  std::vector<Comparison> comparisons;
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string pointer = "/comparisons/" + std::to_string(k);
    const nlohmann::json& c = list[k];
    if (!c.is_object()) throw InputError(path, pointer, "expected a comparison object");
    Comparison cmp;
    const auto& kinds = comparison_kinds();
    if (!c.contains("kind") || !c["kind"].is_string() ||
        std::find(kinds.begin(), kinds.end(), c["kind"].get<std::string>()) == kinds.end()) {
      throw InputError(path, pointer + "/kind",
                       "expected one of batch, repeat, fresh, cache, config, prefill, found " +
                           (c.contains("kind") ? c["kind"].dump() : std::string("nothing")));
    }
    cmp.kind = c["kind"].get<std::string>();
    cmp.tokens_differ = count_at(c, "tokens_differ", path, pointer);
    cmp.logprobs_differ = count_at(c, "logprobs_differ", path, pointer);
    // Optional: only reports of scenarios with compare.top_k / row_digest have them.
    if (c.contains("top_k_differ")) cmp.top_k_differ = count_at(c, "top_k_differ", path, pointer);
    if (c.contains("row_digests_differ")) {
      cmp.row_digests_differ = count_at(c, "row_digests_differ", path, pointer);
    }
    if (c.contains("unsupported")) {
      if (!c["unsupported"].is_string() || c["unsupported"].get<std::string>().empty()) {
        throw InputError(path, pointer + "/unsupported",
                         "expected the reason the comparison could not run, a non-empty string");
      }
      cmp.unsupported = c["unsupported"].get<std::string>();
      if (cmp.tokens_differ != 0 || cmp.logprobs_differ != 0 || cmp.top_k_differ != 0 ||
          cmp.row_digests_differ != 0) {
        throw InputError(path, pointer,
                         "an unsupported comparison compared nothing, yet its counts differ");
      }
      comparisons.push_back(std::move(cmp));
      continue;
    }
    if (c.contains("identical") &&
        (!c["identical"].is_boolean() || c["identical"].get<bool>() != cmp.identical())) {
      throw InputError(path, pointer + "/identical",
                       fmt::format("says {} but the counts say {} tokens and {} logprobs differ",
                                   c["identical"].dump(), cmp.tokens_differ, cmp.logprobs_differ));
    }
    comparisons.push_back(std::move(cmp));
  }
  const nlohmann::json health = report.value("health", nlohmann::json());
  const bool unhealthy = health.is_object() && health.contains("healthy") &&
                         health["healthy"].is_boolean() && !health["healthy"].get<bool>();
  // error and unsupported are states of the run, not results of a diff: the report says which,
  // and only what contradicts it (comparisons where nothing ran) can be checked.
  if (stored == Verdict::error || unhealthy) return Verdict::error;
  if (comparisons.empty()) {
    if (stored == Verdict::unsupported) return Verdict::unsupported;
    throw InputError(path, "/comparisons",
                     "the report says \"" + to_string(stored) +
                         "\" but compares nothing; a verdict on invariance needs at least one "
                         "comparison (only error and unsupported have none)");
  }
  return decide_verdict(comparisons);
}

void check_report_verdict(const nlohmann::json& report, const std::string& path) {
  const Verdict derived = derive_verdict(report, path);
  const std::string stored = report.at("verdict").get<std::string>();
  if (stored == to_string(derived)) return;
  throw InputError(path, "/verdict",
                   "the report says \"" + stored + "\" but its own comparisons give \"" +
                       to_string(derived) +
                       "\" (decide_verdict: a differing repeat/fresh comparison makes "
                       "nondeterministic, else a differing batch/cache one batch_variant, else a "
                       "differing prefill one prefill_variant, else a differing config one "
                       "config_variant, else invariant; an unhealthy output is error); refusing a "
                       "report that "
                       "contradicts itself: run the scenario again");
}

nlohmann::json read_checked_report(const std::string& path) {
  nlohmann::json report = read_report(path);
  check_report_verdict(report, path);
  return report;
}

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
    nlohmann::json report = read_checked_report(path);
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
