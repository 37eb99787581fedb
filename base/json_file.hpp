// json_file.hpp: reading a JSON file (comments allowed) with errors that name the file.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/errors.hpp"
#include "base/json_text.hpp"

namespace bih {

// The whole file as bytes; InputError naming the file when it cannot be read. `what` names the
// kind of file for the message ("the model config (config.json)").
inline std::string read_text_file(const std::string& path, const std::string& what = "the file") {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open " + what + "; valid: a readable JSON file");
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path, "", "cannot read " + what + "; valid: a readable JSON file");
  return text.str();
}

// Reads a file into any basic_json flavour (ordered_json keeps the file's key order, which a
// matrix's axes need), under parse_json_text's rules: bounded nesting, no key twice in one
// object. Throws InputError naming the file, and the line and column where it can.
template <class Json>
Json parse_json_file(const std::string& path, const JsonRules& rules = {}) {
  return parse_json_text<Json>(read_text_file(path), path, rules);
}

inline nlohmann::json read_json_file(const std::string& path, const JsonRules& rules = {}) {
  return parse_json_file<nlohmann::json>(path, rules);
}

}  // namespace bih
