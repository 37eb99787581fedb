// server_process.hpp: a server program as a child: its own process group, its output appended to
// a log file, dying with the thread that started it, and stopped group and all.
//
// Unlike base/line_process there are no pipes to talk through: a server speaks HTTP, and what it
// prints is only for the log (the tail explains a failure). PR_SET_PDEATHSIG(SIGKILL) takes it
// along if its starter dies outright; what leaves the group (setsid) is the worker's subreaper's
// (base/process_tree.hpp).
#pragma once

#include <sys/types.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace bih {

// The file argv0 runs: argv0 itself when it holds a '/', else the first executable file of that
// name in `path` (colon-separated). "" when there is none.
std::string find_program(const std::string& argv0, const std::string& path);

// A TCP port on 127.0.0.1 free now (bound to port 0, read, closed). Throws InfraError.
int free_port();

// GPUs this process may use, counted without CUDA: the /dev/nvidiaN device files, no more than
// CUDA_VISIBLE_DEVICES lists when it is set.
int visible_gpu_count();

class ServerProcess {
 public:
  // Starts `program` (a path, from find_program) with argv in `cwd`, `env` added to our
  // environment, stdout and stderr appended to `log`. Throws InfraError saying why it cannot.
  ServerProcess(const std::string& program, const std::vector<std::string>& argv,
                const std::map<std::string, std::string>& env, const std::string& cwd,
                const std::string& log);
  ~ServerProcess();  // stop(10)
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Whether it has exited (reaped, without waiting); `how` says how: "exited with status 1".
  bool exited(std::string* how = nullptr);
  // SIGTERM to the group, up to grace_s for the leader to exit, then SIGKILL to the group; reaps
  // it. Idempotent. Returns how it ended.
  std::string stop(double grace_s);
  pid_t pid() const { return pid_; }

 private:
  bool reap(int options);  // under mutex_; true once reaped

  std::mutex mutex_;
  pid_t pid_ = -1;
  std::optional<std::string> ended_;
};

}  // namespace bih
