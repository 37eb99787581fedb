// explain.hpp: localize a divergence to the first op whose bits moved.
//
// `bih explain REPORT` (and `"localize": true` in a scenario) takes the first divergent (prompt,
// step) of a failing comparison, re-runs that token in both contexts (e.g. bs=1 and bs=64, or the
// batch twice) with activation capture (models/trace.hpp), and walks the two traces in pipeline
// order. The first entry whose bits differ names the layer, the op, the rank and the element, with
// both bit patterns; if that op's inputs were still equal, the op broke it; if not (attention over
// a K/V cache written differently in an earlier step), an earlier step did.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "spec/scenario.hpp"

namespace bih {

struct Localization {
  bool diverged = false;  // the re-run's traces differ somewhere
  std::string kind;       // the comparison: "batch", "repeat", "fresh", "cache", "config"
  std::string a_label, b_label;
  int prompt = 0;
  int step = 0;
  int entries_compared = 0;
  // The first differing entry (when diverged).
  int layer = -1;
  std::string op;
  int rank = -1;     // -1: the residual stream (one value per row)
  int position = 0;  // the row's position in its sequence
  int element = 0;   // index in the row
  bool float32 = false;
  uint32_t bits_a = 0, bits_b = 0;
  uint64_t ulp = 0;                // in units of the value's own type (bf16 or fp32)
  std::string detail_a, detail_b;  // how each context computed it
  bool inputs_equal = true;
  std::string summary;  // one paragraph for humans
  std::string timings;  // where the re-run's time went ("engine 1.21 s, bs=1 0.30 s, ..."); not
                        // part of the report (times differ from run to run)
};

// Re-runs `prompt`'s token `step` in the two contexts the labels name ("bs=1", "bs=64", "bs=64#2",
// "bs=64(fresh)") and compares their traces.
Localization localize(const Scenario& scenario, const std::string& kind, const std::string& a_label,
                      const std::string& b_label, int prompt, int step);

// A "config" comparison: re-runs `prompt`'s token `step` under the reference (a_label
// "reference:bs=N") and under the configuration (b_label "bs=N") and compares their traces; when
// their TP sizes differ only the residual stream (full rows) is compared, and the summary says so.
Localization localize_config(const Scenario& configuration, const Scenario& reference,
                             const std::string& a_label, const std::string& b_label, int prompt,
                             int step);

// Picks the comparison to explain (the given kind, else the one the verdict rests on: repeat or
// fresh for nondeterministic, config for config_variant, batch otherwise) and its first divergence,
// or prompt 0 step 0 of the batch comparison when nothing diverged (then the re-run confirms no op
// differs), and localizes it.
Localization explain_report(const nlohmann::json& report, const std::optional<std::string>& kind);

nlohmann::json to_json(const Localization& l);

}  // namespace bih
