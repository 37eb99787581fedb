// environment.cpp: reads the host facts a report records.
#include "harness/environment.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "base/utf8.hpp"

#ifndef BIH_VERSION
#define BIH_VERSION "unknown"
#endif
#if __has_include("bih_commit.hpp")
#include "bih_commit.hpp"  // generated at build time: BIH_GIT_COMMIT
#endif
#ifndef BIH_GIT_COMMIT
#define BIH_GIT_COMMIT "unknown"
#endif

extern char** environ;

namespace bih {
namespace {

using json = nlohmann::json;

std::mutex provider_mutex;
std::function<json()>& gpu_provider() {
  static std::function<json()> provider;
  return provider;
}

// The first "model name" line of /proc/cpuinfo (x86); null where there is none (some ARM kernels).
json cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : valid_utf8(line.substr(start));
  }
  return nullptr;
}

json host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return nullptr;
  return valid_utf8(name);
}

json os_info() {
  struct utsname u {};
  if (::uname(&u) != 0) return nullptr;
  return {{"sysname", valid_utf8(u.sysname)},
          {"release", valid_utf8(u.release)},
          {"version", valid_utf8(u.version)},
          {"machine", valid_utf8(u.machine)}};
}

json nccl_variables() {
  json vars = json::object();
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string kv(*entry);
    if (kv.rfind("NCCL_", 0) != 0) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    // The user's environment is outside text: a report must stay valid JSON whatever it holds.
    vars[valid_utf8(kv.substr(0, eq))] = valid_utf8(kv.substr(eq + 1));
  }
  return vars;
}

}  // namespace

const std::vector<std::string>& gpu_environment_keys() {
  static const std::vector<std::string> keys{"name",         "count",        "driver",
                                             "cuda_runtime", "nccl_version", "cublas_version"};
  return keys;
}

void set_gpu_environment_provider(std::function<nlohmann::json()> provider) {
  std::lock_guard<std::mutex> lock(provider_mutex);
  gpu_provider() = std::move(provider);
}

nlohmann::json collect_environment() {
  json gpu = json::object();
  for (const std::string& key : gpu_environment_keys()) gpu[key] = nullptr;
  std::function<json()> provider;
  {
    std::lock_guard<std::mutex> lock(provider_mutex);
    provider = gpu_provider();
  }
  if (provider) {
    const json filled = provider();
    if (!filled.is_object()) {
      throw std::logic_error("GPU environment provider must return an object, not " +
                             filled.dump());
    }
    for (const auto& [key, value] : filled.items()) {
      const auto& keys = gpu_environment_keys();
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        throw std::logic_error("GPU environment provider returned unknown key \"" + key + "\"");
      }
      gpu[key] = value;
    }
  }
  return {{"host", host_name()},
          {"cpu", {{"model", cpu_model()}, {"cores", std::thread::hardware_concurrency()}}},
          {"os", os_info()},
#ifdef __VERSION__
          {"compiler", __VERSION__},
#else
          {"compiler", nullptr},
#endif
          {"bih", {{"version", BIH_VERSION}, {"commit", BIH_GIT_COMMIT}}},
          {"nccl_env", nccl_variables()},
          {"gpu", std::move(gpu)}};
}

}  // namespace bih
