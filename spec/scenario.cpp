#include "spec/scenario.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

#include "base/edit_distance.hpp"
#include "base/json_text.hpp"
#include "base/strings.hpp"
#include "base/utf8.hpp"
#include "models/config.hpp"
#include "models/tree_sum.hpp"
#include "models/weights.hpp"
#include "spec/scenario_file.hpp"
#include "spec/server_profile.hpp"
#include "spec/size_bounds.hpp"

namespace bih {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// The keys each object of a scenario may hold. One table serves unknown-key checks, suggestions
// and the dotted keys of matrix files, so they cannot drift apart.
const std::vector<std::string> kTopKeys{"name",
                                        "model",
                                        "backend",
                                        "parallel",
                                        "sequence_parallel",
                                        "collectives",
                                        "nccl_env",
                                        "kernels",
                                        "cudagraph",
                                        "prefix_caching",
                                        "chunked_prefill",
                                        "plan",
                                        "timeout_s",
                                        "expect",
                                        "localize",
                                        "compare",
                                        "debug",
                                        "engine"};
const std::vector<std::string> kModelKeys{"preset", "path", "seed"};
const std::vector<std::string> kParallelKeys{"tp", "ranks", "ring_order"};
const std::vector<std::string> kSequenceParallelKeys{"enabled", "min_tokens"};
const std::vector<std::string> kCollectiveKeys{"all_reduce", "reduce_scatter", "all_gather"};
const std::vector<std::string> kCudagraphKeys{"mode", "capture_sizes"};
const std::vector<std::string> kPrefixCachingKeys{"enabled", "block_size"};
const std::vector<std::string> kChunkedPrefillKeys{"max_tokens"};
const std::vector<std::string> kPlanKeys{"prompts",      "max_tokens",    "batch_sizes",
                                         "repeats",      "fresh_process", "max_model_len",
                                         "max_num_seqs", "solo_lanes"};
const std::vector<std::string> kPromptKeys{"count", "min_len", "max_len", "seed", "file"};
const std::vector<std::string> kDebugKeys{"fault"};
const std::vector<std::string> kCompareKeys{"prefill", "top_k", "row_digest"};
constexpr int kMaxCompareTopK = 20;  // models/row_extras.hpp's kMaxTopK
const std::vector<std::string> kEngineKeys{
    "kind",         "name",    "command",      "cwd",
    "env",          "options", "model_format", "reply_timeout_s",
    "url",          "profile", "dialect",      "batching",
    "served_model", "args",    "reset_cache",  "ready_timeout_s"};
const std::vector<std::string> kEngineKinds{"bih", "command", "http"};
// Which engine.kind each engine key belongs to ("kind" belongs to all).
const std::vector<std::string> kCommandEngineKeys{
    "name", "command", "cwd", "env", "options", "model_format", "reply_timeout_s"};
const std::vector<std::string> kHttpEngineKeys{
    "name", "url", "profile", "dialect",     "batching",        "served_model",
    "args", "env", "options", "reset_cache", "reply_timeout_s", "ready_timeout_s"};
// With a running server (url) bih launches nothing: these belong to a profile.
const std::vector<std::string> kHttpProfileOnlyKeys{"args", "env", "options", "ready_timeout_s"};
const std::vector<std::string> kHttpUrlOnlyKeys{"reset_cache"};
const std::vector<std::string> kDialects{"openai", "sglang", "llama.cpp"};
const std::vector<std::string> kBatchings{"request", "concurrent"};
const std::vector<std::string> kModelFormats{"hf", "gguf"};
// The knob sections: what an external engine is handed when the input sets them.
const std::vector<std::string> kKnobSections{"backend",     "parallel",       "sequence_parallel",
                                             "collectives", "nccl_env",       "kernels",
                                             "cudagraph",   "prefix_caching", "chunked_prefill"};
const std::vector<std::string> kFaults{"none", "crash", "abort", "hang", "exit"};

constexpr int kMaxTp = 64;
constexpr int kMaxPrompts = 4096;
constexpr int kMaxBlockSize = 256;
constexpr int kDefaultBlockSize = 16;
constexpr int kIntMax = std::numeric_limits<int>::max();

// Sub-objects and the keys they allow, by dotted prefix.
const std::vector<std::pair<std::string, const std::vector<std::string>*>>& object_tables() {
  static const std::vector<std::pair<std::string, const std::vector<std::string>*>> tables{
      {"model", &kModelKeys},
      {"parallel", &kParallelKeys},
      {"sequence_parallel", &kSequenceParallelKeys},
      {"collectives", &kCollectiveKeys},
      {"cudagraph", &kCudagraphKeys},
      {"prefix_caching", &kPrefixCachingKeys},
      {"chunked_prefill", &kChunkedPrefillKeys},
      {"plan", &kPlanKeys},
      {"plan.prompts", &kPromptKeys},
      {"compare", &kCompareKeys},
      {"debug", &kDebugKeys},
      {"engine", &kEngineKeys}};
  return tables;
}

std::string quoted_list(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const auto& item : items) quoted.push_back("'" + item + "'");
  return join(quoted);
}

// A value as the user wrote it, cut short so a message stays one line.
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// Where we are: the file (for messages and for resolving relative paths) and the JSON pointer.
struct Cursor {
  const std::string& file;
  std::string pointer;

  Cursor at(const std::string& key) const {
    return {file, pointer + "/" + json_pointer_token(key)};
  }
  Cursor at(size_t index) const { return {file, pointer + "/" + std::to_string(index)}; }

  [[noreturn]] void fail(const std::string& what, const std::string& valid) const {
    throw ScenarioError(file, pointer, what + "; valid: " + valid);
  }
};

// Checks that `j` is an object with only `allowed` keys; suggests the nearest for a typo.
void check_object(const json& j, const Cursor& at, const std::vector<std::string>& allowed) {
  if (!j.is_object()) {
    at.fail("expected an object, got " + std::string(j.type_name()) + " " + shown(j),
            "an object with keys " + join(allowed));
  }
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string what = "unknown key '" + key + "'";
    if (auto near = nearest_key(key, allowed)) what += " (did you mean '" + *near + "'?)";
    at.at(key).fail(what, "keys " + join(allowed));
  }
}

const json* find(const json& object, const std::string& key) {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

int64_t read_integer(const json& value, const Cursor& at, int64_t lo, int64_t hi,
                     const std::string& range_text) {
  if (!value.is_number_integer()) {
    at.fail("expected an integer, got " + std::string(value.type_name()) + " " + shown(value),
            range_text);
  }
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    at.fail("value " + shown(value) + " is out of range", range_text);
  }
  const int64_t v = value.get<int64_t>();
  if (v < lo || v > hi) at.fail("value " + shown(value) + " is out of range", range_text);
  return v;
}

std::string range_text(int64_t lo, int64_t hi) {
  if (hi >= kIntMax) return "an integer >= " + std::to_string(lo);
  return "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
}

// Reads object[key] as an int in lo..hi into `out`; leaves `out` alone when the key is absent.
void read_int(const json& object, const Cursor& at, const std::string& key, int& out, int64_t lo,
              int64_t hi = kIntMax) {
  if (const json* v = find(object, key)) {
    out = static_cast<int>(read_integer(*v, at.at(key), lo, hi, range_text(lo, hi)));
  }
}

void read_seed(const json& object, const Cursor& at, uint64_t& out) {
  const json* v = find(object, "seed");
  if (!v) return;
  const std::string valid = "an integer >= 0";
  if (!v->is_number_integer()) {
    at.at("seed").fail("expected an integer, got " + std::string(v->type_name()) + " " + shown(*v),
                       valid);
  }
  if (v->is_number_unsigned()) {
    out = v->get<uint64_t>();
    return;
  }
  if (v->get<int64_t>() < 0) at.at("seed").fail("value " + shown(*v) + " is negative", valid);
  out = static_cast<uint64_t>(v->get<int64_t>());
}

void read_bool(const json& object, const Cursor& at, const std::string& key, bool& out) {
  const json* v = find(object, key);
  if (!v) return;
  if (!v->is_boolean()) {
    at.at(key).fail("expected a boolean, got " + std::string(v->type_name()) + " " + shown(*v),
                    "true or false");
  }
  out = v->get<bool>();
}

// Reads a string; `valid` describes what it may be for the type error.
bool read_string(const json& object, const Cursor& at, const std::string& key, std::string& out,
                 const std::string& valid = "a string") {
  const json* v = find(object, key);
  if (!v) return false;
  if (!v->is_string()) {
    at.at(key).fail("expected a string, got " + std::string(v->type_name()) + " " + shown(*v),
                    valid);
  }
  out = v->get<std::string>();
  return true;
}

// Reads one of an enum's spellings with the knobs.hpp parser.
template <class E, class Parse>
void read_enum(const json& object, const Cursor& at, const std::string& key, E& out, Parse parse,
               const std::vector<std::string>& spellings) {
  std::string text;
  if (!read_string(object, at, key, text, "one of " + quoted_list(spellings))) return;
  auto parsed = parse(text);
  if (!parsed) {
    std::string what = "unknown value '" + text + "' for " + key;
    if (auto near = nearest_key(text, spellings)) what += " (did you mean '" + *near + "'?)";
    at.at(key).fail(what, "one of " + quoted_list(spellings));
  }
  out = *parsed;
}

std::vector<int> read_int_list(const json& value, const Cursor& at, int64_t lo, int64_t hi,
                               const std::string& valid) {
  if (!value.is_array()) {
    at.fail("expected an array, got " + std::string(value.type_name()) + " " + shown(value), valid);
  }
  std::vector<int> out;
  for (size_t i = 0; i < value.size(); ++i) {
    out.push_back(static_cast<int>(read_integer(value[i], at.at(i), lo, hi, valid)));
  }
  return out;
}

// A path as written in a scenario, relative to the scenario file's folder, made absolute so the
// resolved scenario means the same thing whoever reads it.
std::string resolve_path(const std::string& scenario_file, const std::string& path) {
  fs::path p(path);
  if (p.is_relative()) p = fs::path(scenario_file).parent_path() / p;
  return fs::absolute(p).lexically_normal().string();
}

// A resolved path goes into the resolved scenario and the report, both JSON, which holds only
// UTF-8; a path the OS cannot be handed whole (a NUL) would name another file. The file path on
// the command line is outside text, so a relative path can pick up its bytes.
void check_path_text(const std::string& path, const Cursor& at, const std::string& valid) {
  if (path.find('\0') != std::string::npos) {
    at.fail("the path " + shown(json(path)) + " holds a NUL character", valid);
  }
  if (const size_t bad = first_invalid_utf8(path); bad != std::string::npos) {
    at.fail(fmt::format("the path '{}' is not valid UTF-8 (byte 0x{:02X}); bih's scenarios and "
                        "reports are JSON, which holds only UTF-8",
                        valid_utf8(path), static_cast<unsigned char>(path[bad])),
            valid + " whose name is UTF-8 (rename the folder, or give an absolute UTF-8 path)");
  }
}

std::string last_path_component(const std::string& path) {
  fs::path p(path);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

void parse_model(const json& j, const Cursor& at, Scenario& s) {
  check_object(j, at, kModelKeys);
  const bool has_preset =
      read_string(j, at, "preset", s.model.preset, "one of " + quoted_list(preset_names()));
  const bool has_path = read_string(j, at, "path", s.model.path, "a checkpoint folder");
  if (has_preset && has_path) {
    at.fail("both 'preset' and 'path' are given", "exactly one of 'preset' and 'path'");
  }
  if (has_path) {
    if (s.model.path.empty()) at.at("path").fail("the path is empty", "a checkpoint folder");
    s.model.path = resolve_path(at.file, s.model.path);
    check_path_text(s.model.path, at.at("path"), "a checkpoint folder");
    s.model.preset.clear();
  }
  read_seed(j, at, s.model.seed);
}

void parse_parallel(const json& j, const Cursor& at, Scenario& s) {
  check_object(j, at, kParallelKeys);
  read_int(j, at, "tp", s.tp, 1, kMaxTp);
  read_enum(j, at, "ranks", s.ranks, parse_rank_kind, spellings_rank_kind());
  if (const json* v = find(j, "ring_order")) {
    const std::string valid = "a permutation of 0..tp-1 (tp=" + std::to_string(s.tp) + ")";
    s.ring_order = read_int_list(*v, at.at("ring_order"), 0, kMaxTp - 1, valid);
  }
}

void parse_plan(const json& j, const Cursor& at, Scenario& s) {
  check_object(j, at, kPlanKeys);
  PlanSpec& plan = s.plan;
  if (const json* prompts = find(j, "prompts")) {
    const Cursor pat = at.at("prompts");
    check_object(*prompts, pat, kPromptKeys);
    read_int(*prompts, pat, "count", plan.prompts.count, 1, kMaxPrompts);
    read_int(*prompts, pat, "min_len", plan.prompts.min_len, 1);
    read_int(*prompts, pat, "max_len", plan.prompts.max_len, 1);
    read_seed(*prompts, pat, plan.prompts.seed);
    if (read_string(*prompts, pat, "file", plan.prompts.file, "a JSON file of token-id lists")) {
      if (plan.prompts.file.empty()) {
        pat.at("file").fail("the file name is empty", "a JSON file of token-id lists");
      }
      plan.prompts.file = resolve_path(at.file, plan.prompts.file);
      check_path_text(plan.prompts.file, pat.at("file"), "a JSON file of token-id lists");
    }
  }
  read_int(j, at, "max_tokens", plan.max_tokens, 1);
  read_bool(j, at, "fresh_process", plan.fresh_process);
  read_int(j, at, "repeats", plan.repeats, 1, kMaxRepeats);
  read_int(j, at, "max_model_len", plan.max_model_len, 1, kMaxModelLen);
  read_int(j, at, "max_num_seqs", plan.max_num_seqs, 1, kMaxNumSeqs);
  read_int(j, at, "solo_lanes", plan.solo_lanes, 1, kMaxSoloLanes);
  if (const json* v = find(j, "batch_sizes")) {
    const std::string valid = "a non-empty array of integers in 1..max_num_seqs (" +
                              std::to_string(plan.max_num_seqs) + "), the first the reference";
    plan.batch_sizes = read_int_list(*v, at.at("batch_sizes"), 1, kIntMax, valid);
    if (plan.batch_sizes.size() > kMaxBatchSizes) {
      at.at("batch_sizes")
          .fail(std::to_string(plan.batch_sizes.size()) + " batch sizes",
                "at most " + std::to_string(kMaxBatchSizes) + " batch sizes");
    }
  }
}

// How many levels a value nests (a scalar 0, {} or [] 1). Recursion is bounded: every value
// here was parsed under kMaxJsonDepth.
int json_depth(const json& v) {
  if (!v.is_structured()) return 0;
  int deepest = 0;
  for (const auto& child : v) deepest = std::max(deepest, json_depth(child));
  return deepest + 1;
}

bool contains(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

// A name for the id's engine=<name>: letters, digits, . _ -.
void read_engine_name(const json& j, const Cursor& at, EngineSpec& e, bool required) {
  const std::string name_valid = "a short name such as \"llama.cpp\" (letters, digits, . _ -)";
  if (!read_string(j, at, "name", e.name, name_valid) && required) {
    at.at("name").fail("engine.kind '" + e.kind + "' needs a name (it ends the scenario id)",
                       name_valid);
  }
  const bool name_ok = !e.name.empty() && std::all_of(e.name.begin(), e.name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  if (!name_ok) at.at("name").fail("bad engine name " + shown(json(e.name)), name_valid);
}

void read_engine_env(const json& j, const Cursor& at, EngineSpec& e) {
  const json* env = find(j, "env");
  if (env == nullptr) return;
  const Cursor env_at = at.at("env");
  if (!env->is_object()) {
    env_at.fail("expected an object, got " + shown(*env), "an object of names to strings");
  }
  const std::string name_valid =
      "a variable name: not empty, without '=' or NUL, e.g. \"OMP_NUM_THREADS\"";
  for (const auto& [key, value] : env->items()) {
    // setenv refuses a name with '=' (or takes it as name=value) and C strings end at a NUL:
    // the engine would get another variable than the file names.
    if (key.empty() || key.find('=') != std::string::npos || key.find('\0') != std::string::npos) {
      // A NUL would cut the message short where it is printed: point at the object then.
      (key.find('\0') == std::string::npos ? env_at.at(key) : env_at)
          .fail("bad variable name " + shown(json(key)), name_valid);
    }
    std::string text;
    read_string(*env, env_at, key, text, "a string, e.g. \"1\"");
    if (text.find('\0') != std::string::npos) {
      env_at.at(key).fail("the value " + shown(json(text)) + " holds a NUL character",
                          "a string without NUL (\\u0000), e.g. \"1\"");
    }
    e.env[key] = text;
  }
}

void read_engine_options(const json& j, const Cursor& at, EngineSpec& e) {
  const json* options = find(j, "options");
  if (options == nullptr) return;
  if (!options->is_object()) {
    at.at("options").fail("expected an object, got " + shown(*options),
                          "an object handed to the engine (init.options, or the server profile's "
                          "option mappings), recorded");
  }
  // A report carries the options kOptionsDepthInReport levels below its top, and every reader
  // (gate, matrix, explain) refuses a file deeper than kMaxJsonDepth: options nested deeper than
  // this bound would make a report that bih itself cannot read back.
  if (const int depth = json_depth(*options); depth > kMaxOptionsDepth) {
    at.at("options").fail(
        fmt::format("the options nest {} levels deep (the report carries them {} levels "
                    "further down, and bih reads no JSON deeper than {})",
                    depth, kOptionsDepthInReport, kMaxJsonDepth),
        fmt::format("options nested at most {} levels (the options object itself is one)",
                    kMaxOptionsDepth));
  }
  e.options = *options;
}

// Reads a number of seconds; 0 keeps its meaning (a default) when zero_ok.
void read_seconds(const json& j, const Cursor& at, const std::string& key, double& out,
                  const std::string& zero_means) {
  const json* v = find(j, key);
  if (v == nullptr) return;
  // Below a millisecond a wait rounds to no wait at all: every answer would time out.
  const bool in_range = v->is_number() && v->get<double>() >= 0 &&
                        v->get<double>() <= kMaxTimeoutS &&
                        (v->get<double>() == 0 || v->get<double>() >= kMinReplyTimeoutS);
  if (!in_range) {
    at.at(key).fail("expected 0 or a number of seconds from 0.001 up to a week, got " + shown(*v),
                    "0 (" + zero_means + "), or from " + shown(json(kMinReplyTimeoutS)) + " to " +
                        shown(json(kMaxTimeoutS)) + " seconds");
  }
  out = v->get<double>();
}

// One of a fixed set of words.
void read_word(const json& j, const Cursor& at, const std::string& key, std::string& out,
               const std::vector<std::string>& words, const std::string& label = "") {
  std::string text;
  if (!read_string(j, at, key, text, "one of " + quoted_list(words))) return;
  if (!contains(words, text)) {
    std::string what = "unknown " + (label.empty() ? key : label) + " '" + text + "'";
    if (auto near = nearest_key(text, words)) what += " (did you mean '" + *near + "'?)";
    at.at(key).fail(what, "one of " + quoted_list(words));
  }
  out = text;
}

// "http://HOST:PORT" with an optional path prefix ("/v2"); no query, fragment or user.
void check_url(const std::string& url, const Cursor& at) {
  const std::string valid =
      "\"http://HOST:PORT\" with an optional path prefix, e.g. \"http://127.0.0.1:8000\" (a "
      "running server; https is not supported)";
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) at.fail("the url " + shown(json(url)) + " is not http://", valid);
  const std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? "" : rest.substr(slash);
  size_t colon = authority.rfind(':');
  std::string host = colon == std::string::npos ? authority : authority.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : authority.substr(colon + 1);
  const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  const bool host_ok =
      bracketed || (!host.empty() && std::all_of(host.begin(), host.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-';
      }));
  if (!host_ok) at.fail("the url " + shown(json(url)) + " has no valid host", valid);
  const bool port_ok =
      !port.empty() && port.size() <= 5 &&
      std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      std::stoi(port) >= 1 && std::stoi(port) <= 65535;
  if (!port_ok) at.fail("the url " + shown(json(url)) + " has no port in 1..65535", valid);
  const bool path_ok = std::all_of(path.begin(), path.end(), [](char c) {
    return c > ' ' && c < 0x7f && c != '?' && c != '#' && c != '%';
  });
  if (!path_ok) {
    at.fail("the url " + shown(json(url)) + " holds a query, fragment, escape or space", valid);
  }
}

void parse_http_engine(const json& j, const Cursor& at, Scenario& s) {
  EngineSpec& e = s.engine;
  const bool has_url = read_string(j, at, "url", e.url, "\"http://HOST:PORT\"");
  const bool has_profile =
      read_string(j, at, "profile", e.profile, "a shipped profile's name or a profile file");
  const std::string which =
      "exactly one of 'url' (a running server) and 'profile' (a server bih launches)";
  if (has_url == has_profile) {
    at.fail(has_url ? "both 'url' and 'profile' are given" : "neither 'url' nor 'profile' is given",
            which);
  }
  for (const std::string& key : has_url ? kHttpProfileOnlyKeys : kHttpUrlOnlyKeys) {
    if (find(j, key)) {
      at.at(key).fail("'" + key + "' is for " +
                          (has_url ? "a server bih launches (engine.profile)"
                                   : "a running server (engine.url)") +
                          ", but engine." + (has_url ? "url" : "profile") + " is given",
                      "no '" + key + "' here");
    }
  }
  std::vector<std::string> dialects = kDialects;
  if (has_url) {
    check_url(e.url, at.at("url"));
    while (e.url.size() > 1 && e.url.back() == '/') e.url.pop_back();
    if (!find(j, "dialect")) {
      at.at("dialect").fail("engine.url needs the dialect the server speaks",
                            "one of " + quoted_list(kDialects));
    }
    e.name = "http";
  } else {
    if (e.profile.empty()) at.at("profile").fail("the profile is empty", shown(json(which)));
    // A bad profile is the user's to fix before anything runs.
    const ServerProfile profile = load_server_profile(e.profile, at.file);
    // A file is kept absolute, so the resolved scenario names the same one wherever it is read.
    if (!contains(shipped_profile_names(), e.profile) && !profile.file.empty()) {
      e.profile = profile.file;
    }
    e.name = profile.name;
    e.model_format = profile.model_format;
    dialects = profile.dialects;
    if (!dialects.empty()) e.dialect = dialects.front();
  }
  read_word(j, at, "dialect", e.dialect, dialects);
  if (!contains(kDialects, e.dialect)) {
    at.at("dialect").fail(e.dialect.empty() ? "profile '" + e.profile + "' lists no dialect"
                                            : "profile '" + e.profile + "' names dialect '" +
                                                  e.dialect + "', which bih does not speak",
                          "one of " + quoted_list(kDialects));
  }
  read_word(j, at, "batching", e.batching, kBatchings);
  if (find(j, "name")) read_engine_name(j, at, e, false);
  read_string(j, at, "served_model", e.served_model, "the request's \"model\" field, a string");
  if (const json* args = find(j, "args")) {
    const std::string valid = "an array of strings (server arguments after the profile's own)";
    if (!args->is_array()) at.at("args").fail("expected an array, got " + shown(*args), valid);
    for (size_t i = 0; i < args->size(); ++i) {
      const json& a = (*args)[i];
      if (!a.is_string() || a.get<std::string>().find('\0') != std::string::npos) {
        at.at("args").at(i).fail("expected a string without NUL, got " + shown(a), valid);
      }
      e.args.push_back(a.get<std::string>());
    }
  }
  read_engine_env(j, at, e);
  read_engine_options(j, at, e);
  std::string reset;
  const std::string reset_valid =
      "\"POST /path\" (the server's endpoint that empties its prefix "
      "cache), e.g. \"POST /flush_cache\"";
  if (read_string(j, at, "reset_cache", reset, reset_valid)) {
    const bool ok = reset.rfind("POST /", 0) == 0 && reset.size() > 5 &&
                    std::all_of(reset.begin() + 5, reset.end(),
                                [](char c) { return c > ' ' && c < 0x7f && c != '#'; });
    if (!ok) at.at("reset_cache").fail("bad endpoint " + shown(json(reset)), reset_valid);
    e.reset_cache = reset;
  }
  read_seconds(j, at, "reply_timeout_s", e.reply_timeout_s, "90% of timeout_s");
  read_seconds(j, at, "ready_timeout_s", e.ready_timeout_s, "the profile's");
}

void parse_engine(const json& j, const Cursor& at, Scenario& s) {
  check_object(j, at, kEngineKeys);
  EngineSpec& e = s.engine;
  read_word(j, at, "kind", e.kind, kEngineKinds, "engine kind");
  const std::vector<std::string>& allowed =
      e.is_bih() ? std::vector<std::string>{}
                 : (e.is_http() ? kHttpEngineKeys : kCommandEngineKeys);
  for (const auto& [key, value] : j.items()) {
    if (key == "kind" || contains(allowed, key)) continue;
    const bool for_command = contains(kCommandEngineKeys, key);
    const bool for_http = contains(kHttpEngineKeys, key);
    const std::string whose = for_command && for_http ? "an adapter or a server"
                              : for_command           ? "an adapter"
                                                      : "a server";
    const std::string kinds = for_command && for_http ? "'command' or 'http'"
                              : for_command           ? "'command'"
                                                      : "'http'";
    at.at(key).fail("'" + key + "' is for " + whose + " (engine.kind " + kinds +
                        "), but engine.kind is '" + e.kind + "'",
                    "engine.kind " + kinds + " with it, or no '" + key + "'");
  }
  if (e.is_bih()) return;
  if (e.is_http()) {
    parse_http_engine(j, at, s);
    return;
  }
  read_engine_name(j, at, e, true);
  const std::string command_valid = "a non-empty array of strings: [program, args...]";
  const json* command = find(j, "command");
  if (command == nullptr) {
    at.at("command").fail("engine.kind 'command' needs the adapter's command line", command_valid);
  }
  if (!command->is_array() || command->empty()) {
    at.at("command").fail("expected " + command_valid + ", got " + shown(*command), command_valid);
  }
  for (size_t i = 0; i < command->size(); ++i) {
    if (!(*command)[i].is_string() || (*command)[i].get<std::string>().empty()) {
      at.at("command").at(i).fail("expected a non-empty string, got " + shown((*command)[i]),
                                  command_valid);
    }
    e.command.push_back((*command)[i].get<std::string>());
    if (e.command.back().find('\0') != std::string::npos) {
      // exec takes C strings: the adapter would get the argument cut at the NUL.
      at.at("command").at(i).fail(
          "argument " + shown((*command)[i]) + " holds a NUL character (\\u0000)", command_valid);
    }
  }
  if (read_string(j, at, "cwd", e.cwd, "a folder")) {
    if (e.cwd.empty()) at.at("cwd").fail("the folder is empty", "a folder");
    e.cwd = resolve_path(at.file, e.cwd);
    check_path_text(e.cwd, at.at("cwd"), "a folder");
  } else {
    // A file named without a folder ("s.json") is in the working directory; fs::absolute("")
    // throws, so that case is spelled out.
    const fs::path folder = fs::path(at.file).parent_path();
    e.cwd =
        (folder.empty() ? fs::current_path() : fs::absolute(folder).lexically_normal()).string();
    check_path_text(e.cwd, at.at("cwd"),
                    "a scenario file in a folder (the adapter's default working directory)");
  }
  read_engine_env(j, at, e);
  read_engine_options(j, at, e);
  read_word(j, at, "model_format", e.model_format, kModelFormats, "model format");
  read_seconds(j, at, "reply_timeout_s", e.reply_timeout_s, "90% of timeout_s");
}

// The knob leaves the input sets, dotted ("parallel.tp", "nccl_env.NCCL_ALGO", "kernels").
std::vector<std::string> knobs_set_in(const json& j) {
  std::vector<std::string> set;
  for (const std::string& section : kKnobSections) {
    const json* v = find(j, section);
    if (v == nullptr) continue;
    if (!v->is_object()) {
      set.push_back(section);
      continue;
    }
    for (const auto& [key, value] : v->items()) set.push_back(section + "." + key);
  }
  return set;
}

// The token-id lists of a prompts file: checked here so a bad file fails before any run starts.
// Returns the longest prompt's length.
int check_prompts_file(const std::string& path, const Cursor& at, int vocab_size) {
  const std::string valid = "an existing JSON file holding [[token ids], ...]";
  if (!fs::is_regular_file(path)) at.fail("prompts file '" + path + "' does not exist", valid);
  json prompts;
  try {
    prompts = read_json_file(path);
  } catch (const InputError& e) {
    at.fail(std::string("cannot read the prompts file: ") + e.what(), valid);
  }
  const std::string token_range = "token ids in 0.." + std::to_string(vocab_size - 1);
  if (!prompts.is_array() || prompts.empty()) {
    at.fail("prompts file '" + path + "' is not a non-empty array", valid);
  }
  size_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const json& prompt = prompts[i];
    const std::string where = "prompts file '" + path + "' entry " + std::to_string(i);
    if (!prompt.is_array() || prompt.empty()) {
      at.fail(where + " is not a non-empty array of token ids", valid);
    }
    for (const json& token : prompt) {
      if (!token.is_number_integer() || token.get<int64_t>() < 0 ||
          token.get<int64_t>() >= vocab_size) {
        at.fail(where + " holds " + shown(token), token_range);
      }
    }
    longest = std::max(longest, prompt.size());
  }
  return static_cast<int>(longest);
}

// The model's shape, for the checks that depend on it.
ModelConfig model_config(const Scenario& s, const Cursor& at) {
  if (!s.model.path.empty()) {
    const std::string config_path = (fs::path(s.model.path) / "config.json").string();
    const std::string valid =
        "a Hugging Face checkpoint folder holding config.json (bih export --preset NAME "
        "--format hf --out DIR writes one)";
    // The error_code form: a name the system refuses (too long, say) is the input's fault too,
    // not a filesystem_error escaping the checks.
    std::error_code ec;
    if (!fs::is_regular_file(config_path, ec)) {
      at.at("model").at("path").fail(
          "'" + config_path + "' " +
              (ec ? "cannot be read (" + ec.message() + ")" : "does not exist"),
          valid);
    }
    ModelConfig config;
    try {
      config = load_config_json(config_path);
    } catch (const std::exception& e) {
      // A checkpoint's config.json is user input too, whatever the parser threw.
      at.at("model").at("path").fail(std::string("bad model config: ") + e.what(), valid);
    }
    // The weights against the config now, before any check that uses the config's sizes: a
    // num_hidden_layers far beyond the weights is the checkpoint's fault, not the plan's. A
    // folder with no weights yet (config only: listing, ids) is left to the run's own check.
    const fs::path dir(s.model.path);
    try {
      if (fs::exists(dir / "model.safetensors") || fs::exists(dir / "model.safetensors.index.json"))
        validate_checkpoint(s.model.path);
    } catch (const std::exception& e) {
      at.at("model").at("path").fail(
          std::string("bad checkpoint: ") + e.what(),
          "a checkpoint whose safetensors match its config.json (re-download or re-export it, "
          "e.g. bih export --model SRC --format hf --out DIR)");
    }
    return config;
  }
  auto config = preset_config(s.model.preset);
  if (!config) {
    std::string what = "unknown preset '" + s.model.preset + "'";
    if (auto near = nearest_key(s.model.preset, preset_names())) {
      what += " (did you mean '" + *near + "'?)";
    }
    at.at("model").at("preset").fail(what, "one of " + quoted_list(preset_names()));
  }
  return *config;
}

// Cross-field rules: each names the field whose value a user would most likely change.
// kernels tp_invariant is defined by its 8-chunk K tree (models/tree_sum.hpp): a TP size whose
// ranks hold whole subtrees, and a model whose every contraction's K splits into 8 chunks.
void check_tp_invariant(const Scenario& s, const ModelConfig& config, const std::string& model_name,
                        const Cursor& at) {
  if (!tp_invariant_tp_ok(s.tp)) {
    at.at("parallel")
        .at("tp")
        .fail("tp=" + std::to_string(s.tp) +
                  " with kernels 'tp_invariant', whose K chunk tree has " +
                  std::to_string(kTpInvariantChunks) + " leaves",
              "tp 1, 2, 4 or 8 with kernels 'tp_invariant'");
  }
  const std::vector<std::pair<std::string, int>> contractions{
      {"hidden_size", config.hidden_size},
      {"num_heads*head_dim", config.q_size()},
      {"intermediate_size", config.intermediate_size}};
  std::vector<std::string> bad;
  for (const auto& [what, K] : contractions) {
    if (K % kTpInvariantChunks != 0) bad.push_back(what + "=" + std::to_string(K));
  }
  if (!bad.empty()) {
    at.at("kernels").fail("kernels 'tp_invariant' splits every contraction's K into " +
                              std::to_string(kTpInvariantChunks) + " chunks, but " + join(bad) +
                              " of model '" + model_name + "' " + (bad.size() == 1 ? "is" : "are") +
                              " not a multiple of " + std::to_string(kTpInvariantChunks),
                          "'invariant' or 'vendor' for this model, or a model whose hidden, "
                          "attention and intermediate sizes are multiples of 8");
  }
}

void check_combinations(const Scenario& s, const Cursor& at) {
  const ModelConfig config = model_config(s, at);
  const std::string model_name = s.model.path.empty() ? s.model.preset : s.model.path;

  const std::vector<std::pair<std::string, int>> sharded{
      {"num_heads", config.num_heads},
      {"num_kv_heads", config.num_kv_heads},
      {"intermediate_size", config.intermediate_size},
      {"vocab_size", config.vocab_size}};
  std::vector<std::string> not_divided;
  for (const auto& [what, size] : sharded) {
    if (size % s.tp != 0) not_divided.push_back(what + "=" + std::to_string(size));
  }
  if (!not_divided.empty()) {
    std::vector<std::string> good;
    for (int tp = 1; tp <= kMaxTp; ++tp) {
      bool divides_all = true;
      for (const auto& entry : sharded) divides_all = divides_all && entry.second % tp == 0;
      if (divides_all) good.push_back(std::to_string(tp));
    }
    at.at("parallel")
        .at("tp")
        .fail("tp=" + std::to_string(s.tp) + " does not divide " + join(not_divided) +
                  " of model '" + model_name + "'",
              "a tp that divides all of them: " + join(good));
  }

  if (s.kernels == KernelFamily::tp_invariant) check_tp_invariant(s, config, model_name, at);

  if (s.ranks == RankKind::nccl && s.backend == Backend::cpu) {
    at.at("parallel")
        .at("ranks")
        .fail("ranks 'nccl' need GPUs, but backend is 'cpu'",
              "ranks 'emulated' on backend 'cpu', or ranks 'nccl' with backend 'cuda' or 'auto'");
  }

  if (!s.ring_order.empty()) {
    std::vector<int> sorted = s.ring_order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> identity(s.tp);
    std::iota(identity.begin(), identity.end(), 0);
    if (sorted != identity) {
      at.at("parallel")
          .at("ring_order")
          .fail(
              shown(json(s.ring_order)) + " is not a permutation of 0.." + std::to_string(s.tp - 1),
              "each of 0.." + std::to_string(s.tp - 1) +
                  " exactly once (tp=" + std::to_string(s.tp) + ")");
    }
  }

  for (const auto& [key, value] : s.nccl_env) {
    if (key.rfind("NCCL_", 0) != 0) {
      at.at("nccl_env")
          .at(key)
          .fail("'" + key + "' is not an NCCL variable",
                "names starting with NCCL_, e.g. NCCL_ALGO");
    }
  }

  const Cursor sizes_at = at.at("cudagraph").at("capture_sizes");
  if (s.capture_sizes.empty()) sizes_at.fail("the list is empty", "strictly increasing sizes >= 1");
  for (size_t i = 1; i < s.capture_sizes.size(); ++i) {
    if (s.capture_sizes[i] <= s.capture_sizes[i - 1]) {
      sizes_at.at(i).fail(std::to_string(s.capture_sizes[i]) + " does not exceed the previous " +
                              std::to_string(s.capture_sizes[i - 1]),
                          "strictly increasing sizes >= 1");
    }
  }

  const int b = s.block_size;
  if (b < 1 || b > kMaxBlockSize || (b & (b - 1)) != 0) {
    at.at("prefix_caching")
        .at("block_size")
        .fail("block_size " + std::to_string(b) + " is not a power of two in 1..256",
              "1, 2, 4, 8, 16, 32, 64, 128 or 256");
  }

  const PlanSpec& plan = s.plan;
  const Cursor plan_at = at.at("plan");
  int longest_prompt = plan.prompts.max_len;
  if (!plan.prompts.file.empty()) {
    longest_prompt =
        check_prompts_file(plan.prompts.file, plan_at.at("prompts").at("file"), config.vocab_size);
  } else if (plan.prompts.min_len > plan.prompts.max_len) {
    plan_at.at("prompts").at("min_len").fail("min_len " + std::to_string(plan.prompts.min_len) +
                                                 " exceeds max_len " +
                                                 std::to_string(plan.prompts.max_len),
                                             "1 <= min_len <= max_len");
  }
  if (plan.batch_sizes.empty()) {
    plan_at.at("batch_sizes").fail("the list is empty", "a non-empty array of batch sizes");
  }
  for (size_t i = 0; i < plan.batch_sizes.size(); ++i) {
    if (plan.batch_sizes[i] > plan.max_num_seqs) {
      plan_at.at("batch_sizes")
          .at(i)
          .fail(
              "batch size " + std::to_string(plan.batch_sizes[i]) + " exceeds max_num_seqs " +
                  std::to_string(plan.max_num_seqs),
              "an integer in 1.." + std::to_string(plan.max_num_seqs) + ", or raise max_num_seqs");
    }
  }
  const int64_t needed = int64_t{longest_prompt} + plan.max_tokens;
  if (needed > plan.max_model_len) {
    plan_at.at("max_model_len")
        .fail(
            "the longest prompt (" + std::to_string(longest_prompt) + ") + max_tokens (" +
                std::to_string(plan.max_tokens) + ") = " + std::to_string(needed) +
                " exceeds max_model_len " + std::to_string(plan.max_model_len),
            "max_model_len >= " + std::to_string(needed) + ", or shorter prompts or fewer tokens");
  }
  if (plan.max_model_len > config.max_position_embeddings) {
    plan_at.at("max_model_len")
        .fail("max_model_len " + std::to_string(plan.max_model_len) + " exceeds the model's " +
                  "max_position_embeddings " + std::to_string(config.max_position_embeddings),
              "an integer in 1.." + std::to_string(config.max_position_embeddings));
  }
  check_size_bounds(s, config, at.file, at.pointer);
}

}  // namespace

const std::vector<std::string>& http_dialects() { return kDialects; }

const std::vector<std::string>& knob_sections() { return kKnobSections; }

std::vector<std::string> scenario_dotted_keys() {
  std::vector<std::string> keys;
  for (const auto& top : kTopKeys) {
    keys.push_back(top);
    for (const auto& [prefix, table] : object_tables()) {
      if (prefix != top) continue;
      for (const auto& key : *table) {
        keys.push_back(prefix + "." + key);
        if (prefix + "." + key == "plan.prompts") {
          for (const auto& prompt_key : kPromptKeys) keys.push_back("plan.prompts." + prompt_key);
        }
      }
    }
  }
  return keys;
}

bool is_scenario_dotted_key(const std::string& dotted) {
  static const std::vector<std::string> keys = scenario_dotted_keys();
  if (std::find(keys.begin(), keys.end(), dotted) != keys.end()) return true;
  // Free-form maps: any one name below them.
  for (const std::string prefix : {"nccl_env.NCCL_", "engine.options.", "engine.env."}) {
    if (dotted.size() > prefix.size() && dotted.rfind(prefix, 0) == 0 &&
        dotted.find('.', prefix.size()) == std::string::npos) {
      return true;
    }
  }
  return false;
}

Scenario scenario_from_json(const json& j, const std::string& file, const std::string& pointer) {
  const Cursor at{file, pointer};
  // "$schema" is for editors and validators; it carries no knob.
  static const std::vector<std::string> kTopKeysInFiles = [] {
    std::vector<std::string> keys = kTopKeys;
    keys.push_back("$schema");
    return keys;
  }();
  check_object(j, at, kTopKeysInFiles);
  Scenario s;
  s.source_file = file;
  read_string(j, at, "name", s.name);
  if (const json* v = find(j, "model")) parse_model(*v, at.at("model"), s);
  read_enum(j, at, "backend", s.backend, parse_backend, spellings_backend());
  if (const json* v = find(j, "parallel")) parse_parallel(*v, at.at("parallel"), s);
  if (const json* v = find(j, "sequence_parallel")) {
    const Cursor sp_at = at.at("sequence_parallel");
    check_object(*v, sp_at, kSequenceParallelKeys);
    read_bool(*v, sp_at, "enabled", s.sp_enabled);
    read_int(*v, sp_at, "min_tokens", s.sp_min_tokens, 1);
  }
  if (const json* v = find(j, "collectives")) {
    const Cursor c_at = at.at("collectives");
    check_object(*v, c_at, kCollectiveKeys);
    read_enum(*v, c_at, "all_reduce", s.all_reduce, parse_reduce_order, spellings_reduce_order());
    read_enum(*v, c_at, "reduce_scatter", s.reduce_scatter, parse_reduce_order,
              spellings_reduce_order());
    read_enum(*v, c_at, "all_gather", s.all_gather, parse_reduce_order, spellings_reduce_order());
  }
  if (const json* v = find(j, "nccl_env")) {
    const Cursor env_at = at.at("nccl_env");
    if (!v->is_object()) {
      env_at.fail("expected an object, got " + std::string(v->type_name()) + " " + shown(*v),
                  "an object of NCCL_* names to string values");
    }
    for (const auto& [key, value] : v->items()) {
      std::string text;
      read_string(*v, env_at, key, text, "a string, e.g. \"4\"");
      s.nccl_env[key] = text;
    }
  }
  read_enum(j, at, "kernels", s.kernels, parse_kernel_family, spellings_kernel_family());
  if (const json* v = find(j, "cudagraph")) {
    const Cursor g_at = at.at("cudagraph");
    check_object(*v, g_at, kCudagraphKeys);
    read_enum(*v, g_at, "mode", s.graph_mode, parse_graph_mode, spellings_graph_mode());
    if (const json* sizes = find(*v, "capture_sizes")) {
      s.capture_sizes = read_int_list(*sizes, g_at.at("capture_sizes"), 1, kIntMax,
                                      "a non-empty, strictly increasing array of sizes >= 1");
    }
  }
  if (const json* v = find(j, "prefix_caching")) {
    const Cursor p_at = at.at("prefix_caching");
    check_object(*v, p_at, kPrefixCachingKeys);
    read_bool(*v, p_at, "enabled", s.prefix_caching);
    read_int(*v, p_at, "block_size", s.block_size, 1, kMaxBlockSize);
  }
  if (const json* v = find(j, "chunked_prefill")) {
    const Cursor c_at = at.at("chunked_prefill");
    check_object(*v, c_at, kChunkedPrefillKeys);
    read_int(*v, c_at, "max_tokens", s.chunked_prefill_max_tokens, 0);
  }
  if (const json* v = find(j, "plan")) parse_plan(*v, at.at("plan"), s);
  if (const json* v = find(j, "timeout_s")) {
    if (!v->is_number() || !(v->get<double>() > 0) || !(v->get<double>() <= kMaxTimeoutS)) {
      at.at("timeout_s")
          .fail("expected a positive number of seconds up to a week, got " + shown(*v),
                "a number > 0, at most " + shown(json(kMaxTimeoutS)) + " (a week)");
    }
    s.timeout_s = v->get<double>();
  }
  if (const json* v = find(j, "expect"); v && !v->is_null()) {
    const std::vector<std::string> verdicts{"invariant",      "batch_variant",   "nondeterministic",
                                            "config_variant", "prefill_variant", "error",
                                            "unsupported"};
    std::string text;
    read_string(j, at, "expect", text, "one of " + quoted_list(verdicts) + ", or null");
    s.expect = parse_verdict(text);
    if (!s.expect) {
      std::string what = "unknown verdict '" + text + "'";
      if (auto near = nearest_key(text, verdicts)) what += " (did you mean '" + *near + "'?)";
      at.at("expect").fail(what, "one of " + quoted_list(verdicts) + ", or null");
    }
  }
  read_bool(j, at, "localize", s.localize);
  if (const json* v = find(j, "compare")) {
    const Cursor c_at = at.at("compare");
    check_object(*v, c_at, kCompareKeys);
    read_bool(*v, c_at, "prefill", s.compare.prefill);
    read_int(*v, c_at, "top_k", s.compare.top_k, 0, kMaxCompareTopK);
    read_bool(*v, c_at, "row_digest", s.compare.row_digest);
  }
  if (const json* v = find(j, "engine")) parse_engine(*v, at.at("engine"), s);
  s.knobs_set = knobs_set_in(j);
  if (s.kernels == KernelFamily::tp_invariant) {
    // The row-parallel sums are the chunk tree's whatever the orders say; left unset, the orders
    // resolve to `fixed` (a fixed order the tree continues) so that the id does not name a ring.
    const auto unset = [&](const char* dotted) {
      return std::find(s.knobs_set.begin(), s.knobs_set.end(), dotted) == s.knobs_set.end();
    };
    if (unset("collectives.all_reduce")) s.all_reduce = ReduceOrder::fixed;
    if (unset("collectives.reduce_scatter")) s.reduce_scatter = ReduceOrder::fixed;
  }
  if (const json* v = find(j, "debug")) {
    const Cursor d_at = at.at("debug");
    check_object(*v, d_at, kDebugKeys);
    std::string fault;
    if (read_string(*v, d_at, "fault", fault, "one of " + quoted_list(kFaults))) {
      if (std::find(kFaults.begin(), kFaults.end(), fault) == kFaults.end()) {
        std::string what = "unknown fault '" + fault + "'";
        if (auto near = nearest_key(fault, kFaults)) what += " (did you mean '" + *near + "'?)";
        d_at.at("fault").fail(what, "one of " + quoted_list(kFaults));
      }
      s.fault = fault == "none" ? "" : fault;
    }
  }

  check_combinations(s, at);
  // The identity ring is the default; store it as such so equal scenarios compare equal.
  bool identity = true;
  for (size_t i = 0; i < s.ring_order.size(); ++i) identity = identity && s.ring_order[i] == int(i);
  if (identity) s.ring_order.clear();
  return s;
}

namespace {

// compare's id parts, only for what is on: a scenario without `compare` keeps its id.
void append_compare_parts(const CompareSpec& c, std::vector<std::string>& parts) {
  if (c.prefill) parts.push_back("prefill=on");
  if (c.top_k > 0) parts.push_back("top_k=" + std::to_string(c.top_k));
  if (c.row_digest) parts.push_back("digest=on");
}

bool is_set(const std::vector<std::string>& knobs_set, const std::string& dotted) {
  return std::find(knobs_set.begin(), knobs_set.end(), dotted) != knobs_set.end();
}

// A string in an id: bare when that cannot be mistaken for anything else (a plain word of
// [A-Za-z0-9_.:/+-] that does not read as a JSON number, true, false or null), JSON-quoted
// otherwise. So "1" and 1, or "a,b=c" and two options, never give one id.
std::string id_string(const std::string& text) {
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' ||
           c == '/' || c == '+' || c == '-';
  });
  if (plain && json::parse(text, nullptr, /*allow_exceptions=*/false).is_discarded()) return text;
  return json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

// A value in an id: a string as above, anything else compact canonical JSON (nlohmann sorts
// object keys, and JSON delimits itself, so distinct values give distinct text).
std::string id_value(const json& v) {
  return v.is_string() ? id_string(v.get<std::string>())
                       : v.dump(-1, ' ', false, json::error_handler_t::replace);
}

uint64_t fnv1a64(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// "(k=v,...)", or "(options#HASH)" where that would be longer than kMaxOptionsIdChars: an id is
// a name (file names, filters, table rows), the report keeps the options whole.
std::string id_options(const json& options) {
  std::vector<std::string> parts;
  for (const auto& [key, value] : options.items()) {
    parts.push_back(id_string(key) + "=" + id_value(value));
  }
  const std::string text = "(" + join(parts, ",") + ")";
  if (text.size() <= kMaxOptionsIdChars) return text;
  return fmt::format("(options#{:016x})",
                     fnv1a64(options.dump(-1, ' ', false, json::error_handler_t::replace)));
}

}  // namespace

// An external engine's id names only what the input set: the knobs it was handed (in the order
// of bih's ids), the model, and the engine with its options: "tp=2,model=tiny,engine=vllm".
static std::string external_engine_id(const Scenario& s, const std::string& model_part) {
  const auto set = [&](const std::string& dotted) { return is_set(s.knobs_set, dotted); };
  std::vector<std::string> parts;
  if (set("parallel.tp")) parts.push_back("tp=" + std::to_string(s.tp));
  if (set("sequence_parallel.enabled") || set("sequence_parallel.min_tokens")) {
    parts.push_back(s.sp_enabled ? "sp=on(min=" + std::to_string(s.sp_min_tokens) + ")" : "sp=off");
  }
  if (set("collectives.all_reduce")) parts.push_back("ar=" + to_string(s.all_reduce));
  if (set("collectives.reduce_scatter")) parts.push_back("rs=" + to_string(s.reduce_scatter));
  if (set("cudagraph.mode")) parts.push_back("graph=" + to_string(s.graph_mode));
  if (set("prefix_caching.enabled")) {
    parts.push_back(std::string("prefix=") + (s.prefix_caching ? "on" : "off"));
  }
  if (set("kernels")) parts.push_back("kernels=" + to_string(s.kernels));
  parts.push_back(model_part);
  if (set("collectives.all_gather")) parts.push_back("ag=" + to_string(s.all_gather));
  if (set("chunked_prefill.max_tokens")) {
    parts.push_back("chunk=" + std::to_string(s.chunked_prefill_max_tokens));
  }
  if (set("parallel.ranks")) parts.push_back("ranks=" + to_string(s.ranks));
  if (set("backend")) parts.push_back("backend=" + to_string(s.backend));
  if (set("cudagraph.capture_sizes")) {
    std::vector<std::string> sizes;
    for (int n : s.capture_sizes) sizes.push_back(std::to_string(n));
    parts.push_back("capture=" + join(sizes, "-"));
  }
  if (set("prefix_caching.block_size")) parts.push_back("block=" + std::to_string(s.block_size));
  for (const auto& [key, value] : s.nccl_env) parts.push_back(key + "=" + value);
  std::string engine_part = "engine=" + s.engine.name;
  if (!s.engine.options.empty()) engine_part += id_options(s.engine.options);
  parts.push_back(engine_part);
  // A server's answers can depend on how they were asked for: the dialect and the batching.
  if (s.engine.is_http()) {
    parts.push_back("dialect=" + s.engine.dialect);
    parts.push_back("batching=" + s.engine.batching);
  }
  append_compare_parts(s.compare, parts);
  if (!s.fault.empty()) parts.push_back("fault=" + s.fault);
  return join(parts, ",");
}

std::string tp_invariant_collectives_refusal(const Scenario& s) {
  if (s.kernels != KernelFamily::tp_invariant || s.tp == 1) return "";
  const std::pair<const char*, ReduceOrder> orders[] = {{"all_reduce", s.all_reduce},
                                                        {"reduce_scatter", s.reduce_scatter}};
  for (const auto& [name, order] : orders) {
    if (order != ReduceOrder::fixed && order != ReduceOrder::tree) {
      return std::string("collectives.") + name + " " + to_string(order) +
             ": kernels tp_invariant sums the ranks' fp32 partials in its fixed chunk tree "
             "(only 'fixed' or 'tree' are accepted, both meaning that tree)";
    }
  }
  return "";
}

std::string Scenario::id() const {
  if (!engine.is_bih()) {
    std::string model_part =
        "model=" + (model.path.empty() ? model.preset : last_path_component(model.path));
    if (model.seed != 0) model_part += "(seed=" + std::to_string(model.seed) + ")";
    return external_engine_id(*this, model_part);
  }
  std::vector<std::string> parts;
  parts.push_back("tp=" + std::to_string(tp));
  parts.push_back(sp_enabled ? "sp=on(min=" + std::to_string(sp_min_tokens) + ")" : "sp=off");
  parts.push_back("ar=" + to_string(all_reduce));
  parts.push_back("rs=" + to_string(reduce_scatter));
  parts.push_back("graph=" + to_string(graph_mode));
  parts.push_back(std::string("prefix=") + (prefix_caching ? "on" : "off"));
  parts.push_back("kernels=" + to_string(kernels));
  std::string model_part =
      "model=" + (model.path.empty() ? model.preset : last_path_component(model.path));
  if (model.seed != 0) model_part += "(seed=" + std::to_string(model.seed) + ")";
  parts.push_back(model_part);

  if (all_gather != ReduceOrder::ring) parts.push_back("ag=" + to_string(all_gather));
  if (chunked_prefill_max_tokens > 0) {
    parts.push_back("chunk=" + std::to_string(chunked_prefill_max_tokens));
  }
  if (ranks == RankKind::nccl) parts.push_back("ranks=nccl");
  bool identity_ring = true;
  for (size_t i = 0; i < ring_order.size(); ++i) {
    identity_ring = identity_ring && ring_order[i] == int(i);
  }
  if (!identity_ring) {
    std::vector<std::string> ranks_text;
    for (int r : ring_order) ranks_text.push_back(std::to_string(r));
    parts.push_back("ring=" + join(ranks_text, "-"));
  }
  if (backend != Backend::cpu) parts.push_back("backend=" + to_string(backend));
  if (prefix_caching && block_size != kDefaultBlockSize) {
    parts.push_back("block=" + std::to_string(block_size));
  }
  append_compare_parts(compare, parts);
  if (!fault.empty()) parts.push_back("fault=" + fault);
  return join(parts, ",");
}

json Scenario::to_json() const {
  std::vector<int> ring = ring_order;
  if (ring.empty()) {
    ring.resize(tp);
    std::iota(ring.begin(), ring.end(), 0);
  }
  json model_json = {{"seed", model.seed}};
  if (model.path.empty()) {
    model_json["preset"] = model.preset;
  } else {
    model_json["path"] = model.path;
  }
  json prompts = {{"count", plan.prompts.count},
                  {"min_len", plan.prompts.min_len},
                  {"max_len", plan.prompts.max_len},
                  {"seed", plan.prompts.seed}};
  if (!plan.prompts.file.empty()) prompts["file"] = plan.prompts.file;
  json engine_json = {{"kind", engine.kind}};
  if (engine.is_http()) {
    engine_json["name"] = engine.name;
    engine_json[engine.url.empty() ? "profile" : "url"] =
        engine.url.empty() ? engine.profile : engine.url;
    engine_json["dialect"] = engine.dialect;
    engine_json["batching"] = engine.batching;
    if (!engine.served_model.empty()) engine_json["served_model"] = engine.served_model;
    if (engine.url.empty()) {
      engine_json["args"] = engine.args;
      engine_json["env"] = engine.env;
      engine_json["options"] = engine.options;
      engine_json["ready_timeout_s"] = engine.ready_timeout_s;
    } else if (!engine.reset_cache.empty()) {
      engine_json["reset_cache"] = engine.reset_cache;
    }
    engine_json["reply_timeout_s"] = engine.reply_timeout_s;
  } else if (!engine.is_bih()) {
    engine_json["name"] = engine.name;
    engine_json["command"] = engine.command;
    engine_json["cwd"] = engine.cwd;
    engine_json["env"] = engine.env;
    engine_json["options"] = engine.options;
    engine_json["model_format"] = engine.model_format;
    engine_json["reply_timeout_s"] = engine.reply_timeout_s;
  }
  json out{{"name", name},
           {"model", model_json},
           {"backend", to_string(backend)},
           {"parallel", {{"tp", tp}, {"ranks", to_string(ranks)}, {"ring_order", ring}}},
           {"sequence_parallel", {{"enabled", sp_enabled}, {"min_tokens", sp_min_tokens}}},
           {"collectives",
            {{"all_reduce", to_string(all_reduce)},
             {"reduce_scatter", to_string(reduce_scatter)},
             {"all_gather", to_string(all_gather)}}},
           {"nccl_env", nccl_env},
           {"kernels", to_string(kernels)},
           {"cudagraph", {{"mode", to_string(graph_mode)}, {"capture_sizes", capture_sizes}}},
           {"prefix_caching", {{"enabled", prefix_caching}, {"block_size", block_size}}},
           {"chunked_prefill", {{"max_tokens", chunked_prefill_max_tokens}}},
           {"plan",
            {{"prompts", prompts},
             {"max_tokens", plan.max_tokens},
             {"batch_sizes", plan.batch_sizes},
             {"repeats", plan.repeats},
             {"fresh_process", plan.fresh_process},
             {"max_model_len", plan.max_model_len},
             {"max_num_seqs", plan.max_num_seqs}}},
           {"timeout_s", timeout_s},
           {"expect", expect ? json(to_string(*expect)) : json(nullptr)},
           {"localize", localize},
           {"debug", {{"fault", fault.empty() ? "none" : fault}}},
           {"engine", engine_json}};
  // Only when something is on: resolved scenarios (and reports resumed from them) stay as they
  // were.
  if (plan.solo_lanes > 1) out["plan"]["solo_lanes"] = plan.solo_lanes;
  if (compare.any()) {
    out["compare"] = {
        {"prefill", compare.prefill}, {"top_k", compare.top_k}, {"row_digest", compare.row_digest}};
  }
  if (engine.is_bih()) return out;
  // An external engine keeps its own defaults: only the knobs the input set stay.
  for (const std::string& section : kKnobSections) {
    json& value = out[section];
    if (!value.is_object()) {
      if (!is_set(knobs_set, section)) out.erase(section);
      continue;
    }
    std::vector<std::string> drop;
    for (const auto& [key, leaf] : value.items()) {
      if (!is_set(knobs_set, section + "." + key)) drop.push_back(key);
    }
    for (const std::string& key : drop) value.erase(key);
    if (value.empty()) out.erase(section);
  }
  return out;
}

json Scenario::knobs_json() const {
  const json full = [this] {
    Scenario copy = *this;
    copy.engine = EngineSpec{};  // the bih form: every knob present
    return copy.to_json();
  }();
  json knobs = json::object();
  for (const std::string& dotted : knobs_set) {
    const auto dot = dotted.find('.');
    const json& section = full.at(dotted.substr(0, dot));
    knobs[dotted] = dot == std::string::npos ? section : section.at(dotted.substr(dot + 1));
  }
  return knobs;
}

}  // namespace bih
