// localization_queue.hpp: `bih explain` of a variant scenario runs beside the scenarios after it.
//
// A localization is a process of its own that re-runs two contexts with every op traced: about
// 2.4 s a cell on one H200 at TP=4, 38 s of the GPU matrix's 217 when the driver waited for each
// (reports/gpu/matrix-fixed-costs-2026-12-04). The driver starts it and goes on with the next
// scenario; one runs at a time. It is settled (waited for, its text printed under the id it
// explains) before the driver reaps its process tree after a worker (kill_descendants kills
// every descendant, and it would be one), before the next localization starts, and when the run
// ends or is interrupted. Its text and the report's "localization" section are what they were
// in line; only when they appear on stderr moved.
#pragma once

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

namespace bih {

struct LocalizationJob {
  std::string id;              // the scenario it explains, for the lines it prints
  std::string report_path;     // the report bih explain reads and adds its section to
  std::filesystem::path work;  // the scenario's work folder: the explain's stderr goes there
  bool remove_work = true;     // remove `work` after (no --keep-work, no failure kept it)
  double timeout_s = 900;
};

// Runs bih explain for `job` and returns what it printed, or why it printed nothing.
std::string run_localization(const LocalizationJob& job);

class LocalizationQueue {
 public:
  // `out`: where a settled localization's text goes; `tty`: clear a progress line before it.
  LocalizationQueue(std::FILE* out, bool tty) : out_(out), tty_(tty) {}
  ~LocalizationQueue() { settle(); }
  LocalizationQueue(const LocalizationQueue&) = delete;
  LocalizationQueue& operator=(const LocalizationQueue&) = delete;

  // Settles the one in flight, then starts bih explain for `job` on a thread of its own.
  void start(LocalizationJob job);
  // Waits for the one in flight (if any) and prints its text. Safe to call at any time.
  void settle();
  // How many localizations were started, and how long they took in all (their own wall time,
  // not time the driver waited).
  int started() const { return started_; }
  double total_s() const { return total_s_; }

 private:
  std::FILE* out_;
  bool tty_;
  std::mutex mutex_;  // settle() from the run loop and from a worker's reaping never overlap
  std::thread thread_;
  LocalizationJob job_;
  std::string text_;
  double wall_s_ = 0;
  int started_ = 0;
  double total_s_ = 0;
};

}  // namespace bih
