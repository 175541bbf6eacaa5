// Hostile clients against `telos-run serve` on loopback, each attack bounded in time and count:
// slowloris, a chunked body past the limit, a flood of header lines, absurd Content-Lengths,
// cross-site shapes (text/plain bodies, foreign Host names), wrong methods, a non-streaming client
// that hangs up, and more connections than the cap. Through all of it /health answers within a
// second and real completions are served; afterwards the server's memory and KV pages are back
// to their idle values. Last, the API key's sources that keep it out of `ps`.
import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { MODELS, metric, metrics, postJson, startServer } from "./server_harness.mjs";
import { openStream } from "./sse_client.mjs";

const kHeadTimeout = 3;           // s, --head-timeout of the attacked server
const kBodyTimeout = 2;           // s, --body-timeout
const kKeepAliveTimeout = 1;      // s, --keep-alive-timeout
const kMaxBody = 1 << 20;         // --max-body-bytes
const kFlood = 512 << 20;         // bytes a flooding client sends at most before giving up
const kRssSlack = 24 << 20;       // how far above idle the server's RSS may go, or stay
const LONG = { prompt: [1, 2, 3], max_tokens: 30000, ignore_eos: true };

// Resident memory of a process, in bytes.
function rss(pid) {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(m[1]) * 1024;
}

function hostPort(url) {
  const { hostname, port } = new URL(url);
  return { host: hostname, port: Number(port) };
}

// A connected socket that records what the server sends and when it closes.
async function connect(url) {
  const { host, port } = hostPort(url);
  const socket = net.connect(port, host);
  const state = { socket, answer: "", closed: false };
  socket.on("data", (d) => (state.answer += d));
  socket.on("error", () => {});
  state.closedPromise = new Promise((resolve) => socket.on("close", () => {
    state.closed = true;
    resolve();
  }));
  await new Promise((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  return state;
}

// Sends `bytes` and waits for the first line of the answer: {status, ms, answer}.
async function exchange(url, bytes, timeoutMs = 3000) {
  const c = await connect(url);
  const t0 = Date.now();
  c.socket.write(bytes);
  while (!c.answer.includes("\r\n") && !c.closed && Date.now() - t0 < timeoutMs) await sleep(5);
  c.socket.destroy();
  const m = /^HTTP\/1\.1 (\d{3}) /.exec(c.answer);
  return { status: m ? Number(m[1]) : null, ms: Date.now() - t0, answer: c.answer };
}

// GET /health on a fresh connection; throws if it takes more than `ms`.
async function health(url, ms = 1000) {
  const t0 = Date.now();
  const res = await fetch(`${url}/health`, {
    signal: AbortSignal.timeout(ms), headers: { Connection: "close" },
  });
  await res.text();
  return { status: res.status, ms: Date.now() - t0 };
}

async function waitFor(what, predicate, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const last = await predicate();
    if (last === true) return;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms (${last})`);
    await sleep(50);
  }
}

function post(path, body, headers = "") {
  return `POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n${headers}` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

describe("attacks on one server", () => {
  let server, pid, idle;
  before(async () => {
    server = await startServer(`${MODELS}/tiny-long.telos`, [
      "--head-timeout", String(kHeadTimeout), "--body-timeout", String(kBodyTimeout),
      "--keep-alive-timeout", String(kKeepAliveTimeout), "--max-body-bytes", String(kMaxBody),
      "--max-concurrent-requests", "1", "--allowed-host", "api.example.test"]);
    pid = server.proc.pid;
    assert.equal((await postJson(`${server.url}/v1/completions`, { prompt: [1, 2], max_tokens: 2 })).status, 200);
    const m = await metrics(server.url);
    idle = { rss: rss(pid), pages: metric(m, "telos_kv_pages_used") };
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test("slowloris: 150 connections trickling a head hold no worker and are cut at the deadline", async () => {
    const slow = await Promise.all(Array.from({ length: 150 }, () => connect(server.url)));
    const t0 = Date.now();
    // Beside them: a body that stops half-way, and a keep-alive connection left idle.
    const slowBody = await connect(server.url);
    slowBody.socket.write(post("/v1/completions", "x".repeat(100)).slice(0, -90));
    const idle = await connect(server.url);
    idle.socket.write("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let line = 0;
    for (const c of slow) c.socket.write("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n");
    const trickle = setInterval(() => {
      line += 1;
      for (const c of slow) if (!c.closed) c.socket.write(`X-Slow-${line}: x\r\n`);
    }, 1000);
    try {
      await sleep(1200);
      for (let i = 0; i < 3; i++) assert.equal((await health(server.url)).status, 200);
      const done = await postJson(`${server.url}/v1/completions`, { prompt: [5, 6, 7], max_tokens: 4 });
      assert.equal(done.status, 200, done.text);
      // Every slow head gets 408 once its whole head is late, however often it sent a line.
      await Promise.all(slow.map((c) => Promise.race([c.closedPromise, sleep((kHeadTimeout + 3) * 1000)])));
      assert.ok(Date.now() - t0 < (kHeadTimeout + 2) * 1000, `cut after ${Date.now() - t0} ms`);
      assert.equal(slow.filter((c) => c.closed).length, 150);
      assert.equal(slow.filter((c) => /^HTTP\/1\.1 408 /.test(c.answer)).length, 150);
      assert.match(slow[0].answer, /did not arrive within 3 s \(--head-timeout\)/);
      await Promise.race([slowBody.closedPromise, sleep(1000)]);
      assert.match(slowBody.answer, /^HTTP\/1\.1 408 [^]*body did not arrive within 2 s \(--body-timeout\)/);
      assert.ok(idle.closed, "the idle keep-alive connection was closed");
      assert.match(idle.answer, /^HTTP\/1\.1 200 [^]*Connection: keep-alive/);
      assert.doesNotMatch(idle.answer, /408/);
    } finally {
      clearInterval(trickle);
      for (const c of slow) c.socket.destroy();
    }
  });

  test("a chunked body past the limit is 413 at once, in bounded memory", async () => {
    const c = await connect(server.url);
    c.socket.write("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
      "Transfer-Encoding: chunked\r\n\r\n");
    const chunk = Buffer.concat([Buffer.from("10000\r\n"), Buffer.alloc(0x10000, 0x20), Buffer.from("\r\n")]);
    let sent = 0, peak = 0;
    while (!c.answer && !c.closed && sent < kFlood) {
      if (!c.socket.write(chunk)) await Promise.race([new Promise((r) => c.socket.once("drain", r)), c.closedPromise]);
      else await new Promise((r) => setImmediate(r));
      sent += 0x10000;
      if (sent % (1 << 20) === 0) peak = Math.max(peak, rss(pid));
    }
    c.socket.destroy();
    assert.match(c.answer, /^HTTP\/1\.1 413 /, `no 413 after ${sent} bytes`);
    assert.match(c.answer, /larger than this server's limit of 1048576 bytes/);
    assert.ok(sent < 32 << 20, `answered only after ${sent} bytes`);
    assert.ok(peak < idle.rss + kRssSlack, `RSS rose from ${idle.rss} to ${peak}`);
  });

  test("100k header lines are 431 at once", async () => {
    const head = "GET /health HTTP/1.1\r\nHost: localhost\r\n" + "X-Flood: y\r\n".repeat(100000) + "\r\n";
    const r = await exchange(server.url, head);
    assert.equal(r.status, 431, r.answer);
    assert.ok(r.ms < 1000, `${r.ms} ms`);
    assert.match(r.answer, /more than 100 header lines/);
    const long = await exchange(server.url, `GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: ${"z".repeat(20000)}\r\n\r\n`);
    assert.equal(long.status, 431, long.answer);
  });

  test("absurd Content-Lengths are answered at once", async () => {
    for (const [length, status] of [["1000000000000000000", 413], ["1e18", 400], ["-1", 400], ["+5", 400],
      ["99999999999999999999999999", 413], ["5, 5", 400]]) {
      const r = await exchange(server.url, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n" +
        `Content-Type: application/json\r\nContent-Length: ${length}\r\n\r\n`);
      assert.equal(r.status, status, `Content-Length ${length}: ${r.answer}`);
      assert.ok(r.ms < 1000, `Content-Length ${length}: ${r.ms} ms`);
    }
    const both = await exchange(server.url, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n" +
      "Content-Type: application/json\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert.equal(both.status, 400);
  });

  test("a body not sent as JSON is 415", async () => {
    const url = `${server.url}/v1/completions`;
    for (const type of ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"]) {
      const res = await fetch(url, { method: "POST", headers: { "Content-Type": type }, body: '{"prompt": [1]}' });
      assert.equal(res.status, 415, type);
      assert.match((await res.json()).error.message, /application\/json/);
    }
    const ok = await postJson(url, { prompt: [1], max_tokens: 1 }, { "Content-Type": "Application/JSON; charset=utf-8" });
    assert.equal(ok.status, 200, ok.text);
  });

  test("a foreign Host name is 403; localhost, allowed names and IP literals are served", async () => {
    const { port } = hostPort(server.url);
    const get = (host) => exchange(server.url, `GET /health HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
    for (const host of ["evil.example", `evil.example:${port}`, "localhost.evil.example", "127.0.0.1.nip.io"]) {
      const r = await get(host);
      assert.equal(r.status, 403, `${host}: ${r.answer}`);
      assert.match(r.answer, /--allowed-host/);
    }
    for (const host of ["localhost", `LOCALHOST:${port}`, `127.0.0.1:${port}`, "10.1.2.3", `[::1]:${port}`, "[::1]",
      "api.example.test", `Api.Example.Test:${port}`]) {
      const r = await get(host);
      assert.equal(r.status, 200, `${host}: ${r.answer}`);
    }
  });

  test("PUT on a route is 405 with Allow", async () => {
    const r = await exchange(server.url, post("/v1/chat/completions", "{}").replace(/^POST/, "PUT"));
    assert.equal(r.status, 405);
    assert.match(r.answer, /\r\nAllow: POST\r\n/);
    assert.equal((await exchange(server.url, "PUT /nope HTTP/1.1\r\nHost: localhost\r\n\r\n")).status, 404);
  });

  test("pipelined requests are answered in order; 100-continue only for an acceptable head", async () => {
    const body = JSON.stringify({ prompt: [1, 2], max_tokens: 2 });
    const c = await connect(server.url);
    c.socket.write("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n" + post("/v1/completions", body) +
      "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n" + "GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n" +
      "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    await Promise.race([c.closedPromise, sleep(5000)]);
    assert.deepEqual([...c.answer.matchAll(/HTTP\/1\.1 (\d+) /g)].map((m) => Number(m[1])), [200, 200, 200, 404, 200]);
    assert.ok(c.answer.indexOf('"text_completion"') < c.answer.indexOf('"object":"list"'));

    // Many small pipelined requests in one write: all answered, none lost.
    const many = await connect(server.url);
    many.socket.write("GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n".repeat(2000) +
      "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    await Promise.race([many.closedPromise, sleep(5000)]);
    assert.equal([...many.answer.matchAll(/HTTP\/1\.1 200 /g)].length, 2001);

    const head = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n" +
      `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`;
    const go = await connect(server.url);
    go.socket.write(head);
    await waitFor("100 Continue", () => go.answer.length > 0, 2000);
    assert.equal(go.answer, "HTTP/1.1 100 Continue\r\n\r\n");
    go.socket.write(body);
    await waitFor("the response", () => /\r\n\r\n[^]*\}/.test(go.answer.slice(25)), 5000);
    assert.match(go.answer.slice(25), /^HTTP\/1\.1 200 /);
    go.socket.destroy();
    const no = await exchange(server.url, head.replace("application/json", "text/plain"));
    assert.equal(no.status, 415, no.answer);
    const big = await exchange(server.url, head.replace(/Content-Length: \d+/, "Content-Length: 2000000"));
    assert.equal(big.status, 413, big.answer);
  });

  test("a non-streaming client that hangs up has its requests cancelled and its slot freed", async () => {
    for (const n of [1, 3]) {
      const c = await connect(server.url);
      c.socket.write(post("/v1/completions", JSON.stringify({ ...LONG, n })));
      await waitFor("KV pages in use", async () => metric(await metrics(server.url), "telos_kv_pages_used") > idle.pages, 5000);
      c.socket.destroy();
      await waitFor(`n=${n}: pages back and the slot free`, async () => {
        const m = await metrics(server.url);
        return (metric(m, "telos_kv_pages_used") === idle.pages && metric(m, "telos_http_requests_in_flight") === 0) ||
          `${metric(m, "telos_kv_pages_used")} pages used, ${metric(m, "telos_http_requests_in_flight")} in flight`;
      }, 3000);
      const next = await postJson(`${server.url}/v1/completions`, { prompt: [1], max_tokens: 2 });
      assert.equal(next.status, 200, next.text);
    }
  });

  test("afterwards memory and KV pages are back to idle", async () => {
    await waitFor("the attackers' connections closed", async () =>
      metric(await metrics(server.url), "telos_http_connections_open") <= 2, 3000);
    assert.equal(metric(await metrics(server.url), "telos_kv_pages_used"), idle.pages);
    assert.ok(rss(pid) < idle.rss + kRssSlack, `RSS ${rss(pid)}, idle ${idle.rss}`);
    assert.equal((await health(server.url)).status, 200);
  });
});

describe("the connection cap", () => {
  let server;
  before(async () => {
    server = await startServer(`${MODELS}/tiny-long.telos`, ["--max-connections", "4", "--max-concurrent-requests", "4"]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test("slow connections over the cap make room, oldest first, and /health still answers", async () => {
    // Each newcomer past the cap closes the connection that has waited longest for its request,
    // with a 503: the slow clients cycle, a fresh /health gets in.
    const slow = [];
    for (let i = 0; i < 7; i++) {
      const c = await connect(server.url);
      c.socket.write("GET /health HTTP/1.1\r\nHost: localhost\r\n");
      slow.push(c);
      await sleep(30);
    }
    await waitFor("the three oldest refused", () => slow.slice(0, 3).every((c) => c.closed), 2000);
    // A 503 for those whose partial head the server had read (all of them, unless it lagged).
    for (const c of slow.slice(0, 3)) assert.ok(c.answer === "" || /^HTTP\/1\.1 503 [^]*--max-connections/.test(c.answer));
    assert.ok(slow.slice(0, 3).some((c) => c.answer !== ""));
    assert.ok(slow.slice(3).every((c) => !c.closed));
    const h = await health(server.url);
    assert.equal(h.status, 200);
    await waitFor("the oldest still open made room for /health", () => slow[3].closed, 1000);
    assert.ok(slow.slice(4).every((c) => !c.closed));
    for (const c of slow) c.socket.destroy();
  });

  test("when every connection is busy, a new one is answered 503 at once", async () => {
    const streams = [];
    for (let i = 0; i < 4; i++) {
      const s = await openStream(`${server.url}/v1/completions`, LONG);
      assert.equal(s.status, 200);
      await s.next();
      streams.push(s);
    }
    const c = await connect(server.url);
    await Promise.race([c.closedPromise, sleep(2000)]);
    assert.match(c.answer, /^HTTP\/1\.1 503 [^]*all of them busy/);
    for (const s of streams) s.leave();
    await waitFor("connections free again", async () => {
      try {
        return (await health(server.url)).status === 200;
      } catch (e) {
        return String(e);
      }
    }, 5000);
    await waitFor("KV pages back", async () => metric(await metrics(server.url), "telos_kv_pages_used") === 0, 5000);
  });
});

describe("the body budget", () => {
  const kBudget = 1 << 20;  // --max-buffered-bytes
  let server;
  before(async () => {
    server = await startServer(`${MODELS}/tiny-chat.telos`, [
      "--max-buffered-bytes", String(kBudget), "--max-body-bytes", String(kBudget)]);
  });
  after(async () => {
    const { code } = await server.stop();
    assert.equal(code, 0);
  });

  test("bodies held together past the budget: the request that passes it is 503", async () => {
    // Two uploads of 600 KiB each, sent slowly enough that both are held at once: each is within
    // --max-body-bytes, together they pass --max-buffered-bytes.
    const part = 600 << 10;
    const head = "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n" +
      `Content-Type: application/json\r\nContent-Length: ${part + 16}\r\n\r\n`;
    const first = await connect(server.url);
    first.socket.write(head + " ".repeat(part));
    await sleep(200);
    const second = await connect(server.url);
    second.socket.write(head + " ".repeat(part));
    await Promise.race([second.closedPromise, sleep(2000)]);
    assert.match(second.answer, /^HTTP\/1\.1 503 [^]*--max-buffered-bytes/);
    assert.equal(first.closed, false);
    first.socket.destroy();
    // The refused and the abandoned bodies are released: a full-size request is served again.
    await waitFor("the budget free again", async () => {
      const body = JSON.stringify({ prompt: [1, 2], max_tokens: 2 }) + " ".repeat(700 << 10);
      const r = await postJson(`${server.url}/v1/completions`, body);
      return r.status === 200 || r.status;
    }, 3000);
  });
});

// A key on the command line shows in `ps`; the environment and a file do not.
describe("API key sources", () => {
  const check = async (url, key) => {
    const models = `${url}/v1/models`;
    assert.equal((await fetch(models)).status, 401);
    assert.equal((await fetch(models, { headers: { Authorization: `Bearer ${key}x` } })).status, 401);
    assert.equal((await fetch(models, { headers: { Authorization: `Bearer ${key}` } })).status, 200);
    assert.equal((await fetch(`${url}/health`)).status, 200);
  };

  test("TELOS_API_KEY", async () => {
    process.env.TELOS_API_KEY = "from-the-environment";
    let server;
    try {
      server = await startServer(`${MODELS}/tiny-chat.telos`);
    } finally {
      delete process.env.TELOS_API_KEY;
    }
    try {
      await check(server.url, "from-the-environment");
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  test("--api-key-file", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "telos-key-"));
    const file = path.join(dir, "key");
    fs.writeFileSync(file, "from-a-file\n", { mode: 0o600 });
    const server = await startServer(`${MODELS}/tiny-chat.telos`, ["--api-key-file", file]);
    try {
      await check(server.url, "from-a-file");
    } finally {
      assert.equal((await server.stop()).code, 0);
      fs.rmSync(dir, { recursive: true });
    }
  });
});
