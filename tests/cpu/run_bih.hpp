// run_bih.hpp: run the built `bih` binary from a test and capture what it printed.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
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

// A fresh empty folder under the system temp folder.
inline std::filesystem::path fresh_dir(const std::string& name) {
  // The pid keeps concurrent test processes (ctest -j, several checkouts) out of each other's way.
  auto dir = std::filesystem::temp_directory_path() /
             ("bih-test-" + std::to_string(getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
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
