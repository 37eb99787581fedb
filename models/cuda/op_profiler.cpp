// op_profiler.cpp: per-op GPU time of eager steps (op_profiler.hpp).
#include "models/cuda/op_profiler.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "models/cuda/check.hpp"

namespace bih::cuda {

OpProfiler::OpProfiler() {
  const char* flag = std::getenv("BIH_CUDA_PROFILE");
  enabled_ = flag != nullptr && *flag != '\0' && std::strcmp(flag, "0") != 0;
}

OpProfiler::~OpProfiler() {
  for (CUevent_st* e : events_) cudaEventDestroy(e);
}

CUevent_st* OpProfiler::next_event() {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    cudaCheck(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[used_++];
}

void OpProfiler::mark(const char* op, CUstream_st* stream) {
  if (!enabled_) return;
  cudaCheck(cudaEventRecord(next_event(), stream));
  names_.push_back(op);
}

void OpProfiler::end_step(CUstream_st* stream) {
  if (!enabled_ || names_.empty()) return;
  CUevent_st* last = next_event();
  cudaCheck(cudaEventRecord(last, stream));
  cudaCheck(cudaEventSynchronize(last));
  for (size_t i = 0; i < names_.size(); ++i) {
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    total_ms_[names_[i]] += ms;
  }
  ++steps_;
  names_.clear();
  used_ = 0;
}

std::string OpProfiler::report() const {
  if (steps_ == 0) return "";
  std::vector<std::pair<double, std::string>> rows;
  double all = 0;
  for (const auto& [name, ms] : total_ms_) {
    rows.emplace_back(ms, name);
    all += ms;
  }
  std::sort(rows.rbegin(), rows.rend());
  std::string out = fmt::format("GPU time of {} eager steps (rank 0), {:.3f} ms per step:\n",
                                steps_, all / steps_);
  for (const auto& [ms, name] : rows) {
    out += fmt::format("  {:<22} {:10.3f} ms  {:9.1f} us/step  {:5.1f}%\n", name, ms,
                       1e3 * ms / steps_, 100 * ms / all);
  }
  return out;
}

}  // namespace bih::cuda
