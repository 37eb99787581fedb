// engine_setup.hpp: a scenario's model, communicators and engine, built the same way everywhere
// (the worker's generations and explain's re-runs must see the same engine).
#pragma once

#include <memory>
#include <vector>

#include "harness/scenario.hpp"
#include "models/comm/emulated.hpp"
#include "models/engine.hpp"
#include "models/weights.hpp"

namespace bih {

// Synthetic weights for a preset, or the checkpoint at model.path. Throws InputError.
std::shared_ptr<const ModelWeights> build_model(const Scenario& s);

EngineOptions engine_options(const Scenario& s);

// The emulated group (owned here: the engine keeps pointers into it) and the engine.
struct EngineBundle {
  std::unique_ptr<EmulatedGroup> group;
  std::unique_ptr<Engine> engine;
};
EngineBundle make_engine(const Scenario& s, std::shared_ptr<const ModelWeights> weights);

}  // namespace bih
