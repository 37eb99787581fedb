// engine_options.hpp: the options of bih's engine that a scenario resolves to, in one place (the
// engine is built from them, and the size bounds check what they would reserve).
#pragma once

#include "models/forward.hpp"
#include "spec/scenario.hpp"

namespace bih {

EngineOptions engine_options(const Scenario& s);

}  // namespace bih
