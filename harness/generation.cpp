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

uint32_t read_bits(const ObjectReader& r, const json& v, const std::string& pointer) {
  return static_cast<uint32_t>(r.checked_int(v, pointer, 0, std::numeric_limits<uint32_t>::max(),
                                             "a float32 bit pattern (integer)"));
}

// The optional top-k and digest fields: one entry per generated token when present.
void read_row_extras(const ObjectReader& r, SequenceOutput& s) {
  if (r.has("top_k_ids") != r.has("top_k_bits")) {
    r.fail(r.at(r.has("top_k_ids") ? "top_k_bits" : "top_k_ids"),
           "top_k_ids and top_k_bits come together");
  }
  if (r.has("top_k_ids")) {
    const json& ids = required_array(r, "top_k_ids");
    const json& bits = required_array(r, "top_k_bits");
    if (ids.size() != s.tokens.size() || bits.size() != s.tokens.size()) {
      r.fail(r.at("top_k_ids"), "expected one top-k list per token (" +
                                    std::to_string(s.tokens.size()) +
                                    ") in top_k_ids and "
                                    "top_k_bits");
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::string at_ids = r.at("top_k_ids") + "/" + std::to_string(i);
      const std::string at_bits = r.at("top_k_bits") + "/" + std::to_string(i);
      if (!ids[i].is_array() || !bits[i].is_array() || ids[i].size() != bits[i].size()) {
        r.fail(at_ids, "expected two arrays of the same length (ids and their bit patterns)");
      }
      s.top_k_ids.emplace_back();
      s.top_k_values.emplace_back();
      for (size_t k = 0; k < ids[i].size(); ++k) {
        s.top_k_ids.back().push_back(static_cast<int32_t>(
            r.checked_int(ids[i][k], at_ids + "/" + std::to_string(k), 0,
                          std::numeric_limits<int32_t>::max(), "a token id (integer)")));
        s.top_k_values.back().push_back(
            std::bit_cast<float>(read_bits(r, bits[i][k], at_bits + "/" + std::to_string(k))));
      }
    }
  }
  if (r.has("row_digests")) {
    const json& digests = required_array(r, "row_digests");
    if (digests.size() != s.tokens.size()) {
      r.fail(r.at("row_digests"), "expected one digest per token (" +
                                      std::to_string(s.tokens.size()) + "), found " +
                                      std::to_string(digests.size()));
    }
    for (size_t i = 0; i < digests.size(); ++i) {
      const std::string pointer = r.at("row_digests") + "/" + std::to_string(i);
      const json& d = digests[i];
      uint64_t value = 0;
      if (!d.is_string() || !parse_digest(d.get<std::string>(), value)) {
        r.fail(pointer, "expected 16 lower-case hex digits (a 64-bit digest), found " + d.dump());
      }
      s.row_digests.push_back(value);
    }
  }
}

SequenceOutput read_sequence(const json& j, const std::string& file, const std::string& pointer) {
  ObjectReader r(
      j, file, pointer,
      {"prompt", "tokens", "logprob_bits", "logprobs", "top_k_ids", "top_k_bits", "row_digests"});
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
  read_row_extras(r, s);
  return s;
}

}  // namespace

std::string digest_hex(uint64_t digest) {
  static const char* kDigits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, digest >>= 4) out[i] = kDigits[digest & 0xf];
  return out;
}

bool parse_digest(const std::string& text, uint64_t& out) {
  if (text.size() != 16) return false;
  uint64_t value = 0;
  for (char c : text) {
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    value = value << 4 | static_cast<uint64_t>(digit);
  }
  out = value;
  return true;
}

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
    json seq = {{"prompt", s.prompt},
                {"tokens", s.tokens},
                {"logprob_bits", std::move(bits)},
                {"logprobs", std::move(decimals)}};
    if (!s.top_k_ids.empty()) {
      json top_bits = json::array();
      for (const auto& values : s.top_k_values) {
        json row = json::array();
        for (float v : values) row.push_back(std::bit_cast<uint32_t>(v));
        top_bits.push_back(std::move(row));
      }
      seq["top_k_ids"] = s.top_k_ids;
      seq["top_k_bits"] = std::move(top_bits);
    }
    if (!s.row_digests.empty()) {
      json digests = json::array();
      for (uint64_t d : s.row_digests) digests.push_back(digest_hex(d));
      seq["row_digests"] = std::move(digests);
    }
    sequences.push_back(std::move(seq));
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
  if (g.solo_lanes > 1) out["solo_lanes"] = g.solo_lanes;
  if (!g.scores.empty()) out["scores"] = g.scores;
  return out;
}

Generation generation_from_json(const nlohmann::json& j, const std::string& file) {
  ObjectReader r(
      j, file, "",
      {"schema", "label", "batch_size", "repeat", "fresh_process", "scenario_id", "wall_s", "steps",
       "tokens_processed", "requests_in_flight", "solo_lanes", "scores", "sequences"});
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
  g.solo_lanes = static_cast<int>(r.get_int("solo_lanes", 1, 1, kIntMax));
  g.scores = r.get_string("scores", "");
  const json& sequences = required_array(r, "sequences");
  g.sequences.reserve(sequences.size());
  for (size_t i = 0; i < sequences.size(); ++i) {
    g.sequences.push_back(read_sequence(sequences[i], file, "/sequences/" + std::to_string(i)));
  }
  return g;
}

}  // namespace bih
