// report_set.hpp: every report of one or more runs, gathered for `bih matrix` and `bih gate`.
//
// A run writes one report per scenario and one manifest (manifest.json, or
// manifest-shard-I-of-N.json for `--shard I/N`) naming every scenario id of the whole selection.
// Gathering the folders of all shards therefore tells which scenarios have no report yet, and the
// reports' environments tell whether they can be shown side by side.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "spec/verdict.hpp"

namespace bih {

inline constexpr const char* kManifestSchema = "bih.manifest/1";

struct RunManifest {
  std::string path;
  std::vector<std::string> all_ids;    // the whole selection, before sharding
  std::vector<std::string> shard_ids;  // what this run was asked to run
  int shard_index = 1;                 // 1-based
  int shard_count = 1;
};

struct ReportSet {
  std::vector<nlohmann::json> reports;  // read_report()-checked, sorted by id, one per id
  std::vector<std::string> paths;       // parallel to reports
  std::vector<RunManifest> manifests;
  std::vector<std::string> missing_ids;    // named by a manifest, with no report
  std::vector<std::string> duplicate_ids;  // ids with several reports (the newest is kept)
  // The environment fields that differ between reports ("gpu.name: NVIDIA H200 | null"); empty
  // when every report comes from one environment.
  std::vector<std::string> environment_differences;
};

// The verdict a report's own contents give, by the rule the driver used to write it
// (decide_verdict over its comparisons): `unsupported` when nothing ran (a reason and no
// comparison), `error` when it says error or its health section says the output was unhealthy,
// else decide_verdict of the comparisons, each one's "identical" read from its counts.
// Throws InputError naming `path` and the pointer for a report that cannot give one: a comparison
// of an unknown kind, counts that are not non-negative integers, an "identical" that contradicts
// its own counts, or a verdict of a run that compared nothing.
Verdict derive_verdict(const nlohmann::json& report, const std::string& path);

// Throws InputError naming `path`, the stored verdict and the derived one when they differ: a
// report is never trusted by its verdict field (an edited or corrupted report would otherwise
// pass the gate, resume as done, or be explained as what it is not).
void check_report_verdict(const nlohmann::json& report, const std::string& path);

// read_report() and check_report_verdict(): what every reader of reports calls.
nlohmann::json read_checked_report(const std::string& path);

// Reads every *.json report and manifest directly inside each folder (or the named files).
// Throws InputError for an unreadable or malformed report, or one whose verdict contradicts its
// comparisons (check_report_verdict), naming the file.
ReportSet load_report_set(const std::vector<std::string>& folders_or_files);

// The environment a report's verdict depends on, as "key: value" lines: bih commit, GPU fields,
// NCCL env. Host names and CPU load do not belong here.
std::vector<std::string> comparable_environment(const nlohmann::json& environment);

// Writes a manifest into `out_dir` (named by the shard) atomically.
void write_manifest(const std::string& out_dir, const RunManifest& manifest);

}  // namespace bih
