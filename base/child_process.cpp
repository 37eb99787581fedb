#include "base/child_process.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
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
  if (lost) {
    return "ended, but another wait in bih reaped it first, so how it ended is unknown (a bih "
           "bug: its process tree was reaped while it ran)";
  }
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
  // Only the file's end is read: a log of 500 MB without a newline costs 64 KB, not 500 MB.
  constexpr std::streamoff kMaxBytes = 64 << 10;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - kMaxBytes);
  in.seekg(from);
  std::string text(static_cast<size_t>(size - from), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (!text.empty() && text.back() == '\n') text.pop_back();
  // The last `lines` lines; the first one may be the end of a longer line ("..." says so).
  size_t start = text.size();
  int found = 0;
  while (start > 0 && found < lines) {
    const size_t nl = text.rfind('\n', start - 1);
    if (nl == std::string::npos) {
      start = 0;
      break;
    }
    ++found;
    if (found == lines) {
      start = nl + 1;
      break;
    }
    start = nl;
  }
  if (text.empty() || lines <= 0) return "";
  std::string out = text.substr(start);
  if (start == 0 && from > 0) out = "..." + out;
  return out + "\n";
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
    signal(SIGTTOU, SIG_DFL);  // the guardian's child ignores it; its children get the default
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
  // Lines are found in each chunk once (linear however long a line), and a line is kept up to
  // kMaxLine bytes: a worker flooding stdout without a newline costs no memory.
  constexpr size_t kMaxLine = 1 << 20;
  std::string pending;
  auto feed = [&](const char* data, size_t n) {
    for (size_t i = 0; i < n;) {
      const char* nl = static_cast<const char*>(memchr(data + i, '\n', n - i));
      const size_t end = nl != nullptr ? static_cast<size_t>(nl - data) : n;
      pending.append(data + i, std::min(end - i, kMaxLine - std::min(kMaxLine, pending.size())));
      if (nl == nullptr) break;
      if (on_line) on_line(pending);
      pending.clear();
      i = end + 1;
    }
  };
  bool pipe_open = true;
  // One read: false at end of file.
  auto read_some = [&] {
    char buf[65536];
    ssize_t n;
    while ((n = read(out_pipe[0], buf, sizeof(buf))) < 0 && errno == EINTR) {
    }
    if (n <= 0) return false;
    feed(buf, static_cast<size_t>(n));
    return true;
  };
  int status = 0;
  bool exited = false;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  while (!exited) {
    if (pipe_open) {
      pollfd pfd{out_pipe[0], POLLIN, 0};
      if (poll(&pfd, 1, 100) > 0) pipe_open = read_some();
    } else {
      usleep(50 * 1000);
    }
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w < 0 && errno == ECHILD) {
      // Reaped by another thread's waitpid(-1) (kill_descendants): without this the loop would
      // wait for a pid that is gone until the deadline, and call it a timeout.
      result.lost = true;
      break;
    }
    if (w == pid) {
      exited = true;
      // What it wrote just before exiting is still in the pipe (a last @unsupported line): read
      // it all. It has exited, so an empty pipe means all of it was read, even while a process
      // it left behind holds the pipe open (and such a process cannot keep us here past 1 s).
      const auto drain_end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      while (pipe_open && std::chrono::steady_clock::now() < drain_end) {
        pollfd pfd{out_pipe[0], POLLIN, 0};
        if (poll(&pfd, 1, 0) <= 0) break;
        pipe_open = read_some();
      }
      if (!pending.empty() && on_line) on_line(pending);  // a last line without its newline
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
  if (!result.timed_out && !result.cancelled && !result.interrupted && !result.lost) {
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
