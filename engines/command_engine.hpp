// command_engine.hpp: an engine under test behind an adapter program (engine.kind "command").
//
// The adapter speaks bih.engine/1 (docs/engine-protocol.md) over its stdin/stdout. bih hands it
// the scenario's model in the form it asked for (an HF folder or a GGUF file, exported on the fly
// and cached), the knobs the scenario set and engine.options; the adapter answers with its
// identity and resolved settings, or says which knob it cannot honour (`unsupported`). A crash,
// a hang or an answer that breaks the protocol is an InfraError quoting what the adapter said and
// the tail of its stderr.
#pragma once

#include <memory>
#include <string>

#include "engines/engine.hpp"
#include "spec/scenario.hpp"

namespace bih {

struct EngineKind;
EngineKind command_engine_kind();

// Why bih itself cannot hand this scenario to any adapter (a knob only bih's engine has, such as
// a collective order); "" when it can. The adapter may still answer `unsupported`.
std::string command_engine_unsupported_reason(const Scenario& s);

// Starts the adapter and completes the init/hello exchange. `work_dir` receives its stderr log.
// Throws UnsupportedError when the adapter declines the scenario, InfraError when it fails.
std::unique_ptr<TestedEngine> start_command_engine(const Scenario& s, const std::string& work_dir);

}  // namespace bih
