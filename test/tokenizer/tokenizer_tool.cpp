// Test driver for the reference comparison (compare.mjs): runs the C++ tokenizer and chat
// template over a JSON file of cases and prints JSON results for the node side to compare.
//
//   tokenizer_tool encode TOKENIZER_JSON CORPUS_JSON
//     CORPUS_JSON is an array of strings; prints an array of
//     {"ids": encode(text, false), "with_special": encode(text, true),
//      "decoded": decode(ids, false), "streamed": IncrementalDecoder pieces joined,
//      "stream_pieces_valid": every piece was valid UTF-8, "skipped": decode(ids, true)}
//   tokenizer_tool render TOKENIZER_CONFIG_JSON CASES_JSON
//     CASES_JSON is an array of {"messages": [...], "add_generation_prompt": bool, ...extra};
//     prints an array of {"text": ...} or {"error": ...}.
//
// Exit codes: 0 success, 1 a telos::Error (message on stderr), 2 bad usage.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "executor/tokenizer/chat_template.hpp"
#include "executor/tokenizer/tokenizer.hpp"
#include "executor/tokenizer/utf8.hpp"
#include "support/error.hpp"

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Ordered, so that tool schemas keep their key order through the chat template's tojson.
ordered_json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) telos::fail(path + ": cannot open");
  try {
    return ordered_json::parse(in);
  } catch (const ordered_json::exception& e) {
    telos::fail(path + ": not valid JSON: " + e.what());
  }
}

json encode_all(const std::string& tokenizer_path, const std::string& corpus_path) {
  const telos::Tokenizer tokenizer = telos::Tokenizer::from_file(tokenizer_path);
  json results = json::array();
  for (const ordered_json& entry : read_json(corpus_path)) {
    const std::string text = entry.get<std::string>();
    const std::vector<telos::TokenId> ids = tokenizer.encode(text, false);
    telos::IncrementalDecoder stream(tokenizer, false);
    std::string streamed;
    bool pieces_valid = true;
    auto take = [&](const std::string& piece) {
      pieces_valid = pieces_valid && telos::utf8::first_invalid(piece) == piece.size();
      streamed += piece;
    };
    for (telos::TokenId id : ids) take(stream.push(id));
    take(stream.finish());
    results.push_back({{"ids", ids},
                       {"with_special", tokenizer.encode(text, true)},
                       {"decoded", tokenizer.decode(ids, false)},
                       {"streamed", streamed},
                       {"stream_pieces_valid", pieces_valid},
                       {"skipped", tokenizer.decode(ids, true)}});
  }
  return results;
}

json render_all(const std::string& config_path, const std::string& cases_path) {
  const telos::ChatTemplate chat = telos::ChatTemplate::from_tokenizer_config(config_path);
  json results = json::array();
  for (const ordered_json& c : read_json(cases_path)) {
    ordered_json extra = c;
    extra.erase("messages");
    extra.erase("add_generation_prompt");
    try {
      results.push_back({{"text", chat.render(c.at("messages"),
                                              c.value("add_generation_prompt", false), extra)}});
    } catch (const telos::Error& e) {
      results.push_back({{"error", e.what()}});
    }
  }
  return results;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || (std::string(argv[1]) != "encode" && std::string(argv[1]) != "render")) {
    std::cerr << "usage: tokenizer_tool encode TOKENIZER_JSON CORPUS_JSON\n"
                 "       tokenizer_tool render TOKENIZER_CONFIG_JSON CASES_JSON\n";
    return 2;
  }
  try {
    const json out = std::string(argv[1]) == "encode" ? encode_all(argv[2], argv[3])
                                                      : render_all(argv[2], argv[3]);
    std::cout << out.dump() << '\n';
  } catch (const telos::Error& e) {
    std::cerr << "tokenizer_tool: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
