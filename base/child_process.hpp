// child_process.hpp: run a child process with a deadline, streaming its stdout lines.
//
// The driver's only window into a worker: stdout lines arrive through a callback while it runs,
// stderr goes to a file (its tail explains a crash), and a child that outlives its deadline is
// killed with its whole process group. The result says how it ended in words a report can hold.
//
// Nothing outlives the driver. Each child sits in its own process group (a timeout kills it and
// whatever it started), so a Ctrl-C at the terminal does not reach it: after
// install_interrupt_handlers(), SIGINT and SIGTERM only set a flag, every run_child loop sees it
// within 100 ms and kills its child's group, and the caller decides what to say. A driver killed
// outright (SIGKILL, an OOM kill) takes its children along: each is started with
// PR_SET_PDEATHSIG(SIGKILL), and adapters a worker starts have the same (base/line_process).
// What left a group (a setsid() daemon) is reaped by a subreaper (base/process_tree). After the
// child exits its stdout is read to the end, so a last line written just before exiting is seen.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace bih {

struct ChildResult {
  bool timed_out = false;
  bool cancelled = false;    // killed because `cancel` was set (a peer process failed)
  bool interrupted = false;  // killed because this process got SIGINT or SIGTERM
  bool signaled = false;
  bool lost = false;  // something else in this process reaped it: how it ended is unknown
  int signal = 0;
  int exit_code = 0;
  double wall_s = 0;
  bool ok() const {
    return !timed_out && !cancelled && !interrupted && !signaled && !lost && exit_code == 0;
  }
  // "killed by signal 11 (Segmentation fault)", "exited with status 3", "timed out after 600 s".
  std::string describe() const;
};

// Runs argv[0] with argv, stderr appended to stderr_file. Throws InfraError if it cannot start.
// When `cancel` becomes true while the child runs, the child's process group is killed.
ChildResult run_child(const std::vector<std::string>& argv, const std::string& stderr_file,
                      double timeout_s, const std::function<void(const std::string&)>& on_line,
                      const std::atomic<bool>* cancel = nullptr);

// SIGINT and SIGTERM set the interrupt flag instead of ending the process (idempotent).
void install_interrupt_handlers();

// The signal that interrupted this process (SIGINT or SIGTERM), or 0.
int interrupt_signal();

// The last `lines` lines of a text file ("" if it cannot be read), from its last 64 KB only.
std::string tail_of_file(const std::string& path, int lines);

// The absolute path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace bih
