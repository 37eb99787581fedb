#include "harness/localization_queue.hpp"

#include <fmt/core.h>

#include <exception>

#include "base/child_process.hpp"

namespace bih {

std::string run_localization(const LocalizationJob& job) {
  std::error_code ec;
  std::filesystem::create_directories(job.work, ec);
  const std::string err_file = (job.work / "stderr-explain.log").string();
  std::string text;
  try {
    const ChildResult r =
        run_child({self_executable(), "explain", job.report_path}, err_file, job.timeout_s,
                  [&](const std::string& line) { text += line + "\n"; });
    if (r.interrupted) {
      text = "not localized: bih was interrupted\n";
    } else if (!r.ok()) {
      text = "bih explain " + r.describe() + ": " + tail_of_file(err_file, 5);
    }
  } catch (const std::exception& e) {
    text = std::string("not localized: ") + e.what() + "\n";
  }
  if (job.remove_work) std::filesystem::remove_all(job.work, ec);
  return text;
}

void LocalizationQueue::start(LocalizationJob job) {
  settle();
  std::lock_guard<std::mutex> lock(mutex_);
  job_ = std::move(job);
  text_.clear();
  wall_s_ = 0;
  ++started_;
  thread_ = std::thread([this] {
    const auto begin = std::chrono::steady_clock::now();
    text_ = run_localization(job_);
    wall_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  });
}

void LocalizationQueue::settle() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!thread_.joinable()) return;
  thread_.join();
  total_s_ += wall_s_;
  // The explain's stdout starts with the report's id, which the header line names already.
  std::string text = text_;
  if (text.rfind(job_.id + "\n", 0) == 0) text.erase(0, job_.id.size() + 1);
  std::fprintf(out_, "%s    localization of %s (bih explain, %.1f s, beside the run):\n%s",
               tty_ ? "\r\033[K" : "", job_.id.c_str(), wall_s_, text.c_str());
  std::fflush(out_);
}

}  // namespace bih
