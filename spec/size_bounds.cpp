// size_bounds.cpp: capture sizes and the up-front KV cache against the plan and the machine
// (size_bounds.hpp).
#include "spec/size_bounds.hpp"

#include <algorithm>
#include <stdexcept>

#include "base/machine_memory.hpp"
#include "models/forward.hpp"
#include "spec/engine_options.hpp"

namespace bih {
namespace {

void check_capture_sizes(const Scenario& s, const std::string& file, const std::string& pointer) {
  // A step holds at most max_num_seqs sequences of max_model_len tokens; padding beyond that
  // only burns memory, and the fixed cap keeps a huge plan's padding in reach too.
  const int64_t step_rows = int64_t{s.plan.max_num_seqs} * s.plan.max_model_len;
  const int64_t limit = std::min<int64_t>(step_rows, kMaxCaptureSize);
  const std::string which = limit == kMaxCaptureSize
                                ? "the cap of " + std::to_string(kMaxCaptureSize) + " rows"
                                : "the largest step the plan can run, max_num_seqs (" +
                                      std::to_string(s.plan.max_num_seqs) + ") x max_model_len (" +
                                      std::to_string(s.plan.max_model_len) +
                                      ") = " + std::to_string(step_rows) + " rows";
  for (size_t i = 0; i < s.capture_sizes.size(); ++i) {
    if (s.capture_sizes[i] > limit) {
      throw ScenarioError(file, pointer + "/cudagraph/capture_sizes/" + std::to_string(i),
                          "capture size " + std::to_string(s.capture_sizes[i]) + " exceeds " +
                              which + "; valid: sizes in 1.." + std::to_string(limit));
    }
  }
}

void check_kv_cache(const Scenario& s, const ModelConfig& c, const std::string& file,
                    const std::string& pointer) {
  const std::string where = pointer + "/plan/max_model_len";
  const EngineOptions o = engine_options(s);
  uint64_t per_rank = 0;
  try {
    per_rank = kv_cache_bytes_per_rank(o, c.num_layers, c.num_kv_heads / s.tp, c.head_dim);
  } catch (const std::length_error& e) {
    throw ScenarioError(
        file, where,
        std::string(e.what()) + "; valid: max_num_seqs x max_model_len within " + "2^31 KV slots");
  }
  // Only bih's CPU engine reserves in this process (its TP ranks are threads); a GPU's memory and
  // an adapter's engine are theirs to bound.
  if (!s.engine.is_bih() || s.backend != Backend::cpu) return;
  const auto available = available_memory_bytes();
  if (!available) return;
  // plan.solo_lanes: every lane's engine reserves its own cache (bih's CPU engine has emulated
  // ranks, so every lane asked for runs).
  const uint64_t lanes = static_cast<uint64_t>(s.plan.solo_lanes);
  const uint64_t total = per_rank * static_cast<uint64_t>(s.tp) * lanes;
  const auto budget = static_cast<uint64_t>(static_cast<double>(*available) * kKvMemoryShare);
  if (total <= budget) return;
  const std::string formula =
      "2 (K, V) x " + std::to_string(c.num_layers) + " layers x " + std::to_string(c.num_kv_heads) +
      " KV heads x " + std::to_string(c.head_dim) + " head_dim x 2 bytes x " +
      std::to_string(o.max_model_len) + " max_model_len x " + std::to_string(o.max_num_seqs) +
      " max_num_seqs" + (o.prefix_caching ? " x 2 (prefix cache)" : "") +
      (lanes > 1 ? " x " + std::to_string(lanes) + " solo lanes" : "");
  throw ScenarioError(file, where,
                      "the KV cache this plan reserves up front, " + formula + " = " +
                          std::to_string(total) + " bytes (" + format_bytes(total) +
                          "), exceeds half of this machine's available memory (" +
                          format_bytes(*available) + " " + available_memory_source() + ", so " +
                          format_bytes(budget) +
                          "); valid: a smaller plan.max_model_len (it needs only the longest "
                          "prompt + max_tokens) " +
                          "or plan.max_num_seqs (it needs only the largest batch size)" +
                          (lanes > 1 ? std::string(", or fewer plan.solo_lanes") : std::string()));
}

}  // namespace

void check_size_bounds(const Scenario& s, const ModelConfig& config, const std::string& file,
                       const std::string& pointer) {
  check_capture_sizes(s, file, pointer);
  check_kv_cache(s, config, file, pointer);
}

}  // namespace bih
