#!/usr/bin/env python3
"""Compares two `telos-run generate --json --dump-logits` outputs result by result: generated ids
and every logit bit for bit (timings aside). Prints "identical: N results" or the first
difference, and exits non-zero on one."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../Inputs"))
from generate_results import load_results  # noqa: E402


def results(path):
    out = load_results(path)
    for r in out:
        r.pop("timings", None)
    return out


a, b = results(sys.argv[1]), results(sys.argv[2])
if len(a) != len(b) or not a:
    sys.exit(f"different result counts: {len(a)} vs {len(b)}")
for i, (x, y) in enumerate(zip(a, b)):
    for key in sorted(set(x) | set(y)):
        if x.get(key) != y.get(key):
            sys.exit(f"result {i}: {key} differs")
print(f"identical: {len(a)} results")
