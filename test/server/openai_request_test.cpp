#include "executor/server/openai_request.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "executor/prefix_cache.hpp"
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
       "temperature: must be >= 0 and finite, got -0.5"},
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

ApiError chat_error(const json& body) {
  try {
    parse_chat_request(body, "m", 100);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted " << body.dump();
  return ApiError(0, "", "");
}

ApiError body_error(const std::string& body) {
  try {
    parse_request_json(body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted a body of " << body.size() << " bytes";
  return ApiError(0, "", "");
}

std::string nested_arrays(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// `depth` arrays, each holding the next, built without recursion.
json deep_array(std::size_t depth) {
  json value = json::array();
  for (std::size_t i = 1; i < depth; ++i) {
    json outer = json::array();
    outer.push_back(std::move(value));
    value = std::move(outer);
  }
  return value;
}

TEST(RequestJson, NestingIsBoundedBeforeParsing) {
  EXPECT_EQ(parse_request_json(nested_arrays(kMaxRequestJsonDepth)),
            json::parse(nested_arrays(kMaxRequestJsonDepth)));
  const ApiError too_deep = body_error(nested_arrays(kMaxRequestJsonDepth + 1));
  EXPECT_EQ(too_deep.status, 400);
  EXPECT_EQ(std::string(too_deep.what()),
            "the request body nests arrays and objects more than 64 levels deep");
  // Objects count too, wherever the nesting is.
  std::string deep_kwargs = R"({"messages": [], "chat_template_kwargs": {"x": )";
  for (int i = 0; i < kMaxRequestJsonDepth; ++i) deep_kwargs += R"({"k": )";
  deep_kwargs += "1" + std::string(kMaxRequestJsonDepth + 2, '}');
  EXPECT_EQ(body_error(deep_kwargs).status, 400);
  // What used to overflow the stack: 120 KB of '[' (the dump in an error message) and 17k levels
  // in chat_template_kwargs (the conversion into template values).
  EXPECT_EQ(body_error(nested_arrays(120000)).status, 400);
  EXPECT_EQ(body_error(R"({"chat_template_kwargs": {"x": )" + nested_arrays(17000) + "}}").status,
            400);
  EXPECT_EQ(body_error("[[[").status, 400);
  EXPECT_NE(std::string(body_error("{\"prompt\": ").what()).find("not valid JSON"),
            std::string::npos);
}

TEST(RequestJson, BracketsInStringsDoNotCount) {
  const std::string brackets = std::string(100, '[') + "\\\"{";
  EXPECT_EQ(parse_request_json(R"({"prompt": ")" + brackets + R"("})")["prompt"],
            std::string(100, '[') + "\"{");
  // An escaped backslash ends before the quote, which then closes the string.
  EXPECT_EQ(parse_request_json(R"({"a": "\\", "b": )" + nested_arrays(3) + "}")["b"],
            json::parse(nested_arrays(3)));
}

TEST(RequestJson, ManyObjectsParseInLinearTime) {
  // nlohmann's callback parser rescans an array after each object in it: 160k objects took 50 s.
  std::string body = R"({"prompt": [)";
  for (int i = 0; i < 200000; ++i) body += i ? ",{}" : "{}";
  body += "]}";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(parse_request_json(body)["prompt"].size(), 200000u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(RequestJson, ErrorMessagesDoNotWalkTheValue) {
  // A body built in memory is not bounded by parse_request_json; refusing it must not dump it.
  const ApiError e = completion_error(deep_array(200000));
  EXPECT_EQ(std::string(e.what()), "the request body must be a JSON object, got an array");
  json body = {{"prompt", "x"}};
  body["temperature"] = deep_array(200000);
  EXPECT_EQ(std::string(completion_error(body).what()),
            "temperature: expected a number, got an array");
  body = {{"prompt", std::string(100000, 'y')}, {"n", std::string(100000, 'z')}};
  EXPECT_EQ(std::string(completion_error(body).what()),
            "n: expected an integer, got the string \"" + std::string(37, 'z') + "\"...");
}

TEST(CompletionRequest, TokenIdsAreReportedAsSent) {
  const json big = json::parse("9223372036854775808");  // 2^63: unsigned, beyond int64
  ApiError e = completion_error({{"prompt", {1, 2, big}}});
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(std::string(e.what()),
            "prompt: prompt[2] is the token id 9223372036854775808, outside the vocabulary of 100");
  e = completion_error({{"prompt", {json::array({1, 2, 3, json::parse("18446744073709551615")})}}});
  EXPECT_EQ(std::string(e.what()),
            "prompt: prompt[0][3] is the token id 18446744073709551615, outside the vocabulary "
            "of 100");
  e = completion_error({{"prompt", {json::array({1, 1e30})}}});
  EXPECT_EQ(std::string(e.what()),
            "prompt: expected a token id (an integer) at prompt[0][1], got the number 1e+30");
  e = completion_error({{"prompt", "x"}, {"stop_token_ids", {big}}});
  EXPECT_EQ(e.param, "stop_token_ids");
  EXPECT_EQ(std::string(e.what()),
            "stop_token_ids: stop_token_ids[0] is the token id 9223372036854775808, outside the "
            "vocabulary of 100");
  e = completion_error({{"prompt", "x"}, {"n", big}});
  EXPECT_EQ(std::string(e.what()), "n: must be in [1, 64], got 9223372036854775808");
  e = completion_error({{"prompt", "x"}, {"max_tokens", json::parse("-9223372036854775808")}});
  EXPECT_EQ(std::string(e.what()), "max_tokens: must be >= 1, got -9223372036854775808");
  EXPECT_EQ(*parse_completion_request(
                 {{"prompt", "x"}, {"seed", json::parse("18446744073709551615")}}, "m", 100)
                 .sampling.seed,
            18446744073709551615u);
}

TEST(CompletionRequest, SamplingRangesAreTheEngines) {
  struct Case {
    const char* body;
    const char* param;
    const char* message;
  };
  const Case cases[] = {
      // Each passes a check on the double and is refused by the engine as a float.
      {R"({"prompt": "x", "top_p": 1e-300})", "top_p", "top_p: must be in (0, 1], got 1e-300"},
      {R"({"prompt": "x", "temperature": 1e300})", "temperature",
       "temperature: must be >= 0 and finite, got 1e+300"},
      {R"({"prompt": "x", "repetition_penalty": 1e-50})", "repetition_penalty",
       "repetition_penalty: must be > 0 and finite, got 1e-50"},
      {R"({"prompt": "x", "repetition_penalty": 1e39})", "repetition_penalty",
       "repetition_penalty: must be > 0 and finite, got 1e+39"},
      {R"({"prompt": "x", "presence_penalty": -2.5})", "presence_penalty",
       "presence_penalty: must be in [-2, 2], got -2.5"},
      {R"({"prompt": "x", "min_p": 1.5})", "min_p", "min_p: must be in [0, 1], got 1.5"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs", "logprobs: must be in [0, 20], got 21"},
      {R"({"prompt": "x", "logprobs": 4294967297})", "logprobs",
       "logprobs: must be in [0, 20], got 4294967297"},
      {R"({"prompt": "x", "min_tokens": -1})", "min_tokens", "min_tokens: must be >= 0, got -1"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "max_tokens: must be >= 1, got 0"},
  };
  for (const Case& c : cases) {
    const ApiError e = completion_error(json::parse(c.body));
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(std::string(e.what()), c.message) << c.body;
  }
  // Chat names its own spellings of two fields.
  EXPECT_EQ(
      chat_error(json::parse(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true,
                                        "top_logprobs": 30})"))
          .param,
      "top_logprobs");
  EXPECT_EQ(chat_error(json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
                                        "max_completion_tokens": 0})"))
                .param,
            "max_completion_tokens");
}

TEST(CompletionRequest, WhatTheParserAcceptsTheEngineAccepts) {
  const char* fields[] = {
      "temperature",      "top_p", "min_p", "repetition_penalty", "presence_penalty",
      "frequency_penalty"};
  const double values[] = {-1e300, -2.0000001, -2,     -1e-300, -0.0, 0,
                           1e-300, 1e-45,      1e-38,  0.5,     1,    1.0000001,
                           2,      2.0000001,  3.4e38, 3.5e38,  1e300};
  for (const char* f : fields) {
    for (double v : values) {
      ApiRequest r;
      try {
        r = parse_completion_request({{"prompt", "x"}, {f, v}}, "m", 100);
      } catch (const ApiError& e) {
        EXPECT_EQ(e.param, f);
        continue;
      }
      EXPECT_EQ(check_sampling(r.sampling, 100), std::nullopt) << f << " = " << v;
    }
  }
}

TEST(ChatRequest, TemplateKwargsCannotReplaceWhatTheServerSets) {
  for (const char* key : {"messages", "add_generation_prompt", "bos_token", "eos_token", "tools",
                          "raise_exception", "namespace", "range", "strftime_now"}) {
    json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    body["chat_template_kwargs"] = {{"enable_thinking", false}, {key, json::array()}};
    const ApiError e = chat_error(body);
    EXPECT_EQ(e.status, 400) << key;
    EXPECT_EQ(e.param, "chat_template_kwargs") << key;
    EXPECT_NE(std::string(e.what()).find(std::string("'") + key + "'"), std::string::npos)
        << e.what();
  }
  const ApiRequest r =
      parse_chat_request(json::parse(R"({"messages": [{"role": "user", "content": "hi"}],
                      "chat_template_kwargs": {"enable_thinking": false}})"),
                         "m", 100);
  EXPECT_EQ(r.template_kwargs, json::parse(R"({"enable_thinking": false})"));
}

TEST(ChatRequest, SpecialTokensInRequestTextAreTextByDefault) {
  const json messages = {{{"role", "user"}, {"content", "<|im_end|>"}}};
  EXPECT_TRUE(parse_chat_request({{"messages", messages}}, "m", 100).split_special_tokens);
  EXPECT_FALSE(
      parse_chat_request({{"messages", messages}, {"split_special_tokens", false}}, "m", 100)
          .split_special_tokens);
  // A completions prompt is the model's raw input: its control tokens are parsed unless asked.
  EXPECT_FALSE(parse_completion_request({{"prompt", "x"}}, "m", 100).split_special_tokens);
  EXPECT_TRUE(parse_completion_request({{"prompt", "x"}, {"split_special_tokens", true}}, "m", 100)
                  .split_special_tokens);
  EXPECT_EQ(chat_error({{"messages", messages}, {"split_special_tokens", 1}}).param,
            "split_special_tokens");
}

TEST(ChatRequest, PartsWithOddTypesAreRefusedByName) {
  // nlohmann's value() would throw its own type_error on these.
  EXPECT_EQ(chat_error(json::parse(R"({"messages": [{"role": "user",
                                                     "content": [{"type": 5, "text": "a"}]}]})"))
                .param,
            "messages");
  EXPECT_EQ(
      completion_error(json::parse(R"({"prompt": "x", "response_format": {"type": 5}})")).param,
      "response_format");
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

// cache_salt on both endpoints: a non-empty string of at most kMaxCacheSaltBytes; anything else is
// a 400 naming the field.
TEST(CacheSalt, IsABoundedNonEmptyStringOnBothEndpoints) {
  const std::string longest(kMaxCacheSaltBytes, 'k');
  EXPECT_EQ(
      parse_completion_request({{"prompt", "x"}, {"cache_salt", longest}}, "m", 100).cache_salt,
      longest);
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"cache_salt", "t1"}};
  EXPECT_EQ(parse_chat_request(chat, "m", 100).cache_salt, "t1");
  EXPECT_EQ(parse_completion_request({{"prompt", "x"}}, "m", 100).cache_salt, "");
  EXPECT_EQ(
      parse_completion_request({{"prompt", "x"}, {"cache_salt", nullptr}}, "m", 100).cache_salt,
      "");
  const struct {
    json salt;
    const char* message;
  } cases[] = {
      {7, "cache_salt: expected a string, got the number 7"},
      {json::array({"a"}), "cache_salt: expected a string, got an array"},
      {"",
       "cache_salt: must not be empty (leave it out to share the prefix cache with every request "
       "that has no salt)"},
      {std::string(kMaxCacheSaltBytes + 1, 'k'), "cache_salt: has 257 bytes, more than 256"},
  };
  for (const auto& c : cases) {
    const ApiError completion = completion_error({{"prompt", "x"}, {"cache_salt", c.salt}});
    EXPECT_EQ(completion.status, 400);
    EXPECT_EQ(completion.param, "cache_salt");
    EXPECT_EQ(std::string(completion.what()), c.message);
    json body = chat;
    body["cache_salt"] = c.salt;
    const ApiError e = chat_error(body);
    EXPECT_EQ(e.param, "cache_salt");
    EXPECT_EQ(std::string(e.what()), c.message);
  }
}

}  // namespace
}  // namespace telos::exec
