#!/usr/bin/env python3
"""Runs one long prompt through two artifacts of one model on the CPU reference engine and
compares them: the same greedy ids and the last prompt position's logits within relative L2 T.

    long_prompt_same.py TELOS_RUN ONE.telos OTHER.telos TOKENS [--tolerance T] [--vocab V]

The prompt is TOKENS ids cycling through the vocabulary (a prefill chunk longer than any fixture's
prompt). Prints one line; exits 1 when they differ.
"""
import argparse
import json
import math
import subprocess
import sys


def run(telos_run, artifact, ids):
    out = subprocess.run([telos_run, "generate", artifact, "--engine", "cpu", "--temperature", "0",
                          "--ignore-eos", "--max-tokens", "8", "--json", "--dump-logits",
                          "--prompt-ids", ",".join(map(str, ids))],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("telos_run")
    ap.add_argument("one")
    ap.add_argument("other")
    ap.add_argument("tokens", type=int)
    ap.add_argument("--tolerance", type=float, default=1e-5)
    ap.add_argument("--vocab", type=int, default=500)
    args = ap.parse_args()
    ids = [(i * 37 + 11) % args.vocab + 1 for i in range(args.tokens)]
    a, b = run(args.telos_run, args.one, ids), run(args.telos_run, args.other, ids)
    want, got = a["prompt_logits"], b["prompt_logits"]
    err = math.sqrt(sum((g - w) ** 2 for g, w in zip(got, want))) / math.sqrt(sum(w * w for w in want))
    same = a["generated_ids"] == b["generated_ids"] and len(got) == len(want)
    print(f"{args.tokens} prompt tokens: {'same' if same else 'different'} greedy ids, "
          f"logits rel L2 {err:.1e}")
    return 0 if same and err <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
