#!/usr/bin/env python3
"""Batch invariance at the full-batch decode bucket, end to end.

tools/e2e_check.py runs 64 mixed requests together against eight of them alone; the decode
buckets above 64 rows run other kernel instances (the small GEMM's wide weight tiles from two
64-row M tiles on, and on the 8B's shapes its o and down on clusters of two CTAs:
codegen/kernel_plan.cpp, small_gemm_tiling) and are reached only when more requests decode at
once; decode:16 and decode:32 stream the KV cache through attn_split's bulk-copy ring (BULK,
kernel_plan.hpp). For each model this compiles the checkpoint with max_batch 256 and a prefill
chunk of 2048 tokens, runs 256 distinct 32-token prompts in one telos-run process (prefilled in
four steps, then decoding together in the decode:256 bucket), 32 and 16 of them (the eight below
among them) in two more (decode:32, decode:16) and eight of them in another (the decode:8 bucket),
GEN greedy tokens each, and requires the eight identical in every run. The 256 must not all agree
with one another (at least half distinct), or the comparison could not fail.

Each model is a named config of test/telosc/Inputs/configs/ with random weights
(e2e_check.make_checkpoint, no training: the tokens need to be deterministic, not meaningful), or
an existing checkpoint directory given with --checkpoint.

    python3 tools/batch_invariance_check.py --telosc BIN --telos-run BIN --work DIR
        [--models Llama-3.1-8B,Llama-3.2-1B | --checkpoint DIR] [--engine gpu|cpu] [--out DIR]

Making a checkpoint needs torch and transformers (the GPU machine has both). Prints one line per
model, writes batch_invariance.json to --out, exits 1 when a check fails.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

SERVING = {"max_batch": 256, "max_seq_len": 2048, "kv_page_size": 16, "prefill_chunk": 2048}
BATCH, PROMPT, GEN = 256, 32, 24
ALONE = [0, 37, 74, 111, 148, 185, 222, 255]  # the requests also run apart, as one batch of 8
MIDDLE = [32, 16]  # batches holding ALONE and the first others, in decode:32 and decode:16


def generate(telos_run, artifact, prompts, engine):
    cmd = [telos_run, "generate", artifact, "--temperature", "0", "--ignore-eos", "--max-tokens",
           str(GEN), "--json"]
    if engine:
        cmd += ["--engine", engine]
    for p in prompts:
        cmd += ["--prompt-ids", ",".join(map(str, p))]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"telos-run failed ({res.returncode}): {res.stderr[-2000:]}")
    out = {tuple(r["prompt_ids"]): r["generated_ids"]
           for r in map(json.loads, filter(str.strip, res.stdout.splitlines()))}
    return [out[tuple(p)] for p in prompts]


def check(name, ckpt, args):
    work = os.path.join(args.work, name + ".batch-check")
    os.makedirs(work, exist_ok=True)
    if ckpt is None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from e2e_check import make_checkpoint  # torch and transformers: imported only here
        ckpt = os.path.join(work, "checkpoint")
        make_checkpoint(name, ckpt, None, args.seed)
        # The model it built is garbage now; its memory must leave torch's cache before telos-run
        # sizes its KV pool (the 8B's fp32 copy alone is 32 GB).
        import gc
        import torch
        gc.collect()
        torch.cuda.empty_cache()
    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    # The prefill chunk is at most max_seq_len, itself at most the model's positions (the tiny
    # fixtures' 256: there the batch does not reach decode:256 before its first requests end).
    limit = min(SERVING["max_seq_len"], config.get("max_position_embeddings", SERVING["max_seq_len"]))
    serving, artifact = os.path.join(work, "serving.json"), os.path.join(work, "model.telos")
    with open(serving, "w") as f:
        json.dump(dict(SERVING, max_seq_len=limit, prefill_chunk=limit), f)
    res = subprocess.run([args.telosc, "compile", ckpt, "--serving", serving, "-o", artifact],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"telosc failed: {res.stderr[-2000:]}")
    rng = random.Random(args.seed)
    prompts = [[rng.randrange(config["vocab_size"]) for _ in range(PROMPT)] for _ in range(BATCH)]
    together = generate(args.telos_run, artifact, prompts, args.engine)
    apart = generate(args.telos_run, artifact, [prompts[i] for i in ALONE], args.engine)
    same = {BATCH: sum(together[i] == a for i, a in zip(ALONE, apart))}
    others = [i for i in range(BATCH) if i not in ALONE]
    for n in MIDDLE:
        rows = ALONE + others[:n - len(ALONE)]
        got = dict(zip(rows, generate(args.telos_run, artifact, [prompts[i] for i in rows],
                                      args.engine)))
        same[n] = sum(got[i] == a for i, a in zip(ALONE, apart))
    distinct = len(set(map(tuple, together)))
    return {"model": name, "identical": same, "of": len(ALONE), "distinct_of_256": distinct,
            "pass": all(v == len(ALONE) for v in same.values()) and distinct >= BATCH // 2}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--telosc", required=True)
    ap.add_argument("--telos-run", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--models", default="Llama-3.1-8B,Llama-3.2-1B,Qwen2.5-1.5B,Qwen3-0.6B")
    ap.add_argument("--checkpoint", help="an existing checkpoint directory instead of --models")
    ap.add_argument("--engine", choices=["gpu", "cpu"], help="telos-run's --engine (default: its own)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    todo = ([(os.path.basename(os.path.normpath(args.checkpoint)), args.checkpoint)]
            if args.checkpoint else [(m, None) for m in args.models.split(",")])
    rows = []
    for name, ckpt in todo:
        try:
            rows.append(check(name, ckpt, args))
        except Exception as e:  # report and go on with the next model
            rows.append({"model": name, "pass": False, "error": str(e)[-1500:]})
        finally:
            # The 8B's checkpoint and artifact: ~32 GB.
            shutil.rmtree(os.path.join(args.work, name + ".batch-check"), ignore_errors=True)
        r = rows[-1]
        print(f"{name} | {'pass' if r['pass'] else 'FAIL'} | " +
              (r["error"][:300] if "error" in r else
               "batch " + " / ".join(map(str, r["identical"])) + " vs batch 8: " +
               " / ".join(f"{v}/{r['of']}" for v in r["identical"].values()) +
               f" identical ({GEN} greedy tokens), {r['distinct_of_256']} of 256 distinct"),
              flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "batch_invariance.json"), "w") as f:
        json.dump(rows, f, indent=1)
    sys.exit(0 if all(r["pass"] for r in rows) else 1)


if __name__ == "__main__":
    main()
