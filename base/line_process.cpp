// line_process.cpp: a child process spoken to in lines (line_process.hpp).
#include "base/line_process.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/errors.hpp"

namespace bih {

LineProcess::LineProcess(const std::vector<std::string>& argv, const std::string& cwd,
                         const std::map<std::string, std::string>& env,
                         const std::string& stderr_file)
    : stderr_file_(stderr_file) {
  if (argv.empty()) throw InfraError("LineProcess: empty command line");
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0) {
    throw InfraError("pipe() failed: " + std::string(strerror(errno)));
  }
  const int err_fd = open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (err_fd < 0) {
    throw InfraError("cannot create " + stderr_file + ": " + std::string(strerror(errno)));
  }
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) throw InfraError("fork() failed: " + std::string(strerror(errno)));
  if (pid_ == 0) {
    // Dies with its parent, even one killed by SIGKILL; its own group so that whatever it
    // starts is killed with it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) {
      dprintf(STDERR_FILENO, "cannot enter %s: %s\n", cwd.c_str(), strerror(errno));
      _exit(127);
    }
    execvp(cargv[0], cargv.data());
    dprintf(STDERR_FILENO, "cannot run %s: %s\n", cargv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid_, pid_);
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(err_fd);
  in_fd_ = in_pipe[1];
  out_fd_ = out_pipe[0];
  signal(SIGPIPE, SIG_IGN);  // a dead adapter makes write() fail, not kill us
}

LineProcess::~LineProcess() {
  if (in_fd_ >= 0) close(in_fd_);
  if (out_fd_ >= 0) close(out_fd_);
  if (!ended_ && pid_ > 0) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

bool LineProcess::write_line(const std::string& line) {
  if (in_fd_ < 0) return false;
  std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(in_fd_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

LineProcess::ReadStatus LineProcess::read_line(double timeout_s, std::string& line,
                                               size_t max_line_bytes) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool cut = false;
  for (;;) {
    const auto nl = pending_.find('\n');
    if (nl != std::string::npos) {
      line = pending_.substr(0, std::min(nl, max_line_bytes));
      pending_.erase(0, nl + 1);
      return ReadStatus::line;
    }
    if (pending_.size() > max_line_bytes) {
      pending_.resize(max_line_bytes);
      cut = true;
    }
    if (out_closed_) {
      if (!pending_.empty()) {
        line.swap(pending_);
        pending_.clear();
        return ReadStatus::line;
      }
      return ReadStatus::closed;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return ReadStatus::timeout;
    pollfd pfd{out_fd_, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR)
      throw InfraError("poll() failed: " + std::string(strerror(errno)));
    if (ready <= 0) continue;
    char buf[65536];
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      out_closed_ = true;
      continue;
    }
    if (!cut) {
      pending_.append(buf, static_cast<size_t>(n));
    } else {
      // Drop the rest of an over-long line up to its end.
      const char* end = static_cast<const char*>(memchr(buf, '\n', static_cast<size_t>(n)));
      if (end != nullptr) {
        pending_ += '\n';
        pending_.append(end + 1, static_cast<size_t>(buf + n - (end + 1)));
        cut = false;
      }
    }
  }
}

std::string LineProcess::describe_status(int status) const {
  if (WIFSIGNALED(status)) {
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

bool LineProcess::exited(std::string* how) {
  if (!ended_) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) ended_ = describe_status(status);
  }
  if (ended_ && how != nullptr) *how = *ended_;
  return ended_.has_value();
}

std::string LineProcess::finish(double grace_s) {
  if (in_fd_ >= 0) {
    close(in_fd_);
    in_fd_ = -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  while (!exited() && std::chrono::steady_clock::now() < deadline) usleep(20 * 1000);
  if (!ended_) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    ended_ = describe_status(status) + fmt::format(" (it did not exit within {:.0f} s)", grace_s);
  }
  kill(-pid_, SIGKILL);  // whatever it left behind in its group
  return *ended_;
}

}  // namespace bih
