// `bih serve` end to end: the real bih binary started by the test (--preset tiny --port 0),
// requests from an httplib::Client. A request carrying 8 prompts must give bitwise the in-process
// Engine::generate of the same prompts under the same knobs; concurrent single-prompt requests
// under invariant kernels bitwise their bs=1 results; bad requests 400 naming the field; the
// server gone after SIGTERM and after its parent dies.
#include <gtest/gtest.h>

#if defined(BIH_HAVE_HTTP)
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <fstream>
#include <latch>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engines/bih_adapter.hpp"
#include "engines/bih_engine.hpp"
#include "run_bih.hpp"
#include "spec/plan.hpp"
#include "test_files.hpp"

namespace bih::test_bih_serve {
namespace {

using testing::alive;

using nlohmann::json;
using namespace std::chrono_literals;

constexpr int kMaxTokens = 6;

bool gone_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (alive(pid)) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

// Reads the "listening on http://host:PORT" line from fd; -1 when it does not come within 30 s.
int read_port(int fd, std::string& seen) {
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < end) {
    if (auto at = seen.find("listening on http://127.0.0.1:"); at != std::string::npos) {
      const auto eol = seen.find('\n', at);
      if (eol != std::string::npos) return std::stoi(seen.substr(at + 30, eol - at - 30));
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[512];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return -1;
    seen.append(buf, static_cast<size_t>(n));
  }
  return -1;
}

std::vector<std::string> serve_args(const std::string& knobs_file) {
  return {BIH_BINARY, "serve",  "--knobs",   knobs_file, "--preset",
          "tiny",     "--host", "127.0.0.1", "--port",   "0"};
}

std::vector<char*> c_argv(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}

// `bih serve` as the test's child; killed (SIGKILL) if a test leaves it running.
class Server {
 public:
  explicit Server(const json& knobs) {
    const auto dir = testing::fresh_dir("serve");
    knobs_file_ = (dir / "knobs.json").string();
    std::ofstream(knobs_file_) << knobs.dump();
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    const auto args = serve_args(knobs_file_);
    std::vector<char*> argv = c_argv(args);  // before fork: the child only execs
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      dup2(out[1], STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    fd_ = out[0];
    port_ = read_port(fd_, output_);
  }
  ~Server() {
    if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(fd_);
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& output() const { return output_; }
  httplib::Client client() const {  // a fresh connection per caller
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  // The exit status after SIGTERM, or -1 when it is still running after 10 s.
  int terminate() {
    kill(pid_, SIGTERM);
    for (int i = 0; i < 500; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

 private:
  std::string knobs_file_;
  std::string output_;
  pid_t pid_ = -1;
  int fd_ = -1;
  int port_ = -1;
};

std::vector<std::vector<int32_t>> test_prompts(int count, uint64_t seed) {
  PromptSpec spec;
  spec.count = count;
  spec.min_len = 8;
  spec.max_len = 40;
  spec.seed = seed;
  return make_prompts(spec, preset_config("tiny")->vocab_size, "");
}

// The in-process engine the server builds for these knobs, through the same function.
EngineBundle in_process_engine(const json& knobs) {
  return make_engine(scenario_from_knobs({{"preset", "tiny"}}, knobs, 64, 512, 1, "test"));
}

json completion_body(const json& prompt) {
  return {{"prompt", prompt}, {"max_tokens", kMaxTokens},
          {"temperature", 0}, {"ignore_eos", true},
          {"logprobs", 1},    {"return_token_ids", true},
          {"stream", false},  {"return_tokens_as_token_ids", true}};
}

json post(httplib::Client& c, const std::string& path, const json& body, int* status) {
  auto res = c.Post(path.c_str(), body.dump(), "application/json");
  *status = res ? res->status : -1;
  if (!res) return json();
  return json::parse(res->body, nullptr, false);
}

// choice's tokens and logprobs, every double checked to be a float widened.
SequenceResult sequence_of(const json& choice) {
  SequenceResult r;
  r.tokens = choice.at("token_ids").get<std::vector<int32_t>>();
  const json& lp = choice.at("logprobs");
  for (const json& v : lp.at("token_logprobs")) {
    const double d = v.get<double>();
    const float f = static_cast<float>(d);
    EXPECT_EQ(static_cast<double>(f), d) << "a logprob that is not a float widened: " << v.dump();
    r.logprobs.push_back(f);
  }
  for (size_t t = 0; t < r.tokens.size(); ++t) {
    EXPECT_EQ(lp.at("tokens")[t], "token_id:" + std::to_string(r.tokens[t]));
  }
  EXPECT_EQ(choice.at("finish_reason"), "length");
  return r;
}

bool bitwise_equal(const SequenceResult& a, const SequenceResult& b) {
  if (a.tokens != b.tokens || a.logprobs.size() != b.logprobs.size()) return false;
  for (size_t t = 0; t < a.logprobs.size(); ++t) {
    if (std::bit_cast<uint32_t>(a.logprobs[t]) != std::bit_cast<uint32_t>(b.logprobs[t])) {
      return false;
    }
  }
  return true;
}

TEST(BihServe, OneRequestOfEightPromptsIsBitwiseTheInProcessGenerate) {
  // Vendor kernels: batch variant, so only the same schedule gives the same bits.
  const json knobs = {{"kernels", "vendor"}, {"chunked_prefill.max_tokens", 64}};
  Server server(knobs);
  ASSERT_GT(server.port(), 0) << server.output();
  const auto prompts = test_prompts(8, 3);
  int status = 0;
  auto client = server.client();
  const json reply = post(client, "/v1/completions", completion_body(prompts), &status);
  ASSERT_EQ(status, 200) << reply.dump();
  EXPECT_EQ(reply.at("object"), "text_completion");
  EXPECT_EQ(reply.at("usage").at("completion_tokens"), 8 * kMaxTokens);
  EXPECT_EQ(reply.at("bih").at("max_batch"), 8);
  const auto expected = in_process_engine(knobs).engine->generate(prompts, kMaxTokens);
  ASSERT_EQ(reply.at("choices").size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(reply.at("choices")[i].at("index"), i);
    EXPECT_TRUE(bitwise_equal(sequence_of(reply.at("choices")[i]), expected[i])) << "prompt " << i;
  }
}

// 8 single-prompt requests released together; returns each reply (null when one failed).
std::vector<json> concurrent_requests(const Server& server,
                                      const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<json> replies(prompts.size());
  std::latch start(static_cast<std::ptrdiff_t>(prompts.size()));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      httplib::Client c = server.client();
      start.arrive_and_wait();
      int status = 0;
      json r = post(c, "/v1/completions", completion_body(prompts[i]), &status);
      if (status == 200) replies[i] = std::move(r);
    });
  }
  for (auto& t : threads) t.join();
  return replies;
}

TEST(BihServe, ConcurrentRequestsUnderInvariantKernelsGiveTheirAloneBits) {
  const json knobs = {{"kernels", "invariant"}};
  Server server(knobs);
  ASSERT_GT(server.port(), 0) << server.output();
  const auto prompts = test_prompts(8, 11);
  const auto replies = concurrent_requests(server, prompts);
  auto engine = in_process_engine(knobs);
  int max_batch = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_FALSE(replies[i].is_null()) << "request " << i << " failed";
    const auto alone = engine.engine->generate({prompts[i]}, kMaxTokens)[0];
    EXPECT_TRUE(bitwise_equal(sequence_of(replies[i].at("choices")[0]), alone)) << "prompt " << i;
    max_batch = std::max(max_batch, replies[i].at("bih").at("max_batch").get<int>());
  }
  std::printf("[ bih serve ] invariant, 8 concurrent requests: largest batch a request saw %d\n",
              max_batch);
}

// Vendor kernels are batch variant: whichever requests shared steps may differ from alone. What
// is guaranteed: a request that never shared a step (max_batch 1) ran the bs=1 schedule exactly.
TEST(BihServe, ConcurrentRequestsUnderVendorKernelsAloneOnesKeepTheirBits) {
  const json knobs = {{"kernels", "vendor"}};
  Server server(knobs);
  ASSERT_GT(server.port(), 0) << server.output();
  const auto prompts = test_prompts(8, 11);
  const auto replies = concurrent_requests(server, prompts);
  auto engine = in_process_engine(knobs);
  int differing = 0, max_batch = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_FALSE(replies[i].is_null()) << "request " << i << " failed";
    const int batch = replies[i].at("bih").at("max_batch").get<int>();
    EXPECT_GE(batch, 1);
    EXPECT_LE(batch, 8);
    max_batch = std::max(max_batch, batch);
    const auto alone = engine.engine->generate({prompts[i]}, kMaxTokens)[0];
    const bool same = bitwise_equal(sequence_of(replies[i].at("choices")[0]), alone);
    if (batch == 1) EXPECT_TRUE(same) << "prompt " << i << " ran alone yet differs";
    differing += same ? 0 : 1;
  }
  std::printf(
      "[ bih serve ] vendor, 8 concurrent requests: largest batch %d, %d of 8 differ "
      "from bs=1\n",
      max_batch, differing);
}

TEST(BihServe, BadRequestsAre400NamingTheField) {
  Server server(json::object());
  ASSERT_GT(server.port(), 0) << server.output();
  auto c = server.client();
  const int vocab = preset_config("tiny")->vocab_size;
  struct Case {
    json body;
    std::string param;
  };
  const json base = completion_body(json{1, 2, 3});
  auto with = [&](const json& patch) {
    json body = base;
    body.merge_patch(patch);
    return body;
  };
  std::vector<Case> cases;
  cases.push_back({with({{"temperature", 0.7}}), "temperature"});
  cases.push_back({with({{"stream", true}}), "stream"});
  cases.push_back({with({{"prompt", {1, vocab}}}), "prompt"});
  cases.push_back({with({{"prompt", "hello"}}), "prompt"});
  cases.push_back({with({{"max_tokens", 600}}), "max_tokens"});  // > 512
  cases.push_back({with({{"logprobs", 5}}), "logprobs"});
  cases.push_back({with({{"ignore_eos", false}}), "ignore_eos"});
  for (const Case& k : cases) {
    int status = 0;
    const json reply = post(c, "/v1/completions", k.body, &status);
    EXPECT_EQ(status, 400) << k.body.dump();
    ASSERT_TRUE(reply.contains("error")) << reply.dump();
    EXPECT_EQ(reply["error"]["param"], k.param) << reply.dump();
    EXPECT_FALSE(reply["error"]["message"].get<std::string>().empty());
    EXPECT_EQ(reply["error"]["type"], "BadRequestError");
  }
  auto res = c.Post("/v1/completions", "{not json", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  // Still serving after all that.
  int status = 0;
  post(c, "/v1/completions", base, &status);
  EXPECT_EQ(status, 200);
}

TEST(BihServe, InfoEndpointsAndResetPrefixCache) {
  Server server({{"prefix_caching.enabled", true}, {"plan.max_num_seqs", 16}});
  ASSERT_GT(server.port(), 0) << server.output();
  auto c = server.client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const json version = json::parse(c.Get("/version")->body);
  EXPECT_FALSE(version.at("version").get<std::string>().empty());
  const json models = json::parse(c.Get("/v1/models")->body);
  EXPECT_EQ(models.at("data")[0].at("id"), "preset:tiny");
  const json resolved = json::parse(c.Get("/bih/resolved")->body);
  EXPECT_EQ(resolved.at("settings").at("prefix_caching").at("enabled"), true);
  EXPECT_EQ(resolved.at("engine").at("name"), "bih");

  EXPECT_EQ(c.Post("/reset_prefix_cache")->status, 200);  // idle
  // A long request in flight: the reset is refused until it is done.
  std::atomic<bool> long_done{false};
  std::thread longer([&] {
    httplib::Client other = server.client();
    json body = completion_body(test_prompts(8, 4));
    body["max_tokens"] = 200;
    int status = 0;
    post(other, "/v1/completions", body, &status);
    EXPECT_EQ(status, 200);
    long_done = true;
  });
  bool refused = false;
  while (!long_done && !refused) {
    auto busy = c.Post("/reset_prefix_cache");
    ASSERT_TRUE(busy);
    refused = busy->status == 409;
    if (!refused) std::this_thread::sleep_for(2ms);
  }
  longer.join();
  EXPECT_TRUE(refused) << "a reset while a request was in flight was not refused";
  EXPECT_EQ(c.Post("/reset_prefix_cache")->status, 200);
}

TEST(BihServe, StopsOnSigtermAndDiesWithItsParent) {
  {
    Server server(json::object());
    ASSERT_GT(server.port(), 0) << server.output();
    const pid_t pid = server.pid();
    EXPECT_EQ(server.terminate(), 0);
    EXPECT_FALSE(alive(pid));
  }
  // A parent that starts bih serve, then is SIGKILLed: the server must go too.
  const auto dir = testing::fresh_dir("serve-parent");
  const std::string knobs = (dir / "knobs.json").string();
  std::ofstream(knobs) << "{}";
  const auto args = serve_args(knobs);
  std::vector<char*> argv = c_argv(args);
  int out[2], pids[2];
  ASSERT_EQ(pipe(out), 0);
  ASSERT_EQ(pipe(pids), 0);
  const pid_t parent = fork();
  if (parent == 0) {
    const pid_t child = fork();
    if (child == 0) {
      dup2(out[1], STDOUT_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    (void)!write(pids[1], &child, sizeof child);
    for (;;) pause();
  }
  close(out[1]);
  close(pids[1]);
  pid_t server_pid = -1;
  ASSERT_EQ(read(pids[0], &server_pid, sizeof server_pid), static_cast<ssize_t>(sizeof server_pid));
  std::string seen;
  EXPECT_GT(read_port(out[0], seen), 0) << seen;
  EXPECT_TRUE(alive(server_pid));
  kill(parent, SIGKILL);
  waitpid(parent, nullptr, 0);
  EXPECT_TRUE(gone_within(server_pid, 10s)) << "bih serve outlived its parent";
  if (alive(server_pid)) kill(server_pid, SIGKILL);
  close(out[0]);
  close(pids[0]);
}

TEST(BihServe, BadKnobsAndArgumentsExitTwoNamingThem) {
  const auto dir = testing::fresh_dir("serve-bad");
  const std::string knobs = (dir / "knobs.json").string();
  std::ofstream(knobs) << R"({"parallel.tp": "two"})";
  auto r = testing::run_bih({"serve", "--knobs", knobs, "--preset", "tiny", "--port", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(knobs), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/parallel/tp"), std::string::npos) << r.output;
  r = testing::run_bih({"serve", "--preset", "tiny", "--model", "/nonexistent", "--port", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("exactly one"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace bih::test_bih_serve

#else  // no cpp-httplib in this build

#include "run_bih.hpp"

TEST(BihServe, WithoutHttpExitsTwoNamingThePackage) {
  const auto r = bih::testing::run_bih({"serve", "--preset", "tiny"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("libcpp-httplib-dev"), std::string::npos) << r.output;
}

#endif
