// json_file.hpp: reading a JSON file (comments allowed) with errors that name the file.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/errors.hpp"

namespace bih {

// Reads a file into any basic_json flavour (ordered_json keeps the file's key order, which a
// matrix's axes need). Throws InputError naming the file, and on a syntax error the line and
// column nlohmann reports.
template <class Json>
Json parse_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the file; valid: a readable JSON file");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return Json::parse(text.str(), /*cb=*/nullptr, /*allow_exceptions=*/true,
                       /*ignore_comments=*/true);
  } catch (const nlohmann::json::exception& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line L, column C: ...";
    // a number too large for a double (1e400) is out_of_range.406, not a parse_error.
    throw InputError(path + ": " + e.what() + "; valid: JSON, comments allowed");
  }
}

inline nlohmann::json read_json_file(const std::string& path) {
  return parse_json_file<nlohmann::json>(path);
}

}  // namespace bih
