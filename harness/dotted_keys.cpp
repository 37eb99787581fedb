// dotted_keys.cpp: a scenario's knobs as dotted keys and back to JSON pointers.
#include "harness/dotted_keys.hpp"

namespace bih {

nlohmann::json::json_pointer dotted_key_pointer(const std::string& dotted_key) {
  std::string pointer;
  size_t start = 0;
  while (true) {
    const size_t dot = dotted_key.find('.', start);
    // Two appends: g++ 12 warns (-Wstringop-overflow, a false positive) on "/" + substr(...).
    pointer += '/';
    pointer.append(dotted_key, start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return nlohmann::json::json_pointer(pointer);
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
