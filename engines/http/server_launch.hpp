// server_launch.hpp: one launched server's life: a free port, the model handed over, the command
// the profile maps the scenario to, readiness with a timeout, its output in the work folder, and
// its whole process group stopped on every path.
#pragma once

#include <sys/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "spec/scenario.hpp"
#include "spec/server_profile.hpp"

namespace bih {

class LaunchedServer {
 public:
  virtual ~LaunchedServer() = default;  // stops the server (its process group), waits for it
  virtual const std::string& base_url() const = 0;  // "http://127.0.0.1:PORT"
  virtual const ServerLaunch& launch() const = 0;   // what was run
  virtual const ServerProfile& profile() const = 0;
  // For the report: command line, environment, version and resolved settings as the server gave
  // them, the log file.
  virtual nlohmann::json details() const = 0;
  // Why the server is no longer usable ("exited with status 1", with the log's tail); "" while
  // it runs. The HTTP engine adds it to any request failure.
  virtual std::string failure() const = 0;
  virtual std::string log_tail(int lines = 20) const = 0;
};

struct LaunchSettings {
  double stop_grace_s = 10;  // SIGTERM to SIGKILL when the server is stopped
  int attempts = 3;          // launches on fresh ports while the server says its port is taken
};

// Starts scenario s's server (s.engine.profile) with its output appended to work_dir/server.log,
// the knobs file (when the profile has knobs_file) at work_dir/knobs.json. Throws
// UnsupportedError when the profile cannot honour a knob, its program is not found or the
// machine has fewer GPUs than it needs; InfraError (quoting the log's tail) when the server
// exits, or is not ready within the timeout (engine.ready_timeout_s, else the profile's), or bih
// is interrupted (SIGINT/SIGTERM) meanwhile.
std::unique_ptr<LaunchedServer> launch_server(const Scenario& s, const std::string& work_dir,
                                              const LaunchSettings& settings = {});

// The profile of scenario s (s.engine.profile, relative to s.source_file). InputError.
ServerProfile scenario_server_profile(const Scenario& s);

// What launch_server would run (the port shown as "{port}", the work folder as "{work_dir}", the
// model at the path bih would hand it over at, nothing exported), for `bih run --dry-run`.
ServerLaunch planned_server_launch(const Scenario& s);

}  // namespace bih
