#!/usr/bin/env python3
"""Checks `telos-run generate --json --dump-logits` output against a fixture's golden.json.

    check_golden.py GOLDEN RESULTS.jsonl [--tolerance T] [--same-as OTHER.jsonl]
                    [--logits-near OTHER.jsonl [--near-tolerance T]]

Every golden case must appear in RESULTS (matched by prompt_ids): its generated ids must equal
greedy_ids exactly and its prompt_logits be within relative L2 error T (default 1e-4) of
last_logits. --same-as also requires OTHER to hold the same generated ids for the same prompts
(a batch of requests against each request alone). --logits-near requires OTHER to hold, for the
same prompts, prompt_logits within relative L2 error T (default 1e-5) of RESULTS' and the same
generated ids (another engine configuration against a reference run, e.g. tensor-parallel ranks
against one rank). Prints one line per case; exits 1 on failure.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../Inputs"))
from generate_results import load_results, rel_l2  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("golden")
    ap.add_argument("results")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--same-as")
    ap.add_argument("--logits-near")
    ap.add_argument("--near-tolerance", type=float, default=1e-5)
    args = ap.parse_args()
    golden = json.load(open(args.golden))
    results = load_results(args.results)
    other = load_results(args.same_as) if args.same_as else None
    near = load_results(args.logits_near) if args.logits_near else None
    ok = True
    for i, case in enumerate(golden["cases"]):
        matches = [r for r in results if r["prompt_ids"] == case["prompt_ids"]]
        if not matches:
            print(f"case {i}: no result for prompt {case['prompt_ids']}")
            ok = False
            continue
        for r in matches:
            err = rel_l2(r["prompt_logits"], case["last_logits"])
            same = r["generated_ids"] == case["greedy_ids"]
            line = f"case {i}: greedy {'identical' if same else 'DIFFERENT'}, logits rel L2 {err:.2e}"
            if not same:
                line += f"\n  got  {r['generated_ids']}\n  want {case['greedy_ids']}"
            if len(r["prompt_logits"]) != len(case["last_logits"]):
                line += " (WRONG LENGTH)"
                ok = False
            if err > args.tolerance:
                line += f" (ABOVE {args.tolerance:g})"
                ok = False
            ok = ok and same
            if other is not None:
                twins = [o for o in other if o["prompt_ids"] == case["prompt_ids"]]
                if not twins or any(o["generated_ids"] != r["generated_ids"] for o in twins):
                    line += " (DIFFERS FROM --same-as)"
                    ok = False
            if near is not None:
                twins = [o for o in near if o["prompt_ids"] == case["prompt_ids"]]
                if not twins:
                    line += " (NO --logits-near RESULT)"
                    ok = False
                for o in twins:
                    e = rel_l2(r["prompt_logits"], o["prompt_logits"])
                    line += f", rel L2 to --logits-near {e:.1e}"
                    if e > args.near_tolerance:
                        line += f" (ABOVE {args.near_tolerance:g})"
                        ok = False
                    if o["generated_ids"] != r["generated_ids"]:
                        line += " (GREEDY DIFFERS FROM --logits-near)"
                        ok = False
            print(line)
    print("golden: ok" if ok else "golden: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
