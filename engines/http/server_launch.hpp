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

// Starts scenario s's server (s.engine.profile) with its output in work_dir/server.log. Throws
// UnsupportedError when the profile cannot honour a knob, InfraError (quoting the log's tail)
// when the server exits, or is not ready within the timeout.
std::unique_ptr<LaunchedServer> launch_server(const Scenario& s, const std::string& work_dir);

// What launch_server would run (the port shown as "{port}"), for `bih run --dry-run`.
ServerLaunch planned_server_launch(const Scenario& s);

}  // namespace bih
