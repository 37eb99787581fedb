// test_server_launch.cpp: a launched server's life (engines/http/server_launch.hpp), with the
// misbehaving stand-in tests/hostile/server_fixture.py: ready (details, version, resolved, the
// knobs file), never ready (timeout quoting the log), exiting at start (status and tail), its
// port taken (a relaunch on a fresh port), ignoring SIGTERM, a missing program or GPUs or an
// unmapped knob (`unsupported`, nothing started), and no server process outliving the
// LaunchedServer, a SIGKILLed worker, or a "bih" (a guardian, as bih runs) ended by SIGINT,
// SIGTERM or SIGKILL; checked by pid.
#ifdef BIH_HAVE_HTTP

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/child_process.hpp"
#include "base/process_tree.hpp"
#include "engines/http/server_launch.hpp"
#include "engines/http/server_process.hpp"
#include "run_bih.hpp"
#include "test_files.hpp"

namespace bih::test_server_launch {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::alive;
using testing::read_text;
using namespace std::chrono_literals;

const std::string kFixture = std::string(BIH_SOURCE_DIR) + "/tests/hostile/server_fixture.py";

class ServerLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    // One cache for the suite's runs: the tiny model is exported once.
    setenv("BIH_CACHE_DIR", (fs::temp_directory_path() / "bih-test-server-cache").c_str(), 1);
  }
  void TearDown() override {
    for (pid_t pid : pids(0ms)) kill(pid, SIGKILL);  // never leak into the suite
  }

  // A profile running the fixture in `mode` (an engine option), and a scenario using it.
  Scenario scenario(const std::string& mode, json extra = json::object()) {
    json profile = {{"format", "bih.server-profile/1"},
                    {"name", "fixture"},
                    {"command",
                     {"python3", kFixture, "--port", "{port}", "--pid-file", "{work_dir}/pids.txt",
                      "--state", "{work_dir}/state", "--spawn"}},
                    {"dialects", {"openai"}},
                    {"ready", {{"method", "GET"}, {"path", "/health"}, {"timeout_s", 20}}},
                    {"version", {{"path", "/version"}}},
                    {"resolved", {{"path", "/resolved"}}},
                    {"knobs", {{"parallel.tp", {{"args", {"--tp", "{value}"}}}}}},
                    {"options", {{"mode", {{"args", {"--mode", "{value}"}}}}}}};
    profile.merge_patch(extra);
    std::ofstream(dir_ / "fixture.profile.json") << profile.dump(2);
    Scenario s;
    s.source_file = (dir_ / "s.json").string();
    s.engine.kind = "http";
    s.engine.profile = "fixture.profile.json";
    s.engine.options = {{"mode", mode}};
    return s;
  }

  // The fixture's pids (itself, its child), once it wrote them.
  std::vector<pid_t> pids(std::chrono::milliseconds wait = 10s) const {
    const auto end = std::chrono::steady_clock::now() + wait;
    std::string text;
    while ((text = read_text(dir_ / "pids.txt")).find("ready") == std::string::npos &&
           std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(20ms);
    }
    std::vector<pid_t> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line) && line != "ready";)
      out.push_back(std::stoi(line));
    return out;
  }

  // Every pid is gone within `limit`.
  void expect_gone(const std::vector<pid_t>& ps, std::chrono::milliseconds limit) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    auto left = [&] {
      std::vector<pid_t> l;
      for (pid_t p : ps) {
        if (alive(p)) l.push_back(p);
      }
      return l;
    };
    while (!left().empty() && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(20ms);
    }
    std::string names;
    for (pid_t p : left()) names += " " + std::to_string(p);
    EXPECT_TRUE(left().empty()) << "outlived their launcher:" << names;
  }

  template <class E>
  std::string error_of(const Scenario& s, const LaunchSettings& settings = {}) {
    try {
      launch_server(s, dir_.string(), settings);
    } catch (const E& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "another exception: " << e.what();
      return "";
    }
    ADD_FAILURE() << "the launch did not fail";
    return "";
  }

  fs::path dir_;
};

TEST_F(ServerLaunchTest, AReadyServerIsDescribedAndItsWholeGroupStopsWithIt) {
  Scenario s = scenario("ok");
  s.knobs_set = {"parallel.tp"};
  s.tp = 2;
  std::vector<pid_t> ps;
  {
    const auto server = launch_server(s, dir_.string());
    ps = pids();
    ASSERT_EQ(ps.size(), 2u);
    EXPECT_TRUE(alive(ps[0]) && alive(ps[1]));
    const ServerLaunch& l = server->launch();
    const std::string port = server->base_url().substr(server->base_url().rfind(':') + 1);
    EXPECT_EQ(server->base_url(), "http://127.0.0.1:" + port);
    const std::vector<std::string> expected{"python3",    kFixture,
                                            "--port",     port,
                                            "--pid-file", dir_.string() + "/pids.txt",
                                            "--state",    dir_.string() + "/state",
                                            "--spawn",    "--tp",
                                            "2",          "--mode",
                                            "ok"};
    EXPECT_EQ(l.argv, expected);
    const json d = server->details();
    EXPECT_EQ(d["command"], json(expected));
    EXPECT_EQ(d["pid"], ps[0]);
    EXPECT_EQ(d["version"]["body"], json({{"version", "fixture-1"}}));
    EXPECT_EQ(d["resolved"]["body"]["tp"], 2);
    EXPECT_EQ(d["log"], (dir_ / "server.log").string());
    EXPECT_EQ(server->failure(), "");
    EXPECT_NE(server->log_tail(5).find("fixture: starting in mode ok"), std::string::npos);
    EXPECT_FALSE(fs::exists(dir_ / "knobs.json")) << "only a knobs_file profile gets one";
  }
  expect_gone(ps, 0ms);  // the destructor waited for the group
}

TEST_F(ServerLaunchTest, ADeadServerIsItsFailureWithTheLogsTail) {
  const auto server = launch_server(scenario("ok"), dir_.string());
  const std::vector<pid_t> ps = pids();
  ASSERT_EQ(ps.size(), 2u);
  kill(ps[0], SIGKILL);
  std::string failure;
  for (int i = 0; i < 200 && failure.empty(); ++i) {
    std::this_thread::sleep_for(10ms);
    failure = server->failure();
  }
  EXPECT_NE(failure.find("was killed by signal 9"), std::string::npos) << failure;
  EXPECT_NE(failure.find("| fixture: starting in mode ok"), std::string::npos) << failure;
}

TEST_F(ServerLaunchTest, AServerNeverReadyTimesOutQuotingItsLog) {
  Scenario s = scenario("never-ready");
  // Long enough for python to start listening on a loaded machine (the 503 is what is quoted),
  // far below the profile's own 20 s (the scenario's timeout wins).
  s.engine.ready_timeout_s = 6;
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of<InfraError>(s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 19s);
  EXPECT_NE(e.find("engine fixture: the server was not ready within 6 s"), std::string::npos) << e;
  EXPECT_NE(e.find("GET /health did not answer 200; last: status 503"), std::string::npos) << e;
  EXPECT_NE(e.find("| fixture: \"GET /health HTTP/1.1\" 503"), std::string::npos) << e;
  expect_gone(pids(0ms), 0ms);
}

TEST_F(ServerLaunchTest, AServerExitingAtStartSaysItsStatusAndTail) {
  const std::string e = error_of<InfraError>(scenario("exit-at-start"));
  EXPECT_NE(e.find("the server exited with status 3 before it was ready"), std::string::npos) << e;
  EXPECT_NE(e.find("| fixture: cannot load the model"), std::string::npos) << e;
}

TEST_F(ServerLaunchTest, APortTakenIsRetriedOnAFreshPort) {
  const auto server = launch_server(scenario("busy-once"), dir_.string());
  const std::string log = read_text(dir_ / "server.log");
  EXPECT_NE(log.find("Address already in use"), std::string::npos) << log;
  EXPECT_NE(log.find("---- bih: starting (attempt 2"), std::string::npos) << log;
  EXPECT_EQ(server->failure(), "");
}

TEST_F(ServerLaunchTest, APortTakenOnTheLastAttemptIsAnError) {
  LaunchSettings one;
  one.attempts = 1;
  const std::string e = error_of<InfraError>(scenario("busy-once"), one);
  EXPECT_NE(e.find("exited with status 1 before it was ready"), std::string::npos) << e;
  EXPECT_NE(e.find("Address already in use"), std::string::npos) << e;
}

TEST_F(ServerLaunchTest, AServerIgnoringSigtermIsKilledAfterTheGrace) {
  LaunchSettings quick;
  quick.stop_grace_s = 0.3;
  std::vector<pid_t> ps;
  const auto start = std::chrono::steady_clock::now();
  {
    const auto server = launch_server(scenario("ignore-term"), dir_.string(), quick);
    ps = pids();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  expect_gone(ps, 0ms);
}

TEST_F(ServerLaunchTest, AMissingProgramIsUnsupportedAndNothingStarts) {
  const std::string e = error_of<UnsupportedError>(
      scenario("ok", {{"command", {"no-such-server-program", "--port", "{port}"}}}));
  EXPECT_NE(e.find("program 'no-such-server-program' not found in PATH"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "server.log"));
}

TEST_F(ServerLaunchTest, AFailingCheckIsUnsupportedSayingWhatItSaid) {
  const std::string e = error_of<UnsupportedError>(
      scenario("ok", {{"check", {"python3", "-c", "import no_such_server_module"}}}));
  EXPECT_NE(e.find("the server is not installed here: its check `python3 -c import "
                   "no_such_server_module` exited with status 1"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("No module named 'no_such_server_module'"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "server.log"));
}

TEST_F(ServerLaunchTest, TooFewGpusIsUnsupported) {
  const char* old = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = old != nullptr ? old : "";
  setenv("CUDA_VISIBLE_DEVICES", "", 1);  // none, on any machine
  Scenario s = scenario("ok", {{"gpus", "parallel.tp"}});
  s.tp = 2;
  s.knobs_set = {"parallel.tp"};
  const std::string e = error_of<UnsupportedError>(s);
  old != nullptr ? setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1)
                 : unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_NE(e.find("the server needs 2 GPUs"), std::string::npos) << e;
  EXPECT_NE(e.find("this machine has 0"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "server.log"));
}

TEST_F(ServerLaunchTest, AnUnmappedKnobIsUnsupportedAndNothingStarts) {
  Scenario s = scenario("ok");
  s.knobs_set = {"kernels"};
  const std::string e = error_of<UnsupportedError>(s);
  EXPECT_NE(e.find("knob kernels=invariant: the profile does not map it"), std::string::npos) << e;
  EXPECT_NE(e.find((dir_ / "fixture.profile.json").string()), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir_ / "server.log"));
}

TEST_F(ServerLaunchTest, AKnobsFileProfileGetsEveryKnobInTheInitShape) {
  Scenario s = scenario("ok", {{"knobs_file", true},
                               {"command",
                                {"python3", kFixture, "--port", "{port}", "--pid-file",
                                 "{work_dir}/pids.txt", "--knobs", "{knobs_file}"}}});
  // The fixture does not know --knobs: it exits, and what it was given is what is tested.
  s.knobs_set = {"parallel.tp", "kernels"};
  s.tp = 4;
  s.kernels = KernelFamily::vendor;
  const std::string e = error_of<InfraError>(s);
  EXPECT_NE(e.find("unrecognized arguments: --knobs " + (dir_ / "knobs.json").string()),
            std::string::npos)
      << e;
  EXPECT_EQ(json::parse(read_text(dir_ / "knobs.json")),
            json({{"parallel.tp", 4}, {"kernels", "vendor"}}));
}

TEST_F(ServerLaunchTest, ADryRunShowsThePortAndTheModelBihWouldHandOver) {
  Scenario s = scenario("ok");
  const ServerLaunch l = planned_server_launch(s);
  ASSERT_GE(l.argv.size(), 4u);
  EXPECT_EQ(l.argv[3], "{port}");
  EXPECT_EQ(l.argv[5], "{work_dir}/pids.txt");
  EXPECT_FALSE(fs::exists(dir_ / "server.log"));
}

// "bih" as bih runs: a guardian (start_guardian) whose worker launches the server and holds it
// until interrupted. Returns the guardian's pid; the worker's pid lands in worker.txt.
pid_t start_guardian_with_server(const Scenario& s, const fs::path& dir) {
  const pid_t guardian = fork();
  if (guardian != 0) return guardian;
  setpgid(0, 0);
  start_guardian();  // returns in the worker only
  std::ofstream(dir / "worker.txt") << getpid() << "\n";
  install_interrupt_handlers();
  int code = 0;
  try {
    const auto server = launch_server(s, dir.string());
    while (interrupt_signal() == 0) usleep(10000);
    code = 130;
  } catch (const std::exception& e) {
    std::ofstream(dir / "worker-error.txt") << e.what();
    code = 3;
  }
  _exit(code);
}

class ServerLaunchTree : public ServerLaunchTest {
 protected:
  void run_and_signal(const std::string& mode, int sig, bool kill_worker) {
    Scenario s = scenario(mode);
    s.engine.ready_timeout_s = 60;
    const pid_t guardian = start_guardian_with_server(s, dir_);
    const std::vector<pid_t> ps = pids();
    ASSERT_EQ(ps.size(), 2u) << read_text(dir_ / "worker-error.txt");
    std::this_thread::sleep_for(100ms);  // readiness polling (never-ready) or serving (ok)
    if (kill_worker) {
      const pid_t worker = std::stoi(read_text(dir_ / "worker.txt"));
      ASSERT_EQ(kill(worker, SIGKILL), 0);
    } else {
      ASSERT_EQ(kill(guardian, sig), 0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(guardian, &status, 0), guardian);
    expect_gone(ps, 5s);
  }
};

TEST_F(ServerLaunchTree, NothingOutlivesSigintWhileTheServerStarts) {
  run_and_signal("never-ready", SIGINT, false);
}
TEST_F(ServerLaunchTree, NothingOutlivesSigtermWhileTheServerRuns) {
  run_and_signal("ok", SIGTERM, false);
}
TEST_F(ServerLaunchTree, NothingOutlivesSigkillOfBih) { run_and_signal("ok", SIGKILL, false); }
TEST_F(ServerLaunchTree, NothingOutlivesASigkilledWorker) { run_and_signal("ok", 0, true); }

// Without a subreaper above it (no guardian), the server itself still dies with the process that
// started it (PR_SET_PDEATHSIG); its own child is then the subreaper's in bih, killed here.
TEST_F(ServerLaunchTest, TheServerDiesWithItsStarterByItself) {
  const Scenario s = scenario("ok");
  const pid_t worker = fork();
  if (worker == 0) {
    try {
      const auto server = launch_server(s, dir_.string());
      pause();
    } catch (...) {
    }
    _exit(3);
  }
  const std::vector<pid_t> ps = pids();
  ASSERT_EQ(ps.size(), 2u);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(worker, &status, 0), worker);
  expect_gone({ps[0]}, 3s);
}

}  // namespace
}  // namespace bih::test_server_launch

#endif  // BIH_HAVE_HTTP
