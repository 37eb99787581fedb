// dry_run.cpp: `bih run --dry-run` (dry_run.hpp).
#include "harness/dry_run.hpp"

#include <fmt/core.h>

#include "engines/registry.hpp"
#include "harness/solo_lanes.hpp"
#if BIH_HAVE_HTTP
#include "engines/http/server_launch.hpp"
#endif

namespace bih {
namespace {

// A word as a POSIX shell would need it to read back the same.
std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                          "0123456789_-./:=@%+,{}") == std::string::npos;
  if (plain) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& word : argv) out += (out.empty() ? "" : " ") + shell_word(word);
  return out;
}

void add_env(std::string& out, const std::map<std::string, std::string>& env) {
  for (const auto& [key, value] : env) out += "  env: " + key + "=" + shell_word(value) + "\n";
}

std::string engine_lines(const Scenario& s) {
  const EngineSpec& e = s.engine;
  std::string out;
  if (e.is_bih()) {
    return fmt::format("  engine: kind bih, name bih, backend {}\n", to_string(s.backend));
  }
  if (!e.is_http()) {
    out += fmt::format("  engine: kind command, name {}\n", e.name);
    out += "  command: " + command_line(e.command) + "\n";
    out += "  cwd: " + e.cwd + "\n";
    add_env(out, e.env);
    return out;
  }
  out += fmt::format("  engine: kind http, name {}, dialect {}, batching {}\n", e.name, e.dialect,
                     e.batching);
  if (!e.url.empty()) {
    out += "  url: " + e.url + " (a running server: bih starts nothing)\n";
    if (!e.reset_cache.empty()) out += "  reset_cache: " + e.reset_cache + "\n";
    return out;
  }
  out += "  profile: " + e.profile + "\n";
#if BIH_HAVE_HTTP
  const ServerLaunch launch = planned_server_launch(s);
  if (!launch.unsupported.empty()) {
    out += "  launch: none, " + launch.unsupported + "\n";
    return out;
  }
  out += "  command: " + command_line(launch.argv) + "\n";
  add_env(out, launch.env);
  if (!launch.served_model.empty()) out += "  served_model: " + launch.served_model + "\n";
  if (!launch.request_fields.empty()) {
    out += "  request fields: " + launch.request_fields.dump() + "\n";
  }
#else
  out += "  launch: none, this bih was built without HTTP support\n";
#endif
  return out;
}

}  // namespace

std::string dry_run_text(const std::vector<Scenario>& scenarios) {
  std::string out;
  for (const Scenario& s : scenarios) {
    out += s.id() + "\n" + engine_lines(s);
    if (s.plan.solo_lanes > 1) {
      const int lanes = solo_lanes_for(s, s.plan.solo_lanes);
      out += lanes > 1 ? fmt::format("  bs=1: up to {} engines at once (plan.solo_lanes)\n", lanes)
                       : fmt::format(
                             "  bs=1: one engine (plan.solo_lanes {} multiplies bih's own "
                             "engine with emulated ranks only)\n",
                             s.plan.solo_lanes);
    }
    try {
      const std::string why = EngineRegistry::instance().unsupported_reason(s);
      if (!why.empty()) out += "  would be unsupported: " + why + "\n";
    } catch (const std::exception& e) {
      out += std::string("  cannot tell whether it can run here: ") + e.what() + "\n";
    }
  }
  out += fmt::format("{} scenario{}; nothing was run (--dry-run)\n", scenarios.size(),
                     scenarios.size() == 1 ? "" : "s");
  return out;
}

}  // namespace bih
