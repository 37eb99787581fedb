// test_process_tree.cpp: nothing an adapter starts outlives bih, on every way a run ends, checked
// by pid: success, an error reply, a scenario timeout, SIGINT, SIGTERM and SIGKILL of bih. The
// adapter (tests/data/adapters/tree_adapter.py) leaves a plain child, a setsid() daemon and a
// multiprocessing child behind; every process it started carries a marker in its environment.
// Also here: the bounds on waiting for an adapter (it exits while a child holds its stdout, it
// never reads a large request, it cannot start at all), the shutdown status in the report, and
// run_child reading what a worker wrote just before it exited.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/child_process.hpp"
#include "base/json_file.hpp"
#include "base/line_process.hpp"
#include "base/process_tree.hpp"
#include "run_bih.hpp"
#include "test_files.hpp"

namespace bih::test_process_tree {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::alive;
using testing::read_text;
using namespace std::chrono_literals;

const std::string kAdapter = std::string(BIH_SOURCE_DIR) + "/tests/data/adapters/tree_adapter.py";

// Live processes whose environment holds `marker` (every process the adapter started has it).
std::vector<pid_t> marked_processes(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string env = read_text(e.path() / "environ");
    for (char& c : env) c = c == '\0' ? '\n' : c;
    if (("\n" + env).find("\n" + marker + "\n") != std::string::npos && alive(std::stoi(name))) {
      out.push_back(std::stoi(name));
    }
  }
  return out;
}

class ProcessTree : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    setenv("BIH_CACHE_DIR", (dir_ / "cache").c_str(), 1);
    marker_ = "BIH_TREE_MARK=" + dir_.filename().string();
  }
  void TearDown() override {
    for (pid_t pid : marked_processes(marker_)) kill(pid, SIGKILL);  // never leak into the suite
  }

  json engine(const std::string& mode, bool spawn = true) const {
    return {{"kind", "command"},
            {"name", "tree"},
            {"command", {"python3", kAdapter}},
            {"env", {{"BIH_TREE_MARK", dir_.filename().string()}}},
            {"options", {{"mode", mode}, {"spawn", spawn}, {"pid_file", pid_file().string()}}},
            {"reply_timeout_s", 30}};
  }
  fs::path pid_file() const { return dir_ / "pids.txt"; }

  void write_scenario(const json& engine, double timeout_s, const std::string& expect,
                      const json& plan = {{"prompts", {{"count", 3}}}, {"max_tokens", 2}}) {
    json s{{"engine", engine}, {"plan", plan}, {"timeout_s", timeout_s}};
    if (!expect.empty()) s["expect"] = expect;
    std::ofstream(dir_ / "s.json") << s.dump(2);
  }
  testing::BihResult run() {
    return testing::run_bih({"run", (dir_ / "s.json").string(), "--out", (dir_ / "out").string()});
  }
  json report() const {
    const auto files = testing::report_files(dir_ / "out");
    return files.size() == 1 ? read_json_file(files[0].string()) : json();
  }

  // The adapter's pids (itself, a child, a daemon, a multiprocessing child), once it wrote them.
  std::vector<pid_t> recorded_pids(std::chrono::milliseconds wait = 30s) const {
    const auto end = std::chrono::steady_clock::now() + wait;
    std::string text;
    while ((text = read_text(pid_file())).find("ready") == std::string::npos &&
           std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(50ms);
    }
    std::vector<pid_t> pids;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line) && line != "ready";)
      pids.push_back(std::stoi(line));
    return pids;
  }

  // Every recorded pid and every marked process is gone within `limit` (after bih ended).
  void expect_all_gone(std::chrono::milliseconds limit = 3s) const {
    const std::vector<pid_t> pids = recorded_pids(0ms);
    ASSERT_EQ(pids.size(), 4u) << "the adapter recorded itself and its three descendants";
    const auto end = std::chrono::steady_clock::now() + limit;
    auto survivors = [&] {
      std::vector<pid_t> left = marked_processes(marker_);
      for (pid_t pid : pids) {
        if (alive(pid) && std::find(left.begin(), left.end(), pid) == left.end()) {
          left.push_back(pid);
        }
      }
      return left;
    };
    std::vector<pid_t> left;
    while (!(left = survivors()).empty() && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(50ms);
    }
    std::string names;
    for (pid_t pid : left) {
      std::string cmd = read_text("/proc/" + std::to_string(pid) + "/cmdline");
      for (char& c : cmd) c = c == '\0' ? ' ' : c;
      names += "\n  " + std::to_string(pid) + ": " + cmd;
    }
    EXPECT_TRUE(left.empty()) << "outlived bih:" << names;
  }

  // Starts `bih run` in its own process group (as a shell starts a job), output to log.txt.
  pid_t start_run() const {
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      if (freopen((dir_ / "log.txt").c_str(), "w", stdout) == nullptr) _exit(127);
      dup2(fileno(stdout), STDERR_FILENO);
      const std::string s = (dir_ / "s.json").string(), out = (dir_ / "out").string();
      execl(BIH_BINARY, BIH_BINARY, "run", s.c_str(), "--out", out.c_str(), nullptr);
      _exit(127);
    }
    return pid;
  }

  // A run whose adapter hangs in its first generate, signalled once its descendants run.
  void expect_signal_leaves_nothing(int sig, int expected_exit) {
    write_scenario(engine("hang"), 300, "");
    const pid_t bih = start_run();
    ASSERT_EQ(recorded_pids().size(), 4u) << read_text(dir_ / "log.txt");
    std::this_thread::sleep_for(300ms);  // the generate request is on its way
    ASSERT_EQ(kill(bih, sig), 0);
    int status = 0;
    ASSERT_EQ(waitpid(bih, &status, 0), bih);
    const std::string log = read_text(dir_ / "log.txt");
    if (expected_exit >= 0) {
      ASSERT_TRUE(WIFEXITED(status)) << log;
      EXPECT_EQ(WEXITSTATUS(status), expected_exit) << log;
    } else {
      ASSERT_TRUE(WIFSIGNALED(status)) << log;
    }
    // After a SIGKILL of bih the work goes on in its child, which cleans up on its own.
    expect_all_gone(expected_exit >= 0 ? 3s : 10s);
  }

  fs::path dir_;
  std::string marker_;
};

TEST_F(ProcessTree, NothingOutlivesASuccessfulRun) {
  write_scenario(engine("ok"), 60, "");
  const auto r = run();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(report()["engine"]["shutdown"], "exited with status 0") << r.output;
  expect_all_gone();
}

TEST_F(ProcessTree, NothingOutlivesAnErrorReply) {
  write_scenario(engine("error"), 60, "error");
  const auto r = run();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(report()["reason"].get<std::string>().find("'out of memory'"), std::string::npos)
      << r.output;
  expect_all_gone();
}

TEST_F(ProcessTree, NothingOutlivesAScenarioTimeout) {
  json e = engine("hang");
  e["reply_timeout_s"] = 600;  // the scenario's timeout kills the worker first
  write_scenario(e, 4, "error");
  const auto r = run();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(report()["reason"].get<std::string>().find("timed out after"), std::string::npos)
      << r.output;
  expect_all_gone();
}

TEST_F(ProcessTree, NothingOutlivesSigint) { expect_signal_leaves_nothing(SIGINT, 130); }

TEST_F(ProcessTree, NothingOutlivesSigterm) { expect_signal_leaves_nothing(SIGTERM, 143); }

TEST_F(ProcessTree, NothingOutlivesSigkillOfBih) { expect_signal_leaves_nothing(SIGKILL, -1); }

// ---------------------------------------------------------------------------------------------
// Bounded waits

TEST_F(ProcessTree, AnAdapterThatExitsWhileItsChildrenHoldItsStdoutIsSeenAtOnce) {
  write_scenario(engine("exit_on_generate"), 60, "error");  // reply_timeout_s 30
  const auto start = std::chrono::steady_clock::now();
  const auto r = run();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string reason = report()["reason"];
  EXPECT_NE(reason.find("the adapter exited with status 3"), std::string::npos) << reason;
  EXPECT_LT(wall, 20) << "bih waited for the end of file a child of the adapter held: " << reason;
  expect_all_gone();
}

TEST_F(ProcessTree, ARequestTheAdapterNeverReadsTimesOut) {
  json e = engine("never_reads", false);
  e["reply_timeout_s"] = 8;  // its hello must come in time on a loaded machine
  // Prompts of 20000 tokens: the first generate request is well over the 64 KB a pipe holds.
  write_scenario(e, 60, "error",
                 {{"prompts", {{"count", 2}, {"min_len", 20000}, {"max_len", 20000}}},
                  {"max_tokens", 2},
                  {"max_model_len", 20100}});
  const auto r = run();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string reason = report()["reason"];
  EXPECT_NE(reason.find("did not read the generate request 1 within 8 s"), std::string::npos)
      << reason;
}

TEST_F(ProcessTree, AnAdapterThatCannotStartIsSaidOnTheFirstLine) {
  fs::create_directories(dir_ / "folder");
  std::ofstream(dir_ / "plain.sh") << "#!/bin/sh\necho hi\n";
  std::ofstream(dir_ / "nointerp.sh") << "#!/no/such/interpreter\n";
  fs::permissions(dir_ / "nointerp.sh", fs::perms::owner_all);
  const std::string huge(200000, 'a');  // one argument over the kernel's 128 KiB per argument
  // command, cwd -> what the first line of the reason says
  const std::vector<std::tuple<json, std::string, std::string>> cases{
      {{"no-such-adapter-program"}, "", "'no-such-adapter-program' is not found in PATH"},
      {{(dir_ / "folder").string()}, "", "is a folder, not a program"},
      {{(dir_ / "plain.sh").string()}, "", "is not executable"},
      {{"python3", kAdapter}, (dir_ / "nowhere").string(), "its folder (cwd) '"},
      {{(dir_ / "nointerp.sh").string()}, "", "its interpreter line '#!/no/such/interpreter'"},
      {{"python3", huge}, "", "Argument list too long"}};
  for (const auto& [command, cwd, says] : cases) {
    json e = engine("ok", false);
    e["command"] = command;
    if (!cwd.empty()) e["cwd"] = cwd;
    write_scenario(e, 60, "error");
    fs::remove_all(dir_ / "out");
    const auto r = run();
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::string reason = report().value("reason", "");
    const std::string first = reason.substr(0, reason.find('\n'));
    EXPECT_NE(first.find("its adapter cannot start"), std::string::npos) << reason;
    EXPECT_NE(first.find(says), std::string::npos) << says << "\n" << reason;
  }
}

TEST_F(ProcessTree, TheShutdownStatusIsRecorded) {
  write_scenario(engine("exit5_at_shutdown", false), 60, "");
  auto r = run();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(report()["engine"]["shutdown"], "exited with status 5") << r.output;

  write_scenario(engine("ignores_shutdown", false), 60, "");
  fs::remove_all(dir_ / "out");
  r = run();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(report()["engine"]["shutdown"],
            "killed by signal 9 (Killed) (it did not exit within 10 s)")
      << r.output;
}

// ---------------------------------------------------------------------------------------------
// The parts

TEST(ProcessTreeParts, KillDescendantsLeavesNoOrphanOfASubreaper) {
  const auto dir = testing::fresh_dir("tree-parts");
  const fs::path pids = dir / "pids.txt";
  // In a child of the test, which becomes the subreaper: sh starts a background child and a
  // setsid() one and exits, so both are orphans reparented to the subreaper.
  const pid_t pid = fork();
  if (pid == 0) {
    become_subreaper();
    if (fork() == 0) {
      const std::string script = "sleep 300 & echo $! > " + pids.string() +
                                 "; setsid sh -c 'echo $$ >> " + pids.string() +
                                 "; exec sleep 300' &";
      execl("/bin/sh", "sh", "-c", script.c_str(), nullptr);
      _exit(127);
    }
    for (int i = 0; i < 250; ++i) {
      const std::string text = read_text(pids);
      if (std::count(text.begin(), text.end(), '\n') >= 2) break;
      usleep(20000);
    }
    usleep(100000);  // the sh has exited: its children are ours now
    const int killed = kill_descendants(5);
    _exit(killed >= 2 && descendants(getpid()).empty() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  std::istringstream in(read_text(pids));
  int count = 0;
  for (pid_t p; in >> p; ++count) EXPECT_FALSE(alive(p)) << p;
  EXPECT_EQ(count, 2);
}

TEST(ProcessTreeParts, RunChildSaysWhenAnotherWaitReapedItsChild) {
  // kill_descendants reaps every child with waitpid(-1). A run_child waiting in another thread
  // then finds its pid gone (ECHILD): it must say so, not wait for a pid that no longer exists
  // until its deadline and call that a timeout. Here the other wait is already blocked on the
  // child when it is killed, and a grandchild keeps the stdout pipe open (so run_child's poll
  // does not wake at the death): the other wait reaps it first. In a child of the test, so that
  // the reaping reaches nothing of the test's own.
  const auto dir = testing::fresh_dir("tree-lost");
  const std::string err = (dir / "stderr.log").string();
  const pid_t pid = fork();
  if (pid == 0) {
    ChildResult r;
    std::thread waiter([&] {
      r = run_child({"/bin/sh", "-c", "sleep 60 & exec sleep 60"}, err, 10, nullptr);
    });
    pid_t direct = 0;  // run_child's child leads its own process group; the grandchild is in it
    for (int i = 0; i < 250 && direct == 0; ++i) {
      const std::vector<pid_t> below = descendants(getpid());
      for (const pid_t p : below) {
        if (below.size() == 2 && !group_members(p).empty()) direct = p;
      }
      if (direct == 0) usleep(20000);
    }
    int status = 0;
    const bool killed = direct != 0 && kill(direct, SIGKILL) == 0;
    if (killed) waitpid(direct, &status, 0);  // ECHILD if run_child won the race after all
    waiter.join();
    kill_descendants(5);  // the grandchild
    // Either wait may win the child; neither may become a timeout.
    const bool said = r.lost ? r.describe().find("reaped it first") != std::string::npos
                             : r.signaled && r.signal == SIGKILL;
    _exit(killed && !r.timed_out && !r.ok() && said ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST(ProcessTreeParts, RunChildReadsWhatTheWorkerWroteJustBeforeItExited) {
  // 480 KB of lines in one write to a 1 MB pipe, and an exit at once: when waitpid reports the
  // exit, most of it is still in the pipe (the old loop stopped there and lost 15000 to 39800
  // lines, the last @unsupported line always).
  std::vector<std::string> lines;
  const ChildResult r =
      run_child({"/usr/bin/env", "python3", "-c",
                 "import fcntl, os; fcntl.fcntl(1, 1031, 1 << 20); "  // F_SETPIPE_SZ
                 "os.write(1, (''.join(f'@progress {i:06d}\\n' for i in range(40000)) + "
                 "'@unsupported last words\\n').encode()); os._exit(0)"},
                (testing::fresh_dir("child-drain") / "stderr.log").string(), 30,
                [&](const std::string& line) { lines.push_back(line); });
  EXPECT_TRUE(r.ok()) << r.describe();
  ASSERT_EQ(lines.size(), 40001u);
  EXPECT_EQ(lines[39999], "@progress 039999");
  EXPECT_EQ(lines.back(), "@unsupported last words");
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(ProcessTreeParts, ALineOf200MbIsCutInLinearTime) {
  const auto dir = testing::fresh_dir("line-200mb");
  LineProcess p(
      {"python3", "-c",
       "import sys; sys.stdout.write('x' * (200 << 20) + '\\nnext\\n'); sys.stdout.flush()"},
      "", {}, (dir / "stderr.log").string());
  p.set_max_line_bytes(1 << 20);
  // Our CPU time, not the wall clock: making and writing 200 MB is the child's (and a loaded
  // machine's) business.
  const double cpu_start = cpu_seconds();
  std::string line;
  ASSERT_EQ(p.read_line(60, line), LineProcess::ReadStatus::line);
  EXPECT_EQ(line.size(), size_t{1} << 20);
  EXPECT_TRUE(p.last_line_cut());
  ASSERT_EQ(p.read_line(60, line), LineProcess::ReadStatus::line);
  EXPECT_EQ(line, "next");
  EXPECT_FALSE(p.last_line_cut());
  // Rescanning the buffer after every read took 22-29 s of CPU for this; once per byte, under 2.
  EXPECT_LT(cpu_seconds() - cpu_start, 2);
  EXPECT_EQ(p.read_line(60, line), LineProcess::ReadStatus::closed);
}

TEST(ProcessTreeParts, AWriteToAChildThatNeverReadsGivesUpAtItsDeadline) {
  const auto dir = testing::fresh_dir("write-deadline");
  LineProcess p({"sleep", "30"}, "", {}, (dir / "stderr.log").string());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(p.write_line(std::string(200 << 10, 'r'), 1.0), LineProcess::WriteStatus::timeout);
  EXPECT_LT(seconds_since(start), 5);
}

TEST(ProcessTreeParts, AChildsExitIsSeenWhileItsOwnChildHoldsItsStdout) {
  const auto dir = testing::fresh_dir("exit-held-stdout");
  LineProcess p({"sh", "-c", "echo last; sleep 30 & exit 4"}, "", {},
                (dir / "stderr.log").string());
  const auto start = std::chrono::steady_clock::now();
  std::string line;
  ASSERT_EQ(p.read_line(30, line), LineProcess::ReadStatus::line);
  EXPECT_EQ(line, "last");
  EXPECT_EQ(p.read_line(30, line), LineProcess::ReadStatus::closed);
  EXPECT_LT(seconds_since(start), 5) << "it waited for the end of file the sleep held";
  std::string how;
  EXPECT_TRUE(p.exited(&how));
  EXPECT_EQ(how, "exited with status 4");
  p.finish(1);  // and the sleep goes with its group
}

TEST(ProcessTreeParts, TailOfFileReadsOnlyTheEnd) {
  const auto dir = testing::fresh_dir("tail-end");
  {
    std::ofstream out(dir / "big.log");
    out << "first\n" << std::string(10 << 20, 'y') << "\nsecond\nthird\n";
  }
  EXPECT_EQ(tail_of_file((dir / "big.log").string(), 2), "second\nthird\n");
  const std::string three = tail_of_file((dir / "big.log").string(), 3);
  EXPECT_EQ(three.substr(0, 3), "...") << "the long line's end, marked as cut";
  EXPECT_LT(three.size(), 70u << 10);
  std::ofstream(dir / "small.log") << "a\nb\nc\n";
  EXPECT_EQ(tail_of_file((dir / "small.log").string(), 5), "a\nb\nc\n");
  EXPECT_EQ(tail_of_file((dir / "small.log").string(), 1), "c\n");
  EXPECT_EQ(tail_of_file((dir / "missing.log").string(), 3), "");
}

}  // namespace
}  // namespace bih::test_process_tree
