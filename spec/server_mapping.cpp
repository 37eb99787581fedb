// server_mapping.cpp: a scenario under a server profile -> the server's argv, environment and
// request fields (map_server_launch, server_profile.hpp). Pure: the mapping tests assert its
// output for every scenario of the shipped files, where the servers themselves cannot run.
//
// A knob the scenario set is honoured exactly or refused: a profile that does not map it, a value
// its table lacks, or an "unsupported" entry makes the launch `unsupported` with the reason;
// never a server run with its own default in the knob's place.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "spec/server_profile.hpp"
#include "spec/server_template.hpp"

namespace bih {
using nlohmann::json;

namespace {

// A knob value as template text: strings as they are, everything else as compact JSON.
std::string text_of(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

struct Mapped {
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  json request = json::object();
  std::vector<std::pair<std::string, json>> json_args;  // in order of first use
  std::string unsupported;
};

json expand_request(const json& j, const TemplateValues& tv, const json& value) {
  if (j.is_string()) {
    if (j == "{value}") return value;  // the knob's JSON value, its type kept
    return expand_template(j.get<std::string>(), tv);
  }
  json out = j;
  if (j.is_object()) {
    for (auto& [k, v] : out.items()) v = expand_request(j[k], tv, value);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) out[i] = expand_request(j[i], tv, value);
  }
  return out;
}

void set_at_path(json& target, const std::string& path, const json& value) {
  json* at = &target;
  size_t from = 0;
  while (true) {
    const size_t dot = path.find('.', from);
    const std::string key = path.substr(from, dot == std::string::npos ? dot : dot - from);
    if (dot == std::string::npos) {
      (*at)[key] = value;
      return;
    }
    json& next = (*at)[key];
    if (!next.is_object()) next = json::object();
    at = &next;
    from = dot + 1;
  }
}

// Applies mapping `m` for `what` ("knob parallel.tp" / "option threads") with `value`; returns
// false with out.unsupported set when the profile refuses it.
bool apply(const json& m, const std::string& what, const json& original, json value,
           TemplateValues tv, Mapped& out) {
  const std::string shown = what + "=" + text_of(original);
  if (const auto it = m.find("unsupported"); it != m.end()) {
    out.unsupported = shown + ": " + it->get<std::string>();
    return false;
  }
  const std::string key = text_of(original);
  if (const auto it = m.find("map"); it != m.end()) {
    const auto hit = it->find(key);
    if (hit == it->end()) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : it->items()) keys.push_back(k);
      out.unsupported = fmt::format("{}: the profile maps only {}", shown, fmt::join(keys, ", "));
      return false;
    }
    value = *hit;
  }
  tv.value = text_of(value);
  if (const auto it = m.find("args"); it != m.end()) {
    for (const json& a : *it) {
      if (a == "{value...}") {
        if (value.is_array()) {
          for (const json& e : value) out.args.push_back(text_of(e));
        } else {
          out.args.push_back(text_of(value));
        }
      } else {
        out.args.push_back(expand_template(a.get<std::string>(), tv));
      }
    }
  }
  if (const auto it = m.find("env"); it != m.end()) {
    for (const auto& [k, v] : it->items()) {
      out.env[expand_template(k, tv)] = expand_template(v.get<std::string>(), tv);
    }
  }
  if (const auto it = m.find("request"); it != m.end()) {
    for (const auto& [k, v] : it->items()) out.request[k] = expand_request(v, tv, value);
  }
  if (const auto it = m.find("json_arg"); it != m.end()) {
    const std::string arg = it->get<std::string>();
    auto slot = std::find_if(out.json_args.begin(), out.json_args.end(),
                             [&](const auto& e) { return e.first == arg; });
    if (slot == out.json_args.end()) {
      out.json_args.emplace_back(arg, json::object());
      slot = out.json_args.end() - 1;
    }
    set_at_path(slot->second, m["path"].get<std::string>(), value);
  }
  if (const auto it = m.find("values"); it != m.end()) {
    auto sub = it->find(key);
    if (sub == it->end()) sub = it->find("*");
    if (sub == it->end()) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : it->items()) keys.push_back(k);
      out.unsupported =
          fmt::format("{}: the profile has forms only for {}", shown, fmt::join(keys, ", "));
      return false;
    }
    return apply(*sub, what, original, value, tv, out);
  }
  return true;
}

}  // namespace

ServerLaunch map_server_launch(const ServerProfile& p, const Scenario& s, const ServerVars& vars) {
  TemplateValues tv;
  tv.vars = {{"port", vars.port > 0 ? std::to_string(vars.port) : std::string("{port}")},
             {"host", vars.host},
             {"model.path", vars.model_path},
             {"work_dir", vars.work_dir},
             {"knobs_file", vars.knobs_file},
             {"bih", vars.bih},
             {"limits.max_model_len", std::to_string(s.plan.max_model_len)},
             {"limits.max_tokens", std::to_string(s.plan.max_tokens)},
             {"limits.max_batch", std::to_string(*std::max_element(s.plan.batch_sizes.begin(),
                                                                   s.plan.batch_sizes.end()))}};
  ServerLaunch launch;
  launch.served_model =
      s.engine.served_model.empty() ? expand_template(p.served_model, tv) : s.engine.served_model;
  tv.vars["served_model"] = launch.served_model;
  if (!p.gpus.empty()) launch.gpus = p.gpus == "parallel.tp" ? s.tp : std::stoi(p.gpus);

  const std::string engine = s.engine.name.empty() ? p.name : s.engine.name;
  auto refuse = [&](const std::string& why) {
    ServerLaunch refused;
    refused.served_model = launch.served_model;
    refused.gpus = launch.gpus;
    refused.unsupported = fmt::format("engine {}: {} (profile {})", engine, why, p.file);
    return refused;
  };

  Mapped mapped;
  const json knobs = s.knobs_json();
  for (const std::string& knob : s.knobs_set) {
    const json& value = knobs.at(knob);
    TemplateValues ktv = tv;
    const json* m = nullptr;
    if (const auto it = p.knobs.find(knob); it != p.knobs.end()) {
      m = &*it;
    } else if (knob.rfind("nccl_env.", 0) == 0) {
      if (const auto wild = p.knobs.find("nccl_env.*"); wild != p.knobs.end()) {
        m = &*wild;
        ktv.name = knob.substr(9);
      }
    }
    if (m == nullptr) {
      if (p.knobs_file) continue;  // the server reads every knob from the knobs file
      return refuse(fmt::format(
          "knob {}={}: the profile does not map it, and the server would run with its own "
          "default instead",
          knob, text_of(value)));
    }
    if (!apply(*m, "knob " + knob, value, value, ktv, mapped)) return refuse(mapped.unsupported);
  }
  for (const auto& [key, value] : s.engine.options.items()) {
    const auto it = p.options.find(key);
    if (it == p.options.end()) {
      return refuse(fmt::format("engine.options.{}={}: the profile maps no such option", key,
                                text_of(value)));
    }
    if (!apply(*it, "engine.options." + key, value, value, tv, mapped)) {
      return refuse(mapped.unsupported);
    }
  }

  for (const std::string& a : p.command) launch.argv.push_back(expand_template(a, tv));
  for (const std::string& a : p.check) launch.check.push_back(expand_template(a, tv));
  for (auto& a : mapped.args) launch.argv.push_back(std::move(a));
  for (const auto& [arg, value] : mapped.json_args) {
    launch.argv.push_back(arg);
    launch.argv.push_back(value.dump());
  }
  for (const auto& a : s.engine.args) launch.argv.push_back(a);
  for (const auto& [k, v] : p.env) launch.env[expand_template(k, tv)] = expand_template(v, tv);
  for (const auto& [k, v] : mapped.env) launch.env[k] = v;
  for (const auto& [k, v] : s.engine.env) launch.env[k] = v;
  launch.request_fields = std::move(mapped.request);
  return launch;
}

}  // namespace bih
