// server_launch.cpp: one launched server's life (server_launch.hpp): the profile mapped, the
// program and GPUs checked, the model handed over, the knobs file written, the process started,
// readiness polled, what the server says of itself read, and the group stopped at the end.
#include "engines/http/server_launch.hpp"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/atomic_file.hpp"
#include "base/child_process.hpp"
#include "base/utf8.hpp"
#include "engines/engine_protocol.hpp"
#include "engines/http/server_process.hpp"
#include "engines/model_handoff.hpp"

namespace bih {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kTailLines = 20;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The log's last lines, each cut and repaired (they reach a report), indented under a message.
std::string quoted_tail(const std::string& log, int lines) {
  std::string text = tail_of_file(log, lines);
  std::string out;
  size_t from = 0;
  while (from < text.size()) {
    const size_t nl = text.find('\n', from);
    const std::string line = text.substr(from, nl == std::string::npos ? nl : nl - from);
    const std::string_view kept = cut_utf8(line, 300);
    out += "\n  | " + valid_utf8(kept) + (kept.size() < line.size() ? "..." : "");
    if (nl == std::string::npos) break;
    from = nl + 1;
  }
  return out.empty() ? " (the log is empty)" : out;
}

// Whether what the server wrote since `from` says its port was taken (vLLM/uvicorn and SGLang:
// "[Errno 98] Address already in use"; llama-server: "couldn't bind HTTP server socket").
bool says_address_in_use(const std::string& log, std::streamoff from) {
  std::ifstream in(log, std::ios::binary);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > (256u << 10)) text = text.substr(text.size() - (256u << 10));
  text = lower(text);
  for (const char* needle :
       {"address already in use", "eaddrinuse", "couldn't bind", "could not bind"}) {
    if (text.find(needle) != std::string::npos) return true;
  }
  return false;
}

std::streamoff file_size_of(const std::string& path) {
  std::error_code ec;
  const auto n = fs::file_size(path, ec);
  return ec ? 0 : static_cast<std::streamoff>(n);
}

struct Answer {
  int status = 0;  // 0: no answer (refused, timed out)
  std::string body;
  std::string error;  // why there was no answer
};

Answer ask(const std::string& host, int port, const HttpEndpoint& e, double timeout_s) {
  httplib::Client client(host, port);
  const auto usec = static_cast<time_t>(timeout_s * 1e6);
  client.set_connection_timeout(usec / 1000000, usec % 1000000);
  client.set_read_timeout(usec / 1000000, usec % 1000000);
  client.set_write_timeout(usec / 1000000, usec % 1000000);
  httplib::Result r =
      e.method == "POST"
          ? client.Post(e.path.c_str(), e.body.is_null() ? "" : e.body.dump(), "application/json")
          : client.Get(e.path.c_str());
  Answer a;
  if (!r) {
    a.error = httplib::to_string(r.error());
    return a;
  }
  a.status = r->status;
  a.body = r->body;
  return a;
}

// What an endpoint answered, for the report: its JSON, or its text quoted.
json recorded(const Answer& a, const HttpEndpoint& e) {
  json out = {{"endpoint", e.method + " " + e.path}, {"status", a.status}};
  if (a.status == 0) {
    out["error"] = a.error;
    return out;
  }
  try {
    out["body"] = json::parse(a.body);
  } catch (const json::exception&) {
    out["text"] = protocol::quote_text(a.body, 4000);
  }
  return out;
}

ServerVars vars_for(const Scenario& s, const std::string& work_dir, int port,
                    const std::string& model_path) {
  ServerVars v;
  v.port = port;
  v.model_path = model_path;
  v.work_dir = work_dir;
  v.knobs_file = (fs::path(work_dir) / "knobs.json").string();
  try {
    v.bih = self_executable();
  } catch (const InfraError&) {
    v.bih = "bih";
  }
  (void)s;
  return v;
}

std::string engine_name(const Scenario& s, const ServerProfile& p) {
  return s.engine.name.empty() ? p.name : s.engine.name;
}

class Launched final : public LaunchedServer {
 public:
  Launched(const Scenario& s, const std::string& work_dir, const LaunchSettings& settings)
      : settings_(settings) {
    profile_ = scenario_server_profile(s);
    const std::string name = engine_name(s, profile_);
    log_ = (fs::path(work_dir) / "server.log").string();

    // Refusals first, before anything is exported or started.
    Scenario as_served = s;
    as_served.engine.model_format = profile_.model_format;
    ServerLaunch probe = map_server_launch(
        profile_, as_served, vars_for(s, work_dir, 0, handed_off_model_path(as_served)));
    if (!probe.unsupported.empty()) throw UnsupportedError(probe.unsupported);
    std::map<std::string, std::string> env = probe.env;
    const char* our_path = std::getenv("PATH");
    const std::string path = env.count("PATH") != 0 ? env["PATH"] : our_path ? our_path : "";
    program_ = find_program(probe.argv[0], path);
    if (program_.empty()) {
      throw UnsupportedError(fmt::format(
          "engine {}: program '{}' not found {} (profile {}; install the server, or put it in "
          "PATH)",
          name, probe.argv[0],
          probe.argv[0].find('/') != std::string::npos ? "or not executable" : "in PATH",
          profile_.file));
    }
    if (!probe.check.empty()) run_check(probe, path, work_dir, name);
    if (probe.gpus > 0) {
      const int gpus = visible_gpu_count();
      if (gpus < probe.gpus) {
        throw UnsupportedError(fmt::format(
            "engine {}: the server needs {} GPU{} (profile {}: gpus {}), this machine has {} "
            "(counted /dev/nvidiaN, limited by CUDA_VISIBLE_DEVICES)",
            name, probe.gpus, probe.gpus == 1 ? "" : "s", profile_.file, profile_.gpus, gpus));
      }
    }

    std::string notice;
    model_ = hand_off_model(as_served, &notice);
    if (!notice.empty()) model_notice_ = notice;
    if (profile_.knobs_file) {
      write_file_atomically(vars_for(s, work_dir, 0, model_.path).knobs_file,
                            s.knobs_json().dump(2) + "\n");
    }
    const double ready_timeout =
        s.engine.ready_timeout_s > 0 ? s.engine.ready_timeout_s : profile_.ready_timeout_s;
    for (int attempt = 1;; ++attempt) {
      port_ = free_port();
      launch_ = map_server_launch(profile_, as_served, vars_for(s, work_dir, port_, model_.path));
      base_url_ = fmt::format("http://{}:{}", host_, port_);
      const std::streamoff log_from = file_size_of(log_);
      {
        std::ofstream note(log_, std::ios::app);
        note << "---- bih: starting (attempt " << attempt << ", port " << port_ << ")\n";
      }
      process_ =
          std::make_unique<ServerProcess>(program_, launch_.argv, launch_.env, work_dir, log_);
      const std::string why_not = wait_ready(ready_timeout, name);
      if (why_not.empty()) break;
      const bool port_taken = process_->exited() && says_address_in_use(log_, log_from);
      process_->stop(settings_.stop_grace_s);
      if (port_taken && attempt < settings_.attempts) continue;
      throw InfraError(fmt::format("engine {}: {}; the last lines of {}:{}", name, why_not, log_,
                                   quoted_tail(log_, kTailLines)));
    }
    if (!profile_.version.empty()) {
      version_ = recorded(ask(host_, port_, profile_.version, 10), profile_.version);
    }
    if (!profile_.resolved.empty()) {
      resolved_ = recorded(ask(host_, port_, profile_.resolved, 10), profile_.resolved);
    }
  }

  ~Launched() override {
    if (process_) process_->stop(settings_.stop_grace_s);
  }

  const std::string& base_url() const override { return base_url_; }
  const ServerLaunch& launch() const override { return launch_; }
  const ServerProfile& profile() const override { return profile_; }

  json details() const override {
    json d = {{"profile", profile_.file},
              {"command", launch_.argv},
              {"program", program_},
              {"env", launch_.env},
              {"request_fields", launch_.request_fields},
              {"served_model", launch_.served_model},
              {"base_url", base_url_},
              {"pid", process_ ? process_->pid() : -1},
              {"log", log_},
              {"model_format", model_.format},
              {"model_path", model_.path}};
    if (!version_.is_null()) d["version"] = version_;
    if (!resolved_.is_null()) d["resolved"] = resolved_;
    if (model_notice_) d["model_cache_notice"] = *model_notice_;
    return d;
  }

  std::string failure() const override {
    std::string how;
    if (!process_ || !process_->exited(&how)) return "";
    return fmt::format("the server (pid {}) {}; the last lines of {}:{}", process_->pid(), how,
                       log_, quoted_tail(log_, kTailLines));
  }

  std::string log_tail(int lines) const override { return tail_of_file(log_, lines); }

 private:
  // "" once the ready endpoint answers 200; else why not (exited, timed out, interrupted).
  std::string wait_ready(double timeout_s, const std::string& name) {
    const auto start = std::chrono::steady_clock::now();
    auto elapsed = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    std::string last = "no answer yet";
    int delay_ms = 20;
    while (true) {
      std::string how;
      if (process_->exited(&how)) {
        return fmt::format("the server {} before it was ready ({} {} answered: {})", how,
                           profile_.ready.method, profile_.ready.path, last);
      }
      if (interrupt_signal() != 0) {
        return fmt::format("bih was interrupted (signal {}) while server {} was starting",
                           interrupt_signal(), name);
      }
      if (elapsed() > timeout_s) {
        return fmt::format(
            "the server was not ready within {:g} s ({} {} did not answer 200; last: {})",
            timeout_s, profile_.ready.method, profile_.ready.path, last);
      }
      const Answer a = ask(host_, port_, profile_.ready, 2);
      if (a.status == 200) return "";
      last = a.status == 0 ? a.error : fmt::format("status {}", a.status);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      delay_ms = std::min(delay_ms * 2, 250);
    }
  }

  // The profile's check: `unsupported` with what it said when the server is not installed.
  void run_check(const ServerLaunch& probe, const std::string& path, const std::string& work_dir,
                 const std::string& name) {
    std::vector<std::string> argv = probe.check;
    const std::string program = find_program(argv[0], path);
    const std::string shown = fmt::format("{}", fmt::join(probe.check, " "));
    if (program.empty()) {
      throw UnsupportedError(
          fmt::format("engine {}: program '{}' of the check `{}` not found in "
                      "PATH (profile {})",
                      name, argv[0], shown, profile_.file));
    }
    argv[0] = program;
    const std::string log = (fs::path(work_dir) / "server-check.log").string();
    std::string out;
    const ChildResult r = run_child(argv, log, 120, [&](const std::string& line) {
      if (out.size() < 2000) out += line + "\n";
    });
    if (r.interrupted)
      throw InfraError("bih was interrupted during the server check `" + shown + "`");
    if (r.ok()) return;
    throw UnsupportedError(fmt::format(
        "engine {}: the server is not installed here: its check `{}` {} (profile {}):{}", name,
        shown, r.describe(), profile_.file, quoted_tail(log, 6)));
  }

  LaunchSettings settings_;
  ServerProfile profile_;
  ServerLaunch launch_;
  protocol::ModelHandle model_;
  std::optional<std::string> model_notice_;
  std::string program_;
  std::string log_;
  std::string host_ = "127.0.0.1";
  int port_ = 0;
  std::string base_url_;
  std::unique_ptr<ServerProcess> process_;
  json version_;
  json resolved_;
};

}  // namespace

ServerProfile scenario_server_profile(const Scenario& s) {
  return load_server_profile(s.engine.profile, s.source_file);
}

std::unique_ptr<LaunchedServer> launch_server(const Scenario& s, const std::string& work_dir,
                                              const LaunchSettings& settings) {
  return std::make_unique<Launched>(s, work_dir, settings);
}

ServerLaunch planned_server_launch(const Scenario& s) {
  const ServerProfile p = scenario_server_profile(s);
  Scenario as_served = s;
  as_served.engine.model_format = p.model_format;
  ServerVars v = vars_for(s, "{work_dir}", 0, handed_off_model_path(as_served));
  v.knobs_file = "{work_dir}/knobs.json";
  return map_server_launch(p, as_served, v);
}

}  // namespace bih
