#!/usr/bin/env python3
"""A/B of compiler variants on one model, interleaved in one GPU call (a ratio measured in one
run, not across machines: docs/performance.md).

One checkpoint (a real config of test/telosc/Inputs/configs/ with random bf16 weights, made by
transformers), compiled once per variant: a telosc binary (and, after `@`, the telos-run that
serves it; --telos-run otherwise) and serving-config keys over bench_suite's SERVING. Then ROUNDS
rounds, each running every variant's artifact in turn in one `telos-run bench` process: batch 1
and 256 decode after 512-token prompts (128 generated; --batch and --prompt-len pick others) and
the time to first token of 2048 and 8192-token prompts; with --decode instead bench_suite's decode
shapes (batch 1 and 64 after 32-token prompts, 256 generated) with the host time per step, its
launch calls and the GPU idle gap (the host-overhead target's figures). A round that would end past --budget-s is
not started. Prints one table (medians over the rounds) and writes every figure to OUT.

    python3 tools/variant_ab.py --model Llama-3.1-8B --telos-run BIN --work DIR --out FILE \\
        --variant head=BIN/telosc --variant plain=BIN/telosc:'{"decode_weight_images": false}'
    python3 tools/variant_ab.py --decode ... --variant old=OLD/telosc@OLD/telos-run --variant new=BIN/telosc
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_suite import SERVING, run_child, telos_bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--telos-run", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", action="append", required=True,
                    help="NAME=TELOSC[@TELOS_RUN][:JSON of serving keys]")
    ap.add_argument("--decode", action="store_true",
                    help="batch 1 and 64 decode with host µs, launch calls and GPU idle gap")
    ap.add_argument("--batch", default="1,256",
                    help="without --decode: the batches decoded after the prompts")
    ap.add_argument("--prompt-len", type=int, default=512,
                    help="without --decode: the prompts' length before the batches decode")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=400)
    args = ap.parse_args()
    t0 = time.time()
    work = os.path.join(args.work, args.model)
    ckpt = os.path.join(work, "checkpoint")
    os.makedirs(ckpt, exist_ok=True)
    # The checkpoint in a child process (bench_suite's peer, which also times transformers), so
    # that this process holds no CUDA context while telos-run runs.
    run_child(["--child-peer", args.model, ckpt])
    variants = []
    for v in args.variant:
        name, spec = v.split("=", 1)
        binaries, _, extra = spec.partition(":")
        telosc, _, telos_run = binaries.partition("@")
        serving = dict(SERVING, **(json.loads(extra) if extra else {}))
        path = os.path.join(work, name + ".serving.json")
        with open(path, "w") as f:
            json.dump(serving, f)
        artifact = os.path.join(work, name + ".telos")
        c0 = time.time()
        res = subprocess.run([telosc, "compile", ckpt, "--serving", path, "-o", artifact],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"telosc ({name}) failed: {res.stderr[-2000:]}")
        variants.append({"name": name, "artifact": artifact, "compile_s": time.time() - c0,
                         "telos_run": telos_run or args.telos_run, "rounds": []})
    subprocess.run(["rm", "-rf", ckpt])
    bench = (["--batch", "1,64", "--prompt-len", "32", "--gen", "256"] if args.decode else
             ["--batch", args.batch, "--prompt-len", str(args.prompt_len), "--gen", "128",
              "--ttft", "2048,8192"])
    batches = [int(b) for b in args.batch.split(",")]
    round_s = None
    for r in range(args.rounds):
        if round_s and time.time() - t0 + round_s > args.budget_s:
            break
        r0 = time.time()
        for v in variants:
            try:
                out, stderr = telos_bench(v["telos_run"], v["artifact"], bench)
            except RuntimeError as e:  # kept, and the other variants still run
                v["error"] = str(e)
                continue
            if args.decode:
                by = {run["batch"]: run for run in out["runs"]}
                v["rounds"].append({f"{k}_b{b}": by[b].get(key) for b in (1, 64)
                                    for k, key in (("ms", "ms_per_token"), ("host_us", "host_us_per_step"),
                                                   ("calls_us", "host_launch_calls_us_per_step"),
                                                   ("gap_us", "gpu_idle_gap_us"))})
                continue
            runs = {run["batch"]: run["ms_per_token"] for run in out["runs"]}
            ttft = {x["prompt_len"]: x["ttft_s"] * 1e3 for x in out.get("ttft", [])}
            v["rounds"].append({**{f"b{b}_ms": runs.get(b) for b in batches},
                                "ttft2048_ms": ttft.get(2048), "ttft8192_ms": ttft.get(8192),
                                "load_s": out.get("load_s"),
                                "memory": [l for l in stderr.splitlines() if "memory:" in l]})
        round_s = time.time() - r0
    with open(args.out, "w") as f:
        json.dump(variants, f, indent=1)
    keys = tuple(f"b{b}_ms" for b in batches) + ("ttft2048_ms", "ttft8192_ms", "load_s")
    header = ("| variant | " + " | ".join(f"batch {b} ms/step" for b in batches) +
              " | TTFT 2048 ms | TTFT 8192 ms | load s | compile s |")
    if args.decode:
        keys = tuple(f"{k}_b{b}" for k in ("ms", "host_us", "calls_us", "gap_us") for b in (1, 64))
        header = ("| variant | batch 1 ms/token | batch 64 ms/step | host µs b1 | host µs b64 | launch "
                  "calls µs b1 | launch calls µs b64 | GPU idle µs b1 | GPU idle µs b64 | compile s |")

    def med(v, k):
        xs = [x[k] for x in v["rounds"] if x.get(k) is not None]
        return f"{statistics.median(xs):.3f}" if xs else "—"

    print(f"{args.model}, medians over rounds run interleaved "
          f"({', '.join(str(len(v['rounds'])) for v in variants)} rounds)")
    print(header)
    print("|" + " --- |" * (len(keys) + 2))
    for v in variants:
        print(f"| {v['name']} | " + " | ".join(med(v, k) for k in keys) +
              f" | {v['compile_s']:.1f} |")
    for v in variants:
        if v.get("error"):
            print(f"{v['name']}: {v['error'][-500:]}")
        for line in (v["rounds"][0].get("memory", [])[:3] if v["rounds"] else []):
            print(f"{v['name']}: {line}")


if __name__ == "__main__":
    main()
