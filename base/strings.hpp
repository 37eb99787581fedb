// strings.hpp: joining words for messages ("keys a, b, c").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace bih {

// items with `separator` between each two; "" for none.
inline std::string join(const std::vector<std::string>& items, std::string_view separator = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

}  // namespace bih
