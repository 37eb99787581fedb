// model_handoff.hpp: the scenario's model in the form an adapter loads, so that every engine of a
// scenario runs the same weights.
//
// A checkpoint folder is handed over as it is when the adapter loads HF folders. A preset (or a
// checkpoint an adapter wants as GGUF) is exported once into bih's model cache, named by what
// determines its bits (preset, seed, exporter version; or the checkpoint's files), written
// atomically so that concurrent runs can share it: $BIH_CACHE_DIR, else $XDG_CACHE_HOME/bih, else
// ~/.cache/bih.
#pragma once

#include <string>

#include "engines/engine_protocol.hpp"
#include "spec/scenario.hpp"

namespace bih {

// bih's cache folder (created on demand).
std::string bih_cache_dir();

// The model for scenario s in s.engine.model_format. Throws InputError / InfraError.
protocol::ModelHandle hand_off_model(const Scenario& s);

// A digest of the weights at the handle, as bih reads them (the same digest as weights_hash of
// the scenario's model): the model identity in the report.
std::string handed_off_weights_hash(const Scenario& s);

}  // namespace bih
