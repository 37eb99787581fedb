// size_bounds.hpp: the sizes a scenario may ask for, bounded by what the model, the plan and the
// machine can hold.
//
// A value can be in range on its own and still exhaust the machine: a capture size near 2^31
// pads every step to billions of rows, a long max_model_len times many sequences reserves more
// KV cache up front than the machine has. These are the fixed caps and the cross-field bounds;
// each refusal says which bound it hit and what the plan implies (rows, bytes).
#pragma once

#include <string>

#include "base/json_text.hpp"
#include "models/config.hpp"
#include "spec/scenario.hpp"

namespace bih {

// Fixed caps, read by the scenario parser's range checks and by the bounds below.
inline constexpr int kMaxNumSeqs = 4096;       // sequences one engine step may hold
inline constexpr int kMaxModelLen = 1 << 20;   // tokens of one sequence, whatever the config says
inline constexpr int kMaxCaptureSize = 16384;  // rows a step is padded to under CUDA graphs
inline constexpr int kMaxRepeats = 100;
inline constexpr int kMaxSoloLanes = 16;   // plan.solo_lanes: engines at once in one worker
inline constexpr int kMaxBatchSizes = 64;  // entries of plan.batch_sizes
inline constexpr double kMaxTimeoutS = 7 * 24 * 3600.0;
inline constexpr double kMinReplyTimeoutS = 0.001;  // engine.reply_timeout_s other than 0
// engine.options sit this many levels below the top of a report (report.scenario.engine) and of
// the worker's meta.json (meta.engine.details); the bound leaves room for those levels and a
// margin, so that every report bih writes stays within what its readers take (kMaxJsonDepth).
inline constexpr int kOptionsDepthInReport = 3;
inline constexpr int kMaxOptionsDepth = kMaxJsonDepth - kOptionsDepthInReport - 5;
// Options whose text in the id would be longer than this appear there as a hash.
inline constexpr size_t kMaxOptionsIdChars = 256;
// Of the memory the machine has available, the share one CPU run's KV cache may take: the
// weights, activations and the rest of the machine need the other half.
inline constexpr double kKvMemoryShare = 0.5;

// Throws ScenarioError (file, pointer + the field, "what; valid: ...") for the first size out of
// bounds. `pointer` is the scenario's own pointer in its file.
void check_size_bounds(const Scenario& s, const ModelConfig& config, const std::string& file,
                       const std::string& pointer);

}  // namespace bih
