// command_engine.cpp: the adapter engine (command_engine.hpp).
#include "engines/command_engine.hpp"

#include "base/errors.hpp"
#include "engines/registry.hpp"

namespace bih {

std::string command_engine_unsupported_reason(const Scenario& s) { return ""; }

std::unique_ptr<TestedEngine> start_command_engine(const Scenario& s, const std::string& work_dir) {
  throw InfraError("the command engine is being built");
}

EngineKind command_engine_kind() {
  EngineKind kind;
  kind.name = "command";
  kind.unsupported_reason = command_engine_unsupported_reason;
  kind.make = [](const Scenario& s, const EngineContext& context) {
    return start_command_engine(s, context.work_dir);
  };
  return kind;
}

}  // namespace bih
