// test_http_dialects.cpp: each HTTP dialect's request body, and its reading of replies of the
// documented shapes and of every malformed one (an InfraError quoting the reply, never a silent
// guess). The replies are JSON literals in the shapes the servers' docs give (cited per test);
// vLLM and SGLang do not run here.
#include <gtest/gtest.h>

#include <bit>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "base/errors.hpp"
#include "engines/registry.hpp"

#if BIH_HAVE_HTTP
#include "engines/http/dialect.hpp"
#endif

namespace bih::test_http_dialects {
namespace {

using nlohmann::json;

#if BIH_HAVE_HTTP

constexpr int kVocab = 2048;

// The InfraError message `action` throws; a test failure (and "") otherwise.
std::string infra_error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const InfraError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected an InfraError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an InfraError, nothing was thrown";
  return "";
}

std::string reply_error(const std::string& dialect, const std::string& body, size_t prompts,
                        int max_tokens) {
  return infra_error_of(
      [&] { make_dialect(dialect)->parse_reply(body, prompts, max_tokens, kVocab); });
}

// vLLM's completions reply with return_token_ids and return_tokens_as_token_ids (vLLM docs,
// "OpenAI-Compatible Server", extra parameters; the OpenAI completions object's logprobs:
// tokens, token_logprobs). Choices come in any order; "index" places them.
const char* kVllmReply = R"({
  "id": "cmpl-1", "object": "text_completion", "model": "m",
  "choices": [
    {"index": 1, "text": "", "finish_reason": "length", "token_ids": [7, 8],
     "logprobs": {"tokens": ["token_id:7", "token_id:8"], "token_logprobs": [-0.5, -0.25],
                  "text_offset": [0, 0], "top_logprobs": null}},
    {"index": 0, "text": "", "finish_reason": "length", "token_ids": [1, 2],
     "logprobs": {"tokens": ["token_id:1", "token_id:2"], "token_logprobs": [-1.5, -0.1],
                  "text_offset": [0, 0], "top_logprobs": null}}
  ]})";

TEST(HttpDialects, OpenAiReadsVllmsShapeInIndexOrder) {
  const auto r = make_dialect("openai")->parse_reply(kVllmReply, 2, 2, kVocab);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r[1].tokens, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(r[0].logprobs[0], -1.5f);
  // "-0.1" is the float -0.1f's shortest decimal: taken as that float.
  EXPECT_EQ(r[0].logprobs[1], -0.1f);
  EXPECT_EQ(r[1].logprobs, (std::vector<float>{-0.5f, -0.25f}));
}

TEST(HttpDialects, OpenAiReadsTokenIdsFromLogprobsAlone) {
  const json reply = {
      {"choices",
       {{{"index", 0},
         {"logprobs",
          {{"tokens", {"token_id:5", "token_id:2047"}}, {"token_logprobs", {-2.0, -0.125}}}}}}}};
  const auto r = make_dialect("openai")->parse_reply(reply.dump(), 1, 2, kVocab);
  EXPECT_EQ(r[0].tokens, (std::vector<int32_t>{5, 2047}));
}

// llama-server's /v1/completions: logprobs {"content": [{"id", "token", "bytes", "logprob",
// "top_logprobs"}]} (its README's completion_probabilities entries, tools/server/README.md).
TEST(HttpDialects, OpenAiReadsLlamaServersShape) {
  const char* reply = R"({"object": "text_completion", "model": "m", "choices": [
    {"text": "ab", "index": 0, "finish_reason": "length", "logprobs": {"content": [
      {"id": 40, "token": "a", "bytes": [97], "logprob": -0.10000000149011612,
       "top_logprobs": [{"id": 40, "token": "a", "bytes": [97], "logprob": -0.6931471824645996}]},
      {"id": 41, "token": "b", "bytes": [98], "logprob": -3.0, "top_logprobs": []}]}}]})";
  const auto r = make_dialect("openai")->parse_reply(reply, 1, 2, kVocab);
  EXPECT_EQ(r[0].tokens, (std::vector<int32_t>{40, 41}));
  EXPECT_EQ(r[0].logprobs[0], -0.1f);  // -0.1f widened, as nlohmann prints a float
  EXPECT_EQ(r[0].logprobs[1], -3.0f);
}

TEST(HttpDialects, OpenAiRequestAsksForGreedyTokensWithIds) {
  const auto d = make_dialect("openai");
  EXPECT_EQ(d->path(), "/v1/completions");
  EXPECT_TRUE(d->takes_model());
  const json batch = d->request_body({{1, 2}, {3}}, 4, {{"model", "m"}});
  EXPECT_EQ(batch["prompt"], json({{1, 2}, {3}}));
  EXPECT_EQ(batch["max_tokens"], 4);
  EXPECT_EQ(batch["temperature"], 0);
  EXPECT_EQ(batch["ignore_eos"], true);
  EXPECT_EQ(batch["logprobs"], 1);
  EXPECT_EQ(batch["return_tokens_as_token_ids"], true);
  EXPECT_EQ(batch["return_token_ids"], true);
  EXPECT_EQ(batch["model"], "m");
  EXPECT_EQ(d->request_body({{1, 2}}, 4, json::object())["prompt"], json({1, 2}));
}

// SGLang's native /generate (https://docs.sglang.io/basic_usage/native_api.html): one object for
// one prompt, a list for a batch; meta_info.output_token_logprobs = [[logprob, id, text], ...].
TEST(HttpDialects, SglangReadsOneObjectAndAList) {
  const auto d = make_dialect("sglang");
  const char* one = R"({"text": "", "meta_info": {"id": "x", "finish_reason": {"type": "length"},
    "output_token_logprobs": [[-0.5, 11, null], [-1.25, 12, null]]}})";
  auto r = d->parse_reply(one, 1, 2, kVocab);
  EXPECT_EQ(r[0].tokens, (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(r[0].logprobs, (std::vector<float>{-0.5f, -1.25f}));
  const char* list = R"([{"text": "", "meta_info": {"output_token_logprobs": [[-0.5, 3, "a"]]}},
                         {"text": "", "meta_info": {"output_token_logprobs": [[-2.5, 4, "b"]]}}])";
  r = d->parse_reply(list, 2, 1, kVocab);
  EXPECT_EQ(r[1].tokens, (std::vector<int32_t>{4}));
  EXPECT_EQ(r[1].logprobs[0], -2.5f);
  const json body = d->request_body({{1}, {2, 3}}, 5, json::object());
  EXPECT_EQ(d->path(), "/generate");
  EXPECT_EQ(body["input_ids"], json({{1}, {2, 3}}));
  EXPECT_EQ(body["sampling_params"],
            json({{"max_new_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}}));
  EXPECT_EQ(body["return_logprob"], true);
}

// llama-server's /completion (tools/server/README.md): completion_probabilities[] with id and
// logprob, "tokens" with return_tokens; an array of completions for several prompts.
TEST(HttpDialects, LlamaCppReadsCompletionProbabilities) {
  const auto d = make_dialect("llama.cpp");
  const char* one = R"({"content": "xy", "tokens": [9, 10], "stop_type": "limit",
    "completion_probabilities": [
      {"id": 9, "logprob": -0.25, "token": "x", "bytes": [120], "top_logprobs": []},
      {"id": 10, "logprob": -4.0, "token": "y", "bytes": [121], "top_logprobs": []}]})";
  auto r = d->parse_reply(one, 1, 2, kVocab);
  EXPECT_EQ(r[0].tokens, (std::vector<int32_t>{9, 10}));
  EXPECT_EQ(r[0].logprobs, (std::vector<float>{-0.25f, -4.0f}));
  const char* two = R"([{"tokens": [], "completion_probabilities": [{"id": 1, "logprob": -1}]},
                        {"tokens": [2], "completion_probabilities": [{"id": 2, "logprob": -2}]}])";
  r = d->parse_reply(two, 2, 1, kVocab);
  EXPECT_EQ(r[1].tokens, (std::vector<int32_t>{2}));
  const json body = d->request_body({{1}, {2}}, 3, {{"cache_prompt", false}});
  EXPECT_EQ(d->path(), "/completion");
  EXPECT_EQ(body["prompt"], json({{1}, {2}}));
  EXPECT_EQ(body["n_predict"], 3);
  EXPECT_EQ(body["n_probs"], 1);
  EXPECT_EQ(body["return_tokens"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["cache_prompt"], false);
}

TEST(HttpDialects, EveryMalformedReplyIsAnErrorQuotingIt) {
  struct Case {
    std::string dialect, body;
    size_t prompts;
    int max_tokens;
    std::string says;
  };
  const std::string vllm_one =
      R"({"choices": [{"index": 0, "token_ids": [1, 2], "logprobs": {"token_logprobs": [-1, -2]}}]})";
  const std::vector<Case> cases{
      {"openai", "<html>502 Bad Gateway</html>", 1, 2, "the body is not JSON"},
      {"openai", R"({"error": "no"})", 1, 2, "the reply has no \"choices\""},
      {"openai", vllm_one, 2, 2, "1 choices for 2 prompts"},
      {"openai", vllm_one, 1, 3, "holds 2 tokens and 2 values, but 3 were asked for"},
      {"openai", vllm_one, 1, 1, "holds 2 tokens and 2 values, but 1 were asked for"},
      {"openai",
       R"({"choices": [{"index": 0, "token_ids": [1, 2048], "logprobs": {"token_logprobs": [-1, -2]}}]})",
       1, 2, "choices[0].token_ids[1] is 2048, not a token id in 0..2047"},
      {"openai",
       R"({"choices": [{"index": 0, "token_ids": [1], "logprobs": {"token_logprobs": [-0.30000000000000004]}}]})",
       1, 1, "does not round-trip through float32"},
      {"openai",
       R"({"choices": [{"index": 0, "token_ids": [1], "logprobs": {"tokens": ["token_id:2"], "token_logprobs": [-1]}}]})",
       1, 1, "token_ids and the token ids in its logprobs differ"},
      {"openai",
       R"({"choices": [{"index": 0, "logprobs": {"tokens": ["hello"], "token_logprobs": [-1]}}]})",
       1, 1, "is \"hello\", not \"token_id:N\""},
      {"openai",
       R"({"choices": [{"index": 0, "token_ids": [1], "logprobs": {"token_logprobs": [-1]}}, {"index": 0, "token_ids": [1], "logprobs": {"token_logprobs": [-1]}}]})",
       2, 1, "not a distinct prompt index"},
      {"openai", R"({"choices": [{"index": 0, "token_ids": [1], "logprobs": null}]})", 1, 1,
       "choices[0].logprobs is null, not an object"},
      {"sglang", R"({"meta_info": {}})", 1, 1, "has no \"output_token_logprobs\""},
      {"sglang", R"([{"meta_info": {"output_token_logprobs": [[-1, 1, null]]}}])", 2, 1,
       "1 results for 2 prompts"},
      {"sglang", R"({"meta_info": {"output_token_logprobs": [[-1, -3, null]]}})", 1, 1,
       "is -3, not a token id"},
      {"sglang", R"({"meta_info": {"output_token_logprobs": [["-1", 3, null]]}})", 1, 1,
       "is string '\"-1\"', not a number"},
      {"sglang", R"({"meta_info": {"output_token_logprobs": [[-1, 3, null]]}})", 1, 2,
       "holds 1 tokens"},
      {"llama.cpp", R"({"content": "x"})", 1, 1, "has no \"completion_probabilities\""},
      {"llama.cpp", R"({"completion_probabilities": [{"id": 1, "logprob": 1e-50}]})", 1, 1,
       "does not round-trip through float32"},
      {"llama.cpp", R"({"tokens": [2], "completion_probabilities": [{"id": 1, "logprob": -1}]})", 1,
       1, "tokens and its completion_probabilities ids differ"},
      {"llama.cpp", R"({"completion_probabilities": [{"id": 1, "logprob": -1}]})", 2, 1,
       "not an array of 2 completions"},
  };
  for (const Case& c : cases) {
    const std::string message = reply_error(c.dialect, c.body, c.prompts, c.max_tokens);
    EXPECT_NE(message.find(c.says), std::string::npos) << c.dialect << " " << c.body << "\n"
                                                       << message;
    EXPECT_NE(message.find("the reply: '" + c.body.substr(0, 20)), std::string::npos)
        << "the reply is quoted: " << message;
  }
}

TEST(HttpDialects, ValuesAreTakenOnlyWhenTheyRoundTripThroughFloat32) {
  // The float widened exactly, and the float's shortest decimal, are both that float.
  EXPECT_EQ(narrow_logprob(json::parse("-0.10000000149011612"), "v"), -0.1f);
  EXPECT_EQ(narrow_logprob(json::parse("-0.1"), "v"), -0.1f);
  EXPECT_EQ(narrow_logprob(json::parse("-3"), "v"), -3.0f);
  EXPECT_EQ(narrow_logprob(json::parse("0"), "v"), 0.0f);
  const float subnormal = std::bit_cast<float>(1u);
  EXPECT_EQ(narrow_logprob(json(static_cast<double>(subnormal)), "v"), subnormal);
  // A double that no float32 is, whichever way it was printed.
  for (const char* text : {"-0.30000000000000004", "-0.1000000001", "1e-50", "1e39"}) {
    const std::string message = infra_error_of([&] { narrow_logprob(json::parse(text), "v"); });
    EXPECT_NE(message.find("does not round-trip through float32"), std::string::npos) << text;
  }
  EXPECT_NE(infra_error_of([&] { narrow_logprob(json("-1"), "v"); }).find("not a number"),
            std::string::npos);
}

#else

TEST(HttpDialects, WithoutHttpTheKindNamesThePackage) {
  Scenario s;
  s.engine.kind = "http";
  EXPECT_NE(EngineRegistry::instance().unsupported_reason(s).find("libcpp-httplib-dev"),
            std::string::npos);
}

#endif

}  // namespace
}  // namespace bih::test_http_dialects
