// solo_lanes.cpp: the bs=1 generation on several engines at once (solo_lanes.hpp).
#include "harness/solo_lanes.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/errors.hpp"

namespace bih {

int solo_lanes_for(const Scenario& s, int prompts) {
  if (!s.engine.is_bih() || s.ranks == RankKind::nccl) return 1;
  return std::max(1, std::min(s.plan.solo_lanes, prompts));
}

void run_solo_lanes(TestedEngine& own_engine,
                    const std::function<std::unique_ptr<TestedEngine>()>& make_engine, int lanes,
                    int total,
                    const std::function<void(TestedEngine&, int, GenerateStats&)>& run_one,
                    const std::function<void(int)>& on_done, GenerateStats& stats) {
  std::atomic<bool> failed{false};
  std::mutex mutex;  // first_error, done, on_done
  std::exception_ptr first_error;
  int done = 0;
  std::vector<GenerateStats> lane_stats(lanes);
  auto lane = [&](int k) {
    try {
      std::unique_ptr<TestedEngine> made;
      if (k > 0) {
        try {
          made = make_engine();
        } catch (const std::exception& e) {
          throw InfraError(fmt::format(
              "plan.solo_lanes: lane {} of {} could not make its engine: {}", k, lanes, e.what()));
        }
      }
      TestedEngine& engine = made ? *made : own_engine;
      for (int i = k; i < total && !failed.load(); i += lanes) {
        run_one(engine, i, lane_stats[k]);
        const std::lock_guard lock(mutex);
        on_done(++done);
      }
      if (made) made->shutdown();
    } catch (...) {
      failed = true;
      const std::lock_guard lock(mutex);
      if (!first_error) first_error = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(lanes - 1);
  for (int k = 1; k < lanes; ++k) threads.emplace_back(lane, k);
  lane(0);
  for (std::thread& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
  for (const GenerateStats& l : lane_stats) {
    stats.steps += l.steps;
    stats.rows += l.rows;
    stats.real_rows += l.real_rows;
    stats.prefix_hit_tokens += l.prefix_hit_tokens;
    stats.sp_steps += l.sp_steps;
    stats.max_in_flight = std::max(stats.max_in_flight, l.max_in_flight);
  }
}

}  // namespace bih
