#include "executor/server/openai_request.hpp"

#include <gtest/gtest.h>

#include "executor/server/api_error.hpp"

namespace telos::exec {
namespace {

using json = nlohmann::ordered_json;

ApiError completion_error(const json& body) {
  try {
    parse_completion_request(body, "m", 100);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted " << body.dump();
  return ApiError(0, "", "");
}

TEST(CompletionRequest, ParsesEveryPromptForm) {
  EXPECT_EQ(*parse_completion_request({{"prompt", "hi"}}, "m", 100).prompts[0].text, "hi");
  const ApiRequest ids = parse_completion_request({{"prompt", {1, 2, 3}}}, "m", 100);
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(ids.prompts[0].ids, (std::vector<std::int32_t>{1, 2, 3}));
  const ApiRequest mixed = parse_completion_request({{"prompt", {"a", {4, 5}}}}, "m", 100);
  ASSERT_EQ(mixed.prompts.size(), 2u);
  EXPECT_EQ(*mixed.prompts[0].text, "a");
  EXPECT_EQ(mixed.prompts[1].ids, (std::vector<std::int32_t>{4, 5}));
}

TEST(CompletionRequest, ParsesSamplingFields) {
  const ApiRequest r = parse_completion_request(
      json::parse(R"({"model": "m", "prompt": "x", "temperature": 0.5, "top_p": 0.9, "top_k": -1,
                      "min_p": 0.1, "seed": 7, "max_tokens": 9, "min_tokens": 2, "n": 3,
                      "stop": "END", "stop_token_ids": [4], "ignore_eos": true, "logprobs": 2,
                      "stream": true, "stream_options": {"include_usage": true}})"),
      "m", 100);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(*r.sampling.seed, 7u);
  EXPECT_EQ(*r.sampling.max_tokens, 9);
  EXPECT_EQ(r.sampling.min_tokens, 2);
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.sampling.stop_token_ids, std::vector<std::int32_t>{4});
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.sampling.logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage);
}

TEST(CompletionRequest, RefusalsNameTheField) {
  struct Case {
    const char* body;
    int status;
    const char* param;
    const char* message;
  };
  const Case cases[] = {
      {R"({"prompt": "x", "temperature": -0.5})", 400, "temperature",
       "temperature: must be >= 0, got -0.5"},
      {R"({"prompt": "x", "temperature": "hot"})", 400, "temperature",
       "temperature: expected a number, got the string \"hot\""},
      {R"({"prompt": "x", "top_p": 0})", 400, "top_p", "top_p: must be in (0, 1], got 0"},
      {R"({"prompt": "x", "n": 0})", 400, "n", "n: must be in [1, 64], got 0"},
      {R"({"prompt": "x", "max_tokens": 2.5})", 400, "max_tokens",
       "max_tokens: expected an integer, got the number 2.5"},
      {R"({"prompt": "x", "max_tokens": 3, "min_tokens": 4})", 400, "min_tokens",
       "min_tokens: must not exceed max_tokens (3), got 4"},
      {R"({"prompt": [1, 100]})", 400, "prompt",
       "prompt: prompt[1] is the token id 100, outside the vocabulary of 100"},
      {R"({"prompt": []})", 400, "prompt", "prompt: must not be an empty array"},
      {R"({})", 400, "prompt", "prompt: is required"},
      {R"({"prompt": "x", "stop": ["a", 3]})", 400, "stop",
       "stop: expected a string at stop[1], got the number 3"},
      {R"({"prompt": "x", "logit_bias": {"1": 5}})", 400, "logit_bias",
       "logit_bias: is not supported by Telos"},
      {R"({"prompt": "x", "echo": true, "logprobs": 1})", 400, "echo", nullptr},
      {R"({"prompt": "x", "model": "other"})", 404, "model", nullptr},
  };
  for (const Case& c : cases) {
    const ApiError e = completion_error(json::parse(c.body));
    EXPECT_EQ(e.status, c.status) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    if (c.message) {
      EXPECT_EQ(std::string(e.what()), c.message) << c.body;
    }
  }
  EXPECT_EQ(completion_error(json::array()).status, 400);
}

TEST(ChatRequest, FlattensTextPartsAndChecksRoles) {
  const ApiRequest r = parse_chat_request(
      json::parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                 {"type": "text", "text": "b"}]}],
                      "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2})"),
      "m", 100);
  EXPECT_EQ(r.messages[0]["content"], "a\nb");
  EXPECT_EQ(*r.sampling.max_tokens, 5);
  EXPECT_EQ(r.sampling.logprobs, 2);
  try {
    parse_chat_request(json::parse(R"({"messages": [{"role": "robot", "content": "x"}]})"), "m",
                       100);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "messages");
  }
  try {
    parse_chat_request(
        json::parse(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"), "m",
        100);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "top_logprobs");
  }
}

}  // namespace
}  // namespace telos::exec
