#include "harness/matrix_view.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "base/edit_distance.hpp"
#include "base/errors.hpp"
#include "harness/expectations.hpp"
#include "spec/dotted_keys.hpp"
#include "spec/scenario.hpp"

namespace bih {
namespace {

using json = nlohmann::json;

// Reports keep this many first divergences per comparison unless `bih run --max-divergences`
// said otherwise; a comparison holding exactly this many may have been cut.
constexpr size_t kDefaultDivergenceCap = 16;

// Scenario keys that never tell two scenarios apart in a way a reader cares about.
const std::set<std::string>& ignored_knobs() {
  static const std::set<std::string> keys{"name", "expect", "timeout_s"};
  return keys;
}

json value_at(const json& scenario, const std::string& dotted_key) {
  const json::json_pointer pointer(dotted_key_pointer(dotted_key));
  return scenario.contains(pointer) ? scenario.at(pointer) : json(nullptr);
}

// The engine a scenario names when it is not bih's own ("llama.cpp"); empty for bih's.
std::string external_engine(const json& scenario) {
  // Read defensively: read_report checks only the fields every reader needs.
  const json engine = value_at(scenario, "engine");
  if (!engine.is_object() || !engine.contains("kind") || !engine["kind"].is_string()) return "";
  const std::string kind = engine["kind"].get<std::string>();
  if (kind == "bih") return "";
  const json name = engine.value("name", json());
  return name.is_string() ? name.get<std::string>() : kind;
}

// A command or http engine's scenario keeps only the knobs its file set (the engine keeps its own
// defaults for the rest), so an absent knob reads "default", never a bare null; its tables are
// split by the engine too, so that two engines' defaults never share a cell.
AxisKey make_key(const json& scenario, const std::vector<std::string>& keys, bool split = false) {
  AxisKey key;
  const std::string engine = external_engine(scenario);
  if (split && !engine.empty()) {
    key.values.push_back(json("engine=" + engine));
    key.label = "engine=" + engine;
  }
  for (const std::string& k : keys) {
    key.values.push_back(value_at(scenario, k));
    const std::string text = key.values.back().is_null() && !engine.empty()
                                 ? std::string("default")
                                 : axis_value_text(key.values.back());
    key.label += (key.label.empty() ? "" : ", ") + short_axis_name(k) + "=" + text;
  }
  return key;
}

// Knob values with a natural order that is not the alphabet's: CUDA graph modes by how much of
// the step they capture.
int natural_rank(const json& v) {
  static const std::map<std::string, int> ranks{{"none", 0}, {"piecewise", 1}, {"full", 2}};
  if (!v.is_string()) return -1;
  const auto it = ranks.find(v.get<std::string>());
  return it == ranks.end() ? -1 : it->second;
}

// Orders values the way a reader expects: numbers numerically, false before true, graph modes
// none < piecewise < full, other strings alphabetically (nlohmann's operator< within one type).
bool value_less(const json& a, const json& b) {
  const int ra = natural_rank(a), rb = natural_rank(b);
  if (ra >= 0 && rb >= 0) return ra < rb;
  return a < b;
}

bool key_less(const AxisKey& a, const AxisKey& b) {
  return std::lexicographical_compare(a.values.begin(), a.values.end(), b.values.begin(),
                                      b.values.end(), value_less);
}

std::string anchor_of(const std::string& id) {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a 64, as report_file_name
  for (unsigned char c : id) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  // The same 12 hex digits as the report's file name (report_file_name).
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
  return "s-" + std::string(buf).substr(0, 12);
}

std::string first_line(const std::string& text, size_t max_chars) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > max_chars) line = line.substr(0, max_chars - 3) + "...";
  return line;
}

HeatMap heat_map_of(const json& comparison) {
  HeatMap map;
  map.prompts = comparison.at("sequences_compared").get<int>();
  const int64_t compared = comparison.at("logprobs_compared").get<int64_t>();
  map.steps = map.prompts > 0 ? static_cast<int>(compared / map.prompts) : 0;
  const json& divergences = comparison.at("first_divergences");
  for (const json& d : divergences) {
    HeatMap::Mark mark;
    mark.prompt = d.at("prompt");
    mark.step = d.at("step");
    mark.token_differs = d.at("token_a") != d.at("token_b");
    const json& ulp = d.at("ulp");
    mark.tooltip = "prompt " + std::to_string(mark.prompt) + ", step " + std::to_string(mark.step) +
                   ": token " + d.at("token_a").dump() + " vs " + d.at("token_b").dump() +
                   ", logprob " + d.at("logprob_a_bits").get<std::string>() + " vs " +
                   d.at("logprob_b_bits").get<std::string>() + " (" +
                   (ulp.is_null() ? std::string("NaN") : ulp.dump()) + " ulp)";
    // A prompt past the grid (a malformed count) widens it rather than vanishing.
    map.prompts = std::max(map.prompts, mark.prompt + 1);
    map.steps = std::max(map.steps, mark.step + 1);
    map.marks.push_back(std::move(mark));
  }
  const auto diverged = comparison.at("sequences_diverged").get<int64_t>();
  map.capped = static_cast<int64_t>(divergences.size()) < diverged ||
               divergences.size() >= kDefaultDivergenceCap;
  return map;
}

ComparisonView comparison_view(const json& c) {
  ComparisonView v;
  v.kind = c.at("kind");
  v.a = c.at("a");
  v.b = c.at("b");
  v.summary = c.at("summary");
  v.logprobs_differ = c.at("logprobs_differ");
  v.logprobs_compared = c.at("logprobs_compared");
  v.tokens_differ = c.at("tokens_differ");
  v.tokens_compared = c.at("tokens_compared");
  v.sequences_diverged = c.at("sequences_diverged");
  v.sequences_compared = c.at("sequences_compared");
  if (!c.at("max_ulp").is_null()) v.max_ulp = c.at("max_ulp").get<uint64_t>();
  v.first_divergences = c.at("first_divergences");
  v.heat_map = heat_map_of(c);
  return v;
}

// The comparison a cell's counts come from: for nondeterministic the first run-to-run comparison
// that differs, otherwise the first batch comparison (so an invariant cell reads "0/1536").
const ComparisonView* headline_comparison(const CellEntry& e) {
  if (e.comparisons.empty()) return nullptr;
  if (e.verdict == "nondeterministic") {
    for (const auto& c : e.comparisons) {
      if ((c.kind == "repeat" || c.kind == "fresh") && c.logprobs_differ + c.tokens_differ > 0) {
        return &c;
      }
    }
  }
  if (e.verdict == "config_variant") {
    for (const auto& c : e.comparisons) {
      if (c.kind == "config" && c.logprobs_differ + c.tokens_differ > 0) return &c;
    }
  }
  for (const auto& c : e.comparisons) {
    if (c.kind == "batch") return &c;
  }
  return &e.comparisons.front();
}

CellEntry entry_of(const json& report, const std::string& path) {
  CellEntry e;
  e.id = report.at("id");
  e.anchor = anchor_of(e.id);
  e.verdict = report.at("verdict");
  e.report_path = path;
  if (report.contains("reason") && report.at("reason").is_string()) e.reason = report.at("reason");
  if (report.contains("localization")) e.localization = report.at("localization").at("summary");
  if (report.contains("expect") && report.at("expect").is_string()) {
    e.expect = report.at("expect").get<std::string>();
  }
  // Met or not by check_expectation, as bih run and bih gate judge it, not by the report's
  // expect_met: an unsupported cell whose expect could not be checked here is neither.
  if (e.expect) {
    const ExpectationCheck check =
        check_expectation(*parse_verdict(e.verdict),
                          Expected{.verdict = *parse_verdict(*e.expect), .declared = true});
    e.unchecked = check == ExpectationCheck::unchecked;
    if (!e.unchecked) e.expect_met = check == ExpectationCheck::met;
  }
  try {
    for (const json& c : report.at("comparisons")) e.comparisons.push_back(comparison_view(c));
  } catch (const json::exception& ex) {
    throw InputError(path, "/comparisons", std::string("malformed comparison: ") + ex.what());
  }
  if (e.verdict == "error" || e.verdict == "unsupported") {
    e.counts = first_line(e.reason.empty() ? e.verdict : e.reason, 80);
  } else if (const ComparisonView* c = headline_comparison(e)) {
    e.counts = std::to_string(c->logprobs_differ) + "/" + std::to_string(c->logprobs_compared) +
               " logprobs" +
               (c->kind == "batch"    ? ""
                : c->kind == "config" ? ", vs the reference"
                                      : ", run to run");
  }
  return e;
}

// Names, for each entry of a crowded cell, the knobs whose values differ inside the cell.
void label_distinguishing_knobs(std::vector<CellEntry>& entries,
                                const std::vector<const json*>& scenarios,
                                const std::set<std::string>& axis_keys) {
  if (entries.size() < 2) return;
  std::vector<std::map<std::string, json>> knobs(entries.size());
  std::set<std::string> all_keys;
  for (size_t i = 0; i < entries.size(); ++i) {
    flatten_dotted(*scenarios[i], "", knobs[i]);
    for (const auto& [k, v] : knobs[i]) all_keys.insert(k);
  }
  std::vector<std::string> differing;
  for (const std::string& k : all_keys) {
    if (ignored_knobs().contains(k) || axis_keys.contains(k)) continue;
    std::set<std::string> seen;
    for (const auto& m : knobs) seen.insert(m.contains(k) ? m.at(k).dump() : "null");
    if (seen.size() > 1) differing.push_back(k);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string label;
    for (const std::string& k : differing) {
      const json v = knobs[i].contains(k) ? knobs[i].at(k) : json(nullptr);
      label += (label.empty() ? "" : ", ") + short_axis_name(k) + "=" + axis_value_text(v);
    }
    entries[i].distinguishing = label.empty() ? entries[i].id : label;
  }
}

}  // namespace

void check_matrix_axes(const MatrixOptions& options) {
  std::set<std::string> seen;
  for (const auto* axis : {&options.rows, &options.cols, &options.split}) {
    for (const std::string& k : *axis) {
      if (k.empty() || k.front() == '.' || k.back() == '.' || k.find("..") != std::string::npos) {
        throw InputError("--rows/--cols/--split: \"" + k +
                         "\" is not a dotted scenario key; valid: e.g. parallel.tp, "
                         "sequence_parallel.enabled, collectives.reduce_scatter");
      }
      if (!is_scenario_dotted_key(k)) {
        // A typo would otherwise pivot every report into one "(absent)" row, silently.
        std::string what = "--rows/--cols/--split: unknown scenario key \"" + k + "\"";
        const std::vector<std::string> keys = scenario_dotted_keys();
        if (auto near = nearest_key(k, keys)) what += " (did you mean \"" + *near + "\"?)";
        std::string valid;
        for (const std::string& key : keys) valid += (valid.empty() ? "" : ", ") + key;
        throw InputError(what + "; valid: " + valid +
                         ", nccl_env.NCCL_<name>, engine.options.<name>, engine.env.<name>");
      }
      if (!seen.insert(k).second) {
        throw InputError("--rows/--cols/--split: \"" + k +
                         "\" is on two axes; each scenario key may pick one axis only");
      }
    }
  }
}

std::string short_axis_name(const std::string& dotted_key) {
  static const std::map<std::string, std::string> names{
      {"parallel.tp", "tp"},
      {"parallel.ranks", "ranks"},
      {"parallel.ring_order", "ring"},
      {"sequence_parallel.enabled", "sp"},
      {"sequence_parallel.min_tokens", "sp_min"},
      {"collectives.all_reduce", "ar"},
      {"collectives.reduce_scatter", "rs"},
      {"collectives.all_gather", "ag"},
      {"cudagraph.mode", "graph"},
      {"cudagraph.capture_sizes", "capture"},
      {"prefix_caching.enabled", "prefix"},
      {"prefix_caching.block_size", "block"},
      {"chunked_prefill.max_tokens", "chunk"},
      {"debug.fault", "fault"},
  };
  const auto it = names.find(dotted_key);
  return it == names.end() ? dotted_key : it->second;
}

std::string axis_value_text(const json& value) {
  if (value.is_boolean()) return value.get<bool>() ? "on" : "off";
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

namespace {

std::vector<ConfigRow> config_rows_of(const ReportSet& set) {
  std::vector<ConfigRow> rows;
  for (const json& report : set.reports) {
    if (!report.contains("config_reference") || !report["config_reference"].is_object()) continue;
    ConfigRow row;
    row.id = report.at("id");
    row.anchor = anchor_of(row.id);
    row.verdict = report.at("verdict");
    row.reference_id = report["config_reference"].value("id", "");
    row.is_reference = row.reference_id == row.id;
    if (row.is_reference) row.knobs = "the reference";
    for (const json& c : report.at("comparisons")) {
      if (!c.is_object() || c.value("kind", "") != "config") continue;
      const std::string summary = c.value("summary", "");
      const auto colon = summary.find(": ");
      if (row.knobs.empty() && colon != std::string::npos) row.knobs = summary.substr(0, colon);
      row.counts.push_back(c.value("b", "") + ": " +
                           (colon == std::string::npos ? summary : summary.substr(colon + 2)));
    }
    if (row.counts.empty() && !row.is_reference && report.contains("reason") &&
        report["reason"].is_string()) {
      row.counts.push_back(first_line(report["reason"].get<std::string>(), 80));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

MatrixView build_matrix_view(const ReportSet& set, const MatrixOptions& options) {
  check_matrix_axes(options);
  MatrixView view;
  view.title = options.title;
  view.options = options;
  view.environment_differences = set.environment_differences;
  view.missing_ids = set.missing_ids;
  view.duplicate_ids = set.duplicate_ids;
  view.report_count = static_cast<int>(set.reports.size());
  view.config_rows = config_rows_of(set);

  if (!set.reports.empty()) {
    const json& env = set.reports.front().at("environment");
    for (const std::string& line : comparable_environment(env)) {
      const auto colon = line.find(": ");
      view.environment.emplace_back(line.substr(0, colon), line.substr(colon + 2));
    }
    auto text = [&](const char* pointer) {
      const json::json_pointer p(pointer);
      return env.contains(p) && !env.at(p).is_null() ? axis_value_text(env.at(p))
                                                     : std::string("null");
    };
    view.environment.emplace_back("cpu",
                                  text("/cpu/model") + " (" + text("/cpu/cores") + " cores)");
    view.environment.emplace_back(
        "os", text("/os/sysname") + " " + text("/os/release") + " " + text("/os/machine"));
    view.environment.emplace_back("compiler", text("/compiler"));
  }

  std::set<std::string> axis_keys(options.rows.begin(), options.rows.end());
  axis_keys.insert(options.cols.begin(), options.cols.end());
  axis_keys.insert(options.split.begin(), options.split.end());

  // Group reports by split key, then by (row, col).
  struct Placed {
    AxisKey row, col;
    CellEntry entry;
    const json* scenario;
  };
  std::vector<std::pair<AxisKey, std::vector<Placed>>> groups;
  for (size_t i = 0; i < set.reports.size(); ++i) {
    const json& report = set.reports[i];
    const json& scenario = report.at("scenario");
    const AxisKey split = make_key(scenario, options.split, /*split=*/true);
    auto group = std::find_if(groups.begin(), groups.end(),
                              [&](const auto& g) { return g.first.values == split.values; });
    if (group == groups.end()) {
      groups.push_back({split, {}});
      group = std::prev(groups.end());
    }
    group->second.push_back({make_key(scenario, options.rows), make_key(scenario, options.cols),
                             entry_of(report, set.paths[i]), &scenario});
    ++view.verdict_totals[group->second.back().entry.verdict];
  }
  std::sort(groups.begin(), groups.end(),
            [](const auto& a, const auto& b) { return key_less(a.first, b.first); });

  for (auto& [split, placed] : groups) {
    MatrixTable table;
    table.split = split;
    auto add_unique = [](std::vector<AxisKey>& keys, const AxisKey& k) {
      for (const auto& existing : keys) {
        if (existing.values == k.values) return;
      }
      keys.push_back(k);
    };
    for (const auto& p : placed) {
      add_unique(table.rows, p.row);
      add_unique(table.cols, p.col);
    }
    std::sort(table.rows.begin(), table.rows.end(), key_less);
    std::sort(table.cols.begin(), table.cols.end(), key_less);
    auto index_of = [](const std::vector<AxisKey>& keys, const AxisKey& k) {
      for (size_t i = 0; i < keys.size(); ++i) {
        if (keys[i].values == k.values) return i;
      }
      return keys.size();
    };
    table.cells.assign(table.rows.size(), std::vector<MatrixCell>(table.cols.size()));
    std::vector<std::vector<std::vector<const json*>>> scenarios(
        table.rows.size(), std::vector<std::vector<const json*>>(table.cols.size()));
    for (auto& p : placed) {  // reports are sorted by id, so entries are too
      const size_t r = index_of(table.rows, p.row), c = index_of(table.cols, p.col);
      table.cells[r][c].entries.push_back(std::move(p.entry));
      scenarios[r][c].push_back(p.scenario);
    }
    for (size_t r = 0; r < table.rows.size(); ++r) {
      for (size_t c = 0; c < table.cols.size(); ++c) {
        label_distinguishing_knobs(table.cells[r][c].entries, scenarios[r][c], axis_keys);
      }
    }
    view.tables.push_back(std::move(table));
  }
  return view;
}

}  // namespace bih
