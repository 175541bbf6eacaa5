#!/usr/bin/env python3
"""The serving benchmark: what a client of `telos-run serve` sees when requests arrive at random.

For each request rate of --rates (requests/s, or `inf`: all at once), sends --num-requests
streaming requests to /v1/completions with Poisson arrivals, and reports per rate: request
throughput, output tokens/s, time to first token (TTFT), time per output token after the first
(TPOT) and the time between streamed tokens (ITL) at p50/p90/p99, the prefix cache's hit rate
and the peak of KV pages in use (scraped from /metrics), and the errors; then the goodput rate,
the largest rate up to which every rate meets the latency objectives (p99 TTFT and p99 ITL).

    python3 tools/serve_bench.py ARTIFACT [--telos-run BIN] [--engine gpu|cpu] [--serve-args ARGS]
                                 [--workload sharegpt|shared-prefix|multi-turn|long-prompts]
                                 [--rates 1,4,inf] [--num-requests N] [--seed S]
                                 [--no-prefix-cache | --compare-no-prefix-cache]
                                 [--out FILE.json] [--write-docs [FILE.md]]
    python3 tools/serve_bench.py --url http://HOST:PORT [ARTIFACT | --vocab-size V] ...

With ARTIFACT alone it starts `telos-run serve ARTIFACT --port 0` itself (one server for the whole
run; two with --compare-no-prefix-cache, the second with --no-prefix-cache) and stops it at the
end. With --url it measures a server already running; the artifact, or --vocab-size, bounds the
prompt token ids. Prompts are token ids (artifacts without a tokenizer take only those); every
request asks for a fixed number of tokens (`ignore_eos`), greedy. The workloads and their length
distributions are described in docs/benchmarks.md (Serving benchmark) and in WORKLOADS below.

Exit codes: 0 success (request errors are reported, not fatal); 1 error (the server would not
start or cannot be reached, the artifact or the docs file cannot be read or written); 2 usage
error.
"""
import argparse
import asyncio
import collections
import dataclasses
import datetime
import json
import math
import os
import random
import re
import resource
import shlex
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(REPO, "docs", "benchmarks.md")
# Seconds a single request may take, from its send to its last byte, before it counts as failed.
REQUEST_TIMEOUT_S = 1800
# Seconds between two scrapes of /metrics during a rate's run (the KV-page peak is sampled).
SCRAPE_INTERVAL_S = 0.1
# Seconds a started server has to say its port (loading a large artifact), and any server to
# answer /health and /v1/models.
SERVER_START_TIMEOUT_S = 900
HEALTH_TIMEOUT_S = 60


class BenchError(Exception):
    """A failure of the run itself (not of one request): exit 1 with this message."""


# What a connection to the server can fail with (ValueError: a reply that does not parse).
NET_ERRORS = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


# ---- Workloads ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LogNormal:
    """A length distribution: log-normal with this median and shape, rounded and clipped."""
    median: float
    sigma: float
    lo: int
    hi: int

    def draw(self, rng):
        return max(self.lo, min(self.hi, round(self.median * math.exp(rng.gauss(0.0, self.sigma)))))


# ShareGPT-like lengths. The vLLM paper (Kwon et al., 2023) gives ShareGPT's means as 161 prompt
# and 338 output tokens; these log-normals have those means (mean = median * exp(sigma^2 / 2)) and
# the long right tail of chat traffic (prompt p99 ~1000 tokens, output p99 past the clip). They
# are a parametric stand-in, not a fit to the raw conversations (no data set is downloaded). The
# clips are vLLM's benchmark filter: prompts of 4 to 1024 tokens, outputs up to 1024.
PROMPT_LEN = LogNormal(median=98, sigma=1.0, lo=4, hi=1024)
OUTPUT_LEN = LogNormal(median=225, sigma=0.9, lo=2, hi=1024)
# A user's turn in a conversation (shared-prefix, multi-turn): a sentence or two.
USER_TURN_LEN = LogNormal(median=64, sigma=0.6, lo=8, hi=256)
SYSTEM_PROMPT_LEN = 2000  # shared-prefix: at most half of max_seq_len
TURNS = 4  # multi-turn: turns per conversation, each given max_seq_len / TURNS of the context
LONG_PROMPT_LEN = 8000  # long-prompts: one request in LONG_EVERY, clipped to max_seq_len
LONG_EVERY = 10
MIN_OUTPUT = 2  # every request streams at least two tokens, so each has a TPOT and an ITL

WORKLOADS = {
    "sharegpt": "ShareGPT-like prompt and output lengths (log-normal, means 161 and 338 tokens)",
    "shared-prefix": f"a {SYSTEM_PROMPT_LEN}-token system prompt (at most half of max_model_len) "
                     "shared by every request, then a short user turn",
    "multi-turn": f"conversations of {TURNS} turns, each resending the history with the replies",
    "long-prompts": f"sharegpt plus an {LONG_PROMPT_LEN}-token prompt every {LONG_EVERY}th request",
}


@dataclasses.dataclass
class RequestSpec:
    """One request: its prompt ids (multi-turn: the new user turn only, the history is prepended
    when the previous turn has finished) and how many tokens it asks for."""
    index: int
    prompt: list
    output_len: int
    conversation: int = None  # multi-turn only


def fit(prompt_len, output_len, room):
    """Prompt and output lengths clipped so that both fit in `room` tokens of context."""
    if room < MIN_OUTPUT + 1:
        raise BenchError(f"max_model_len leaves {room} tokens for a request of this workload, "
                         f"fewer than the {MIN_OUTPUT + 1} a prompt and its output need")
    prompt_len = min(prompt_len, room - MIN_OUTPUT)
    return prompt_len, max(MIN_OUTPUT, min(output_len, room - prompt_len))


def token_ids(rng, n, vocab_size):
    return [rng.randrange(vocab_size) for _ in range(n)]


def sharegpt_requests(n, max_seq_len, vocab_size, rng):
    out = []
    for i in range(n):
        p, o = fit(PROMPT_LEN.draw(rng), OUTPUT_LEN.draw(rng), max_seq_len)
        out.append(RequestSpec(i, token_ids(rng, p, vocab_size), o))
    return out


def shared_prefix_requests(n, max_seq_len, vocab_size, rng):
    prefix = token_ids(rng, min(SYSTEM_PROMPT_LEN, max_seq_len // 2), vocab_size)
    out = []
    for i in range(n):
        u, o = fit(USER_TURN_LEN.draw(rng), OUTPUT_LEN.draw(rng), max_seq_len - len(prefix))
        out.append(RequestSpec(i, prefix + token_ids(rng, u, vocab_size), o))
    return out


def multi_turn_requests(n, max_seq_len, vocab_size, rng):
    """Request i is turn i // C of conversation i % C (C conversations of TURNS turns), so a
    conversation's turns are C arrivals apart: the user's time to read and answer."""
    conversations = math.ceil(n / TURNS)
    out = []
    for i in range(n):
        u, o = fit(USER_TURN_LEN.draw(rng), OUTPUT_LEN.draw(rng), max_seq_len // TURNS)
        out.append(RequestSpec(i, token_ids(rng, u, vocab_size), o, i % conversations))
    return out


def long_prompt_requests(n, max_seq_len, vocab_size, rng):
    out = sharegpt_requests(n, max_seq_len, vocab_size, rng)
    for r in out[LONG_EVERY // 2::LONG_EVERY]:
        p, r.output_len = fit(LONG_PROMPT_LEN, r.output_len, max_seq_len)
        r.prompt = token_ids(rng, p, vocab_size)
    return out


def build_workload(name, n, max_seq_len, vocab_size, seed):
    """The requests of workload `name`, the same for every rate and every server (one seed)."""
    make = {"sharegpt": sharegpt_requests, "shared-prefix": shared_prefix_requests,
            "multi-turn": multi_turn_requests, "long-prompts": long_prompt_requests}[name]
    return make(n, max_seq_len, vocab_size, random.Random(f"workload-{seed}"))


# ---- Arrivals -----------------------------------------------------------------------------------


def poisson_arrivals(n, rate, seed):
    """Send times in seconds from the start of a rate's run: the first at 0, then exponential gaps
    of mean 1/rate (a Poisson process); all at 0 for rate inf. The same unit gaps scaled by
    1/rate at every rate, so that schedules at two rates are stretched copies of each other."""
    if math.isinf(rate):
        return [0.0] * n
    rng = random.Random(f"arrivals-{seed}")
    times, t = [], 0.0
    for i in range(n):
        if i:
            t += rng.expovariate(1.0) / rate
        times.append(t)
    return times


# ---- Client: HTTP/1.1 over asyncio --------------------------------------------------------------


@dataclasses.dataclass
class Target:
    """The server under test: its base URL, model name and limits."""
    url: str
    model: str = ""
    max_seq_len: int = 0
    vocab_size: int = 0
    engine: str = None  # the engine telos-run named on start; None for --url


async def send_request(url, method, path, body=None):
    """Sends one request (a JSON body, if any) on a new connection; returns (reader, writer). The
    API key in TELOS_API_KEY, if set, goes along as the server expects it."""
    u = urllib.parse.urlsplit(url)
    reader, writer = await asyncio.open_connection(u.hostname, u.port or 80, limit=1 << 22)
    data = b"" if body is None else json.dumps(body).encode()
    head = [f"{method} {path} HTTP/1.1", f"Host: {u.netloc}", "Connection: close",
            f"Content-Length: {len(data)}"]
    if body is not None:
        head.append("Content-Type: application/json")
    if os.environ.get("TELOS_API_KEY"):
        head.append(f"Authorization: Bearer {os.environ['TELOS_API_KEY']}")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    await writer.drain()
    return reader, writer


async def read_head(reader):
    """The response's status and headers (names in lower case)."""
    lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    fields = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
    return int(lines[0].split()[1]), {k.strip().lower(): v.strip() for k, v in fields.items()}


async def body_pieces(reader, headers):
    """The response body as it arrives: chunked, Content-Length, or until the server closes."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while (size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)) > 0:
            yield await reader.readexactly(size)
            await reader.readexactly(2)
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while piece := await reader.read(1 << 16):
            yield piece


async def fetch(url, path):
    """GET path; returns (status, body bytes). Raises OSError when the server cannot be reached."""
    reader, writer = await send_request(url, "GET", path)
    try:
        status, headers = await read_head(reader)
        return status, b"".join([p async for p in body_pieces(reader, headers)])
    finally:
        writer.close()


async def sse_data(pieces):
    """The `data:` payloads of a server-sent event stream, each as soon as its event is whole."""
    buf = b""
    async for piece in pieces:
        buf += piece
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if line.startswith(b"data: "):
                    yield line[6:]


@dataclasses.dataclass
class RequestResult:
    """What the client saw of one request (times from time.perf_counter)."""
    index: int
    prompt_len: int
    output_len: int  # asked for
    start: float = 0.0
    chunk_times: list = dataclasses.field(default_factory=list)  # each chunk that carried tokens
    token_ids: list = dataclasses.field(default_factory=list)
    cached_tokens: int = 0
    error: str = None


def completion_body(target, prompt, output_len, salt):
    return {"model": target.model, "prompt": prompt, "max_tokens": output_len, "ignore_eos": True,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            "return_token_ids": True, "cache_salt": salt}


async def stream_completion(target, prompt, output_len, salt, result):
    """Streams one completion into `result`; a refusal or a broken stream sets result.error."""
    result.start = time.perf_counter()
    reader, writer = await send_request(target.url, "POST", "/v1/completions",
                                        completion_body(target, prompt, output_len, salt))
    try:
        status, headers = await read_head(reader)
        if status != 200:
            body = b"".join([p async for p in body_pieces(reader, headers)])
            result.error = f"HTTP {status}: {body[:300].decode(errors='replace')}"
            return
        async for data in sse_data(body_pieces(reader, headers)):
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                result.error = f"stream error: {chunk['error'].get('message')}"
                return
            ids = [t for c in chunk.get("choices", []) for t in c.get("token_ids", [])]
            if ids:
                result.chunk_times.append(time.perf_counter())
                result.token_ids += ids
            if chunk.get("usage"):
                details = chunk["usage"].get("prompt_tokens_details") or {}
                result.cached_tokens = details.get("cached_tokens", 0)
        if len(result.token_ids) != output_len:
            result.error = f"short output: {len(result.token_ids)} of {output_len} tokens"
    finally:
        writer.close()


async def send(target, spec, prompt, salt):
    """One request end to end; never raises (a failure is the result's error)."""
    result = RequestResult(spec.index, len(prompt), spec.output_len)
    try:
        await asyncio.wait_for(stream_completion(target, prompt, spec.output_len, salt, result),
                               REQUEST_TIMEOUT_S)
    except asyncio.TimeoutError:
        result.error = f"timeout: no end after {REQUEST_TIMEOUT_S} s"
    except NET_ERRORS as e:
        result.error = f"connection: {type(e).__name__}: {e}"
    return result


# ---- Metrics scrape -----------------------------------------------------------------------------


def parse_metrics(text):
    """Prometheus text: {name: value} for the unlabelled samples."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
            out[parts[0]] = float(parts[1])
    return out


async def scrape(url):
    try:
        status, body = await fetch(url, "/metrics")
    except NET_ERRORS:
        return {}
    return parse_metrics(body.decode()) if status == 200 else {}


async def watch_metrics(url, samples, stop):
    """Scrapes /metrics into `samples` every SCRAPE_INTERVAL_S until `stop` is set."""
    while not stop.is_set():
        samples.append(await scrape(url))
        try:
            await asyncio.wait_for(stop.wait(), SCRAPE_INTERVAL_S)
        except asyncio.TimeoutError:
            pass


def metrics_summary(before, after, samples):
    """The prefix cache's hit rate over the run (hits / queries, the counters' increase), the peak
    of KV pages held by requests, the pool's size, the preemptions, and the server's own mean TTFT
    and the queue time inside it (submission to the first step with the request: the rest is its
    steps), from its histograms' sums and counts."""
    def delta(name):
        return after.get(name, 0.0) - before.get(name, 0.0) if name in after else None

    def mean_ms(histogram):
        total, count = delta(histogram + "_sum"), delta(histogram + "_count")
        return 1e3 * total / count if count else None

    queries = delta("telos_prefix_cache_queries_total")
    hits = delta("telos_prefix_cache_hits_total")
    used = [s["telos_kv_pages_used"] for s in samples + [after] if "telos_kv_pages_used" in s]
    preemptions = delta("telos_preemptions_total")
    return {"prefix_cache_hit_rate": hits / queries if queries else None,
            "kv_pages_used_peak": int(max(used)) if used else None,
            "kv_pages_total": int(after["telos_kv_pages_total"]) if "telos_kv_pages_total" in after
            else None,
            "preemptions": int(preemptions) if preemptions is not None else None,
            "server_ttft_ms_mean": mean_ms("telos_time_to_first_token_seconds"),
            "server_queue_ms_mean": mean_ms("telos_request_queue_seconds")}


# ---- One rate's run -----------------------------------------------------------------------------


async def run_requests(target, workload, arrivals, salt):
    """Sends each request at its arrival time (multi-turn: not before its conversation's previous
    turn has finished, with that turn's prompt and reply as history); the results in order."""
    t0 = time.perf_counter()
    history = {}  # conversation: its last turn's prompt and reply

    async def one(spec, at, previous):
        await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
        prompt = spec.prompt
        if spec.conversation is not None:
            if previous:
                if (await previous).error:
                    return RequestResult(spec.index, 0, spec.output_len, time.perf_counter(),
                                         error="earlier turn failed")
            prompt = history.get(spec.conversation, []) + spec.prompt
        result = await send(target, spec, prompt, salt)
        if spec.conversation is not None:
            history[spec.conversation] = prompt + result.token_ids
        return result

    tasks, last_turn = [], {}
    for spec, at in zip(workload, arrivals):
        tasks.append(asyncio.ensure_future(one(spec, at, last_turn.get(spec.conversation))))
        if spec.conversation is not None:
            last_turn[spec.conversation] = tasks[-1]
    return await asyncio.gather(*tasks), t0


async def run_rate(target, workload, rate, seed, salt):
    before = await scrape(target.url)
    samples, stop = [], asyncio.Event()
    watcher = asyncio.ensure_future(watch_metrics(target.url, samples, stop))
    results, t0 = await run_requests(target, workload, poisson_arrivals(len(workload), rate, seed),
                                     salt)
    duration = time.perf_counter() - t0
    stop.set()
    await watcher
    after = await scrape(target.url)
    row = summarize(rate, results, duration)
    row.update(metrics_summary(before, after, samples))
    return row


# ---- Statistics ---------------------------------------------------------------------------------


def percentile(values, p):
    """The p-th percentile with linear interpolation between order statistics (numpy's
    default); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def distribution_ms(seconds):
    """p50, p90, p99 and mean of durations in seconds, as milliseconds."""
    ms = [1e3 * v for v in seconds]
    out = {f"p{p}": percentile(ms, p) for p in (50, 90, 99)}
    out["mean"] = sum(ms) / len(ms) if ms else None
    return out


def request_latencies(r):
    """TTFT, TPOT (mean time per token after the first) and the inter-token gaps of one request."""
    times = r.chunk_times
    ttft = times[0] - r.start
    tpot = (times[-1] - times[0]) / (len(r.token_ids) - 1) if len(r.token_ids) > 1 else None
    return ttft, tpot, [b - a for a, b in zip(times, times[1:])]


def summarize(rate, results, duration):
    done = [r for r in results if r.error is None]
    errors = collections.Counter(r.error.split(":")[0] for r in results if r.error)
    ttft, tpot, itl = [], [], []
    for r in done:
        a, b, c = request_latencies(r)
        ttft.append(a)
        tpot += [b] if b is not None else []
        itl += c
    out_tokens = sum(len(r.token_ids) for r in done)
    row = {"rate": rate_label(rate), "requests": len(results), "completed": len(done),
           "errors": dict(errors),
           "error_examples": sorted({r.error for r in results if r.error})[:3],
           "duration_s": duration, "request_throughput": len(done) / duration,
           "output_tokens_per_s": out_tokens / duration,
           "prompt_tokens": sum(r.prompt_len for r in done), "output_tokens": out_tokens,
           "cached_prompt_tokens": sum(r.cached_tokens for r in done),
           "ttft_ms": distribution_ms(ttft), "tpot_ms": distribution_ms(tpot),
           "itl_ms": distribution_ms(itl)}
    p50, p99 = row["itl_ms"]["p50"], row["itl_ms"]["p99"]
    row["itl_p99_over_p50"] = p99 / p50 if p50 else None
    return row


def rate_label(rate):
    """A rate as JSON holds it: a number (whole ones as integers), or "inf"."""
    if math.isinf(rate):
        return "inf"
    return int(rate) if rate.is_integer() else rate


def rate_value(label):
    return math.inf if label == "inf" else float(label)


def meets_slo(row, ttft_ms, itl_ms):
    """No request failed, p99 TTFT under ttft_ms and p99 ITL under itl_ms."""
    t, i = row["ttft_ms"]["p99"], row["itl_ms"]["p99"]
    return not row["errors"] and t is not None and i is not None and t < ttft_ms and i < itl_ms


def goodput_rate(rows, ttft_ms, itl_ms):
    """The largest rate up to which every rate measured meets the objectives, or None."""
    best = None
    for row in sorted(rows, key=lambda r: rate_value(r["rate"])):
        if not meets_slo(row, ttft_ms, itl_ms):
            break
        best = row["rate"]
    return best


def compare_runs(cached, uncached):
    """Per rate, TTFT p50 with the prefix cache over without it."""
    out = []
    for a, b in zip(cached["rates"], uncached["rates"]):
        x, y = a["ttft_ms"]["p50"], b["ttft_ms"]["p50"]
        out.append({"rate": a["rate"], "ttft_p50_ratio": x / y if x is not None and y else None})
    return out


# ---- Server -------------------------------------------------------------------------------------


def serve_command(args, prefix_cache):
    """`telos-run serve` on a free port, allowed as many requests at once as the run sends."""
    extra = shlex.split(args.serve_args)
    cmd = [args.telos_run, "serve", args.artifact, "--port", "0"] + extra
    if args.engine:
        cmd += ["--engine", args.engine]
    if not prefix_cache:
        cmd.append("--no-prefix-cache")
    if "--max-concurrent-requests" not in extra:
        cmd += ["--max-concurrent-requests", str(min(4096, max(128, args.num_requests)))]
    if "--max-connections" not in extra:
        cmd += ["--max-connections", str(max(1000, args.num_requests + 64))]
    return cmd


class Server:
    """A `telos-run serve` this script started: its URL and engine from its first stderr line
    ("serving NAME on http://HOST:PORT with the ENGINE engine"); stderr is kept for errors."""

    def __init__(self, cmd):
        self.log = []
        self.said = threading.Event()
        self.url = self.engine = None
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True)
        except OSError as e:
            raise BenchError(f"cannot start {cmd[0]}: {e}")
        threading.Thread(target=self._read, daemon=True).start()
        if not self.said.wait(SERVER_START_TIMEOUT_S) or self.url is None:
            self.stop()
            raise BenchError(f"{shlex.join(cmd)} did not start serving "
                             f"(exit code {self.proc.returncode}): " + " | ".join(self.log[-5:]))

    def _read(self):
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            m = re.search(r" on (http://\S+:\d+) with the (\S+) engine", line)
            if m and self.url is None:
                self.url, self.engine = m.group(1), m.group(2)
                self.said.set()
        self.said.set()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def get(url, path):
    """GET url + path, any status; BenchError when the server cannot be reached."""
    try:
        return await asyncio.wait_for(fetch(url, path), HEALTH_TIMEOUT_S)
    except (asyncio.TimeoutError, *NET_ERRORS) as e:
        raise BenchError(f"cannot reach {url}{path}: {type(e).__name__}: {e}")


async def describe_server(target):
    """Checks /health (a server this script started listens once it has said its port) and fills
    in the served model's name and max_model_len from /v1/models."""
    status, body = await get(target.url, "/health")
    if status != 200:
        raise BenchError(f"{target.url}/health: expected HTTP 200, got {status}: "
                         f"{body[:200].decode(errors='replace')}")
    status, body = await get(target.url, "/v1/models")
    try:
        card = json.loads(body)["data"][0]
        target.model, target.max_seq_len = card["id"], int(card["max_model_len"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise BenchError(f"{target.url}/v1/models: expected a model list with max_model_len, got "
                         f"HTTP {status}: {body[:200].decode(errors='replace')}")


# ---- The whole run ------------------------------------------------------------------------------


def warm_up(target, salt):
    """One short request before the rates, so that no rate pays the server's first-request costs."""
    spec = RequestSpec(-1, [i % target.vocab_size for i in range(1, 5)], MIN_OUTPUT)
    result = asyncio.run(send(target, spec, spec.prompt, salt))
    if result.error:
        raise BenchError(f"{target.url}/v1/completions: the warm-up request failed: {result.error}")


def bench_server(args, target):
    """Every rate on one server; each rate's requests carry a cache salt of their own, so that a
    rate never finds the pages an earlier rate (or an earlier run on the same server) cached."""
    asyncio.run(describe_server(target))
    workload = build_workload(args.workload, args.num_requests, target.max_seq_len,
                              target.vocab_size, args.seed)
    run_id = os.urandom(4).hex()
    warm_up(target, f"serve-bench-{run_id}-warm-up")
    rows = []
    for i, rate in enumerate(args.rates):
        row = asyncio.run(run_rate(target, workload, rate, args.seed, f"serve-bench-{run_id}-{i}"))
        print(f"serve_bench: {progress_line(row)}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def manifest_vocab_size(artifact):
    path = os.path.join(artifact, "manifest.json")
    try:
        with open(path) as f:
            vocab = json.load(f)["model"]["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BenchError(f"{path}: cannot read model.vocab_size from the artifact's manifest: "
                         f"{type(e).__name__}: {e}")
    if not isinstance(vocab, int) or vocab < 1:
        raise BenchError(f"{path}: model.vocab_size: expected a whole number >= 1, got {vocab!r}")
    return vocab


def bench(args, prefix_cache):
    """One pass over the rates on a server: one this script starts, or --url's."""
    vocab = args.vocab_size or manifest_vocab_size(args.artifact)
    if args.url:
        target = Target(args.url.rstrip("/"), vocab_size=vocab)
        return {"prefix_cache": None, "rates": bench_server(args, target)}, target
    server = Server(serve_command(args, prefix_cache))
    try:
        target = Target(server.url, vocab_size=vocab, engine=server.engine)
        return {"prefix_cache": prefix_cache, "rates": bench_server(args, target)}, target
    finally:
        server.stop()


def run(args):
    modes = [True, False] if args.compare_no_prefix_cache else [not args.no_prefix_cache]
    runs = []
    for mode in modes:
        result, target = bench(args, mode)
        result["goodput_rate"] = goodput_rate(result["rates"], args.slo_ttft_ms, args.slo_itl_ms)
        runs.append(result)
    report = {"meta": run_meta(args, target), "runs": runs}
    if args.compare_no_prefix_cache:
        report["comparison"] = compare_runs(runs[0], runs[1])
    return report


def hardware(engine):
    """The GPU's name (nvidia-smi) for the GPU engine, else the CPU's model name."""
    if engine != "cpu" and shutil.which("nvidia-smi"):
        res = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True)
        if res.returncode == 0 and res.stdout.strip():
            return res.stdout.strip().splitlines()[0]
    try:
        with open("/proc/cpuinfo") as f:
            names = [l.split(":", 1)[1].strip() for l in f if l.startswith("model name")]
        return f"{names[0]} ({len(names)} CPUs)" if names else "unknown"
    except OSError:
        return "unknown"


def doc_command(argv, telos_run, out_dir):
    """The command line as docs/benchmarks.md shows it: telos-run's folder written $B and the GPU
    call's output folder (`out_dir`, the device tool's $OUT; None: none) written $OUT, the names
    docs/benchmarks.md's commands use, so that no machine's own paths reach the repository."""
    names = [(os.path.dirname(os.path.abspath(telos_run)), "$B")]
    if out_dir:
        names.append((os.path.abspath(out_dir), "$OUT"))
    words = []
    for arg in argv:
        named = arg
        for path, name in names:
            named = named.replace(path + "/", name + "/")
        words.append(named if named != arg and re.fullmatch(r"[\w$/.=,:+-]+", named)
                     else shlex.quote(arg))
    return "python3 tools/serve_bench.py " + " ".join(words)


def run_meta(args, target):
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": doc_command(sys.argv[1:], args.telos_run, os.environ.get("OUT")),
            "hardware": hardware(target.engine), "engine": target.engine, "model": target.model,
            "max_model_len": target.max_seq_len, "workload": args.workload,
            "workload_description": WORKLOADS[args.workload], "num_requests": args.num_requests,
            "seed": args.seed, "slo_ttft_ms": args.slo_ttft_ms, "slo_itl_ms": args.slo_itl_ms}


# ---- Report -------------------------------------------------------------------------------------


def fmt(v, digits=1):
    return "—" if v is None else f"{v:.{digits}f}"


def count(v):
    return "—" if v is None else str(v)


def triple(d):
    return " / ".join(fmt(d[k]) for k in ("p50", "p90", "p99"))


def progress_line(row):
    return (f"rate {row['rate']}: {row['completed']}/{row['requests']} done, "
            f"{fmt(row['request_throughput'], 2)} req/s, TTFT p50 {fmt(row['ttft_ms']['p50'])} ms, "
            f"ITL p99 {fmt(row['itl_ms']['p99'])} ms, errors {row['errors'] or 'none'}")


def rate_table(rows):
    lines = ["| rate req/s | done / errors | req/s | output tok/s | TTFT ms p50 / p90 / p99 "
             "| TPOT ms p50 / p90 / p99 | ITL ms p50 / p90 / p99 | prefix cache hit rate "
             "| peak KV pages used / pool |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        hit = r["prefix_cache_hit_rate"]
        lines.append(
            f"| {r['rate']} | {r['completed']} / {sum(r['errors'].values())} "
            f"| {fmt(r['request_throughput'], 2)} | {fmt(r['output_tokens_per_s'], 0)} "
            f"| {triple(r['ttft_ms'])} | {triple(r['tpot_ms'])} | {triple(r['itl_ms'])} "
            f"| {'—' if hit is None else f'{100 * hit:.1f}%'} "
            f"| {count(r['kv_pages_used_peak'])} / {count(r['kv_pages_total'])} |")
    return lines


def run_title(run):
    return {True: "prefix cache on", False: "prefix cache off (--no-prefix-cache)",
            None: "server at --url"}[run["prefix_cache"]]


def report_lines(report, svg_name=None):
    """The report as markdown: per run its table and goodput rate, then the cache comparison."""
    m = report["meta"]
    lines = [f"### Serving: {m['workload']}", "",
             f"Written by `tools/serve_bench.py` on {m['date']}. Hardware: {m['hardware']}, "
             f"{m['engine'] or 'unknown'} engine. Model `{m['model']}`, max_model_len "
             f"{m['max_model_len']}. Workload: {m['workload_description']}; {m['num_requests']} "
             f"requests per rate, seed {m['seed']}. Command: `{m['command']}`.", ""]
    for run in report["runs"]:
        lines += [f"{run_title(run).capitalize()}: goodput rate "
                  f"{run['goodput_rate'] if run['goodput_rate'] is not None else 'none'} req/s "
                  f"(p99 TTFT < {m['slo_ttft_ms']:g} ms and p99 ITL < {m['slo_itl_ms']:g} ms).",
                  ""] + rate_table(run["rates"]) + [""]
        spread = ", ".join(f"{r['rate']}: {fmt(r['itl_p99_over_p50'], 1)}" for r in run["rates"])
        lines += [f"ITL p99 over its median, by rate: {spread}.", ""]
        server = ", ".join(f"{r['rate']}: {fmt(r.get('server_ttft_ms_mean'))} / "
                           f"{fmt(r.get('server_queue_ms_mean'))}" for r in run["rates"])
        lines += [f"The server's mean TTFT and the queue time in it (ms, /metrics), by rate: "
                  f"{server}.", ""]
    if "comparison" in report:
        ratios = ", ".join(f"{c['rate']}: {fmt(c['ttft_p50_ratio'], 2)}"
                           for c in report["comparison"])
        lines += [f"TTFT p50 with the prefix cache over without it, by rate: {ratios}.", ""]
    if svg_name:
        lines += [f"![TTFT and ITL against the request rate]({svg_name})", ""]
    return lines


# ---- Plot (hand-made SVG: deterministic, no matplotlib needed) ----------------------------------

SERIES = [("ttft_ms", "p50", "TTFT p50", "#1f77b4"), ("ttft_ms", "p99", "TTFT p99", "#aec7e8"),
          ("itl_ms", "p50", "ITL p50", "#d62728"), ("itl_ms", "p99", "ITL p99", "#ff9896")]


@dataclasses.dataclass
class Frame:
    """The plot area in pixels: rate i spread evenly across it, milliseconds on a log scale over
    the decades 10^lo .. 10^hi."""
    rates: int
    lo: int
    hi: int
    left: int = 60
    top: int = 30
    width: int = 430
    height: int = 280

    def x(self, i):
        return self.left + self.width * (i + 0.5) / self.rates

    def y(self, ms):
        return self.top + self.height * (self.hi - math.log10(ms)) / (self.hi - self.lo)


def decades(values):
    """The whole decades (as exponents lo, hi) that hold every value."""
    logs = [math.log10(v) for v in values]
    lo, hi = math.floor(min(logs)), math.ceil(max(logs))
    return lo, max(hi, lo + 1)


def svg_axes(f, rates, title):
    right, bottom = f.left + f.width, f.top + f.height
    out = [f'<text x="{f.left}" y="18" font-size="13">{escape(title)}</text>',
           f'<rect x="{f.left}" y="{f.top}" width="{f.width}" height="{f.height}" fill="none" '
           'stroke="#888"/>']
    for e in range(f.lo, f.hi + 1):
        y = f.y(10 ** e)
        out += [f'<line x1="{f.left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>',
                f'<text x="{f.left - 6}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g}</text>']
    out += [f'<text x="{f.x(i):.1f}" y="{bottom + 16}" text-anchor="middle">{r}</text>'
            for i, r in enumerate(rates)]
    mid = f.top + f.height / 2
    return out + [f'<text x="{f.left + f.width / 2:.1f}" y="{bottom + 38}" text-anchor="middle">'
                  'request rate (requests/s)</text>',
                  f'<text x="16" y="{mid:.1f}" text-anchor="middle" '
                  f'transform="rotate(-90 16 {mid:.1f})">ms (log scale)</text>']


def svg_run(f, run, legend_y):
    """One run's lines (dashed without the prefix cache) and their legend entries from legend_y."""
    dash = ' stroke-dasharray="5,3"' if run["prefix_cache"] is False else ""
    cache = "cache off" if run["prefix_cache"] is False else "cache on"
    out, lx = [], f.left + f.width + 10
    for key, p, name, color in SERIES:
        pts = [(f.x(i), f.y(r[key][p])) for i, r in enumerate(run["rates"]) if r[key][p]]
        if pts:  # a line, and a dot at each rate (a run of one rate has no line to draw)
            coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" '
                       f'stroke-width="2"{dash}/>')
            out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>' for x, y in pts]
        out += [f'<line x1="{lx}" x2="{lx + 20}" y1="{legend_y + 4}" y2="{legend_y + 4}" '
                f'stroke="{color}" stroke-width="2"{dash}/>',
                f'<text x="{lx + 26}" y="{legend_y + 8}">{name}, {cache}</text>']
        legend_y += 16
    return out


def latency_svg(report):
    """TTFT and ITL (p50, p99) against the rate, every run of the report; None with no figures."""
    values = [r[k][p] for run in report["runs"] for r in run["rates"] for k, p, _, _ in SERIES]
    values = [v for v in values if v]
    if not values:
        return None
    rates = [r["rate"] for r in report["runs"][0]["rates"]]
    f = Frame(len(rates), *decades(values))
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="660" height="360" '
           'font-family="sans-serif" font-size="11">']
    out += svg_axes(f, rates, f"{report['meta']['workload']}: latency against request rate")
    for i, run in enumerate(report["runs"]):
        out += svg_run(f, run, f.top + i * 16 * len(SERIES))
    return "\n".join(out + ["</svg>"]) + "\n"


# ---- docs/benchmarks.md -------------------------------------------------------------------------

# The serving part of docs/benchmarks.md lies between these markers (tools/bench_suite.py keeps it
# when it rewrites the file); each workload's results inside it between markers of their own.
SECTION_BEGIN, SECTION_END = "<!-- serve_bench: begin -->", "<!-- serve_bench: end -->"


def workload_markers(workload):
    return f"<!-- serve_bench {workload}: begin -->", f"<!-- serve_bench {workload}: end -->"


def find_block(text, begin, end, where):
    """(start of begin, end of end) of the one block between the markers, None when absent;
    BenchError when they are not one begin followed by one end."""
    if text.count(begin) == 0 and text.count(end) == 0:
        return None
    a = text.find(begin)
    if text.count(begin) != 1 or text.count(end) != 1 or text.find(end) < a:
        raise BenchError(f"{where}: expected one '{begin}' followed by one '{end}'")
    return a, text.find(end) + len(end)


def kept_serving_section(path):
    """The serving section of an existing benchmarks.md, for bench_suite.py to write again after
    its own tables: from the first begin marker to the last end marker (to the file's end when
    there is none, so that nothing is lost); "" when there is no file or no section."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return ""
    start = text.find(SECTION_BEGIN)
    if start < 0:
        return ""
    end = text.rfind(SECTION_END)
    return text[start:end + len(SECTION_END) if end > start else len(text)].rstrip("\n") + "\n"


def replace_workload_section(text, workload, body, where):
    """`text` with workload's results replaced by `body`, or added at the end of the serving
    section (which is added at the end of the file when absent); nothing else changes."""
    begin, end = workload_markers(workload)
    block = f"{begin}\n{body.rstrip()}\n{end}"
    found = find_block(text, begin, end, where)
    if found:
        return text[:found[0]] + block + text[found[1]:]
    section = find_block(text, SECTION_BEGIN, SECTION_END, where)
    if section:
        at = section[1] - len(SECTION_END)
        return text[:at] + block + "\n" + text[at:]
    return (text.rstrip("\n") + f"\n\n{SECTION_BEGIN}\n## Serving benchmark\n\n{block}\n"
            f"{SECTION_END}\n")


def write_atomically(path, text):
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise BenchError(f"{path}: cannot write: {e}")


def write_docs(path, report):
    """Writes the workload's results into `path` and its plot beside it (serve_bench_WORKLOAD.svg);
    reads and checks everything before writing anything."""
    workload = report["meta"]["workload"]
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    except OSError as e:
        raise BenchError(f"{path}: cannot read: {e}")
    svg = latency_svg(report)
    svg_name = f"serve_bench_{workload}.svg"
    body = "\n".join(report_lines(report, svg_name if svg else None))
    text = replace_workload_section(text, workload, body, path)
    if svg:
        write_atomically(os.path.join(os.path.dirname(os.path.abspath(path)), svg_name), svg)
    write_atomically(path, text)


# ---- Command line -------------------------------------------------------------------------------


def parse_rates(text):
    rates = []
    for part in text.split(","):
        try:
            rate = float(part)
        except ValueError:
            rate = math.nan
        if not rate > 0:  # also refuses nan
            raise argparse.ArgumentTypeError(
                f"expected request rates > 0 (requests/s) or 'inf', comma-separated; got '{part}'")
        rates.append(rate)
    return rates


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got '{text}'")
    return value


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got '{text}'")
    return value


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="serve_bench.py", description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 success; 1 error (server, artifact or docs file); 2 usage error.")
    ap.add_argument("artifact", nargs="?", metavar="ARTIFACT", help="the artifact to serve")
    ap.add_argument("--url", help="measure this running server instead of starting one")
    ap.add_argument("--vocab-size", type=positive_int,
                    help="with --url and no ARTIFACT: prompt token ids are drawn below this")
    ap.add_argument("--telos-run", default=os.path.join(REPO, "build", "bin", "telos-run"),
                    help="the telos-run binary (default: build/bin/telos-run)")
    ap.add_argument("--engine", choices=["cpu", "gpu"],
                    help="telos-run serve --engine (default: telos-run's choice)")
    ap.add_argument("--serve-args", default="",
                    help="more telos-run serve options, one string (e.g. '--kv-pages 4096')")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="sharegpt")
    ap.add_argument("--rates", type=parse_rates, default=[1.0, 4.0, 16.0, math.inf],
                    help="request rates, requests/s, comma-separated; inf sends all at once")
    ap.add_argument("--num-requests", type=positive_int, default=200, help="requests per rate")
    ap.add_argument("--seed", type=int, default=0, help="seeds the workload and the arrivals")
    ap.add_argument("--slo-ttft-ms", type=positive_float, default=1000.0,
                    help="goodput: p99 TTFT must stay under this")
    ap.add_argument("--slo-itl-ms", type=positive_float, default=50.0,
                    help="goodput: p99 ITL must stay under this")
    cache = ap.add_mutually_exclusive_group()
    cache.add_argument("--no-prefix-cache", action="store_true",
                       help="start the server with --no-prefix-cache")
    cache.add_argument("--compare-no-prefix-cache", action="store_true",
                       help="run twice, with and without the prefix cache; report the TTFT ratio")
    ap.add_argument("--out", help="write the report as JSON to this file")
    ap.add_argument("--write-docs", nargs="?", const=DOCS, metavar="FILE.md",
                    help="write the results into the serving section of FILE.md (default: "
                         "docs/benchmarks.md) and the plot beside it")
    args = ap.parse_args(argv)
    check_args(ap, args)
    return args


def check_args(ap, args):
    """The combinations argparse cannot check; ap.error exits with code 2."""
    if not args.url and not args.artifact:
        ap.error("give ARTIFACT to serve, or --url of a running server")
    if args.url:
        u = urllib.parse.urlsplit(args.url)
        if u.scheme != "http" or not u.hostname:
            ap.error(f"--url: expected http://HOST:PORT, got '{args.url}'")
        if args.no_prefix_cache or args.compare_no_prefix_cache:
            ap.error("--no-prefix-cache and --compare-no-prefix-cache start servers: "
                     "not with --url")
        if not args.artifact and not args.vocab_size:
            ap.error("--url needs ARTIFACT or --vocab-size to bound the prompt token ids")
    # Checked now rather than after a long run whose figures would then have nowhere to go.
    for option, path in (("--out", args.out), ("--write-docs", args.write_docs)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            ap.error(f"{option} {path}: the folder {os.path.dirname(os.path.abspath(path))} "
                     "does not exist")


def raise_open_file_limit():
    """At rate inf every request holds a connection at once: as many open files as allowed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass  # the soft limit stays; connections past it fail as request errors


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    raise_open_file_limit()
    try:
        report = run(args)
        print("\n".join(report_lines(report)), flush=True)
        if args.out:
            write_atomically(args.out, json.dumps(report, indent=1) + "\n")
        if args.write_docs:
            write_docs(args.write_docs, report)
    except BenchError as e:
        print(f"serve_bench: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
