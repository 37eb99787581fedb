// op_profiler.hpp: where an eager CUDA step's GPU time goes, op by op (BIH_CUDA_PROFILE=1).
//
// The forward marks the start of each op on its rank's stream; the GPU time between two marks is
// the earlier op's (the stream runs one op after another, so the spans tile the step, launch
// gaps included). Totals per op name are printed at the end of the run. Only eager steps are
// profiled: a CUDA graph's nodes cannot be separated by events recorded from the host.
#pragma once

#include <map>
#include <string>
#include <vector>

struct CUstream_st;
struct CUevent_st;

namespace bih::cuda {

class OpProfiler {
 public:
  // Enabled when the environment variable BIH_CUDA_PROFILE is set to a non-empty value other
  // than "0".
  OpProfiler();
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  bool enabled() const { return enabled_; }
  // Starts the span of `op` on `stream` (and ends the previous one).
  void mark(const char* op, CUstream_st* stream);
  // Ends the step's last span, waits for the stream and adds the spans to the totals.
  void end_step(CUstream_st* stream);
  // "op  total ms  per step us  share" lines, largest first; empty when nothing was profiled.
  std::string report() const;

 private:
  CUevent_st* next_event();

  bool enabled_ = false;
  std::vector<CUevent_st*> events_;  // pool, reused every step
  size_t used_ = 0;
  std::vector<const char*> names_;  // [used_]: the op whose span starts at events_[i]
  std::map<std::string, double> total_ms_;
  long steps_ = 0;
};

}  // namespace bih::cuda
