// generation.cpp: a generation dump to and from JSON, bit-exactly.
//
// Logprobs are written twice: "logprob_bits" (the float32 bit patterns, the truth) and "logprobs"
// (decimals for people reading the file; NaN and infinities come out as null). Only the bits are
// read back, so a dump round-trips bitwise, NaN payloads and -0.0 included.
#include "harness/generation.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "base/errors.hpp"

namespace bih {
namespace {

constexpr const char* kGenerationSchema = "bih.generation/1";

using json = nlohmann::json;

// Reads fields of one JSON object, naming the file and pointer in every error.
class ObjectReader {
 public:
  ObjectReader(const json& j, const std::string& file, std::string pointer,
               std::set<std::string> allowed_keys)
      : j_(j), file_(file), pointer_(std::move(pointer)) {
    if (!j.is_object()) fail(pointer_, "expected an object, found " + std::string(j.type_name()));
    for (const auto& [key, value] : j.items()) {
      if (!allowed_keys.count(key)) {
        std::string valid;
        for (const auto& k : allowed_keys) valid += (valid.empty() ? "" : ", ") + k;
        fail(pointer_ + "/" + key, "unknown key \"" + key + "\"; valid keys: " + valid);
      }
    }
  }

  [[noreturn]] void fail(const std::string& pointer, const std::string& message) const {
    throw InputError(file_, pointer, message);
  }

  bool has(const std::string& key) const { return j_.contains(key); }
  std::string at(const std::string& key) const { return pointer_ + "/" + key; }

  const json& required(const std::string& key) const {
    if (!j_.contains(key)) fail(pointer_, "missing required key \"" + key + "\"");
    return j_.at(key);
  }

  std::string get_string(const std::string& key, std::string fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) fail(at(key), "expected a string, found " + std::string(v.type_name()));
    return v.get<std::string>();
  }

  int64_t get_int(const std::string& key, int64_t fallback, int64_t lo, int64_t hi) const {
    if (!has(key)) return fallback;
    return checked_int(j_.at(key), at(key), lo, hi, "an integer");
  }

  double get_number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_number() || !(v.get<double>() >= 0)) {
      fail(at(key), "expected a non-negative number, found " + v.dump());
    }
    return v.get<double>();
  }

  bool get_bool(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail(at(key), "expected true or false, found " + v.dump());
    return v.get<bool>();
  }

  // An integer in [lo, hi]; `what` describes a valid value for the message.
  int64_t checked_int(const json& v, const std::string& pointer, int64_t lo, int64_t hi,
                      const std::string& what) const {
    bool in_range = false;
    int64_t value = 0;
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      in_range = u <= static_cast<uint64_t>(hi);
      value = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      value = v.get<int64_t>();
      in_range = value >= lo && value <= hi;
    }
    if (!in_range) {
      fail(pointer, "expected " + what + " in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                        "], found " + v.dump());
    }
    return value;
  }

 private:
  const json& j_;
  const std::string& file_;
  std::string pointer_;
};

const json& required_array(const ObjectReader& r, const std::string& key) {
  const json& v = r.required(key);
  if (!v.is_array()) r.fail(r.at(key), "expected an array, found " + std::string(v.type_name()));
  return v;
}

std::vector<int32_t> read_token_ids(const ObjectReader& r, const std::string& key) {
  const json& arr = required_array(r, key);
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    ids.push_back(static_cast<int32_t>(r.checked_int(arr[i], r.at(key) + "/" + std::to_string(i), 0,
                                                     std::numeric_limits<int32_t>::max(),
                                                     "a token id (integer)")));
  }
  return ids;
}

SequenceOutput read_sequence(const json& j, const std::string& file, const std::string& pointer) {
  ObjectReader r(j, file, pointer, {"prompt", "tokens", "logprob_bits", "logprobs"});
  SequenceOutput s;
  s.prompt = read_token_ids(r, "prompt");
  s.tokens = read_token_ids(r, "tokens");
  const json& bits = required_array(r, "logprob_bits");
  if (bits.size() != s.tokens.size()) {
    r.fail(r.at("logprob_bits"), "expected one bit pattern per token (" +
                                     std::to_string(s.tokens.size()) + "), found " +
                                     std::to_string(bits.size()));
  }
  s.logprobs.reserve(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    auto pattern = static_cast<uint32_t>(
        r.checked_int(bits[i], r.at("logprob_bits") + "/" + std::to_string(i), 0,
                      std::numeric_limits<uint32_t>::max(), "a float32 bit pattern (integer)"));
    s.logprobs.push_back(std::bit_cast<float>(pattern));
  }
  // "logprobs" (decimal) is for people only: its presence is allowed, its content ignored.
  return s;
}

}  // namespace

nlohmann::json to_json(const Generation& g) {
  json sequences = json::array();
  for (const SequenceOutput& s : g.sequences) {
    json bits = json::array();
    json decimals = json::array();
    for (float lp : s.logprobs) {
      bits.push_back(std::bit_cast<uint32_t>(lp));
      // JSON has no NaN or infinity: null, explicitly, so the in-memory object matches the text.
      decimals.push_back(std::isfinite(lp) ? json(static_cast<double>(lp)) : json(nullptr));
    }
    sequences.push_back({{"prompt", s.prompt},
                         {"tokens", s.tokens},
                         {"logprob_bits", std::move(bits)},
                         {"logprobs", std::move(decimals)}});
  }
  json out = {{"schema", kGenerationSchema},
              {"label", g.label},
              {"batch_size", g.batch_size},
              {"repeat", g.repeat},
              {"fresh_process", g.fresh_process},
              {"scenario_id", g.scenario_id},
              {"wall_s", g.wall_s},
              {"steps", g.steps},
              {"tokens_processed", g.tokens_processed},
              {"sequences", std::move(sequences)}};
  // Only an engine that sends requests has them.
  if (g.max_in_flight > 0) out["requests_in_flight"] = g.max_in_flight;
  return out;
}

Generation generation_from_json(const nlohmann::json& j, const std::string& file) {
  ObjectReader r(j, file, "",
                 {"schema", "label", "batch_size", "repeat", "fresh_process", "scenario_id",
                  "wall_s", "steps", "tokens_processed", "requests_in_flight", "sequences"});
  if (r.has("schema") && r.get_string("schema", "") != kGenerationSchema) {
    r.fail(r.at("schema"),
           std::string("expected \"") + kGenerationSchema + "\", found " + j.at("schema").dump());
  }
  Generation g;
  if (!r.required("label").is_string()) r.fail(r.at("label"), "expected a string");
  g.label = r.get_string("label", "");
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
  g.batch_size = static_cast<int>(r.get_int("batch_size", 0, 0, kIntMax));
  g.repeat = static_cast<int>(r.get_int("repeat", 0, 0, kIntMax));
  g.fresh_process = r.get_bool("fresh_process", false);
  g.scenario_id = r.get_string("scenario_id", "");
  g.wall_s = r.get_number("wall_s", 0);
  g.steps = r.get_int("steps", 0, 0, kInt64Max);
  g.tokens_processed = r.get_int("tokens_processed", 0, 0, kInt64Max);
  g.max_in_flight = r.get_int("requests_in_flight", 0, 0, kInt64Max);
  const json& sequences = required_array(r, "sequences");
  g.sequences.reserve(sequences.size());
  for (size_t i = 0; i < sequences.size(); ++i) {
    g.sequences.push_back(read_sequence(sequences[i], file, "/sequences/" + std::to_string(i)));
  }
  return g;
}

}  // namespace bih
