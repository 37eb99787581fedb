// server_process.cpp: see server_process.hpp.
#include "engines/http/server_process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/errors.hpp"
#include "base/process_tree.hpp"

extern char** environ;

namespace bih {
namespace fs = std::filesystem;

std::string find_program(const std::string& argv0, const std::string& path) {
  auto runnable = [](const std::string& p) {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (argv0.find('/') != std::string::npos) return runnable(argv0) ? argv0 : "";
  size_t from = 0;
  while (from <= path.size()) {
    const size_t colon = path.find(':', from);
    const std::string dir = path.substr(from, colon == std::string::npos ? colon : colon - from);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + argv0;
    if (runnable(candidate)) return candidate;
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  return "";
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw InfraError("socket() failed: " + std::string(strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = strerror(errno);
    close(fd);
    throw InfraError("cannot find a free port on 127.0.0.1: " + why);
  }
  close(fd);
  return ntohs(addr.sin_port);
}

int visible_gpu_count() {
  int devices = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/dev", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
        name.find_first_not_of("0123456789", 6) == std::string::npos) {
      ++devices;
    }
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return devices;
  // CUDA stops at the first entry that names no device ("-1" hides them all).
  int listed = 0;
  std::string rest = visible;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string entry = rest.substr(0, comma);
    if (entry.empty() || entry[0] == '-') break;
    ++listed;
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  return std::min(devices, listed);
}

namespace {

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  }
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

}  // namespace

ServerProcess::ServerProcess(const std::string& program, const std::vector<std::string>& argv,
                             const std::map<std::string, std::string>& env, const std::string& cwd,
                             const std::string& log) {
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (env.count(entry.substr(0, entry.find('='))) == 0) env_text.push_back(entry);
  }
  for (const auto& [k, v] : env) env_text.push_back(k + "=" + v);
  std::vector<char*> cenv;
  for (auto& e : env_text) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) throw InfraError("cannot open " + log + ": " + strerror(errno));
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int report[2];  // exec's failure comes back here; a successful exec closes it
  if (null_fd < 0 || pipe2(report, O_CLOEXEC) != 0) {
    close(log_fd);
    throw InfraError(std::string("cannot set up the server's process: ") + strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    close(null_fd);
    close(report[0]);
    close(report[1]);
    throw InfraError(std::string("fork() failed: ") + strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGPIPE, SIGTTOU, SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);
    dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    int err = 0;
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) {
      err = errno;
    } else {
      execve(program.c_str(), cargv.data(), cenv.data());
      err = errno;
    }
    (void)!write(report[1], &err, sizeof(err));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so that a kill of the group right after fork reaches it
  pid_ = pid;
  close(log_fd);
  close(null_fd);
  close(report[1]);
  int err = 0;
  ssize_t n;
  while ((n = read(report[0], &err, sizeof(err))) < 0 && errno == EINTR) {
  }
  close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(err))) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ended_ = "could not start";
    throw InfraError(fmt::format("cannot run {} (in {}): {}", program, cwd, strerror(err)));
  }
}

ServerProcess::~ServerProcess() { stop(10); }

bool ServerProcess::reap(int options) {
  if (ended_) return true;
  int status = 0;
  pid_t w;
  while ((w = waitpid(pid_, &status, options)) < 0 && errno == EINTR) {
  }
  if (w == pid_) {
    ended_ = describe(status);
    return true;
  }
  if (w < 0) {
    ended_ = "was reaped elsewhere";  // ECHILD: a subreaper's sweep took it
    return true;
  }
  return false;
}

bool ServerProcess::exited(std::string* how) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool done = reap(WNOHANG);
  if (done && how != nullptr) *how = *ended_;
  return done;
}

std::string ServerProcess::stop(double grace_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pid_ <= 0) return ended_.value_or("");
  if (!reap(WNOHANG)) {
    kill(-pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(grace_s));
    while (!reap(WNOHANG) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!ended_) {
      kill(-pid_, SIGKILL);
      reap(0);
      *ended_ += fmt::format(" (it did not exit within {:g} s of SIGTERM)", grace_s);
    }
  }
  // What it started in its group and left behind. A SIGKILL is delivered asynchronously: wait
  // (bounded: a process stuck in the kernel cannot be waited for) until the group is gone, so
  // that when stop() returns nothing of the server is running.
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (kill(-pid_, SIGKILL) == 0 && !group_members(pid_).empty() &&
         std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return *ended_;
}

}  // namespace bih
