#include "base/child_process.hpp"

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
#include <deque>
#include <fstream>

#include "base/errors.hpp"

namespace bih {
namespace {

// Written by the signal handler: a lock-free atomic is async-signal-safe.
std::atomic<int> g_interrupt{0};
static_assert(std::atomic<int>::is_always_lock_free);

void on_interrupt(int sig) {
  int none = 0;
  g_interrupt.compare_exchange_strong(none, sig);  // the first signal names the interruption
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking poll or wait returns and the loop looks at the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int interrupt_signal() { return g_interrupt.load(); }

namespace {

// waitpid through EINTR (a second Ctrl-C must not leave the killed child a zombie).
void reap(pid_t pid, int& status) {
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

std::string ChildResult::describe() const {
  if (timed_out) return fmt::format("timed out after {:.0f} s and was killed", wall_s);
  if (cancelled) return "was stopped because a peer rank's process failed";
  if (interrupted) return "was stopped because bih was interrupted";
  if (signaled) return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
  return fmt::format("exited with status {}", exit_code);
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw InfraError("cannot read /proc/self/exe: " + std::string(strerror(errno)));
  return std::string(buf, static_cast<size_t>(n));
}

std::string tail_of_file(const std::string& path, int lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += l + "\n";
  return out;
}

ChildResult run_child(const std::vector<std::string>& argv, const std::string& stderr_file,
                      double timeout_s, const std::function<void(const std::string&)>& on_line,
                      const std::atomic<bool>* cancel) {
  int out_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    throw InfraError("pipe() failed: " + std::string(strerror(errno)));
  }
  const int err_fd = open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (err_fd < 0) {
    throw InfraError("cannot create " + stderr_file + ": " + std::string(strerror(errno)));
  }
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);

  const auto start = std::chrono::steady_clock::now();
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw InfraError("fork() failed: " + std::string(strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);  // its own group, so a timeout kills the worker and anything it started
    // Die with the parent (the forking thread, which waits for us until we end). If the parent
    // died before prctl took effect, we were reparented already: go now.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    execv(cargv[0], cargv.data());
    dprintf(STDERR_FILENO, "exec %s failed: %s\n", cargv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(out_pipe[1]);
  close(err_fd);

  ChildResult result;
  std::string pending;
  bool pipe_open = true;
  int status = 0;
  bool exited = false;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  while (!exited) {
    if (pipe_open) {
      pollfd pfd{out_pipe[0], POLLIN, 0};
      if (poll(&pfd, 1, 100) > 0) {
        char buf[4096];
        const ssize_t n = read(out_pipe[0], buf, sizeof(buf));
        if (n <= 0) {
          pipe_open = false;
        } else {
          pending.append(buf, static_cast<size_t>(n));
          size_t nl;
          while ((nl = pending.find('\n')) != std::string::npos) {
            if (on_line) on_line(pending.substr(0, nl));
            pending.erase(0, nl + 1);
          }
        }
      }
    } else {
      usleep(50 * 1000);
    }
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      exited = true;
    } else if (timeout_s > 0 && elapsed() > timeout_s) {
      kill(-pid, SIGKILL);
      reap(pid, status);
      result.timed_out = true;
      exited = true;
    } else if (cancel != nullptr && cancel->load()) {
      kill(-pid, SIGKILL);
      reap(pid, status);
      result.cancelled = true;
      exited = true;
    } else if (interrupt_signal() != 0) {
      kill(-pid, SIGKILL);
      reap(pid, status);
      result.interrupted = true;
      exited = true;
    }
  }
  close(out_pipe[0]);
  result.wall_s = elapsed();
  if (!result.timed_out && !result.cancelled && !result.interrupted) {
    if (WIFSIGNALED(status)) {
      result.signaled = true;
      result.signal = WTERMSIG(status);
    } else if (WIFEXITED(status)) {
      result.exit_code = WEXITSTATUS(status);
    }
  }
  kill(-pid, SIGKILL);  // anything the worker left behind in its group
  return result;
}

}  // namespace bih
