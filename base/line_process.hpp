// line_process.hpp: a child process spoken to in lines over its stdin and stdout.
//
// For adapters (engines/command_engine.cpp): stdin and stdout are pipes, stderr goes to a file
// whose tail explains a failure, the child dies with its parent (PR_SET_PDEATHSIG) and is killed
// with its whole process group when this object goes away (what left the group is the
// subreaper's: base/process_tree.hpp).
//
// Every wait is bounded: a program that cannot start is refused before the fork, naming why (not
// found, a folder, not executable, a cwd that cannot be entered) and exec's own failure (an
// argument list too long, a missing #! interpreter) comes back through a pipe; a write to a child
// that does not read gives up at its deadline; a child that exits while a process it started
// still holds its stdout is noticed within 100 ms; finding a line costs time linear in its bytes
// and keeps at most max_line_bytes of it.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bih {

class LineProcess {
 public:
  // Starts argv (argv[0] looked up in PATH, env's PATH if it sets one) in `cwd` (empty: ours)
  // with `env` added to our environment, stderr appended to `stderr_file`. Throws InfraError,
  // saying why, if it cannot start.
  LineProcess(const std::vector<std::string>& argv, const std::string& cwd,
              const std::map<std::string, std::string>& env, const std::string& stderr_file);
  // What the constructor checks first: `cwd` can be entered and argv[0] names a program that
  // can be run. Throws InfraError saying why not.
  static void check_startable(const std::vector<std::string>& argv, const std::string& cwd,
                              const std::map<std::string, std::string>& env);
  ~LineProcess();
  LineProcess(const LineProcess&) = delete;
  LineProcess& operator=(const LineProcess&) = delete;

  enum class WriteStatus { written, timeout, closed };
  // Writes one line (a '\n' is added), reading its stdout meanwhile so that neither side blocks
  // the other. `closed`: the child no longer reads (it exited); `timeout`: it did not take the
  // line within timeout_s.
  WriteStatus write_line(const std::string& line, double timeout_s);

  enum class ReadStatus { line, timeout, closed };
  // Waits up to timeout_s for the next whole line of stdout. `closed`: the child closed its
  // stdout or exited (what it wrote before is read first, even while a process it started keeps
  // the pipe open); what it wrote without a final newline is returned as a line first. Lines
  // longer than max_line_bytes are cut (the rest is dropped) so a flood cannot exhaust memory.
  ReadStatus read_line(double timeout_s, std::string& line);
  void set_max_line_bytes(size_t bytes) { max_line_bytes_ = bytes; }
  // Whether the line read_line returned last was cut at max_line_bytes.
  bool last_line_cut() const { return last_cut_; }

  // Waits up to grace_s for the child to exit, then kills its process group. Returns how it
  // ended: "exited with status 0", "killed by signal 9 (Killed) (it did not exit within 10 s)".
  std::string finish(double grace_s);
  // Whether it has exited, without waiting; `how` says how when it has.
  bool exited(std::string* how = nullptr);

  pid_t pid() const { return pid_; }
  const std::string& stderr_file() const { return stderr_file_; }

 private:
  std::string describe_status(int status) const;
  void append(const char* data, size_t n);
  size_t next_newline();
  // Reads what stdout has now into the buffer; false at end of file.
  bool read_available();

  pid_t pid_ = -1;
  int in_fd_ = -1;   // the child's stdin
  int out_fd_ = -1;  // the child's stdout
  std::string stderr_file_;
  // Unread stdout: bytes before head_ are consumed, bytes before scanned_ hold no newline.
  std::string buffer_;
  size_t head_ = 0;
  size_t scanned_ = 0;
  bool dropping_ = false;              // the current line was cut: drop bytes up to its newline
  size_t cut_at_ = std::string::npos;  // where in buffer_ the cut line ends, if one was cut
  bool last_cut_ = false;
  size_t max_line_bytes_ = size_t{256} << 20;
  bool out_closed_ = false;
  std::optional<std::string> ended_;  // how it ended, once reaped
};

}  // namespace bih
