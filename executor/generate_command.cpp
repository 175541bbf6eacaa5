// telos-run generate: run a few requests to completion and print the results. All requests are
// submitted at once, so they share steps the way a server's requests do.
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "executor/commands.hpp"
#include "executor/engine.hpp"
#include "executor/tokenizer/tokenizer.hpp"
#include "support/error.hpp"

namespace telos::exec {
namespace {

struct GenerateOptions {
  std::string artifact;
  std::vector<std::string> prompt_ids;  // each "1,2,3": one request per entry
  std::vector<std::string> prompts;     // text: needs the artifact's tokenizer.json
  std::optional<int> max_tokens;
  SamplingParams sampling;
  std::optional<std::uint64_t> seed;
  std::string stop_token_ids;
  int copies = 1;
  bool json = false;
  bool dump_logits = false;
  EngineChoice engine = EngineChoice::Auto;
  RuntimeLimits limits;
  bool prefix_cache = true;  // --no-prefix-cache: false
};

std::vector<std::int32_t> parse_ids(const std::string& text, const std::string& option) {
  std::vector<std::int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
      fail(option + ": \"" + item +
           "\" is not a token id (expected comma-separated integers >= 0)");
    ids.push_back(static_cast<std::int32_t>(v));
  }
  if (ids.empty()) fail(option + ": no token ids in \"" + text + "\"");
  return ids;
}

nlohmann::json logprob_json(const SampledToken& t) {
  nlohmann::json top = nlohmann::json::array();
  for (const TokenLogprob& alt : t.top)
    top.push_back({{"id", alt.token}, {"logprob", alt.logprob}});
  return {{"id", t.token}, {"logprob", t.logprob}, {"top", top}};
}

int run_generate(const GenerateOptions& o) {
  if (o.prompt_ids.empty() && o.prompts.empty())
    fail("generate: give at least one --prompt-ids or --prompt");
  if (o.copies < 1) fail("--n: must be at least 1");
  std::vector<std::vector<std::int32_t>> prompts;
  for (const std::string& ids : o.prompt_ids) prompts.push_back(parse_ids(ids, "--prompt-ids"));
  std::vector<std::int32_t> stop_token_ids;
  if (!o.stop_token_ids.empty()) stop_token_ids = parse_ids(o.stop_token_ids, "--stop-token-ids");

  std::shared_ptr<const Artifact> artifact = load_artifact(o.artifact, o.engine);
  // The checkpoint's tokenizer, when telosc copied one into the artifact: text prompts in, text
  // out.
  std::optional<Tokenizer> tokenizer;
  const std::filesystem::path tokenizer_path = std::filesystem::path(o.artifact) / "tokenizer.json";
  if (std::filesystem::is_regular_file(tokenizer_path))
    tokenizer = Tokenizer::from_file(tokenizer_path.string());
  if (!o.prompts.empty() && !tokenizer)
    fail("--prompt: " + o.artifact +
         " has no tokenizer.json (its checkpoint had none); pass token ids with --prompt-ids");
  for (const std::string& text : o.prompts)
    prompts.push_back(tokenizer->encode(text, /*add_special_tokens=*/true));

  std::vector<GenerationRequest> requests;
  std::vector<std::vector<std::int32_t>> prompt_of;  // parallel to requests (they are moved away)
  for (const std::vector<std::int32_t>& prompt : prompts) {
    for (int copy = 0; copy < o.copies; ++copy) {
      GenerationRequest r;
      r.prompt = prompt;
      r.sampling = o.sampling;
      r.sampling.max_tokens = o.max_tokens;
      // Copies of a seeded request differ from each other but not from run to run.
      if (o.seed) r.sampling.seed = *o.seed + static_cast<std::uint64_t>(copy);
      r.sampling.stop_token_ids = stop_token_ids;
      r.return_prompt_logits = o.dump_logits;
      prompt_of.push_back(prompt);
      requests.push_back(std::move(r));
    }
  }

  EngineOptions options;
  options.limits = o.limits;
  options.prefix_cache = o.prefix_cache;
  std::unique_ptr<Engine> engine =
      Engine::create(artifact, make_backend(artifact, o.engine, std::cerr, o.limits), options);
  std::vector<RequestHandle> handles;
  for (GenerationRequest& r : requests) handles.push_back(engine->submit(std::move(r)));

  int exit_code = kExitOk;
  for (std::size_t i = 0; i < handles.size(); ++i) {
    std::vector<std::int32_t> ids;
    nlohmann::json logprobs = nlohmann::json::array();
    std::vector<float> prompt_logits;
    RequestEvent e, last;
    while (handles[i]->next(e)) {
      if (e.token) {
        ids.push_back(e.token->token);
        logprobs.push_back(logprob_json(*e.token));
      }
      if (!e.logits.empty()) prompt_logits = e.logits;
      if (e.finish) last = std::move(e);
    }
    const std::string_view reason = finish_reason_name(*last.finish);
    if (*last.finish == FinishReason::Error) {
      std::cerr << "telos-run: request " << i << ": " << last.error << "\n";
      exit_code = kExitError;
    }
    if (o.json) {
      nlohmann::json out = {{"index", i},
                            {"prompt_ids", prompt_of[i]},
                            {"generated_ids", ids},
                            {"finish_reason", reason},
                            {"usage",
                             {{"prompt_tokens", last.usage.prompt_tokens},
                              {"completion_tokens", last.usage.completion_tokens},
                              {"cached_tokens", last.usage.cached_tokens}}},
                            {"timings",
                             {{"queue_s", last.timings.queue_seconds},
                              {"first_token_s", last.timings.first_token_seconds},
                              {"total_s", last.timings.total_seconds},
                              {"preemptions", last.timings.preemptions}}}};
      if (last.stop_token) out["stop_token"] = *last.stop_token;
      if (!last.error.empty()) out["error"] = last.error;
      if (o.sampling.logprobs > 0) out["logprobs"] = logprobs;
      if (o.dump_logits) out["prompt_logits"] = prompt_logits;
      if (tokenizer) out["text"] = tokenizer->decode(ids, /*skip_special=*/true);
      std::cout << out.dump() << "\n";
    } else {
      std::cout << "[" << i << "]";
      if (tokenizer) std::cout << " " << tokenizer->decode(ids, /*skip_special=*/true) << "\n   ";
      for (std::int32_t id : ids) std::cout << " " << id;
      std::cout << "  (" << reason << ", " << ids.size() << " tokens, first token after "
                << last.timings.first_token_seconds * 1e3 << " ms)\n";
    }
  }
  return exit_code;
}

}  // namespace

void add_generate_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Run requests to completion and print the generated token ids");
  cmd->footer(kExitCodes);
  cmd->add_option("ARTIFACT", o->artifact, "The artifact directory (NAME.telos)")->required();
  cmd->add_option("--prompt-ids", o->prompt_ids,
                  "A prompt as comma-separated token ids; repeat for more requests");
  cmd->add_option("--prompt", o->prompts,
                  "A text prompt, encoded with the artifact's tokenizer; repeat for more requests");
  cmd->add_option("--max-tokens", o->max_tokens,
                  "Tokens to generate per request (default: up to max_seq_len)");
  cmd->add_option("--temperature", o->sampling.temperature, "0 for greedy (default 1)");
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling mass (default 1: off)");
  cmd->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens (default 0: off)");
  cmd->add_option("--min-p", o->sampling.min_p,
                  "Keep tokens at least min-p times as likely as the best");
  cmd->add_option("--seed", o->seed, "Random seed; copies from --n use seed, seed+1, ...");
  cmd->add_option("--repetition-penalty", o->sampling.repetition_penalty, "Default 1: off");
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "Default 0: off");
  cmd->add_option("--frequency-penalty", o->sampling.frequency_penalty, "Default 0: off");
  cmd->add_option("--stop-token-ids", o->stop_token_ids, "Comma-separated ids that end a request");
  cmd->add_flag("--ignore-eos", o->sampling.ignore_eos, "Do not stop on the model's EOS ids");
  cmd->add_option("--min-tokens", o->sampling.min_tokens, "Generate at least this many tokens");
  cmd->add_option("--logprobs", o->sampling.logprobs,
                  "Report the N most likely tokens at each step");
  cmd->add_option("--n", o->copies, "Copies of each prompt (default 1)");
  cmd->add_flag("--json", o->json, "One JSON object per request on stdout");
  // Diagnostic, for checking an artifact against reference logits: adds "prompt_logits" (the
  // prompt's last-position logits) to each JSON object.
  cmd->add_flag("--dump-logits", o->dump_logits)->group("");
  add_engine_option(*cmd, o->engine);
  add_limit_options(*cmd, o->limits);
  add_prefix_cache_option(*cmd, o->prefix_cache);
  cmd->callback([o, &run] { run = [o] { return run_generate(*o); }; });
}

}  // namespace telos::exec
