// dotted_keys.cpp: a scenario's knobs as dotted keys and their JSON pointers.
#include "spec/dotted_keys.hpp"

#include "base/errors.hpp"

namespace bih {

std::string dotted_key_pointer(const std::string& dotted_key) {
  std::string pointer;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted_key.find('.', start);
    pointer += '/';
    pointer += json_pointer_token(dotted_key.substr(start, dot - start));
    if (dot == std::string::npos) return pointer;
    start = dot + 1;
  }
}

void flatten_dotted(const nlohmann::json& node, const std::string& prefix,
                    std::map<std::string, nlohmann::json>& leaves) {
  if (!node.is_object()) {
    leaves[prefix] = node;
    return;
  }
  for (const auto& [key, value] : node.items()) {
    flatten_dotted(value, prefix.empty() ? key : prefix + "." + key, leaves);
  }
}

}  // namespace bih
