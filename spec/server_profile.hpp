// server_profile.hpp: how bih launches a server under test (engine.kind "http", engine.profile).
//
// A profile is a JSON file (bih.server-profile/1, docs/server-profiles.md) shipped in that
// engine's folder (adapters/vllm/vllm.profile.json, adapters/sglang/sglang.profile.json,
// adapters/llama-cpp/llama-server.profile.json, adapters/bih/bih.profile.json) or written by a
// user: the launch command and environment as templates, the readiness check, the dialects it
// serves, how to empty its prefix cache, and for each scenario knob and engine option how it maps
// (arguments, environment, request fields) or why it is unsupported. A user adds a server without
// recompiling. Parsed and checked here, once: a bad profile is an InputError (exit 2) naming the
// file, the field and what would be valid.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "spec/scenario.hpp"

namespace bih {

struct HttpEndpoint {
  std::string method = "GET";  // GET | POST
  std::string path;            // "/health"
  nlohmann::json body;         // POST body; null: none
  bool empty() const { return path.empty(); }
};

struct ServerProfile {
  std::string file;  // where it was read from (absolute)
  std::string name;  // "vllm": the scenario id's engine=<name> unless engine.name says otherwise
  std::string model_format = "hf";   // what the server loads: hf | gguf
  std::vector<std::string> command;  // templates: "{port}", "{model.path}", "{env:NAME|x}"
  // Optional: a command (templates) that succeeds when the server is installed ("python3 -c
  // 'import sglang'"), run before the model is handed over; its failure is `unsupported`.
  std::vector<std::string> check;
  std::map<std::string, std::string> env;  // templates
  std::vector<std::string> dialects;       // the first is the default
  std::string served_model;                // the request's "model" field (template)
  HttpEndpoint ready;                      // 200 means ready
  double ready_timeout_s = 120;
  HttpEndpoint version;      // optional: the server's version, recorded
  HttpEndpoint resolved;     // optional: what the server says it resolved, recorded
  HttpEndpoint reset_cache;  // optional: empties the prefix cache
  bool knobs_file = false;   // every knob goes to the server in "{knobs_file}"
  // The GPUs the server needs: a knob's value ("parallel.tp": the scenario's tp, set or not) or
  // a count ("1"); "" for none. Fewer visible GPUs make the scenario `unsupported`.
  std::string gpus;
  nlohmann::json knobs = nlohmann::json::object();    // knob leaf -> mapping (docs)
  nlohmann::json options = nlohmann::json::object();  // engine.options key -> mapping
};

// A shipped profile's name ("vllm", "sglang", "llama-server", "bih") or a path to a profile file
// (relative to the scenario file `relative_to`). Throws InputError naming the file and field.
ServerProfile load_server_profile(const std::string& name_or_path, const std::string& relative_to);

// The shipped profiles' names, for messages.
std::vector<std::string> shipped_profile_names();

// What a launch fills into the templates.
struct ServerVars {
  int port = 0;
  std::string host = "127.0.0.1";
  std::string model_path;  // the handed-over model (hf folder or gguf file)
  std::string work_dir;    // the scenario's work folder
  std::string knobs_file;  // a JSON file of the scenario's knobs (the init message's "knobs")
  std::string bih;         // this bih executable
};

// The launch of scenario s under profile p: argv, environment, request fields; or why the profile
// cannot honour a knob the scenario set (`unsupported`, then the rest is empty).
struct ServerLaunch {
  std::vector<std::string> argv;
  std::vector<std::string> check;          // the profile's check, filled in; empty: none
  std::map<std::string, std::string> env;  // added to bih's environment
  nlohmann::json request_fields = nlohmann::json::object();  // merged into every request body
  std::string served_model;
  std::string unsupported;
  int gpus = 0;  // the GPUs it needs (the profile's "gpus" resolved for this scenario)
};
// Pure: reads no file and starts nothing (the mapping tests call it directly). Argument order:
// the profile's command, each set knob's arguments (Scenario::knobs_set order), each JSON-valued
// argument assembled from knobs ("--compilation-config" '{...}'), each engine.options entry's
// arguments (key order), then engine.args as they are. Environment: the profile's, the knobs',
// the options', then engine.env (the user's word last).
ServerLaunch map_server_launch(const ServerProfile& p, const Scenario& s, const ServerVars& vars);

// The folders searched for shipped profiles, in order: $BIH_PROFILE_PATH's (colon-separated),
// then adapters/ in the executable's folder (a build folder's link to the source's, which CMake
// makes), beside it and one above it (build/bih, build/tests/...), then ../share/bih/adapters;
// each folder once.
std::vector<std::string> profile_search_dirs();

}  // namespace bih
