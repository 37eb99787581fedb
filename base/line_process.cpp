// line_process.cpp: a child process spoken to in lines (line_process.hpp).
#include "base/line_process.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/errors.hpp"

namespace bih {
namespace {

using Clock = std::chrono::steady_clock;

// After the child exits, how long what a process it started writes into the pipe is still read.
constexpr std::chrono::milliseconds kDrainAfterExit{500};

std::string errno_text(int err) { return std::string(strerror(err)); }

// Why `path` (already resolved) cannot be run, or "".
std::string why_not_runnable(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return fmt::format("'{}': {}", path, errno_text(errno));
  if (S_ISDIR(st.st_mode)) return fmt::format("'{}' is a folder, not a program", path);
  if (!S_ISREG(st.st_mode)) return fmt::format("'{}' is not a regular file", path);
  if (access(path.c_str(), X_OK) != 0) {
    return fmt::format(
        "'{}' is not executable (chmod +x it, or put its interpreter first, e.g. "
        "[\"python3\", \"{}\"])",
        path, path);
  }
  return "";
}

// The file execvp would run for `name`, found the same way (PATH, `cwd` for relative entries);
// throws InfraError saying why there is none.
std::string resolve_program(const std::string& name, const std::string& cwd,
                            const std::map<std::string, std::string>& env) {
  namespace fs = std::filesystem;
  auto in_cwd = [&](const std::string& p) {
    return cwd.empty() || fs::path(p).is_absolute() ? p : (fs::path(cwd) / p).string();
  };
  if (name.empty()) throw InfraError("the command's first word (the program) is empty");
  if (name.find('/') != std::string::npos) {
    const std::string path = in_cwd(name);
    if (const std::string why = why_not_runnable(path); !why.empty()) throw InfraError(why);
    return fs::absolute(path).string();  // exec runs after chdir(cwd)
  }
  const auto it = env.find("PATH");
  const char* ours = std::getenv("PATH");
  const std::string search = it != env.end() ? it->second : ours ? ours : "/bin:/usr/bin";
  std::string first_problem;
  size_t start = 0;
  for (;;) {
    const size_t colon = search.find(':', start);
    std::string dir = search.substr(start, colon == std::string::npos ? colon : colon - start);
    const std::string path = in_cwd((fs::path(dir.empty() ? "." : dir) / name).string());
    if (access(path.c_str(), F_OK) == 0) {
      const std::string why = why_not_runnable(path);
      if (why.empty()) return fs::absolute(path).string();
      if (first_problem.empty()) first_problem = why;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (!first_problem.empty()) throw InfraError(first_problem);
  throw InfraError(fmt::format("'{}' is not found in PATH ({})", name, search));
}

void check_cwd(const std::string& cwd) {
  if (cwd.empty()) return;
  struct stat st {};
  if (stat(cwd.c_str(), &st) != 0) {
    throw InfraError(fmt::format("its folder (cwd) '{}': {}", cwd, errno_text(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    throw InfraError(fmt::format("its folder (cwd) '{}' is not a folder", cwd));
  }
  if (access(cwd.c_str(), X_OK) != 0) {
    throw InfraError(
        fmt::format("its folder (cwd) '{}' cannot be entered: {}", cwd, errno_text(errno)));
  }
}

// What the child sends back through its close-on-exec pipe when it could not exec.
struct StartFailure {
  int step;  // 0 chdir, 1 exec
  int err;
};

// The first line of a script, for a "#! interpreter" that cannot be run.
std::string first_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.size() > 200 ? line.substr(0, 200) + "..." : line;
}

}  // namespace

void LineProcess::check_startable(const std::vector<std::string>& argv, const std::string& cwd,
                                  const std::map<std::string, std::string>& env) {
  if (argv.empty()) throw InfraError("the command is empty");
  check_cwd(cwd);
  resolve_program(argv[0], cwd, env);
}

LineProcess::LineProcess(const std::vector<std::string>& argv, const std::string& cwd,
                         const std::map<std::string, std::string>& env,
                         const std::string& stderr_file)
    : stderr_file_(stderr_file) {
  check_startable(argv, cwd, env);
  const std::string program = resolve_program(argv[0], cwd, env);
  int in_pipe[2], out_pipe[2], status_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0 ||
      pipe2(status_pipe, O_CLOEXEC) != 0) {
    throw InfraError("pipe() failed: " + errno_text(errno));
  }
  const int err_fd = open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (err_fd < 0) throw InfraError("cannot create " + stderr_file + ": " + errno_text(errno));
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) throw InfraError("fork() failed: " + errno_text(errno));
  if (pid_ == 0) {
    // Dies with its parent, even one killed by SIGKILL; its own group so that whatever it
    // starts is killed with it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);
    signal(SIGTTOU, SIG_DFL);  // the guardian's child ignores it; the adapter gets the default
    dup2(in_pipe[0], STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
    StartFailure failure{0, 0};
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) {
      failure = {0, errno};
    } else {
      execv(program.c_str(), cargv.data());
      failure = {1, errno};
    }
    (void)!write(status_pipe[1], &failure, sizeof(failure));
    _exit(127);
  }
  setpgid(pid_, pid_);
  close(in_pipe[0]);
  close(out_pipe[1]);
  close(status_pipe[1]);
  close(err_fd);
  in_fd_ = in_pipe[1];
  out_fd_ = out_pipe[0];
  fcntl(in_fd_, F_SETFL, fcntl(in_fd_, F_GETFL) | O_NONBLOCK);
  signal(SIGPIPE, SIG_IGN);  // a dead adapter makes write() fail, not kill us
  // End of file: exec succeeded (the pipe closed on exec). Anything else says why not.
  StartFailure failure{};
  ssize_t n;
  while ((n = read(status_pipe[0], &failure, sizeof(failure))) < 0 && errno == EINTR) {
  }
  close(status_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(failure))) {
    int status = 0;
    waitpid(pid_, &status, 0);
    ended_ = describe_status(status);
    close(in_fd_);
    close(out_fd_);
    if (failure.step == 0) {
      throw InfraError(
          fmt::format("its folder (cwd) '{}' cannot be entered: {}", cwd, errno_text(failure.err)));
    }
    size_t bytes = 0;
    for (const auto& a : argv) bytes += a.size() + 1;
    if (failure.err == E2BIG) {
      throw InfraError(fmt::format("'{}' cannot be started: {} ({} arguments, {} bytes)", program,
                                   errno_text(failure.err), argv.size(), bytes));
    }
    const std::string line = first_line_of(program);
    if ((failure.err == ENOENT || failure.err == EACCES) && line.rfind("#!", 0) == 0) {
      throw InfraError(fmt::format("'{}' cannot be started: its interpreter line '{}': {}", program,
                                   line, errno_text(failure.err)));
    }
    throw InfraError(fmt::format("'{}' cannot be started: {}{}", program, errno_text(failure.err),
                                 failure.err == ENOEXEC ? " (no #! line and not a binary)" : ""));
  }
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

// Bytes before scanned_ were searched once: each byte is looked at once, however long the line.
size_t LineProcess::next_newline() {
  if (scanned_ < head_) scanned_ = head_;
  const void* nl = memchr(buffer_.data() + scanned_, '\n', buffer_.size() - scanned_);
  if (nl == nullptr) {
    scanned_ = buffer_.size();
    return std::string::npos;
  }
  scanned_ = static_cast<size_t>(static_cast<const char*>(nl) - buffer_.data());
  return scanned_;
}

void LineProcess::append(const char* data, size_t n) {
  if (dropping_) {
    const char* nl = static_cast<const char*>(memchr(data, '\n', n));
    if (nl == nullptr) return;
    buffer_ += '\n';  // the cut line ends here
    dropping_ = false;
    n -= static_cast<size_t>(nl + 1 - data);
    data = nl + 1;
  }
  // Consumed bytes go once they are half the buffer: copying stays linear overall.
  if (head_ > 0 && head_ * 2 >= buffer_.size()) {
    buffer_.erase(0, head_);
    scanned_ -= std::min(scanned_, head_);
    if (cut_at_ != std::string::npos) cut_at_ -= head_;
    head_ = 0;
  }
  buffer_.append(data, n);
  if (next_newline() == std::string::npos && buffer_.size() - head_ > max_line_bytes_) {
    buffer_.resize(head_ + max_line_bytes_);
    scanned_ = cut_at_ = buffer_.size();
    dropping_ = true;
  }
}

bool LineProcess::read_available() {
  char buf[65536];
  for (;;) {
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n > 0) {
      append(buf, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

LineProcess::WriteStatus LineProcess::write_line(const std::string& line, double timeout_s) {
  if (in_fd_ < 0) return WriteStatus::closed;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  const std::string data = line + "\n";
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(in_fd_, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return WriteStatus::closed;
    // The pipe is full: it does not read now. Exited (a process it started may hold its stdin)?
    if (exited()) return WriteStatus::closed;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return WriteStatus::timeout;
    pollfd fds[2] = {{in_fd_, POLLOUT, 0}, {out_fd_, POLLIN, 0}};
    const int nfds = out_closed_ ? 1 : 2;
    if (poll(fds, nfds, static_cast<int>(std::min<int64_t>(left, 100))) > 0 && nfds == 2 &&
        (fds[1].revents & (POLLIN | POLLHUP)) != 0) {
      // It may be blocked writing to us: take what it wrote, for read_line.
      if (!read_available()) out_closed_ = true;
    }
  }
  return WriteStatus::written;
}

LineProcess::ReadStatus LineProcess::read_line(double timeout_s, std::string& line) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  std::optional<Clock::time_point> drain_until;  // set once the child is seen to have exited
  for (;;) {
    const size_t nl = next_newline();
    if (nl != std::string::npos) {
      last_cut_ = nl == cut_at_;
      if (last_cut_) cut_at_ = std::string::npos;
      line.assign(buffer_, head_, nl - head_);
      head_ = nl + 1;
      scanned_ = head_;
      return ReadStatus::line;
    }
    if (out_closed_) {
      if (head_ < buffer_.size()) {
        last_cut_ = cut_at_ == buffer_.size();
        cut_at_ = std::string::npos;
        line.assign(buffer_, head_, std::string::npos);
        head_ = scanned_ = buffer_.size();
        return ReadStatus::line;
      }
      return ReadStatus::closed;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 && !drain_until) return ReadStatus::timeout;
    pollfd pfd{out_fd_, POLLIN, 0};
    const int wait_ms = drain_until ? 0 : static_cast<int>(std::min<int64_t>(left, 100));
    const int ready = poll(&pfd, 1, wait_ms);
    if (ready < 0 && errno != EINTR) throw InfraError("poll() failed: " + errno_text(errno));
    if (ready > 0) {
      if (!read_available()) out_closed_ = true;
      if (drain_until && Clock::now() > *drain_until) out_closed_ = true;  // someone else floods
      continue;
    }
    if (drain_until) {
      // It has exited and the pipe holds nothing more: all it wrote has been read, whoever else
      // keeps the pipe open.
      out_closed_ = true;
    } else if (exited()) {
      drain_until = Clock::now() + kDrainAfterExit;
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
  const auto deadline = Clock::now() + std::chrono::duration<double>(grace_s);
  while (!exited() && Clock::now() < deadline) usleep(20 * 1000);
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
