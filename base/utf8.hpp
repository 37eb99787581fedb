// utf8.hpp: text from outside bih (an adapter's lines and stderr, a worker's stderr, paths, the
// host's environment) made safe to carry in JSON.
//
// JSON holds only UTF-8, and nlohmann's dump() throws type_error.316 on anything else: one
// Latin-1 byte in an adapter's localized error message would end the whole run, not the one
// scenario. Every outside string is passed through valid_utf8() where it enters; cut_utf8()
// shortens text without splitting a character (a cut in the middle of "é" is invalid too).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace bih {

// Whether `text` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF), the rule nlohmann's dump() enforces.
bool is_valid_utf8(std::string_view text);

// The offset of the first byte that does not start a well-formed sequence, or npos.
size_t first_invalid_utf8(std::string_view text);

// `text` with each byte that is not part of a well-formed UTF-8 sequence written as a visible
// "\xNN" (so the user sees which byte it was); valid text comes back unchanged.
std::string valid_utf8(std::string_view text);

// The longest prefix of `text` of at most `max_bytes` bytes that does not end inside a UTF-8
// sequence (a malformed byte counts as one character).
std::string_view cut_utf8(std::string_view text, size_t max_bytes);

}  // namespace bih
