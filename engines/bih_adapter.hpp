// bih_adapter.hpp: bih's own engine served over bih.engine/1 (`bih adapter`).
//
// The reference adapter: it puts bih's engine behind the same protocol as any external engine, so
// that the command path (export, hand-off, knobs, values as bit patterns) can be proven bitwise
// against the in-process bih engine on the same scenario, and so that adapter authors have an
// implementation to read. It loads HF folders only; the knobs it is handed are scenario keys, so
// it honours all of them except ranks nccl (one process per GPU).
#pragma once

#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "engines/engine.hpp"
#include "spec/scenario.hpp"

namespace bih {

// The scenario bih's engine runs for engine-protocol knobs (scenario keys, dotted: "parallel.tp")
// over `model` (a scenario's model object: {"path": HF folder} or {"preset": "tiny"}), planned to
// fit the limits (max_batch sequences at once, each within max_model_len). Knobs override the plan
// too ("plan.max_num_seqs"). `where` names the source in errors. Throws InputError for a bad knob,
// UnsupportedError for ranks nccl (one process per GPU). Shared by `bih adapter` and `bih serve`.
Scenario scenario_from_knobs(const nlohmann::json& model, const nlohmann::json& knobs,
                             int max_batch, int max_model_len, int max_tokens,
                             const std::string& where);

// What bih's engine applied for `s` (its scenario keys but plan, name and debug, plus the
// identity's details): the adapter's hello "settings" and bih serve's GET /bih/resolved.
nlohmann::json resolved_settings(const Scenario& s, const EngineIdentity& id);

// Serves one adapter session: reads messages from `in`, answers on `out`. Returns the exit code.
int serve_bih_engine(std::istream& in, std::ostream& out);

}  // namespace bih
