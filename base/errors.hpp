// errors.hpp: the failure categories that main turns into exit codes.
//
// Deep code throws one of these; nothing below main calls exit(). InputError carries what a user
// needs to fix a file: which file, where in it (a JSON pointer), and what would be valid.
#pragma once

#include <stdexcept>
#include <string>

namespace bih {

enum class ExitCode : int { ok = 0, conformance_failure = 1, usage_error = 2, infrastructure = 3 };

// JSON pointer escaping of one reference token (RFC 6901: "~" -> "~0", "/" -> "~1"), so that
// error messages can point at keys such as tensor names that hold a '/'.
inline std::string json_pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// Bad user input: a malformed file, an unknown key, a value out of range. Exit code 2.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
  // "FILE: at /json/pointer: MESSAGE"
  InputError(const std::string& file, const std::string& pointer, const std::string& message)
      : std::runtime_error(file + ": at " + (pointer.empty() ? std::string("/") : pointer) + ": " +
                           message) {}
};

// The machine failed us: a worker crashed, a file could not be written. Exit code 3.
class InfraError : public std::runtime_error {
 public:
  explicit InfraError(const std::string& message) : std::runtime_error(message) {}
};

// This engine or machine cannot run what was asked (an adapter declined a knob): the scenario's
// verdict is `unsupported` with this reason, not an error.
class UnsupportedError : public std::runtime_error {
 public:
  explicit UnsupportedError(const std::string& reason) : std::runtime_error(reason) {}
};

}  // namespace bih
