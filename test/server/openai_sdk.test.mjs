// The official openai SDK (v5) against `telos-run serve` on the CPU reference engine: completions
// (text and token-id prompts, streaming, n, logprobs, echo, stop strings), chat (plain and
// streaming), the prefix cache (cached_tokens, cache_salt, its metrics), /v1/models, and the
// errors the SDK surfaces (status, param, message).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { after, before, describe, test } from "node:test";

import OpenAI from "openai";

import { ENGINE, MODELS, TELOS_RUN, startServer } from "./server_harness.mjs";

const API_KEY = "sk-telos-test";
const model = "tiny-chat";

async function expectApiError(promise, status, pattern, param) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
    assert.equal(e.status, status, e.message);
    assert.match(e.message, pattern);
    if (param !== undefined) assert.equal(e.param, param);
    return true;
  });
}

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

describe("with a tokenizer and chat template", () => {
  let server, client;
  before(async () => {
    server = await startServer(`${MODELS}/tiny-chat.telos`, ["--api-key", API_KEY]);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 60000 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0, "graceful shutdown exits 0");
  });

  test("lists the served model", async () => {
    const page = await client.models.list();
    assert.deepEqual(page.data.map((m) => m.id), [model]);
    assert.equal(page.data[0].object, "model");
  });

  test("greedy token-id completion equals telos-run generate", async () => {
    const ids = [1, 17, 42, 100, 7];
    const out = await client.completions.create({
      model, prompt: ids, max_tokens: 12, temperature: 0, ignore_eos: true, return_token_ids: true,
    });
    const generated = JSON.parse(
      execFileSync(TELOS_RUN, ["generate", `${MODELS}/tiny-chat.telos`, "--engine", ENGINE, "--json",
        "--prompt-ids", ids.join(","), "--max-tokens", "12", "--temperature", "0", "--ignore-eos"],
      { encoding: "utf8" }));
    assert.deepEqual(out.choices[0].token_ids, generated.generated_ids);
    assert.equal(out.object, "text_completion");
    assert.match(out.id, /^cmpl-/);
    assert.equal(out.model, model);
    assert.equal(out.choices[0].finish_reason, "length");
    assert.deepEqual(out.usage, { prompt_tokens: 5, completion_tokens: 12, total_tokens: 17,
      prompt_tokens_details: { cached_tokens: 0 } });
  });

  test("text completion, and the same text streamed", async () => {
    const request = { model, prompt: "the quick brown fox", max_tokens: 16, temperature: 0, ignore_eos: true };
    const whole = await client.completions.create(request);
    assert.equal(whole.choices[0].finish_reason, "length");
    assert.equal(whole.usage.completion_tokens, 16);
    assert.ok(whole.usage.prompt_tokens > 0);

    const chunks = await collect(await client.completions.create({
      ...request, stream: true, stream_options: { include_usage: true },
    }));
    const text = chunks.flatMap((c) => c.choices.map((ch) => ch.text)).join("");
    assert.equal(text, whole.choices[0].text);
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, whole.usage);
    assert.equal(chunks.at(-2).choices[0].finish_reason, "length");
    for (const c of chunks) assert.equal(c.object, "text_completion");
  });

  test("several prompts and n choices, seeded sampling is reproducible", async () => {
    const request = { model, prompt: ["alpha", [5, 6, 7]], n: 2, max_tokens: 6, temperature: 1, seed: 11,
      ignore_eos: true };
    const a = await client.completions.create(request);
    const b = await client.completions.create(request);
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2, 3]);
    assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
    assert.equal(a.usage.completion_tokens, 24);
  });

  test("logprobs and echo", async () => {
    const out = await client.completions.create({ model, prompt: "abc", max_tokens: 5, temperature: 0,
      ignore_eos: true, logprobs: 3 });
    const lp = out.choices[0].logprobs;
    assert.equal(lp.tokens.length, 5);
    assert.equal(lp.token_logprobs.length, 5);
    for (const top of lp.top_logprobs) assert.ok(Object.keys(top).length <= 3 && Object.keys(top).length >= 1);
    for (const v of lp.token_logprobs) assert.ok(v <= 0);
    assert.deepEqual(lp.text_offset.slice(0, 1), [0]);

    const echoed = await client.completions.create({ model, prompt: "abc", max_tokens: 5, temperature: 0,
      ignore_eos: true, echo: true });
    assert.equal(echoed.choices[0].text, "abc" + out.choices[0].text);
  });

  test("a stop string ends the text before it", async () => {
    const request = { model, prompt: "hello there", max_tokens: 24, temperature: 0, ignore_eos: true };
    const full = (await client.completions.create(request)).choices[0].text;
    const chars = Array.from(full);
    const stop = chars.slice(Math.floor(chars.length / 2), Math.floor(chars.length / 2) + 2).join("");
    const expected = full.slice(0, full.indexOf(stop));
    const out = await client.completions.create({ ...request, stop: [stop] });
    assert.equal(out.choices[0].text, expected);
    assert.equal(out.choices[0].finish_reason, "stop");
    const chunks = await collect(await client.completions.create({ ...request, stop, stream: true }));
    assert.equal(chunks.map((c) => c.choices[0].text).join(""), expected);
    assert.equal(chunks.at(-1).choices[0].finish_reason, "stop");
  });

  test("chat uses the template, and streams the same content", async () => {
    const messages = [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }];
    const chat = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0,
      ignore_eos: true });
    assert.equal(chat.object, "chat.completion");
    assert.match(chat.id, /^chatcmpl-/);
    assert.equal(chat.choices[0].message.role, "assistant");
    assert.equal(chat.choices[0].finish_reason, "length");

    const rendered = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    const same = await client.completions.create({ model, prompt: rendered, max_tokens: 10, temperature: 0,
      ignore_eos: true });
    assert.equal(chat.usage.prompt_tokens, same.usage.prompt_tokens);
    assert.equal(chat.choices[0].message.content, same.choices[0].text);
    // The rendered prompt is the chat's: its first page of 16 tokens comes from the prefix cache.
    assert.equal(chat.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(same.usage.prompt_tokens_details.cached_tokens, 16);

    const chunks = await collect(await client.chat.completions.create({ model, messages, max_tokens: 10,
      temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } }));
    assert.equal(chunks[0].object, "chat.completion.chunk");
    assert.equal(chunks[0].choices[0].delta.role, "assistant");
    const content = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? "")).join("");
    assert.equal(content, chat.choices[0].message.content);
    assert.deepEqual(chunks.at(-1).usage, { ...chat.usage, prompt_tokens_details: { cached_tokens: 16 } });
  });

  test("a resent prompt comes from the prefix cache, apart for each cache_salt", async () => {
    const prompt = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 500);  // 2 full pages and 8
    const request = { model, prompt, max_tokens: 8, temperature: 0, ignore_eos: true, return_token_ids: true };
    const scrape = async () => {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      const value = (name) => Number(text.match(new RegExp(`^${name} (\\S+)$`, "m"))[1]);
      return { queries: value("telos_prefix_cache_queries_total"), hits: value("telos_prefix_cache_hits_total") };
    };
    const before = await scrape();
    const first = await client.completions.create(request);
    const again = await client.completions.create(request);
    assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(again.usage.prompt_tokens_details.cached_tokens, 32);
    assert.deepEqual(again.choices[0].token_ids, first.choices[0].token_ids);
    const after = await scrape();
    assert.equal(after.queries - before.queries, 80);
    assert.equal(after.hits - before.hits, 32);

    const salted = { ...request, cache_salt: "tenant-a" };
    const chunks = await collect(await client.completions.create({ ...salted, stream: true,
      stream_options: { include_usage: true } }));
    assert.equal(chunks.at(-1).usage.prompt_tokens_details.cached_tokens, 0);
    const salted_again = await client.completions.create(salted);
    assert.equal(salted_again.usage.prompt_tokens_details.cached_tokens, 32);
    assert.deepEqual(salted_again.choices[0].token_ids, first.choices[0].token_ids);
    const other = await client.completions.create({ ...request, cache_salt: "tenant-b" });
    assert.equal(other.usage.prompt_tokens_details.cached_tokens, 0);

    // n choices of one prompt count its cached tokens once, like its prompt tokens.
    const two = await client.completions.create({ ...request, n: 2 });
    assert.equal(two.usage.prompt_tokens, 40);
    assert.equal(two.usage.prompt_tokens_details.cached_tokens, 32);

    const messages = [{ role: "system", content: "You are a terse assistant who answers in one word." },
      { role: "user", content: "colour?" }];
    const chat = { model, messages, max_tokens: 4, temperature: 0, ignore_eos: true, cache_salt: "tenant-c" };
    assert.equal((await client.chat.completions.create(chat)).usage.prompt_tokens_details.cached_tokens, 0);
    const resent = await client.chat.completions.create(chat);
    assert.ok(resent.usage.prompt_tokens_details.cached_tokens >= 16, JSON.stringify(resent.usage));
  });

  test("chat logprobs", async () => {
    const chat = await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }],
      max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 });
    const content = chat.choices[0].logprobs.content;
    assert.equal(content.length, 4);
    for (const t of content) {
      assert.equal(typeof t.token, "string");
      assert.ok(Array.isArray(t.bytes));
      assert.equal(t.top_logprobs.length, 2);
    }
  });

  test("errors name the field", async () => {
    await expectApiError(client.completions.create({ model, prompt: "x", temperature: -1 }), 400,
      /temperature: must be >= 0/, "temperature");
    await expectApiError(client.completions.create({ model, prompt: "x", top_p: 1.5 }), 400, /top_p/, "top_p");
    await expectApiError(client.completions.create({ model, prompt: "x", n: 0 }), 400, /n: must be in/, "n");
    await expectApiError(client.completions.create({ model, prompt: "x", max_tokens: 0 }), 400,
      /max_tokens: must be >= 1/, "max_tokens");
    await expectApiError(client.completions.create({ model, prompt: "x", max_tokens: 100000 }), 400,
      /maximum context length is 256/, "max_tokens");
    await expectApiError(client.completions.create({ model, prompt: [1, 999] }), 400,
      /outside the vocabulary of 512/, "prompt");
    await expectApiError(client.completions.create({ model, prompt: 5 }), 400, /prompt: expected a string/,
      "prompt");
    await expectApiError(client.completions.create({ model, prompt: "x", stream_options: { include_usage: true } }),
      400, /stream_options/, "stream_options");
    await expectApiError(client.chat.completions.create({ model, messages: [] }), 400, /messages/, "messages");
    await expectApiError(client.chat.completions.create({ model, messages: [{ role: "wizard", content: "x" }] }),
      400, /role 'wizard'/, "messages");
    await expectApiError(client.completions.create({ model, prompt: "x", cache_salt: 5 }), 400,
      /cache_salt: expected a string, got the number 5/, "cache_salt");
    await expectApiError(client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }],
      cache_salt: "" }), 400, /cache_salt: must not be empty/, "cache_salt");
    await expectApiError(client.completions.create({ model, prompt: "x", cache_salt: "s".repeat(257) }), 400,
      /cache_salt: has 257 bytes, more than 256/, "cache_salt");
    await expectApiError(client.completions.create({ model: "gpt-4", prompt: "x" }), 404,
      /model 'gpt-4' does not exist/, "model");
    const wrongKey = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "wrong", maxRetries: 0 });
    await expectApiError(wrongKey.models.list(), 401, /API key/);
    // The server is still serving.
    const ok = await client.completions.create({ model, prompt: "x", max_tokens: 1 });
    assert.equal(ok.choices.length, 1);
  });
});

describe("without a tokenizer", () => {
  let server, client;
  before(async () => {
    server = await startServer(`${MODELS}/tiny-ids.telos`);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 60000 });
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test("token-id prompts work and return token ids", async () => {
    const out = await client.completions.create({ model: "tiny-qwen2", prompt: [3, 4, 5], max_tokens: 4,
      temperature: 0, ignore_eos: true });
    assert.equal(out.choices[0].token_ids.length, 4);
    assert.equal(out.choices[0].text, "");
    const chunks = await collect(await client.completions.create({ model: "tiny-qwen2", prompt: [3, 4, 5],
      max_tokens: 4, temperature: 0, ignore_eos: true, stream: true }));
    assert.deepEqual(chunks.flatMap((c) => c.choices[0].token_ids), out.choices[0].token_ids);
  });

  test("text prompts, chat and stop strings are refused with a reason", async () => {
    await expectApiError(client.completions.create({ model: "tiny-qwen2", prompt: "hello" }), 400,
      /text prompts need the model's tokenizer/, "prompt");
    await expectApiError(client.chat.completions.create({ model: "tiny-qwen2",
      messages: [{ role: "user", content: "hi" }] }), 400, /chat needs the model's tokenizer/, "messages");
    await expectApiError(client.completions.create({ model: "tiny-qwen2", prompt: [3], stop: "x" }), 400,
      /stop strings need the model's tokenizer/, "stop");
  });
});
