// test_server_profiles.cpp: server profiles (spec/server_profile.hpp): the shipped four load, and
// map every scenario of the shipped GPU scenario files to the documented command line (vLLM:
// docs.vllm.ai engine_args and CompilationConfig; SGLang: docs.sglang.io server_arguments; cited
// in the profiles), which cannot be run here; llama-server's and bih's forms; templates; and each
// fault of a profile file an InputError naming the file, the field and what is valid.
#include <gtest/gtest.h>

#include <fstream>

#include "base/json_file.hpp"
#include "run_bih.hpp"
#include "spec/scenario_file.hpp"
#include "spec/server_profile.hpp"
#include "test_files.hpp"
#include "test_util.hpp"

namespace bih::test_server_profiles {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::kSource;
using Argv = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

ServerVars vars() {
  ServerVars v;
  v.port = 8000;
  v.model_path = "/cache/models/qwen3.hf";
  v.work_dir = "/work/s1";
  v.knobs_file = "/work/s1/knobs.json";
  v.bih = "/opt/bih/bih";
  return v;
}

// The scenarios of a shipped http scenario file. Their engine section (kind http, batching) is
// scenario.cpp's to parse; it is taken out here, since batching does not reach the command line,
// and the engine is set as that file sets it.
std::vector<Scenario> shipped_scenarios(const std::string& file, const std::string& profile,
                                        size_t* batching_values) {
  auto j = parse_json_file<nlohmann::ordered_json>(kSource + "/scenarios/" + file);
  EXPECT_EQ(j["base"]["engine"], nlohmann::ordered_json({{"kind", "http"}, {"profile", profile}}));
  j["base"].erase("engine");
  *batching_values = j["axes"]["engine.batching"].size();
  j["axes"].erase("engine.batching");
  const fs::path dir = testing::fresh_dir("profiles-" + profile);
  std::ofstream(dir / file) << j.dump();
  std::vector<Scenario> out = load_scenarios((dir / file).string()).scenarios;
  for (Scenario& s : out) {
    s.engine.kind = "http";
    s.engine.profile = profile;
  }
  return out;
}

const json* knob(const Scenario& s, const std::string& key) {
  static json knobs;
  knobs = s.knobs_json();
  return knobs.contains(key) ? &knobs[key] : nullptr;
}

TEST(ServerProfiles, TheShippedFourLoadFromTheSourceTree) {
  const std::map<std::string, std::string> where{
      {"vllm", "adapters/vllm/vllm.profile.json"},
      {"sglang", "adapters/sglang/sglang.profile.json"},
      {"llama-server", "adapters/llama-cpp/llama-server.profile.json"},
      {"bih", "adapters/bih/bih.profile.json"}};
  EXPECT_EQ(shipped_profile_names(), (Argv{"vllm", "sglang", "llama-server", "bih"}));
  for (const auto& name : shipped_profile_names()) {
    const ServerProfile p = load_server_profile(name, "/nowhere/s.json");
    EXPECT_EQ(p.name, name);
    EXPECT_EQ(fs::canonical(p.file), fs::canonical(kSource + "/" + where.at(name)));
  }
  EXPECT_EQ(load_server_profile("sglang", "").dialects, (Argv{"sglang", "openai"}));
  EXPECT_EQ(load_server_profile("llama-server", "").model_format, "gguf");
  EXPECT_TRUE(load_server_profile("bih", "").knobs_file);
  EXPECT_EQ(load_server_profile("vllm", "").reset_cache.path, "/reset_prefix_cache");
  EXPECT_EQ(load_server_profile("sglang", "").reset_cache.path, "/flush_cache");
  EXPECT_TRUE(load_server_profile("llama-server", "").reset_cache.empty());
}

TEST(ServerProfiles, BihProfilePathComesFirst) {
  const fs::path dir = testing::fresh_dir("profile-path");
  fs::create_directories(dir / "mine");
  std::ifstream in(kSource + "/adapters/bih/bih.profile.json");
  std::ofstream(dir / "mine" / "vllm.profile.json") << in.rdbuf();
  setenv("BIH_PROFILE_PATH", ("/nonexistent:" + dir.string()).c_str(), 1);
  const ServerProfile p = load_server_profile("vllm", "");
  unsetenv("BIH_PROFILE_PATH");
  EXPECT_EQ(p.file, (dir / "mine" / "vllm.profile.json").string());
  EXPECT_EQ(p.name, "bih");
}

TEST(ServerProfiles, EveryVllmScenarioMapsToTheDocumentedCommandLine) {
  size_t batching = 0;
  const auto scenarios = shipped_scenarios("issue-56370-vllm.json", "vllm", &batching);
  EXPECT_EQ(batching, 2u);
  ASSERT_EQ(scenarios.size(), 72u) << "3 SP cases x TP 3 x graphs 2 x prefix 2 x kernels 2";
  const ServerProfile p = load_server_profile("vllm", "");
  for (const Scenario& s : scenarios) {
    SCOPED_TRACE(s.id());
    const ServerLaunch l = map_server_launch(p, s, vars());
    ASSERT_EQ(l.unsupported, "");
    json compilation = {{"cudagraph_mode", s.graph_mode == GraphMode::full ? "FULL" : "NONE"},
                        {"pass_config", {{"enable_sp", s.sp_enabled}}}};
    if (knob(s, "sequence_parallel.min_tokens") != nullptr) {
      compilation["pass_config"]["sp_min_token_num"] = s.sp_min_tokens;
    }
    const Argv expected{"vllm",
                        "serve",
                        "/cache/models/qwen3.hf",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        "8000",
                        "--served-model-name",
                        "bih",
                        "--dtype",
                        "bfloat16",
                        "--seed",
                        "0",
                        "--skip-tokenizer-init",
                        "--max-model-len",
                        "512",
                        "--max-num-seqs",
                        "64",
                        "--tensor-parallel-size",
                        std::to_string(s.tp),
                        s.prefix_caching ? "--enable-prefix-caching" : "--no-enable-prefix-caching",
                        "--compilation-config",
                        compilation.dump()};
    EXPECT_EQ(l.argv, expected);
    EXPECT_EQ(l.env,
              (Env{{"VLLM_BATCH_INVARIANT", s.kernels == KernelFamily::invariant ? "1" : "0"}}));
    EXPECT_EQ(l.request_fields, json::object());
    EXPECT_EQ(l.gpus, s.tp);
    EXPECT_TRUE(l.check.empty());
  }
}

TEST(ServerProfiles, TheIssuesOwnCaseUnderVllmLiterally) {
  size_t batching = 0;
  const auto all = shipped_scenarios("issue-56370-vllm.json", "vllm", &batching);
  const auto it = std::find_if(all.begin(), all.end(), [](const Scenario& s) {
    return s.tp == 4 && s.sp_enabled && s.sp_min_tokens == 64 && s.graph_mode == GraphMode::full &&
           !s.prefix_caching && s.kernels == KernelFamily::invariant;
  });
  ASSERT_NE(it, all.end());
  const ServerLaunch l = map_server_launch(load_server_profile("vllm", ""), *it, vars());
  EXPECT_EQ(l.argv[l.argv.size() - 1],
            R"({"cudagraph_mode":"FULL","pass_config":{"enable_sp":true,"sp_min_token_num":64}})");
  EXPECT_EQ(l.argv[l.argv.size() - 2], "--compilation-config");
  EXPECT_EQ(l.argv[l.argv.size() - 3], "--no-enable-prefix-caching");
  EXPECT_EQ(l.env.at("VLLM_BATCH_INVARIANT"), "1");
}

TEST(ServerProfiles, VllmMapsTheOtherKnobsAsTheOfflineAdapterDoes) {
  Scenario s;
  s.knobs_set = {"cudagraph.capture_sizes", "chunked_prefill.max_tokens",
                 "prefix_caching.block_size", "nccl_env.NCCL_PROTO", "cudagraph.mode"};
  s.capture_sizes = {1, 2, 4};
  s.chunked_prefill_max_tokens = 256;
  s.block_size = 32;
  s.nccl_env = {{"NCCL_PROTO", "Simple"}};
  s.graph_mode = GraphMode::piecewise;
  s.engine.args = {"--gpu-memory-utilization", "0.5"};
  s.engine.env = {{"NCCL_PROTO", "LL"}};  // the user's word is last
  const ServerLaunch l = map_server_launch(load_server_profile("vllm", ""), s, vars());
  ASSERT_EQ(l.unsupported, "");
  const Argv tail(l.argv.end() - 9, l.argv.end());
  EXPECT_EQ(tail, (Argv{"--enable-chunked-prefill", "--max-num-batched-tokens", "256",
                        "--block-size", "32", "--compilation-config",
                        R"({"cudagraph_capture_sizes":[1,2,4],"cudagraph_mode":"PIECEWISE"})",
                        "--gpu-memory-utilization", "0.5"}));
  EXPECT_EQ(l.env, (Env{{"NCCL_PROTO", "LL"}}));
  s.knobs_set = {"chunked_prefill.max_tokens"};
  s.chunked_prefill_max_tokens = 0;
  s.engine.args.clear();
  EXPECT_EQ(map_server_launch(load_server_profile("vllm", ""), s, vars()).argv.back(),
            "--no-enable-chunked-prefill");
}

TEST(ServerProfiles, EverySglangScenarioMapsToTheDocumentedCommandLine) {
  size_t batching = 0;
  const auto scenarios = shipped_scenarios("issue-56370-sglang.json", "sglang", &batching);
  EXPECT_EQ(batching, 2u);
  ASSERT_EQ(scenarios.size(), 12u) << "TP 3 x kernels 2 x prefix 2";
  const ServerProfile p = load_server_profile("sglang", "");
  for (const Scenario& s : scenarios) {
    SCOPED_TRACE(s.id());
    const ServerLaunch l = map_server_launch(p, s, vars());
    ASSERT_EQ(l.unsupported, "");
    Argv expected{"python3",
                  "-m",
                  "sglang.launch_server",
                  "--model-path",
                  "/cache/models/qwen3.hf",
                  "--host",
                  "127.0.0.1",
                  "--port",
                  "8000",
                  "--served-model-name",
                  "bih",
                  "--dtype",
                  "bfloat16",
                  "--random-seed",
                  "0",
                  "--skip-tokenizer-init",
                  "--context-length",
                  "512",
                  "--max-running-requests",
                  "64",
                  "--tp-size",
                  std::to_string(s.tp)};
    if (s.kernels == KernelFamily::invariant)
      expected.push_back("--enable-deterministic-inference");
    if (!s.prefix_caching) expected.push_back("--disable-radix-cache");
    EXPECT_EQ(l.argv, expected);
    EXPECT_EQ(l.env, Env{});
    EXPECT_EQ(l.check, (Argv{"python3", "-c", "import sglang"}));
    EXPECT_EQ(l.gpus, s.tp);
  }
}

TEST(ServerProfiles, SglangRefusesWhatItCannotDoSayingWhy) {
  const ServerProfile p = load_server_profile("sglang", "");
  Scenario s;
  s.knobs_set = {"sequence_parallel.enabled"};
  s.sp_enabled = true;
  const ServerLaunch l = map_server_launch(p, s, vars());
  EXPECT_TRUE(l.argv.empty());
  EXPECT_EQ(l.unsupported,
            "engine sglang: knob sequence_parallel.enabled=true: SGLang has no "
            "switch for sequence parallelism of a dense model's tensor-parallel "
            "all-reduce (vLLM's pass_config.enable_sp) (profile " +
                p.file + ")");
  s.knobs_set = {"cudagraph.mode", "cudagraph.capture_sizes", "chunked_prefill.max_tokens"};
  s.graph_mode = GraphMode::none;
  s.capture_sizes = {1, 8};
  s.chunked_prefill_max_tokens = 0;
  const Argv argv = map_server_launch(p, s, vars()).argv;
  ASSERT_GE(argv.size(), 6u);
  EXPECT_EQ(Argv(argv.end() - 6, argv.end()), (Argv{"--disable-cuda-graph", "--cuda-graph-bs", "1",
                                                    "8", "--chunked-prefill-size", "-1"}));
}

TEST(ServerProfiles, LlamaServerOptionsAndRequestFields) {
  const ServerProfile p = load_server_profile("llama-server", "");
  Scenario s;
  s.engine.options = {{"threads", 2},
                      {"parallel", 64},
                      {"kv_unified", false},
                      {"cache_prompt", false},
                      {"ctx_size", 4096}};
  unsetenv("BIH_LLAMA_SERVER");
  ServerLaunch l = map_server_launch(p, s, vars());
  ASSERT_EQ(l.unsupported, "");
  // engine.options in key order: cache_prompt, ctx_size, kv_unified, parallel, threads.
  EXPECT_EQ(l.argv, (Argv{"llama-server", "-m", "/cache/models/qwen3.hf", "--host", "127.0.0.1",
                          "--port", "8000", "--alias", "bih", "--no-webui", "-s", "0", "-c", "4096",
                          "--no-kv-unified", "-np", "64", "-t", "2"}));
  EXPECT_EQ(l.request_fields, json({{"cache_prompt", false}}));
  setenv("BIH_LLAMA_SERVER", "/opt/llama/bin/llama-server", 1);
  s.engine.options = json::object();
  s.knobs_set = {"prefix_caching.enabled"};
  s.prefix_caching = true;
  l = map_server_launch(p, s, vars());
  unsetenv("BIH_LLAMA_SERVER");
  EXPECT_EQ(l.argv[0], "/opt/llama/bin/llama-server");
  EXPECT_EQ(l.request_fields, json({{"cache_prompt", true}}));
  s.knobs_set = {"kernels"};
  EXPECT_NE(map_server_launch(p, s, vars())
                .unsupported.find("knob kernels=invariant: llama.cpp has no switch"),
            std::string::npos);
  s.knobs_set = {};
  s.engine.options = {{"slots", 4}};
  EXPECT_NE(map_server_launch(p, s, vars())
                .unsupported.find("engine.options.slots=4: the profile maps no such option"),
            std::string::npos);
}

TEST(ServerProfiles, BihServeGetsEveryKnobThroughTheKnobsFile) {
  const ServerProfile p = load_server_profile("bih", "");
  Scenario s;
  s.knobs_set = {"parallel.tp", "collectives.all_reduce", "kernels"};
  s.tp = 4;
  const ServerLaunch l = map_server_launch(p, s, vars());
  ASSERT_EQ(l.unsupported, "");
  EXPECT_EQ(l.argv, (Argv{"/opt/bih/bih", "serve", "--knobs", "/work/s1/knobs.json", "--model",
                          "/cache/models/qwen3.hf", "--host", "127.0.0.1", "--port", "8000",
                          "--max-model-len", std::to_string(s.plan.max_model_len)}));
  EXPECT_EQ(l.served_model, "bih");
}

TEST(ServerProfiles, UnsetKnobsKeepTheServersDefaultsAndUnmappedOnesAreRefused) {
  const ServerProfile p = load_server_profile("vllm", "");
  Scenario s;
  s.tp = 8;  // not in knobs_set: vLLM keeps its own default, nothing is added
  ServerLaunch l = map_server_launch(p, s, vars());
  EXPECT_EQ(l.argv.back(), "64");  // --max-num-seqs 64 ends the profile's command
  EXPECT_EQ(l.env, Env{});
  s.knobs_set = {"collectives.reduce_scatter"};
  l = map_server_launch(p, s, vars());
  EXPECT_EQ(l.unsupported,
            "engine vllm: knob collectives.reduce_scatter=ring: the profile does "
            "not map it, and the server would run with its own default instead "
            "(profile " +
                p.file + ")");
  s.knobs_set = {"backend"};
  s.backend = Backend::cpu;
  EXPECT_NE(map_server_launch(p, s, vars())
                .unsupported.find("knob backend=cpu: this profile launches vLLM's GPU build"),
            std::string::npos);
}

// A profile file with `patch` merged into a valid one; the InputError its load throws.
std::string profile_error(const json& patch, const std::string& erase = "") {
  const fs::path dir = testing::fresh_dir("bad-profile");
  json j = {{"format", "bih.server-profile/1"},
            {"name", "x"},
            {"command", {"server", "--port", "{port}"}},
            {"dialects", {"openai"}},
            {"ready", {{"path", "/health"}}}};
  if (patch.is_object()) j.merge_patch(patch);
  if (!erase.empty()) j.erase(erase);
  std::ofstream(dir / "x.profile.json") << j.dump();
  const std::string file = (dir / "x.profile.json").string();
  const std::string e = testing::input_error_of(
      [&] { load_server_profile("x.profile.json", (dir / "s.json").string()); });
  EXPECT_EQ(e.rfind(file + ": at ", 0), 0u) << e;
  EXPECT_NE(e.find("; valid: "), std::string::npos) << e;
  return e.substr(std::min(e.size(), file.size() + 5));
}

TEST(ServerProfiles, EachFaultOfAProfileNamesTheFieldAndWhatIsValid) {
  auto starts = [](const std::string& e, const std::string& prefix) {
    EXPECT_EQ(e.substr(0, prefix.size()), prefix) << e;
  };
  starts(profile_error({}, "format"),
         "/: no \"format\"; valid: \"format\": \"bih.server-profile/1\"");
  starts(profile_error({{"format", "bih.server-profile/2"}}), "/format: format");
  starts(profile_error({{"colour", 1}}), "/colour: unknown key 'colour'");
  starts(profile_error({{"model_format", "onnx"}}),
         "/model_format: model format 'onnx'; valid: hf or gguf");
  starts(profile_error({{"command", json::array()}}), "/command: no command");
  starts(profile_error({{"command", {"server", "--port", "{prot}"}}}),
         "/command/2: unknown placeholder {prot} in '{prot}'; valid: {port}, {host}");
  starts(profile_error({{"command", {"server", "{value}"}}}),
         "/command/1: unknown placeholder {value}");
  starts(profile_error({{"command", {"server", "{port"}}}), "/command/1: a '{' without its '}'");
  starts(profile_error({{"env", {{"A", "{env:}"}}}}),
         "/env/A: placeholder {env:} names no environment variable");
  starts(profile_error({{"dialects", {"grpc"}}}),
         "/dialects/0: unknown dialect 'grpc'; valid: openai, sglang, llama.cpp");
  starts(profile_error({{"ready", {{"method", "PUT"}, {"path", "/h"}}}}),
         "/ready/method: method 'PUT'; valid: GET or POST");
  starts(profile_error({{"ready", {{"path", "health"}}}}),
         "/ready/path: path 'health' does not start with '/'");
  starts(profile_error({{"ready", {{"path", "/h"}, {"timeout_s", 0}}}}),
         "/ready/timeout_s: timeout 0");
  starts(profile_error({{"version", {{"path", "/v"}, {"timeout_s", 5}}}}),
         "/version/timeout_s: only the ready endpoint");
  starts(profile_error({}, "ready"), "/: no \"ready\"");
  starts(profile_error({{"gpus", "all"}}), "/gpus: gpus 'all'");
  starts(profile_error({{"knobs", {{"parallel.tpp", {{"args", {"-tp"}}}}}}}),
         "/knobs/parallel.tpp: 'parallel.tpp' is not a scenario knob");
  starts(profile_error({{"knobs", {{"plan.max_tokens", {{"args", {"-n"}}}}}}}),
         "/knobs/plan.max_tokens: 'plan.max_tokens' is not a scenario knob");
  starts(profile_error({{"knobs", {{"kernels", {{"argz", {"-k"}}}}}}}),
         "/knobs/kernels/argz: unknown key 'argz'");
  starts(profile_error({{"knobs", {{"kernels", {{"args", {"{name}"}}}}}}}),
         "/knobs/kernels/args/0: unknown placeholder {name}");
  starts(profile_error({{"knobs", {{"kernels", {{"unsupported", "no"}, {"args", {"-k"}}}}}}}),
         "/knobs/kernels/args: 'args' beside \"unsupported\"");
  starts(profile_error({{"knobs", {{"kernels", {{"json_arg", "--c"}}}}}}),
         "/knobs/kernels: json_arg and path go together");
  starts(profile_error({{"knobs", {{"kernels", {{"json_arg", "--c"}, {"path", "a..b"}}}}}}),
         "/knobs/kernels/path: path 'a..b'");
  starts(profile_error(
             {{"knobs", {{"kernels", {{"values", {{"vendor", {{"env", {{"A=B", "1"}}}}}}}}}}}}),
         "/knobs/kernels/values/vendor/env/A=B: 'A=B' is not an environment variable name");
  starts(profile_error({{"options", {{"threads", {{"request", {{"n", "{bogus}"}}}}}}}}),
         "/options/threads/request/n: unknown placeholder {bogus}");
}

TEST(ServerProfiles, AProfileNotFoundListsTheShippedNames) {
  const std::string e = testing::input_error_of([] { load_server_profile("tgi", "/x/s.json"); });
  EXPECT_EQ(
      e.rfind("/x/s.json: at /engine/profile: no profile 'tgi' (looked for tgi.profile.json in ",
              0),
      0u)
      << e;
  EXPECT_NE(e.find("BIH_PROFILE_PATH"), std::string::npos) << e;
  EXPECT_NE(e.find("valid: a shipped profile (vllm, sglang, llama-server, bih) or a profile file"),
            std::string::npos)
      << e;
  const std::string missing =
      testing::input_error_of([] { load_server_profile("my/server.json", "/x/s.json"); });
  EXPECT_NE(missing.find("the profile file /x/my/server.json does not exist"), std::string::npos)
      << missing;
}

TEST(ServerProfiles, TemplatesFillEnvironmentDefaultsAndLiteralBraces) {
  const fs::path dir = testing::fresh_dir("templates");
  std::ofstream(dir / "t.profile.json")
      << json{{"format", "bih.server-profile/1"},
              {"name", "t"},
              {"command",
               {"{env:BIH_TEST_SERVER|srv}", "--cfg", R"({{"port": {port}}})",
                "{limits.max_tokens}"}},
              {"env", {{"HOST_{env:BIH_TEST_UNSET|X}", "{host}:{port}"}}},
              {"served_model", "m-{port}"},
              {"dialects", {"openai"}},
              {"ready", {{"path", "/"}}},
              {"knobs", {{"nccl_env.*", {{"env", {{"{name}", "v={value}"}}}}}}}}
             .dump();
  const ServerProfile p = load_server_profile((dir / "t.profile.json").string(), "");
  Scenario s;
  s.knobs_set = {"nccl_env.NCCL_ALGO"};
  s.nccl_env = {{"NCCL_ALGO", "Ring"}};
  unsetenv("BIH_TEST_SERVER");
  ServerLaunch l = map_server_launch(p, s, vars());
  EXPECT_EQ(l.argv, (Argv{"srv", "--cfg", R"({"port": 8000})", "24"}));
  EXPECT_EQ(l.env, (Env{{"HOST_X", "127.0.0.1:8000"}, {"NCCL_ALGO", "v=Ring"}}));
  EXPECT_EQ(l.served_model, "m-8000");
  setenv("BIH_TEST_SERVER", "/bin/other", 1);
  s.engine.served_model = "mine";
  l = map_server_launch(p, s, vars());
  unsetenv("BIH_TEST_SERVER");
  EXPECT_EQ(l.argv[0], "/bin/other");
  EXPECT_EQ(l.served_model, "mine");
}

}  // namespace
}  // namespace bih::test_server_profiles
