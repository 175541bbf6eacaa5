#!/usr/bin/env python3
"""The benchmark suite: Telos beside its peers and ceilings, measured in one run.

For each named config of test/telosc/Inputs/configs/ (real shapes, random bf16 weights made by
transformers at run time):
  - `telosc compile` time, cold cache and warm (weights packing included: the artifact is written
    both times), and the weight bytes;
  - `telos-run bench --json`: decode latency at batch 1 (32-token prompt, 256 generated; greedy,
    and again sampled with temperature 0.8 and top_p 0.95), host
    time per step and GPU idle gap at batch 1 and 64 (the median of seven processes, and their
    range), load time and load to first token; with --throughput also
    batches 8/64/256 with 512-token prompts and 128 outputs, a mixed-length run, and time to
    first token for 512/2048/8192-token prompts;
  - the peer: transformers eager in bf16 on the same weights, batch 1, 256 greedy steps after a
    32-token prompt, CUDA events around the decode steps;
  - with --fp8, the same checkpoint compiled with `--quantize fp8` (e4m3 layer weights, the LM
    head bf16) and with `--quantize-lm-head` too (the LM head e4m3, a tied one a copy of the
    embedding): decode latency at batch 1 (greedy) and its floor, the bytes a token reads (every
    weight of the artifact's manifest but an untied embedding table, of which a step reads a row)
    over the copy bandwidth; and compiled for the CPU engine with serving.kv_dtype "bf16" and
    "fp8_e4m3", the same pool otherwise: the tokens a GiB of KV pool holds at each (`telosc
    inspect`) and their ratio;
once a run, before the models:
  - the ceilings: device-to-device copy bandwidth (read + write bytes / time, median of 20), and
    the floor it gives: weight bytes / bandwidth per decoded token at batch 1; with --throughput
    also the bf16 matmul rate (torch.matmul, 8192 cubed), and each throughput batch's decode-step
    floor: its bytes at the bandwidth or its FLOPs at that rate, whichever is longer;
  - with --fp8, decode attention on an e4m3 KV cache (`telos-kernel-bench --attention`, its "plan
    e4m3" rows): % of the copy bandwidth (that bench's own) at context 32k, batches 1, 16 and 64,
    target >= 80%;
  - with --fp8, the W8A8 prefill GEMM on Llama-3.1-8B's shapes at M = 4096, 8192, 16384
    (`telos-prefill-bench --compile-only-w8a8` writes its cubin; codegen/bench/prefill_gemm_torch.py
    --w8a8 times it, two rounds): its speed over torch._scaled_mm's (cuBLASLt FP8, target >= 0.95)
    and over our bf16 prefill GEMM's (target >= 1.5).
A missing binary or a failed tool of --fp8 is its section's line, and the run goes on.

    python3 tools/bench_suite.py --telosc BIN --telos-run BIN --work DIR --out DIR
                                 [--models Llama-3.2-1B,Llama-3.1-8B] [--throughput] [--fp8]
                                 [--prefill-bench BIN] [--kernel-bench BIN]

--prefill-bench and --kernel-bench default to telos-prefill-bench and telos-kernel-bench beside
--telosc. `--models ''` measures no model: the ceilings and, with --fp8, the kernels alone.

Writes OUT/benchmarks.md (the tables, hardware, versions, commands, date), OUT/bench.json (every
figure) and OUT/decode_latency.png (ms/token: Telos, transformers, the floor).

The torch work (the copy bandwidth; each model's checkpoint and its transformers run; the W8A8
GEMM's peer) happens in child processes (--child-ceiling, --child-peer, prefill_gemm_torch.py),
which exit before telos-run starts:
the process that runs telos-run holds no CUDA context of its own. An idle PyTorch context on the
same GPU makes telos-run's host time per step several times what the same artifact measures
alone (docs/performance.md, the host).
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_check import make_checkpoint  # noqa: E402
from serve_bench import DOCS, kept_serving_section  # noqa: E402

TARGET_MS = {"Llama-3.2-1B": 0.68, "Llama-3.1-8B": 4.1}
TARGET_FP8_MS = {"Llama-3.2-1B": 0.40, "Llama-3.1-8B": 2.1}
# The FP8 artifacts --fp8 times: a name, telosc's flags and what the report calls it.
FP8_DECODE = [("fp8", ["--quantize", "fp8"], "`--quantize fp8`, LM head bf16"),
              ("fp8_lm_head", ["--quantize", "fp8", "--quantize-lm-head"],
               "`--quantize fp8 --quantize-lm-head`")]
# The W8A8 prefill GEMM's speed over torch._scaled_mm's (cuBLASLt FP8) and over our bf16 GEMM's.
TARGET_W8A8_OVER_SCALED_MM = 0.95
TARGET_W8A8_OVER_BF16 = 1.5
W8A8_ROUNDS = 2
# Decode attention on an e4m3 KV cache: % of copy bandwidth at this context.
TARGET_ATTENTION_E4M3_PCT = 80
ATTENTION_TARGET_CONTEXT = 32768
# A child tool that runs longer than this is stopped and its row says so.
TOOL_TIMEOUT_S = 900
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The batch-1 decode's second run: sampled, as a chat client's request usually is (the table's
# column names the same values).
SAMPLED = ["--temperature", "0.8", "--top-p", "0.95"]
# Processes that measure the host time per step at each batch, and what each keeps of it.
HOST_PROCESSES = 7
HOST_KEYS = ("host_us_per_step", "host_launch_calls_us_per_step", "gpu_idle_gap_us",
             "host_cpu_us_per_step", "thread_cpu_clock_us", "cpu_steal_pct", "involuntary_switches",
             "cpu_probe_ns")
# A 2048-token step budget, as vLLM's chunked prefill defaults to: with 512, the throughput run's
# 256 requests of 512-token prompts would be admitted one per step and never decode as one batch.
SERVING = {"max_batch": 256, "max_seq_len": 8448, "kv_page_size": 16, "prefill_chunk": 2048}


def median_ms(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def matmul_rate():
    """The tensor cores' bf16 rate as torch.matmul (cuBLAS) reaches it: FLOP/s of an 8192-cubed
    product, median of 20."""
    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    ms = median_ms(lambda: torch.matmul(a, b))
    del a, b
    return 2 * n ** 3 / (ms * 1e-3)


def decode_step_floor_ms(config, weight_bytes, batch, context, bandwidth, flops):
    """The shortest a decode step of `batch` sequences at `context` positions each can take: its
    bytes (every weight once, each sequence's K and V over the context) at the copy bandwidth, or
    its FLOPs (2 a weight a token, and the attention's 4 · context · heads · head_dim a token a
    layer) at the matmul rate, whichever is longer. Returns (ms, "memory" or "compute"). The
    weights count as the batch-1 floor counts them, every tensor: an untied embedding table, of
    which a step reads a row a token, makes both figures a few percent high (the 8B's: 6.5%)."""
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_bytes = batch * context * layers * 2 * kv_heads * head_dim * 2
    step_flops = 2 * (weight_bytes / 2) * batch + 4 * batch * context * layers * heads * head_dim
    memory_ms = (weight_bytes + kv_bytes) / bandwidth * 1e3
    compute_ms = step_flops / flops * 1e3
    return (memory_ms, "memory") if memory_ms >= compute_ms else (compute_ms, "compute")


def copy_bandwidth():
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    del src, dst
    return 2 * n / (ms * 1e-3)


@torch.no_grad()
def transformers_decode_ms(model, vocab, steps=256, prompt_len=32):
    model.to(torch.bfloat16)
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, vocab, (1, prompt_len), generator=g).cuda()
    out = model(prompt, use_cache=True)
    past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    for _ in range(3):  # warm-up steps
        out = model(tok, past_key_values=past, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(steps):
        out = model(tok, past_key_values=past, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / steps


def telosc_time(telosc, ckpt, serving, out, cache, extra=()):
    env = dict(os.environ, TELOS_CACHE_DIR=cache)
    t0 = time.time()
    res = subprocess.run([telosc, "compile", ckpt, "--serving", serving, "-o", out, *extra],
                         capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"telosc failed: {res.stderr[-2000:]}")
    return time.time() - t0


def fp8_decode(args, ckpt, serving, work, bandwidth):
    """Each FP8_DECODE artifact of `ckpt`, compiled (its own kernel cache, so that the bf16
    artifact's cold compile stays cold), timed at batch 1 and removed: {name: its figures}."""
    out = {}
    for name, flags, _ in FP8_DECODE:
        artifact = os.path.join(work, f"model-{name}.telos")
        telosc_time(args.telosc, ckpt, serving, artifact, os.path.join(work, "kernel-cache-fp8"), flags)
        weight_bytes = token_weight_bytes(artifact)
        decode, _ = telos_bench(args.telos_run, artifact,
                                ["--batch", "1", "--prompt-len", "32", "--gen", "256"])
        out[name] = {"weight_bytes": weight_bytes, "floor_ms_per_token": weight_bytes / bandwidth * 1e3,
                     "ms_per_token": decode["runs"][0]["ms_per_token"], "decode": decode}
        subprocess.run(["rm", "-rf", artifact])
    return out


def token_weight_bytes(artifact):
    """The weight bytes a batch-1 decode step reads, from the artifact's manifest: every tensor
    but an untied embedding table, of which a step reads one row."""
    with open(os.path.join(artifact, "manifest.json")) as f:
        m = json.load(f)
    tied = m["model"].get("tie_word_embeddings", False)
    return sum(t["bytes"] for t in m["weights"]["tensors"] if tied or t["name"] != "embed")


def telos_bench(telos_run, artifact, args):
    res = subprocess.run([telos_run, "bench", artifact, "--json"] + args, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"telos-run bench {' '.join(args)} failed: {res.stderr[-2000:]}")
    return json.loads(res.stdout), res.stderr


def child_peer(name, ckpt):
    """In a child process: the checkpoint at ckpt and transformers' decode on it."""
    model, config, _ = make_checkpoint(name, ckpt, None, 0)
    return {"weight_bytes": sum(p.numel() * 2 for p in model.parameters()),
            "transformers_ms_per_token": transformers_decode_ms(model, config.vocab_size)}


def run_child(args):
    """This script with `args` in a child process; the JSON object it prints last."""
    res = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"bench_suite {' '.join(args)} failed: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_tool(cmd, what):
    """`cmd`'s stdout; a missing binary, a non-zero exit or a timeout raise RuntimeError naming
    `what` (the tool and, for a binary, its bench_suite argument)."""
    if not os.access(cmd[0], os.X_OK):
        raise RuntimeError(f"{what}: {cmd[0]} not found or not executable")
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what}: stopped after {TOOL_TIMEOUT_S} s") from None
    if res.returncode != 0:
        said = (res.stderr or res.stdout).strip()[-1500:] or "no output"
        raise RuntimeError(f"{what} exited {res.returncode}: {said}")
    return res.stdout


def parse_kv_cache(text):
    """The "kv cache:" line of `telosc inspect`: bytes a page, tokens a page, the element type and
    the tokens a GiB of pool holds."""
    m = re.search(r"^kv cache: (\d+) bytes per page of (\d+) tokens \([^)]*\), (\w+)\b.*, (\d+) "
                  r"tokens a GiB$", text, re.M)
    if not m:
        raise ValueError("telosc inspect printed no \"kv cache: ... tokens a GiB\" line")
    return {"bytes_per_page": int(m.group(1)), "page_tokens": int(m.group(2)), "dtype": m.group(3),
            "tokens_per_gib": int(m.group(4))}


def kv_capacity(telosc, model, serving, work):
    """The tokens a GiB of KV pool holds with serving.kv_dtype "bf16" and "fp8_e4m3", the same
    `serving` (dict) otherwise, and their ratio; {"error": ...} on a failure. Each artifact is
    compiled for the CPU engine (the cache's pages are the GPU artifact's: no kernels needed),
    read with `telosc inspect` and removed."""
    result = {}
    try:
        for kv_dtype in ("bf16", "fp8_e4m3"):
            config = os.path.join(work, f"serving-kv-{kv_dtype}.json")
            with open(config, "w") as f:
                json.dump(dict(serving, kv_dtype=kv_dtype), f)
            artifact = os.path.join(work, f"kv-{kv_dtype}.telos")
            run_tool([telosc, "compile", model, "--serving", config, "--target", "cpu", "-o", artifact],
                     f"telosc compile (kv_dtype {kv_dtype})")
            try:
                result[kv_dtype] = parse_kv_cache(run_tool([telosc, "inspect", artifact], "telosc inspect"))
            finally:
                subprocess.run(["rm", "-rf", artifact])
    except (RuntimeError, ValueError) as e:
        return {"error": str(e)}
    result["ratio"] = result["fp8_e4m3"]["tokens_per_gib"] / result["bf16"]["tokens_per_gib"]
    return result


def table_cells(line):
    """The cells of a markdown table row, stripped."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_w8a8(text):
    """prefill_gemm_torch.py --w8a8's output: the peer's scales (its round header), each shape's
    times in the last round, and the ratios' median and range over the rounds."""
    peer = re.search(r"^round 1: W8A8, our bf16 GEMM and torch\._scaled_mm \((.*)\) interleaved in one "
                     r"process", text, re.M)
    last, summary, section = {}, [], None
    for line in text.splitlines():
        if line.startswith("round "):
            section, last = "round", {}
        elif line.startswith("over "):
            section = "summary"
        elif line.startswith("| ") and not line.startswith("| shape"):
            cells = table_cells(line)
            if section == "round" and len(cells) == 13:
                last[tuple(cells[:5])] = [float(c) for c in cells[5:10]]
            elif section == "summary" and len(cells) == 7:
                summary.append(cells)
    if not summary:
        raise ValueError("prefill_gemm_torch.py --w8a8 printed no table of ratios over its rounds")
    rows = []
    for cells in summary:
        ratios = [re.fullmatch(r"([\d.]+) \(([\d.]+)-([\d.]+)\)", c) for c in cells[5:7]]
        if not all(ratios):
            raise ValueError(f"prefill_gemm_torch.py --w8a8: expected \"median (min-max)\" ratios in {cells}")
        times = last.get(tuple(cells[:5]), [None] * 5)
        rows.append({"shape": cells[0], "M": int(cells[1]), "N": int(cells[2]), "K": int(cells[3]),
                     "epilogue": cells[4], **dict(zip(("w8a8_ms", "w8a8_tflops", "bf16_ms", "scaled_mm_ms",
                                                       "quant_ms"), times)),
                     "scaled_mm_over_w8a8": [float(x) for x in ratios[0].groups()],
                     "bf16_over_w8a8": [float(x) for x in ratios[1].groups()]})
    return {"peer": peer.group(1) if peer else None, "rows": rows}


def prefill_w8a8(prefill_bench, work):
    """The W8A8 prefill GEMM on the 8B's shapes at M = 4096-16384 beside torch._scaled_mm and our
    bf16 GEMM: telos-prefill-bench writes the cubin, codegen/bench/prefill_gemm_torch.py (a child:
    torch) times it over W8A8_ROUNDS rounds. {"error": ...} on a failure."""
    cubin = os.path.join(work, "prefill-w8a8.cubin")
    try:
        run_tool([prefill_bench, "--compile-only-w8a8", cubin], "telos-prefill-bench (--prefill-bench)")
        script = os.path.join(ROOT, "codegen", "bench", "prefill_gemm_torch.py")
        return parse_w8a8(run_tool([sys.executable, script, "--w8a8", cubin, str(W8A8_ROUNDS)],
                                   "prefill_gemm_torch.py --w8a8"))
    except (RuntimeError, ValueError) as e:
        return {"error": str(e)}


def parse_attention_e4m3(text):
    """telos-kernel-bench --attention's output: the GPU, the copy bandwidth it measured, and its
    "plan e4m3" rows (the plan's attn_split + combine on an e4m3 cache, 8 layers chained with PDL):
    batch, context, µs a layer, GB/s and % of copy on the cache's bytes."""
    lines = text.splitlines()
    copy_gbs, rows = None, []
    for line in lines:
        cells = table_cells(line)
        if len(cells) != 5:
            continue
        if cells[0] == "cudaMemcpy D2D (read+write)":
            copy_gbs = float(cells[3])
        shape = re.fullmatch(r"B=(\d+) ctx=(\d+)", cells[1])
        if cells[0].startswith("attn_split+combine PDL plan e4m3 ") and shape:
            rows.append({"batch": int(shape.group(1)), "context": int(shape.group(2)),
                         "us": float(cells[2]), "gbs": float(cells[3]), "pct_copy": float(cells[4])})
    if not rows:
        said = next((l for l in lines if l.strip()), "nothing")
        raise ValueError(f"telos-kernel-bench --attention printed no \"plan e4m3\" rows (it said: {said})")
    return {"gpu": lines[0], "copy_gbs": copy_gbs, "rows": rows}


def attention_e4m3(kernel_bench):
    """Decode attention on an e4m3 KV cache against the copy bandwidth (telos-kernel-bench
    --attention); {"error": ...} on a failure."""
    try:
        return parse_attention_e4m3(run_tool([kernel_bench, "--attention"],
                                             "telos-kernel-bench (--kernel-bench)"))
    except (RuntimeError, ValueError) as e:
        return {"error": str(e)}


def bench_model(name, args, bandwidth):
    row = {"model": name}
    work = os.path.join(args.work, name)
    ckpt = os.path.join(work, "checkpoint")
    os.makedirs(ckpt, exist_ok=True)
    peer = run_child(["--child-peer", name, ckpt])
    row["weight_bytes"] = peer["weight_bytes"]
    row["floor_ms_per_token"] = peer["weight_bytes"] / bandwidth * 1e3
    row["transformers_ms_per_token"] = peer["transformers_ms_per_token"]

    serving = os.path.join(work, "serving.json")
    with open(serving, "w") as f:
        json.dump(SERVING, f)
    if args.fp8:  # first: the disk then holds the checkpoint and one artifact at a time
        row["kv_capacity"] = kv_capacity(args.telosc, ckpt, SERVING, work)
        row["fp8_decode"] = fp8_decode(args, ckpt, serving, work, bandwidth)
    cache = os.path.join(work, "kernel-cache")
    artifact = os.path.join(work, "model.telos")
    row["compile_cold_s"] = telosc_time(args.telosc, ckpt, serving, artifact, cache)
    row["compile_warm_s"] = telosc_time(args.telosc, ckpt, serving, artifact, cache)
    subprocess.run(["rm", "-rf", ckpt])

    decode, stderr = telos_bench(args.telos_run, artifact,
                                 ["--batch", "1", "--prompt-len", "32", "--gen", "256", "--profile"])
    row["engine_log"] = [l for l in stderr.splitlines() if l.strip()][:20]
    row.setdefault("telos", {})["decode"] = decode
    run = decode["runs"][0]
    row["telos_ms_per_token"] = run["ms_per_token"]
    row["load_s"] = decode["load_s"]
    row["load_to_first_token_s"] = decode["load_to_first_token_s"]
    # The same decode with the sampling an OpenAI-style client usually sends (SAMPLED): the
    # sampler's exact top_p search is no longer the greedy row's few loads.
    sampled, _ = telos_bench(args.telos_run, artifact, ["--batch", "1", "--prompt-len", "32", "--gen", "256"] + SAMPLED)
    row["telos"]["decode_sampled"] = sampled
    row["telos_sampled_ms_per_token"] = sampled["runs"][0]["ms_per_token"]
    b64, _ = telos_bench(args.telos_run, artifact,
                         ["--batch", "64", "--prompt-len", "32", "--gen", "64", "--profile"])
    row["telos"]["batch64"] = b64
    # The host time per step varies between processes on the GPU machine (a VM whose slow spells
    # make every device call and the engine's own work cost several times more, pinned to a core
    # or not, with or without address randomisation: docs/performance.md), so it is measured in HOST_PROCESSES processes at each batch, these two runs and short
    # ones after them, and the table gives their median and range.
    for key, batch in (("decode", "1"), ("batch64", "64")):
        runs = [row["telos"][key]["runs"][0]]
        for _ in range(HOST_PROCESSES - 1):
            extra, _ = telos_bench(args.telos_run, artifact, ["--batch", batch, "--prompt-len", "32", "--gen", "64"])
            runs.append(extra["runs"][0])
        row["telos"][key]["host_processes"] = [{k: r.get(k) for k in HOST_KEYS} for r in runs]
    if args.throughput:
        thr, _ = telos_bench(args.telos_run, artifact, ["--batch", "8,64,256", "--prompt-len", "512",
                                                        "--gen", "128", "--mixed", "128",
                                                        "--ttft", "512,2048,8192"])
        row["telos"]["throughput"] = thr
    return row


def model_config(name):
    """The model's config.json from test/telosc/Inputs/configs (None if absent)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "telosc", "Inputs",
                        "configs", name, "config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def fmt(v, digits=3):
    return "—" if v is None else f"{v:.{digits}f}"


def host_cell(bench):
    """Host µs per step, and of it the device API calls that launch the step (telos-run bench):
    the median over the processes that measured it, and their range."""
    procs = bench.get("host_processes") or [bench["runs"][0]]
    values = {k: [p[k] for p in procs if p.get(k) is not None]
              for k in ("host_us_per_step", "host_launch_calls_us_per_step")}
    med = {k: statistics.median(v) if v else None for k, v in values.items()}
    cell = f"{fmt(med['host_us_per_step'], 1)} ({fmt(med['host_launch_calls_us_per_step'], 1)})"
    host = values["host_us_per_step"]
    if len(host) > 1:
        cell += f", {len(host)} processes {min(host):.1f}–{max(host):.1f}"
    return cell


def host_process_section(rows):
    """Each host-time process as measured: wall-clock µs a step, the loop thread's CPU time over the
    same work (lower by the time it was off its CPU; it includes one read of that clock, whose cost
    is given), the share of the machine's CPU time the hypervisor stole over the run, the process's
    involuntary context switches, and telos-run bench's probe of the CPU's speed before the run."""
    lines = ["", "### Host time per step, process by process", "",
             "Wall-clock µs / thread CPU µs a step (medians over the run's full-batch decode "
             "steps), CPU stolen by the hypervisor over the run (% of the machine's), involuntary "
             "context switches; the thread CPU clock's own cost, included once in the CPU figure; the CPU "
             "probe before the run, ns a step: a dependent integer chain / a random walk over 128 KB / "
             "over 64 MB (telos-run bench):", ""]

    def steal(v):  # null where the run was shorter than a clock tick of /proc/stat
        return "—" if v is None else f"{v:.2f}%"

    def probe(p):
        return "—" if not p else f"{p['alu']:.2f} / {p['cache']:.2f} / {p['dram']:.0f}"

    for r in rows:
        for key, label in (("decode", "batch 1"), ("batch64", "batch 64")):
            procs = r.get("telos", {}).get(key, {}).get("host_processes") or []
            cells = [f"{fmt(p.get('host_us_per_step'), 1)} / {fmt(p.get('host_cpu_us_per_step'), 1)} "
                     f"({steal(p.get('cpu_steal_pct'))}, {p.get('involuntary_switches', '—')}; clock "
                     f"{fmt(p.get('thread_cpu_clock_us'), 1)}; probe {probe(p.get('cpu_probe_ns'))})"
                     for p in procs]
            if cells:
                lines.append(f"- {r['model']}, {label}: " + "; ".join(cells))
    return lines


def launch_calls_line(run):
    """The run's host time in the launch calls by call group, and the descriptor bytes uploaded
    per step (medians over its full-batch decode steps; telos-run bench), or None before they
    were measured."""
    if run.get("host_upload_us") is None:
        return None
    return (f"Launch calls: upload {run['host_upload_us']:.1f}, wait {run['host_wait_us']:.1f}, "
            f"graph launch {run['host_graph_launch_us']:.1f}, other {run['host_other_us']:.1f} µs "
            f"(medians; total {fmt(run.get('host_launch_calls_us_per_step'), 1)} µs); the bench's "
            f"own timing events {fmt(run.get('host_timing_events_us'), 1)} µs, not counted; "
            f"descriptor upload {run['descriptor_upload_bytes'] / 1e3:.1f} KB per step.")


def profile_sections(rows):
    """Where a decode step's time goes: `telos-run bench --profile` replays the first step of the
    run's largest decode bucket (a full-batch step) as its graph and kernel by kernel (events
    between launches, no overlap); the run's launch calls by call group above the kernels."""
    lines = []
    for r in rows:
        for key, label in (("decode", "batch 1"), ("batch64", "batch 64")):
            run = r.get("telos", {}).get(key, {}).get("runs", [{}])[0]
            p = run.get("profile")
            if not p:
                continue
            by = {}
            for k in p["kernels"]:
                name = k["instance"].split("<")[0].replace("telos_kernels::", "")
                n, us = by.get(name, (0, 0.0))
                by[name] = (n + k["launches"], us + k["total_us"])
            lines += ["", f"### Where the time goes: {r['model']}, one decode step at {label} ({p['bucket']})", "",
                      f"Graph (programmatic launches): {p['graph_us']:.1f} µs; the same kernels one by one: "
                      f"{p['serial_us']:.1f} µs. Host time of the graph launch (cudaGraphLaunch, part of "
                      f"the host time per step): {p.get('launch_host_us', float('nan')):.1f} µs.", ""]
            calls = launch_calls_line(run)
            if calls:
                lines += [calls, ""]
            lines += ["| kernel | launches | µs | µs per launch | share |", "| --- | --- | --- | --- | --- |"]
            for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
                lines.append(f"| {name} | {n} | {us:.1f} | {us / n:.2f} | {100 * us / p['serial_us']:.1f}% |")
    return lines


def one_line(text, limit):
    """A failure's message in a table cell or a line: its whitespace runs as single spaces, its last
    `limit` characters (a traceback's last line says most)."""
    return " ".join(text.split())[-limit:]


def fp8_decode_lines(rows):
    """Batch-1 decode with FP8 weights beside its target and floor."""
    fp8_rows = [r for r in rows if "fp8_decode" in r]
    if not fp8_rows:
        return []
    lines = ["", "### Decode latency, batch 1, FP8 weights", "",
             "| model | artifact | Telos ms/token | target | floor ms/token (bytes a token reads / "
             "copy BW) | Telos % of floor |", "| --- | --- | --- | --- | --- | --- |"]
    for r in fp8_rows:
        for name, _, label in FP8_DECODE:
            d = r["fp8_decode"].get(name)
            if not d:
                continue
            t, floor = d["ms_per_token"], d["floor_ms_per_token"]
            lines.append(f"| {r['model']} | {label} | {fmt(t)} | "
                         f"≤ {TARGET_FP8_MS.get(r['model'], float('nan'))} | {fmt(floor)} | "
                         f"{fmt(100 * floor / t if t else None, 0)}% |")
    return lines


def kv_capacity_lines(rows):
    """Each model's KV pool: the tokens a GiB holds at bf16 and at e4m3, and their ratio."""
    kv_rows = [r for r in rows if "kv_capacity" in r]
    if not kv_rows:
        return []
    lines = ["", "### KV pool capacity, bf16 against e4m3 (`serving.kv_dtype`, the same pool; "
             "`telosc inspect`)", "",
             "| model | bf16 bytes a page | bf16 tokens a GiB | e4m3 bytes a page | e4m3 tokens a GiB "
             "| e4m3 / bf16 |", "| --- | --- | --- | --- | --- | --- |"]
    for r in kv_rows:
        kv = r["kv_capacity"]
        if "error" in kv:
            lines.append(f"| {r['model']} | error: {one_line(kv['error'], 300)} | | | | |")
            continue
        b, e = kv["bf16"], kv["fp8_e4m3"]
        lines.append(f"| {r['model']} | {b['bytes_per_page']} | {b['tokens_per_gib']} | "
                     f"{e['bytes_per_page']} | {e['tokens_per_gib']} | {kv['ratio']:.2f}× |")
    return lines


def prefill_w8a8_lines(result):
    """The W8A8 prefill GEMM beside torch._scaled_mm and our bf16 GEMM, with the targets."""
    if not result:
        return []
    lines = ["", "### W8A8 prefill GEMM, Llama-3.1-8B shapes (`codegen/bench/prefill_gemm_torch.py "
             f"--w8a8`, {W8A8_ROUNDS} rounds interleaved in one process)", ""]
    if "error" in result:
        return lines + [f"Not measured: {one_line(result['error'], 600)}"]

    def ratio(r):
        return f"{r[0]:.3f} ({r[1]:.3f}–{r[2]:.3f})"

    lines += [f"torch._scaled_mm's scales: {result['peer'] or '—'}. Times from the last round; "
              "ratios: median over the rounds (range).", "",
              "| shape | M | N | K | epilogue | W8A8 ms | TFLOP/s | bf16 ms | scaled_mm ms | quant ms "
              f"| scaled_mm / W8A8 (≥ {TARGET_W8A8_OVER_SCALED_MM}) "
              f"| bf16 / W8A8 (≥ {TARGET_W8A8_OVER_BF16}) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        lines.append(f"| {r['shape']} | {r['M']} | {r['N']} | {r['K']} | {r['epilogue']} | "
                     f"{fmt(r['w8a8_ms'])} | {fmt(r['w8a8_tflops'], 0)} | {fmt(r['bf16_ms'])} | "
                     f"{fmt(r['scaled_mm_ms'])} | {fmt(r['quant_ms'])} | {ratio(r['scaled_mm_over_w8a8'])} | "
                     f"{ratio(r['bf16_over_w8a8'])} |")
    return lines


def attention_e4m3_lines(result, bandwidth):
    """Decode attention on an e4m3 cache: % of copy bandwidth at the target's context, with the
    floor (the cache's bytes at telos-kernel-bench's copy bandwidth); the other contexts in a
    line."""
    if not result:
        return []
    lines = ["", f"### Decode attention on an e4m3 KV cache, context {ATTENTION_TARGET_CONTEXT} "
             "(`telos-kernel-bench --attention`, \"plan e4m3\" rows)", ""]
    if "error" in result:
        return lines + [f"Not measured: {one_line(result['error'], 600)}"]
    copy = result.get("copy_gbs")
    lines += [f"The plan's attn_split + combine, head dim 128, GQA 32/8, 8 layers chained with PDL; GB/s "
              f"on the cache's bytes, against telos-kernel-bench's own copy bandwidth ({fmt(copy, 0)} GB/s, "
              f"2 GiB; this run's: {bandwidth / 1e9:.0f} GB/s).", "",
              "| batch | µs a layer | floor µs (cache bytes / copy BW) | GB/s "
              f"| % of copy (≥ {TARGET_ATTENTION_E4M3_PCT}%) |", "| --- | --- | --- | --- | --- |"]
    for r in result["rows"]:
        if r["context"] == ATTENTION_TARGET_CONTEXT:
            lines.append(f"| {r['batch']} | {r['us']:.1f} | {r['us'] * r['pct_copy'] / 100:.1f} | "
                         f"{r['gbs']:.0f} | {r['pct_copy']:.1f}% |")
    others = [f"context {r['context']} batch {r['batch']} {r['pct_copy']:.1f}%"
              for r in result["rows"] if r["context"] != ATTENTION_TARGET_CONTEXT]
    if others:
        lines += ["", "Other contexts (% of copy): " + ", ".join(others) + "."]
    return lines


def fp8_section(rows, meta, kernels):
    """The FP8 measures (--fp8): each beside its target and, where one applies, its floor."""
    parts = (fp8_decode_lines(rows) + kv_capacity_lines(rows) + prefill_w8a8_lines(kernels.get("prefill_w8a8"))
             + attention_e4m3_lines(kernels.get("attention_e4m3"), meta["bandwidth"]))
    return ["", "## FP8 (`--fp8`)"] + parts if parts else []


def write_report(rows, meta, out, kernels=None):
    lines = [
        "# Benchmarks",
        "",
        f"Written by `tools/bench_suite.py` on {meta['date']}. Hardware: {meta['gpu']}, "
        f"driver {meta['driver']}, CUDA {meta['cuda']}; torch {meta['torch']}, transformers "
        f"{meta['transformers']}. Command (on the GPU machine): `{meta['command']}`. Copy "
        f"bandwidth measured in the same run: {meta['bandwidth'] / 1e9:.0f} GB/s (read + write "
        "bytes over time, 1 GiB device-to-device, median of 20). Models: real configs with "
        "random bf16 weights.",
        "",
        "## Decode latency, batch 1 (32-token prompt, 256 generated)",
        "",
        "| model | Telos ms/token | target | floor ms/token (weights / copy BW) | Telos % of floor "
        "| Telos ms/token sampled (temperature 0.8, top_p 0.95) "
        "| transformers eager bf16 ms/token | host µs/step (of which launch calls), median of processes and range "
        "| GPU idle µs between steps |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error'][:200]} | | | | | | | |")
            continue
        run = r["telos"]["decode"]["runs"][0]
        t = r["telos_ms_per_token"]
        lines.append(
            f"| {r['model']} | {fmt(t)} | ≤ {TARGET_MS.get(r['model'], float('nan'))} | "
            f"{fmt(r['floor_ms_per_token'])} | {fmt(100 * r['floor_ms_per_token'] / t if t else None, 0)}% | "
            f"{fmt(r.get('telos_sampled_ms_per_token'))} | "
            f"{fmt(r['transformers_ms_per_token'])} | {host_cell(r['telos']['decode'])} | "
            f"{fmt(run.get('gpu_idle_gap_us'), 1)} |")
    lines += fp8_section(rows, meta, kernels or {})
    lines += ["", "## Batch 64 decode, load and compile", "",
              "| model | batch 64 ms/step | batch 64 tok/s | host µs/step (of which launch calls), median of "
              "processes and range | GPU idle µs | load s | "
              "load to first token s | telosc cold s | telosc warm s | host RSS MB, end / peak |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            continue
        run = r["telos"]["batch64"]["runs"][0]
        lines.append(
            f"| {r['model']} | {fmt(run['ms_per_token'])} | {fmt(run['output_tokens_per_s'], 0)} | "
            f"{host_cell(r['telos']['batch64'])} | {fmt(run.get('gpu_idle_gap_us'), 1)} | "
            f"{fmt(r['load_s'], 2)} | {fmt(r['load_to_first_token_s'], 2)} | "
            f"{fmt(r['compile_cold_s'], 1)} | {fmt(r['compile_warm_s'], 1)} | "
            f"{fmt(r['telos']['batch64'].get('host_rss_mb'), 0)} / {fmt(r['telos']['batch64'].get('host_peak_rss_mb'), 0)} |")
    lines += host_process_section(rows)
    lines += profile_sections(rows)
    thr_rows = [r for r in rows if "throughput" in r.get("telos", {})]
    if thr_rows:
        lines += ["", "## Throughput (512-token prompts, 128 outputs) and time to first token", "",
                  "The floor of a decode step: its bytes (the weights once, each sequence's K and V "
                  "at the mean decode context, prompt + half the output) at the copy bandwidth, or its "
                  "FLOPs at the bf16 matmul rate measured in the same run "
                  f"({fmt(meta['flops'] / 1e12 if meta.get('flops') else None, 0)} TFLOP/s, "
                  "torch.matmul 8192³), whichever is longer.", "",
                  "| model | batch | output tok/s | total s | ms/step (decode) | floor ms/step (bound) "
                  "| Telos % of floor |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in thr_rows:
            config = model_config(r["model"])
            for run in r["telos"]["throughput"]["runs"]:
                floor = bound = None
                if config:  # without the matmul rate, the memory bound alone
                    floor, bound = decode_step_floor_ms(config, r["weight_bytes"], run["batch"],
                                                        run["prompt_len"] + run["gen"] // 2,
                                                        meta["bandwidth"], meta.get("flops") or float("inf"))
                step = run.get("ms_per_token")
                share = f"{100 * floor / step:.0f}%" if floor and step else "—"
                lines.append(f"| {r['model']} | {run['batch']} | {fmt(run['output_tokens_per_s'], 0)} | "
                             f"{fmt(run['total_s'], 2)} | {fmt(step)} | "
                             f"{fmt(floor)} ({bound or '—'}) | {share} |")
        for r in thr_rows:
            t = r["telos"]["throughput"]
            if t.get("mixed"):
                m = t["mixed"]
                lines.append(f"\n{r['model']} mixed run: {m['requests']} requests, "
                             f"{fmt(m['output_tokens_per_s'], 0)} output tok/s, TTFT mean "
                             f"{fmt(m['mean_ttft_s'] * 1e3, 1)} ms.")
            for x in t.get("ttft", []):
                lines.append(f"- {r['model']} TTFT, {x['prompt_len']}-token prompt: {fmt(x['ttft_s'] * 1e3, 1)} ms")
    lines += ["", "![ms/token at batch 1](decode_latency.png)", ""]
    path = os.path.join(out, "benchmarks.md")
    # tools/serve_bench.py's section (its description and results) stays: that of the file being
    # rewritten, else that of docs/benchmarks.md, which a report in a fresh OUT is copied over.
    serving = kept_serving_section(path) or kept_serving_section(DOCS)
    if serving:
        lines += [serving]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def save(rows, meta, kernels, out):
    """bench.json and the report as far as the run got, so that a run cut short keeps what it
    measured."""
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "kernels": kernels}, f, indent=1)
    write_report(rows, meta, out, kernels)


def plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = range(len(ok))
    w = 0.27
    ax.bar([i - w for i in x], [r["floor_ms_per_token"] for r in ok], w, label="floor (weights / copy BW)")
    ax.bar(list(x), [r["telos_ms_per_token"] or 0 for r in ok], w, label="Telos")
    ax.bar([i + w for i in x], [r["transformers_ms_per_token"] for r in ok], w, label="transformers eager bf16")
    ax.set_xticks(list(x), [r["model"] for r in ok])
    ax.set_ylabel("ms / token, batch 1")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "decode_latency.png"), dpi=120)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child-ceiling":
        bandwidth = copy_bandwidth()
        try:  # the throughput floors' second bound; the run goes on without it
            flops = matmul_rate()
        except Exception as e:
            print(f"bench_suite: matmul rate not measured: {e}", file=sys.stderr)
            flops = None
        print(json.dumps({"bandwidth": bandwidth, "flops": flops}))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--child-peer":
        print(json.dumps(child_peer(sys.argv[2], sys.argv[3])))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--telosc", required=True)
    ap.add_argument("--telos-run", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="Llama-3.2-1B,Llama-3.1-8B")
    ap.add_argument("--throughput", action="store_true")
    ap.add_argument("--fp8", action="store_true",
                    help="also the FP8 measures: each model's batch-1 decode with --quantize fp8 "
                         "(and --quantize-lm-head) and "
                         "its KV pool's tokens a GiB at kv_dtype fp8_e4m3 against bf16, the W8A8 "
                         "prefill GEMM and decode attention on an e4m3 cache")
    ap.add_argument("--prefill-bench", help="telos-prefill-bench (default: beside --telosc)")
    ap.add_argument("--kernel-bench", help="telos-kernel-bench (default: beside --telosc)")
    args = ap.parse_args()
    bin_dir = os.path.dirname(os.path.abspath(args.telosc))
    args.prefill_bench = args.prefill_bench or os.path.join(bin_dir, "telos-prefill-bench")
    args.kernel_bench = args.kernel_bench or os.path.join(bin_dir, "telos-kernel-bench")
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    ceiling = run_child(["--child-ceiling"])
    bandwidth = ceiling["bandwidth"]
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().split(", ")
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "gpu": smi[0], "driver": smi[1] if len(smi) > 1 else "?", "cuda": torch.version.cuda,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "bandwidth": bandwidth, "flops": ceiling.get("flops"),
            "command": f"python3 tools/bench_suite.py --telosc BIN/telosc --telos-run BIN/telos-run "
                       f"--work DIR --out OUT --models {args.models or repr('')}" + (" --throughput" if args.throughput else "")
                       + (" --fp8" if args.fp8 else "")}
    rows, kernels = [], {}
    if args.fp8:  # each in its own process, before any telos-run
        kernels["attention_e4m3"] = attention_e4m3(args.kernel_bench)
        save(rows, meta, kernels, args.out)
        kernels["prefill_w8a8"] = prefill_w8a8(args.prefill_bench, args.work)
        save(rows, meta, kernels, args.out)
    for name in [n for n in args.models.split(",") if n]:
        try:
            rows.append(bench_model(name, args, bandwidth))
        except Exception as e:
            rows.append({"model": name, "error": str(e)[-1500:]})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "telos"}), flush=True)
        save(rows, meta, kernels, args.out)
    save(rows, meta, kernels, args.out)
    plot(rows, args.out)
    print(open(os.path.join(args.out, "benchmarks.md")).read())


if __name__ == "__main__":
    main()
