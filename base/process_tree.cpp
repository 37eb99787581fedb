// process_tree.cpp: subreapers, the descendant killer and the guardian (process_tree.hpp).
#include "base/process_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "base/errors.hpp"

namespace bih {

void become_subreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    throw InfraError("prctl(PR_SET_CHILD_SUBREAPER) failed: " + std::string(strerror(errno)));
  }
}

bool is_subreaper() {
  int on = 0;
  return prctl(PR_GET_CHILD_SUBREAPER, &on) == 0 && on != 0;
}

namespace {

struct LiveProcess {
  pid_t pid;
  pid_t parent;
  pid_t group;
};

// Every live process, from one /proc scan (zombies have no children left and need no kill).
std::vector<LiveProcess> live_processes() {
  std::vector<LiveProcess> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    // POSIX reads: a process that exits between open and read fails the read with ESRCH, which
    // std::filebuf turns into an exception (seen under ASan's slower timing); here it is skipped.
    const int fd =
        open((std::string("/proc/") + e->d_name + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buffer[1024];
    const ssize_t got = read(fd, buffer, sizeof buffer);
    close(fd);
    if (got <= 0) continue;
    const std::string stat(buffer, static_cast<size_t>(got));
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so look after the
    // last ')'.
    const auto close = stat.rfind(')');
    if (close == std::string::npos || close + 4 >= stat.size()) continue;
    const char state = stat[close + 2];
    if (state == 'Z' || state == 'X') continue;
    char* after_parent = nullptr;
    const long parent = std::strtol(stat.c_str() + close + 4, &after_parent, 10);
    const long group = std::strtol(after_parent, nullptr, 10);
    out.push_back({static_cast<pid_t>(pid), static_cast<pid_t>(parent), static_cast<pid_t>(group)});
  }
  closedir(proc);
  return out;
}

}  // namespace

std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  for (const LiveProcess& p : live_processes()) children.emplace(p.parent, p.pid);
  std::vector<pid_t> out;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    const auto [first, last] = children.equal_range(p);
    for (auto it = first; it != last; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

std::vector<pid_t> group_members(pid_t group) {
  std::vector<pid_t> out;
  for (const LiveProcess& p : live_processes()) {
    if (p.group == group) out.push_back(p.pid);
  }
  return out;
}

int kill_descendants(double limit_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  std::set<pid_t> killed;
  for (;;) {
    for (const pid_t pid : descendants(getpid())) {
      if (kill(pid, SIGKILL) == 0) killed.insert(pid);
    }
    // ECHILD is the proof: every descendant's chain of parents starts at a child of ours, and an
    // orphan below us is reparented to us (a subreaper) before its parent can be reaped.
    for (;;) {
      const pid_t w = waitpid(-1, nullptr, WNOHANG);
      if (w > 0) continue;
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && errno == ECHILD) return static_cast<int>(killed.size());
      break;  // children left that have not died yet
    }
    if (std::chrono::steady_clock::now() > deadline) return static_cast<int>(killed.size());
    usleep(2000);
  }
}

void start_guardian() {
  // Blocked before the fork so that no signal slips between it and the wait loop; the child
  // restores the mask before it does anything.
  sigset_t watched, old;
  sigemptyset(&watched);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGCHLD}) sigaddset(&watched, sig);
  sigprocmask(SIG_BLOCK, &watched, &old);
  become_subreaper();
  std::fflush(nullptr);
  const pid_t guardian = getpid();
  const pid_t child = fork();
  if (child < 0) throw InfraError("fork() failed: " + std::string(strerror(errno)));
  if (child == 0) {
    // Its own group: a kill of the terminal's job (kill -9 -PGID, timeout(1)) reaches only the
    // guardian, whose death then interrupts us and we clean up. Writing to the terminal from a
    // group that is not in the foreground needs SIGTTOU ignored (stty tostop).
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != guardian) _exit(128 + SIGTERM);  // it died before prctl took effect
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    signal(SIGTTOU, SIG_IGN);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    return;
  }
  setpgid(child, child);
  int status = 0;
  for (bool done = false; !done;) {
    timespec tick{1, 0};
    const int sig = sigtimedwait(&watched, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      kill(child, sig);
    } else if (sig == SIGHUP || sig == SIGQUIT) {
      kill(child, SIGTERM);  // the worker knows SIGINT and SIGTERM as interruptions
    } else if (sig == SIGTSTP) {
      // Ctrl-Z: stop the worker's group with us, and resume it with us.
      kill(-child, SIGSTOP);
      raise(SIGSTOP);
      kill(-child, SIGCONT);
    }
    for (;;) {
      int s = 0;
      const pid_t w = waitpid(-1, &s, WNOHANG);
      if (w <= 0) break;
      if (w == child) {
        status = s;
        done = true;
      }
    }
  }
  kill_descendants();
  _exit(WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
}

}  // namespace bih
