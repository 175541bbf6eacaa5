// Requests the openai SDK would never send: malformed JSON and HTTP, wrong types, bodies over the
// limit, missing keys, too many at once, unknown routes. Each gets its status and an OpenAI-style
// JSON error, and the server keeps serving. Last, SIGTERM during a stream shuts down with exit 0.
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, test } from "node:test";

import { MODELS, metric, metrics, postJson, startServer } from "./server_harness.mjs";
import { openStream } from "./sse_client.mjs";

const KEY = "secret";
const auth = { Authorization: `Bearer ${KEY}` };

function assertError(res, status, pattern) {
  assert.equal(res.status, status, res.text);
  assert.ok(res.body && res.body.error, `no JSON error in ${res.text}`);
  assert.match(res.body.error.message, pattern);
  assert.equal(typeof res.body.error.type, "string");
  assert.ok("param" in res.body.error && "code" in res.body.error);
}

// Sends `bytes` on a fresh connection and returns everything the server answers until it closes.
// `halfClose` also ends our side, for requests whose body never fully arrives.
async function rawHttp(url, bytes, halfClose = false) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () =>
      halfClose ? socket.end(bytes) : socket.write(bytes));
    let answer = "";
    socket.on("data", (d) => (answer += d));
    socket.on("end", () => resolve(answer));
    socket.on("error", reject);
    socket.setTimeout(10000, () => reject(new Error("no answer within 10 s")));
  });
}

describe("refusals", () => {
  let server, completions;
  before(async () => {
    server = await startServer(`${MODELS}/tiny-chat.telos`, ["--api-key", KEY, "--max-body-bytes", "2048",
      "--max-prompt-tokens", "16", "--max-concurrent-requests", "2"]);
    completions = `${server.url}/v1/completions`;
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test("malformed JSON, wrong shapes and invalid UTF-8 are 400", async () => {
    assertError(await postJson(completions, "{\"prompt\": ", auth), 400, /not valid JSON/);
    assertError(await postJson(completions, "[1, 2]", auth), 400, /must be a JSON object/);
    assertError(await postJson(completions, { prompt: { text: "x" } }, auth), 400, /prompt: expected a string/);
    assertError(await postJson(completions, { prompt: "x", n: "two" }, auth), 400, /n: expected an integer/);
    assertError(await postJson(completions, { prompt: "x", stream: "yes" }, auth), 400, /stream: expected a boolean/);
    const bad = Buffer.concat([Buffer.from('{"prompt": "'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
    const res = await fetch(completions, {
      method: "POST", headers: { ...auth, "Content-Type": "application/json" }, body: bad });
    assert.equal(res.status, 400);
  });

  test("limits: body size 413, prompt length 400, API key 401", async () => {
    assertError(await postJson(completions, { prompt: "x".repeat(4000) }, auth), 413, /larger than .* 2048 bytes/);
    assertError(await postJson(completions, { prompt: Array.from({ length: 20 }, (_, i) => i) }, auth), 400,
      /20 tokens, more than this server's limit of 16/);
    assertError(await postJson(completions, { prompt: [1] }), 401, /API key/);
    assertError(await postJson(completions, { prompt: [1] }, { Authorization: "Bearer nope" }), 401, /API key/);
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    assert.match(await metrics(server.url), /^telos_kv_pages_free \d+$/m);
  });

  test("unknown routes are 404 and wrong methods 405 with Allow, as JSON", async () => {
    const notFound = await fetch(`${server.url}/v1/engines`, { headers: auth });
    assert.equal(notFound.status, 404);
    assert.match((await notFound.json()).error.message, /no such endpoint/);
    for (const method of ["GET", "PUT", "DELETE", "PATCH"]) {
      const wrongMethod = await fetch(completions, { method, headers: auth });
      assert.equal(wrongMethod.status, 405, method);
      assert.equal(wrongMethod.headers.get("allow"), "POST");
      assertError({ status: 405, body: await wrongMethod.json() }, 405, /takes POST/);
    }
    const health = await fetch(`${server.url}/health`, { method: "DELETE" });
    assert.equal(health.status, 405);
    assert.equal(health.headers.get("allow"), "GET, HEAD");
  });

  test("garbage that is not HTTP gets 400 and the server goes on", async () => {
    const answer = await rawHttp(server.url, "NOT HTTP AT ALL\r\n\r\n");
    assert.match(answer, /^HTTP\/1\.1 400/);
    const truncated = await rawHttp(server.url,
      "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
      `Authorization: Bearer ${KEY}\r\nContent-Length: 100\r\n\r\n{"prompt"`, true);
    assert.ok(truncated === "" || /^HTTP\/1\.1 4/.test(truncated), truncated);
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
  });
});

// Requests that must still be running when the test probes generate up to 30000 tokens on
// tiny-long (max_seq_len 32768) and their clients stop reading after the first event: the slot is
// held while the engine generates and then while the unread stream fills the socket, long after
// the probe however fast the engine is (the GPU engine finishes tiny-chat's 256 tokens in
// milliseconds).
const LONG = { prompt: [1, 2, 3], max_tokens: 30000, ignore_eos: true };

describe("concurrency limit", () => {
  let server, completions;
  before(async () => {
    server = await startServer(`${MODELS}/tiny-long.telos`, ["--api-key", KEY, "--max-concurrent-requests", "2"]);
    completions = `${server.url}/v1/completions`;
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test("more concurrent requests than allowed are 429", async () => {
    const a = await openStream(completions, LONG, auth);
    const b = await openStream(completions, LONG, auth);
    assert.equal(a.status, 200);
    assert.equal(b.status, 200);
    await a.next();
    await b.next();
    const refused = await postJson(completions, { prompt: [1], max_tokens: 1 }, auth);
    assertError(refused, 429, /too many concurrent requests/);
    assert.equal(refused.body.error.code, "too_many_requests");
    a.leave();
    b.leave();
    // The slots come back once the server notices the clients left.
    const deadline = Date.now() + 30000;
    let res;
    do {
      await new Promise((r) => setTimeout(r, 100));
      res = await postJson(completions, { prompt: [1], max_tokens: 1 }, auth);
    } while (res.status === 429 && Date.now() < deadline);
    assert.equal(res.status, 200, res.text);
    assert.equal(metric(await metrics(server.url), "telos_kv_pages_used"), 0);
  });
});

describe("graceful shutdown", () => {
  test("SIGTERM during a stream ends it and exits 0", async () => {
    const server = await startServer(`${MODELS}/tiny-long.telos`);
    try {
      const stream = await openStream(`${server.url}/v1/completions`, LONG);
      assert.equal(stream.status, 200);
      await stream.next();
      server.proc.kill("SIGTERM");
      const events = [];
      for (let data = await stream.next(); data !== null; data = await stream.next()) events.push(data);
      assert.equal(events.at(-1), "[DONE]");
      assert.match(events.at(-2), /shutting down/);
    } finally {
      const { code } = await server.stop();
      assert.equal(code, 0);
    }
  });
});
