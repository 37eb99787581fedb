// dotted_keys.hpp: a scenario's knobs as dotted keys ("parallel.tp") and their JSON pointers.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace bih {

// "plan.prompts.count" -> "/plan/prompts/count", each part escaped as a JSON pointer token.
std::string dotted_key_pointer(const std::string& dotted_key);

// Every leaf under `node` as dotted key -> value, keys prefixed by `prefix` (arrays are leaves).
void flatten_dotted(const nlohmann::json& node, const std::string& prefix,
                    std::map<std::string, nlohmann::json>& leaves);

}  // namespace bih
