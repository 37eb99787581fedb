// run_bih.hpp: run the built `bih` binary from a test and capture what it printed.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bih::testing {

struct BihResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

inline BihResult run_bih(const std::vector<std::string>& args) {
  std::string cmd = shell_quote(BIH_BINARY);
  for (const auto& a : args) {
    // Two appends: GCC 12 warns (-Wstringop-overflow, a false positive) on " " + std::string&&.
    cmd += ' ';
    cmd += shell_quote(a);
  }
  cmd += " 2>&1";
  BihResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The folders fresh_dir made in this process. They go when the process exits, unless a test
// failed (they are then what to look at, and stderr says where) or BIH_KEEP_TEST_DIRS is set; a
// suite run used to leave some 240 folders in /tmp each time. Only the process that made them
// removes them: a forked child that exits normally must not take its parent's folders.
class FreshDirs {
 public:
  void add(const std::filesystem::path& dir) { dirs_.push_back(dir); }
  ~FreshDirs() {
    if (getpid() != owner_ || dirs_.empty()) return;
    const ::testing::UnitTest* tests = ::testing::UnitTest::GetInstance();
    if (std::getenv("BIH_KEEP_TEST_DIRS") != nullptr || tests->Failed()) {
      for (const auto& dir : dirs_) std::fprintf(stderr, "kept %s\n", dir.c_str());
      return;
    }
    std::error_code ignored;
    for (const auto& dir : dirs_) std::filesystem::remove_all(dir, ignored);
  }

 private:
  pid_t owner_ = getpid();
  std::vector<std::filesystem::path> dirs_;
};

// A fresh empty folder under the system temp folder, removed when the test process ends.
inline std::filesystem::path fresh_dir(const std::string& name) {
  static FreshDirs made;
  // The pid keeps concurrent test processes (ctest -j, several checkouts) out of each other's way.
  auto dir = std::filesystem::temp_directory_path() /
             ("bih-test-" + std::to_string(getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  made.add(dir);
  return dir;
}

// The report files (*.json but the run manifest) directly in `dir`.
inline std::vector<std::filesystem::path> report_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const bool manifest = e.path().filename().string().rfind("manifest", 0) == 0;
    if (e.is_regular_file() && e.path().extension() == ".json" && !manifest) {
      files.push_back(e.path());
    }
  }
  return files;
}

}  // namespace bih::testing
