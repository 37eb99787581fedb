// solo_lanes.cpp: the bs=1 generation on several engines at once (solo_lanes.hpp).
#include "harness/solo_lanes.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bih {

int solo_lanes_for(const Scenario& s, int prompts) {
  if (!s.engine.is_bih() || s.ranks == RankKind::nccl) return 1;
  return std::max(1, std::min(s.plan.solo_lanes, prompts));
}

int run_solo_lanes(TestedEngine& own_engine,
                   const std::function<std::unique_ptr<TestedEngine>()>& make_engine, int lanes,
                   int total,
                   const std::function<void(TestedEngine&, int, GenerateStats&)>& run_one,
                   const std::function<void(int)>& on_done,
                   const std::function<void(const std::string&)>& on_lane_not_made,
                   GenerateStats& stats) {
  std::atomic<bool> failed{false};
  std::mutex mutex;  // first_error, done, on_done
  std::exception_ptr first_error;
  int done = 0;
  const auto record_failure = [&] {
    failed = true;
    const std::lock_guard lock(mutex);
    if (!first_error) first_error = std::current_exception();
  };
  // Runs phase(k) for every lane k in [first, count), lane 0 (when included) on this thread.
  const auto on_every_lane = [&](int first, int count, const std::function<void(int)>& phase) {
    std::vector<std::thread> threads;
    threads.reserve(count);
    for (int k = std::max(first, 1); k < count; ++k) {
      threads.emplace_back([&, k] {
        try {
          phase(k);
        } catch (...) {
          record_failure();
        }
      });
    }
    if (first == 0) {
      try {
        phase(0);
      } catch (...) {
        record_failure();
      }
    }
    for (std::thread& t : threads) t.join();
  };
  // Three phases, each finished on every lane before the next starts: an engine being made or
  // shut down (device allocations, pinned host memory, synchronization) invalidates another
  // engine's CUDA graph capture in flight on the same GPU (measured on an H200: 6 of 12 runs of
  // GraphModes/CudaSoloLanes.*/full failed with cudaErrorStreamCaptureInvalidated when lanes
  // were made while lane 0 generated).
  // A lane whose engine cannot be made (a GPU another process fills, most often) is left out:
  // lanes change how long the requests alone take, never their bits, so the others take its
  // requests and the reason is reported.
  std::vector<std::unique_ptr<TestedEngine>> made(lanes);
  std::vector<std::string> not_made(lanes);
  on_every_lane(1, lanes, [&](int k) {
    try {
      made[k] = make_engine();
    } catch (const std::exception& e) {
      not_made[k] = fmt::format("plan.solo_lanes: lane {} of {} could not make its engine: {}", k,
                                lanes, e.what());
    }
  });
  std::vector<TestedEngine*> engines = {&own_engine};
  for (int k = 1; k < lanes; ++k) {
    if (made[k]) engines.push_back(made[k].get());
  }
  const int running = static_cast<int>(engines.size());
  for (const std::string& why : not_made) {
    if (why.empty()) continue;
    on_lane_not_made(fmt::format("{}; the requests alone run on {} lane{}", why, running,
                                 running == 1 ? "" : "s"));
  }
  std::vector<GenerateStats> lane_stats(running);
  if (!failed) {
    on_every_lane(0, running, [&](int k) {
      TestedEngine& engine = *engines[k];
      for (int i = k; i < total && !failed.load(); i += running) {
        run_one(engine, i, lane_stats[k]);
        const std::lock_guard lock(mutex);
        on_done(++done);
      }
    });
  }
  on_every_lane(1, lanes, [&](int k) {
    if (made[k]) made[k]->shutdown();
  });
  if (first_error) std::rethrow_exception(first_error);
  for (const GenerateStats& l : lane_stats) {
    stats.steps += l.steps;
    stats.rows += l.rows;
    stats.real_rows += l.real_rows;
    stats.prefix_hit_tokens += l.prefix_hit_tokens;
    stats.sp_steps += l.sp_steps;
    stats.max_in_flight = std::max(stats.max_in_flight, l.max_in_flight);
  }
  return running;
}

}  // namespace bih
