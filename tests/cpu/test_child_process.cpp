// The driver's window into its workers (harness/child_process.hpp): exit status, signals, stdout
// lines as they come, the deadline, and cancellation (how the driver stops the other rank
// processes of an NCCL scenario when one of them fails).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "base/child_process.hpp"
#include "run_bih.hpp"

namespace bih::test_child_process {
namespace {

std::string err_file(const char* name) {
  return (testing::fresh_dir(name) / "stderr.log").string();
}

TEST(ChildProcess, ReportsExitStatusAndStdoutLines) {
  std::vector<std::string> lines;
  const ChildResult r =
      run_child({"/bin/sh", "-c", "echo one; echo two; exit 3"}, err_file("child-exit"), 30,
                [&](const std::string& line) { lines.push_back(line); });
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(r.describe(), "exited with status 3");
}

TEST(ChildProcess, ReportsTheSignalThatKilledIt) {
  const ChildResult r =
      run_child({"/bin/sh", "-c", "kill -SEGV $$"}, err_file("child-signal"), 30, {});
  EXPECT_TRUE(r.signaled);
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_NE(r.describe().find("signal 11"), std::string::npos) << r.describe();
}

TEST(ChildProcess, KillsAChildPastItsDeadline) {
  const ChildResult r = run_child({"/bin/sleep", "30"}, err_file("child-timeout"), 0.3, {});
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
}

TEST(ChildProcess, CancelStopsTheChildAndSaysWhy) {
  std::atomic<bool> cancel{false};
  std::thread peer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;  // a peer rank's process failed
  });
  const ChildResult r = run_child({"/bin/sleep", "30"}, err_file("child-cancel"), 60, {}, &cancel);
  peer.join();
  EXPECT_TRUE(r.cancelled);
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.describe().find("peer rank"), std::string::npos) << r.describe();
}

TEST(ChildProcess, AnUnsetCancelFlagChangesNothing) {
  std::atomic<bool> cancel{false};
  const ChildResult r = run_child({"/bin/true"}, err_file("child-nocancel"), 30, {}, &cancel);
  EXPECT_TRUE(r.ok()) << r.describe();
}

}  // namespace
}  // namespace bih::test_child_process
