// json_text.hpp: parsing JSON text that came from outside bih, with limits on its shape.
//
// nlohmann parses any depth without recursion, but copying, comparing, dumping and destroying a
// value recurse: a file nested 100000 levels deep parses and then overflows the stack. Every
// JSON bih reads from outside (scenario and matrix files, prompts, config.json, safetensors
// headers, reports, generation dumps, expectations, engine protocol lines) goes through
// parse_json_text, which refuses nesting deeper than kMaxJsonDepth (found by a scan of the text,
// with its line and column, before nlohmann sees it) and keys that appear twice in one object
// (nlohmann keeps the last one silently; a user who wrote the key twice meant one of them).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/errors.hpp"

namespace bih {

// Deeper than any file bih reads needs (a report nests about 8 levels), far shallower than what
// overflows a thread's stack while a value is copied.
inline constexpr int kMaxJsonDepth = 64;

struct JsonRules {
  bool comments = true;  // // and /* */ comments (bih's own files allow them)
  int max_depth = kMaxJsonDepth;
  bool unique_keys = true;  // refuse a key that appears twice in one object
};

// A 1-based position in a text.
struct TextPosition {
  size_t line = 1;
  size_t column = 1;
};

// The position of the first '[' or '{' (outside strings and comments) that opens level
// max_depth + 1, or nothing when the text nests no deeper than max_depth.
std::optional<TextPosition> first_too_deep(std::string_view text, int max_depth);

// "at most N levels" and the like: one wording for every refusal of the depth rule.
std::string depth_message(const TextPosition& at, int max_depth);

// Tracks where the parser is (a JSON pointer) and the keys seen in each open object, for the
// callback below. Kept out of the template so that the bookkeeping is compiled once.
class KeyTracker {
 public:
  void open(bool object);
  void close();  // the innermost container ended: it is one complete value of its parent
  void value();  // a scalar ended: one complete value of the innermost container
  // Records `key` in the innermost object; false when that object already holds it.
  bool key(const std::string& key);
  // The pointer of the innermost object's current key (after key() has been called).
  std::string pointer() const;

 private:
  struct Frame {
    bool object = false;
    std::set<std::string> keys;
    std::string key;   // object: the key whose value is being read
    size_t index = 0;  // array: the index of the element being read
  };
  void completed();
  std::vector<Frame> frames_;
};

// Parses `text` (named `source` in messages: a file path, or e.g. "the adapter's line") into any
// basic_json flavour. Throws InputError:
//   "SOURCE: at /: line L, column C: arrays and objects nest deeper than N levels; valid: ..."
//   "SOURCE: at /pointer/key: key 'key' appears twice in one object; valid: ..."
//   "SOURCE: at /: not valid JSON: [json.exception.parse_error.101] ... line L, column C: ..."
template <class Json>
Json parse_json_text(const std::string& text, const std::string& source,
                     const JsonRules& rules = {}) {
  if (rules.max_depth > 0) {
    if (auto at = first_too_deep(text, rules.max_depth)) {
      throw InputError(source, "", depth_message(*at, rules.max_depth));
    }
  }
  typename Json::parser_callback_t callback = nullptr;
  KeyTracker tracker;
  if (rules.unique_keys) {
    callback = [&](int /*depth*/, typename Json::parse_event_t event, Json& parsed) {
      using E = typename Json::parse_event_t;
      switch (event) {
        case E::object_start:
          tracker.open(true);
          break;
        case E::array_start:
          tracker.open(false);
          break;
        case E::object_end:
        case E::array_end:
          tracker.close();
          break;
        case E::value:
          tracker.value();
          break;
        case E::key: {
          const std::string key = parsed.template get<std::string>();
          if (!tracker.key(key)) {
            throw InputError(source, tracker.pointer(),
                             "key '" + key +
                                 "' appears twice in one object; valid: each key at most once "
                                 "per object (remove one of them)");
          }
          break;
        }
      }
      return true;
    };
  }
  try {
    return Json::parse(text, callback, /*allow_exceptions=*/true, rules.comments);
  } catch (const nlohmann::json::exception& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line L, column C: ...";
    // a number past a double (1e999) is out_of_range.406, thrown by the parser as well.
    throw InputError(source, "",
                     std::string("not valid JSON: ") + e.what() + "; valid: JSON" +
                         (rules.comments ? ", comments allowed" : ""));
  }
}

}  // namespace bih
