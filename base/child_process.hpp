// child_process.hpp: run a child process with a deadline, streaming its stdout lines.
//
// The driver's only window into a worker: stdout lines arrive through a callback while it runs,
// stderr goes to a file (its tail explains a crash), and a child that outlives its deadline is
// killed with its whole process group. The result says how it ended in words a report can hold.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace bih {

struct ChildResult {
  bool timed_out = false;
  bool cancelled = false;  // killed because `cancel` was set (a peer process failed)
  bool signaled = false;
  int signal = 0;
  int exit_code = 0;
  double wall_s = 0;
  bool ok() const { return !timed_out && !cancelled && !signaled && exit_code == 0; }
  // "killed by signal 11 (Segmentation fault)", "exited with status 3", "timed out after 600 s".
  std::string describe() const;
};

// Runs argv[0] with argv, stderr appended to stderr_file. Throws InfraError if it cannot start.
// When `cancel` becomes true while the child runs, the child's process group is killed.
ChildResult run_child(const std::vector<std::string>& argv, const std::string& stderr_file,
                      double timeout_s, const std::function<void(const std::string&)>& on_line,
                      const std::atomic<bool>* cancel = nullptr);

// The last `lines` lines of a text file ("" if it cannot be read).
std::string tail_of_file(const std::string& path, int lines);

// The absolute path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace bih
