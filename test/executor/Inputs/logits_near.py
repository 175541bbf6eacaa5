#!/usr/bin/env python3
"""Checks one `telos-run generate --json --dump-logits` run against a reference run of the same
prompts, where no golden file applies (e.g. FP8 weights over tensor-parallel ranks against one rank).

    logits_near.py RESULTS.jsonl REFERENCE.jsonl [--tolerance T]

Every reference result must have a result of the same prompt_ids with the same generated ids and
prompt_logits within relative L2 error T (default 1e-5). Prints one line per case; exits 1 on
failure.
"""
import argparse
import sys

from check_golden import load_results, rel_l2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("reference")
    ap.add_argument("--tolerance", type=float, default=1e-5)
    args = ap.parse_args()
    results = load_results(args.results)
    ok = True
    for i, ref in enumerate(load_results(args.reference)):
        twins = [r for r in results if r["prompt_ids"] == ref["prompt_ids"]]
        if not twins:
            print(f"case {i}: no result for prompt {ref['prompt_ids']}")
            ok = False
        for r in twins:
            err = rel_l2(r["prompt_logits"], ref["prompt_logits"])
            same = r["generated_ids"] == ref["generated_ids"]
            line = f"case {i}: greedy {'identical' if same else 'DIFFERENT'}, logits rel L2 {err:.1e}"
            if len(r["prompt_logits"]) != len(ref["prompt_logits"]):
                line += " (WRONG LENGTH)"
                ok = False
            if err > args.tolerance:
                line += f" (ABOVE {args.tolerance:g})"
                ok = False
            ok = ok and same
            print(line)
    print("near: ok" if ok else "near: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
