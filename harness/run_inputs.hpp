// run_inputs.hpp: checks on a run's inputs taken as a whole, before any worker starts.
//
// Each file's loader refuses a scenario id that appears twice in that file; two files (or one
// file given twice) can still produce one id, and then the second report overwrites the first.
// check_unique_ids refuses that before anything runs.
#pragma once

#include <string>
#include <vector>

#include "spec/scenario.hpp"

namespace bih {

// Throws InputError naming both source files (or the file given twice) of the first id that
// two scenarios share.
void check_unique_ids(const std::vector<Scenario>& scenarios);

// Checks the checkpoint of every scenario with a model.path (config.json, each safetensors
// header against its file, each tensor's dtype and shape against the config; no weights read),
// once per folder. Throws InputError naming the scenario file, /model/path, the safetensors file
// and the tensor: a corrupt checkpoint is the user's to fix, found before any worker starts
// (inside a worker it would be an infrastructure error). Scenario loading checks only
// config.json, so `bih list` stays cheap.
void check_checkpoints(const std::vector<Scenario>& scenarios);

}  // namespace bih
