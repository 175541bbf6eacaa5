#!/usr/bin/env python3
"""Compares two `telos-run generate --json --dump-logits` outputs of the same prompts, result by
result: the relative L2 error of each result's prompt logits (the first sampled position) against
the second file's, and whether the generated ids are the same. Prints "max rel L2 E over N
results, greedy identical in K" and exits non-zero when E exceeds --tolerance or the prompts
differ."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../Inputs"))
from generate_results import load_results, rel_l2  # noqa: E402


ap = argparse.ArgumentParser()
ap.add_argument("got")
ap.add_argument("want")
ap.add_argument("--tolerance", type=float, required=True)
args = ap.parse_args()
got, want = load_results(args.got), load_results(args.want)
if len(got) != len(want) or not got:
    sys.exit(f"different result counts: {len(got)} vs {len(want)}")
worst, same = 0.0, 0
for i, (g, w) in enumerate(zip(got, want)):
    if g["prompt_ids"] != w["prompt_ids"] or len(g["prompt_logits"]) != len(w["prompt_logits"]):
        sys.exit(f"result {i}: a different prompt or vocabulary")
    worst = max(worst, rel_l2(g["prompt_logits"], w["prompt_logits"]))
    same += g["generated_ids"] == w["generated_ids"]
print(f"max rel L2 {worst:.1e} over {len(got)} results, greedy identical in {same}")
if worst > args.tolerance:
    sys.exit(f"above the tolerance {args.tolerance}")
