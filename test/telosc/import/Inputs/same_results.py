#!/usr/bin/env python3
"""Compares two `telos-run generate --json --dump-logits` outputs result by result: generated ids
and every logit bit for bit (timings aside; with --ignore-index the results' indices too, for
prompts run alone against the same prompts in one batch). Prints "identical: N results" or the
first difference, and exits non-zero on one."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../Inputs"))
from generate_results import load_results  # noqa: E402


ignore = ["timings"] + (["index"] if "--ignore-index" in sys.argv else [])
paths = [a for a in sys.argv[1:] if a != "--ignore-index"]


def results(path):
    out = load_results(path)
    for r in out:
        for key in ignore:
            r.pop(key, None)
    return out


a, b = results(paths[0]), results(paths[1])
if len(a) != len(b) or not a:
    sys.exit(f"different result counts: {len(a)} vs {len(b)}")
for i, (x, y) in enumerate(zip(a, b)):
    for key in sorted(set(x) | set(y)):
        if x.get(key) != y.get(key):
            sys.exit(f"result {i}: {key} differs")
print(f"identical: {len(a)} results")
