// schema_check.hpp: validate a JSON document against one of the project's JSON Schemas (draft 7)
// with valijson, for tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validator.hpp>

#include "spec/scenario_file.hpp"

namespace bih::testing {

class SchemaChecker {
 public:
  explicit SchemaChecker(const std::string& schema_path) {
    const nlohmann::json schema_json = read_json_file(schema_path);
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    valijson::adapters::NlohmannJsonAdapter adapter(schema_json);
    parser.populateSchema(adapter, schema_);
  }

  // Empty when `doc` is valid; otherwise one "context: description" line per complaint.
  std::string errors(const nlohmann::json& doc) const {
    valijson::Validator validator;
    valijson::ValidationResults results;
    valijson::adapters::NlohmannJsonAdapter target(doc);
    if (validator.validate(schema_, target, &results)) return "";
    std::string out;
    valijson::ValidationResults::Error e;
    while (results.popError(e)) {
      for (const auto& part : e.context) out += part;
      out += ": " + e.description + "\n";
    }
    return out.empty() ? "invalid" : out;
  }

 private:
  valijson::Schema schema_;
};

}  // namespace bih::testing
