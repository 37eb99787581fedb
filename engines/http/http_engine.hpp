// http_engine.hpp: an engine under test behind HTTP (engine.kind "http", docs/http-engine.md).
//
// Either a server already running (engine.url: bih only talks to it; its configuration is its
// own, so no knob can be set) or one bih launches from a profile (engine.profile: launch_server,
// stopped with the engine). Each generate() is one request holding every prompt (batching
// "request") or one request per prompt, all released together (batching "concurrent"), in the
// scenario's dialect (dialect.hpp). Any failure is an InfraError quoting the server's reply, with
// a launched server's failure and log tail.
#pragma once

#include <memory>
#include <string>

#include "engines/engine.hpp"
#include "spec/scenario.hpp"

namespace bih {

struct EngineKind;
EngineKind http_engine_kind();

// Why bih cannot run this http scenario ("" when it can): a bih-only knob, a knob set against a
// running server, a knob the profile cannot map, prefix caching with no way to empty the cache,
// a fresh process of a server bih does not own.
std::string http_engine_unsupported_reason(const Scenario& s);

// Launches (profile) or reaches (url) the server. Throws UnsupportedError / InfraError.
std::unique_ptr<TestedEngine> start_http_engine(const Scenario& s, const std::string& work_dir);

}  // namespace bih
