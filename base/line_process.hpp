// line_process.hpp: a child process spoken to in lines over its stdin and stdout.
//
// For adapters (engines/command_engine.cpp): stdin and stdout are pipes, stderr goes to a file
// whose tail explains a failure, the child dies with its parent (PR_SET_PDEATHSIG) and is killed
// with its whole process group when this object goes away.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bih {

class LineProcess {
 public:
  // Starts argv (argv[0] looked up in PATH) in `cwd` (empty: ours) with `env` added to our
  // environment, stderr appended to `stderr_file`. Throws InfraError if it cannot start.
  LineProcess(const std::vector<std::string>& argv, const std::string& cwd,
              const std::map<std::string, std::string>& env, const std::string& stderr_file);
  ~LineProcess();
  LineProcess(const LineProcess&) = delete;
  LineProcess& operator=(const LineProcess&) = delete;

  // Writes one line (a '\n' is added). False when the child no longer reads (it exited).
  bool write_line(const std::string& line);

  enum class ReadStatus { line, timeout, closed };
  // Waits up to timeout_s for the next whole line of stdout. `closed`: the child closed its
  // stdout (it exited or crashed); what it wrote without a final newline is returned as a line
  // first. Lines longer than max_line_bytes are cut (the rest is dropped) so a flood cannot
  // exhaust memory.
  ReadStatus read_line(double timeout_s, std::string& line, size_t max_line_bytes = 256 << 20);

  // Waits up to grace_s for the child to exit, then kills its process group. Returns how it
  // ended: "exited with status 0", "killed by signal 9 (Killed)", ...
  std::string finish(double grace_s);
  // Whether it has exited, without waiting; `how` says how when it has.
  bool exited(std::string* how = nullptr);

  pid_t pid() const { return pid_; }
  const std::string& stderr_file() const { return stderr_file_; }

 private:
  std::string describe_status(int status) const;

  pid_t pid_ = -1;
  int in_fd_ = -1;   // the child's stdin
  int out_fd_ = -1;  // the child's stdout
  std::string stderr_file_;
  std::string pending_;
  bool out_closed_ = false;
  std::optional<std::string> ended_;  // how it ended, once reaped
};

}  // namespace bih
