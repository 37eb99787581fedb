// expectations.hpp: the CI baseline, "which verdict each scenario should have", read from a file.
//
// An expectations file ("schema": "bih.expectations/1", JSON with comments) lists entries
// {"id", "verdict", "why"}. An entry's id is an exact scenario id or a glob ('*' and '?', matched
// over the whole id with fnmatch, as `bih run --only` does). An exact id beats any glob; among
// globs the first in file order wins. A scenario that no entry matches is expected `invariant`:
// batch invariance is the point, so a baseline only needs to list the accepted variances.
// The file's text is kept so that the gate can point at the line of the entry to change.
//
// It also holds the one rule for "could not run here" (check_expectation), which `bih run`'s exit
// code and table, `bih gate`, its JUnit XML and the matrix's cells all follow.
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
  size_t index = 0;      // position in the file's "expectations" array
  int line = 0;          // 1-based line of the entry's id in the file; 0 when not found
  bool require = false;  // "require": true: the scenario must run; unsupported fails the gate
};

struct ExpectationsFile {
  std::string path;
  std::vector<Expectation> entries;  // file order
  bool require_all = false;          // top-level "require_all": true: every entry must run
};

// What a scenario is expected to be, wherever the expectation came from.
struct Expected {
  Verdict verdict = kDefaultExpectation;
  // Something named a verdict for this scenario: its `expect`, or an expectations entry. Without
  // that, the default (invariant) is no claim that could go unchecked: an unsupported verdict
  // misses it (a run that tested nothing must not pass silently).
  bool declared = false;
  // The scenario must run here (bih gate/run --require-all, an entry's "require", the file's
  // "require_all"): an unsupported verdict fails instead of being unchecked.
  bool must_run = false;
};

enum class ExpectationCheck {
  met,                 // the verdict is the expected one
  missed,              // it is not                                                  -> failure
  unchecked,           // unsupported here, another verdict was declared: nothing was checked
  required_unchecked,  // unchecked, but the scenario had to run                     -> failure
};
std::string to_string(ExpectationCheck check);

// The one rule: met when `got` is the expected verdict; unchecked when `got` is unsupported, the
// expectation was declared and is something else (required_unchecked when it must run); else
// missed.
ExpectationCheck check_expectation(Verdict got, const Expected& expected);

// missed and required_unchecked count against a run or a gate; met and unchecked do not.
inline bool is_failure(ExpectationCheck check) {
  return check == ExpectationCheck::missed || check == ExpectationCheck::required_unchecked;
}

// "6 not checked on this machine: ranks nccl at tp=2 needs 2 GPUs" from the first line of each
// unchecked scenario's reason (distinct reasons in first-seen order, "; "-joined; when there are
// several, each says how many scenarios it covers, "(4×)"); empty when `reasons` is empty.
std::string unchecked_summary(const std::vector<std::string>& reasons);

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
