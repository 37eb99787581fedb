// json_text.cpp: the depth scan and the key bookkeeping of parse_json_text (json_text.hpp).
#include "base/json_text.hpp"

namespace bih {

std::optional<TextPosition> first_too_deep(std::string_view text, int max_depth) {
  TextPosition pos;
  int depth = 0;
  size_t i = 0;
  // Advances over one character, keeping the line and column of the next one.
  auto step = [&] {
    if (text[i] == '\n') {
      ++pos.line;
      pos.column = 1;
    } else {
      ++pos.column;
    }
    ++i;
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"') {  // a string: brackets inside it do not nest
      step();
      while (i < text.size() && text[i] != '"') {
        if (text[i] == '\\' && i + 1 < text.size()) step();
        step();
      }
      if (i < text.size()) step();
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n') step();
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      step();
      step();
      while (i < text.size() && !(text[i] == '*' && i + 1 < text.size() && text[i + 1] == '/')) {
        step();
      }
      if (i < text.size()) {
        step();
        step();
      }
    } else {
      if (c == '[' || c == '{') {
        if (++depth > max_depth) return pos;
      } else if ((c == ']' || c == '}') && depth > 0) {
        --depth;  // an unbalanced closer is the parser's to report
      }
      step();
    }
  }
  return std::nullopt;
}

std::string depth_message(const TextPosition& at, int max_depth) {
  return "line " + std::to_string(at.line) + ", column " + std::to_string(at.column) +
         ": arrays and objects nest deeper than " + std::to_string(max_depth) +
         " levels; valid: at most " + std::to_string(max_depth) + " levels of nesting";
}

void KeyTracker::open(bool object) { frames_.push_back(Frame{object, {}, {}, 0}); }

void KeyTracker::close() {
  if (!frames_.empty()) frames_.pop_back();
  completed();
}

void KeyTracker::value() { completed(); }

void KeyTracker::completed() {
  if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
}

bool KeyTracker::key(const std::string& key) {
  if (frames_.empty() || !frames_.back().object) return true;
  frames_.back().key = key;
  return frames_.back().keys.insert(key).second;
}

std::string KeyTracker::pointer() const {
  std::string out;
  for (const Frame& f : frames_) {
    out += "/" + (f.object ? json_pointer_token(f.key) : std::to_string(f.index));
  }
  return out;
}

}  // namespace bih
