// test_llama_cpp_reuse.cpp: the llama.cpp adapter reuses its contexts across requests (one per
// batch size) and empties them after each; this proves, with the real engine, that no KV state
// leaks from one request into the next: a prompt alone gives the same bits first, after another
// prompt, after batches that held it, and after reset_cache, and the same bits as in a fresh
// adapter that saw the prompts in the other order.
//
// Needs adapters/llama-cpp/node_modules (bash adapters/llama-cpp/setup.sh); skipped without it,
// except under CI=true, where a missing install is a failure.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "run_bih.hpp"
#include "test_files.hpp"

namespace bih::test_llama_cpp_reuse {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::kSource;

using Prompt = std::vector<int>;
const Prompt kA{5, 17, 900, 1200, 33, 1800};
const Prompt kB{44, 3, 1999, 8, 8, 8, 8, 8, 8, 8, 8, 8, 700, 260, 1500, 12};  // longer: more cells

json generate(int id, const std::vector<Prompt>& prompts) {
  return {{"type", "generate"}, {"id", id},       {"prompts", prompts},
          {"max_tokens", 3},    {"greedy", true}, {"ignore_eos", true}};
}

// Runs one adapter over `requests` (after init, before shutdown); its answers, one per line.
std::vector<json> exchange(const fs::path& dir, const std::string& name, const fs::path& gguf,
                           const std::vector<json>& requests) {
  const json init = {
      {"type", "init"},
      {"protocol", "bih.engine/1"},
      {"model", {{"format", "gguf"}, {"path", gguf}, {"config", {{"vocab_size", 2048}}}}},
      {"knobs", json::object()},
      {"options", {{"threads", 2}}},
      {"limits", {{"max_batch", 3}, {"max_model_len", 64}, {"max_tokens", 3}}}};
  {
    std::ofstream in(dir / (name + ".in"));
    in << init.dump() << "\n";
    for (const json& r : requests) in << r.dump() << "\n";
    in << json{{"type", "shutdown"}}.dump() << "\n";
  }
  const std::string command =
      "node " +
      testing::shell_quote((fs::path(kSource) / "adapters/llama-cpp/adapter.mjs").string()) +
      " < " + testing::shell_quote((dir / (name + ".in")).string()) + " > " +
      testing::shell_quote((dir / (name + ".out")).string()) + " 2> " +
      testing::shell_quote((dir / (name + ".log")).string());
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::vector<json> answers;
  std::ifstream out(dir / (name + ".out"));
  for (std::string line; std::getline(out, line);) answers.push_back(json::parse(line));
  return answers;
}

// The sequence of the prompt at `index` in the result for request `id`.
json sequence(const std::vector<json>& answers, int id, size_t index) {
  for (const json& a : answers) {
    if (a.value("type", "") == "result" && a.value("id", 0) == id) return a["sequences"].at(index);
  }
  ADD_FAILURE() << "no result for request " << id;
  return json();
}

TEST(LlamaCppReuse, NoKvStateLeaksBetweenRequests) {
  if (!fs::exists(fs::path(kSource) /
                  "adapters/llama-cpp/node_modules/node-llama-cpp/package.json")) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") FAIL() << "CI=true but the adapter is missing";
    GTEST_SKIP() << "llama.cpp adapter not installed (bash adapters/llama-cpp/setup.sh)";
  }
  const auto dir = testing::fresh_dir("llama-cpp-reuse");
  const fs::path gguf = dir / "tiny.gguf";
  const auto exported =
      testing::run_bih({"export", "--preset", "tiny", "--format", "gguf", "--out", gguf.string()});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;

  const std::vector<json> one =
      exchange(dir, "one", gguf,
               {generate(1, {kA}), generate(2, {kB}), generate(3, {kA}), generate(4, {kB, kA, {7}}),
                generate(5, {kA, kB, {7}}), generate(6, {kA}), json{{"type", "reset_cache"}},
                generate(7, {kA})});
  ASSERT_EQ(one.size(), 9u) << "hello, 7 results and reset_done expected";
  EXPECT_EQ(one[0]["type"], "hello");
  EXPECT_EQ(one[0]["capabilities"]["reset_cache"], true);
  EXPECT_EQ(one[7], json({{"type", "reset_done"}}));
  const json a = sequence(one, 1, 0);
  ASSERT_EQ(a["tokens"].size(), 3u);
  EXPECT_EQ(sequence(one, 3, 0), a) << "A after B";
  EXPECT_EQ(sequence(one, 6, 0), a) << "A after batches of three";
  EXPECT_EQ(sequence(one, 7, 0), a) << "A after reset_cache";

  // A fresh adapter, the other order: B first, then A.
  const std::vector<json> fresh =
      exchange(dir, "fresh", gguf, {generate(1, {kB}), generate(2, {kA})});
  ASSERT_EQ(fresh.size(), 3u);
  EXPECT_EQ(sequence(fresh, 2, 0), a) << "A in a fresh adapter";
  EXPECT_EQ(sequence(fresh, 1, 0), sequence(one, 2, 0)) << "B in a fresh adapter";
}

}  // namespace
}  // namespace bih::test_llama_cpp_reuse
