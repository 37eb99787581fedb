// expectations.hpp: the CI baseline, "which verdict each scenario should have", read from a file.
//
// An expectations file ("schema": "bih.expectations/1", JSON with comments) lists entries
// {"id", "verdict", "why"}. An entry's id is an exact scenario id or a glob ('*' and '?', matched
// over the whole id with fnmatch, as `bih run --only` does). An exact id beats any glob; among
// globs the first in file order wins. A scenario that no entry matches is expected `invariant`:
// batch invariance is the point, so a baseline only needs to list the accepted variances.
// The file's text is kept so that the gate can point at the line of the entry to change.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "spec/verdict.hpp"

namespace bih {

inline constexpr const char* kExpectationsSchema = "bih.expectations/1";

// What an id that no entry matches is expected to be.
inline constexpr Verdict kDefaultExpectation = Verdict::invariant;

struct Expectation {
  std::string id;  // exact scenario id, or a glob when it has '*' or '?'
  Verdict verdict = Verdict::invariant;
  std::string why;  // free text, e.g. the upstream issue; may be empty
  bool glob = false;
  size_t index = 0;  // position in the file's "expectations" array
  int line = 0;      // 1-based line of the entry's id in the file; 0 when not found
};

struct ExpectationsFile {
  std::string path;
  std::vector<Expectation> entries;  // file order
};

// True when `pattern` is a glob rather than an exact id (it has '*' or '?').
bool is_glob(std::string_view pattern);

// Parses the text of an expectations file; `path` names it in messages. Throws InputError naming
// the file and the JSON pointer for: a syntax error (with line and column), a missing or wrong
// "schema", unknown keys (with the nearest valid key), a verdict that is not one of the five
// (with the nearest), an empty or non-string id, and an id listed twice (the second could never
// win).
ExpectationsFile parse_expectations(const std::string& text, const std::string& path);

// Reads and parses the file at `path` (see parse_expectations). Throws InputError when it cannot
// be read.
ExpectationsFile load_expectations(const std::string& path);

// The entry that decides scenario `id`: the entry with exactly this id, else the first glob that
// matches it, else nullptr (then kDefaultExpectation applies).
const Expectation* match_expectation(const ExpectationsFile& file, const std::string& id);

// The JSON text of one entry, as a line to paste into the "expectations" array.
std::string entry_json(const std::string& id, Verdict verdict, const std::string& why);

}  // namespace bih
