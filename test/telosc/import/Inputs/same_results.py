#!/usr/bin/env python3
"""Compares two `telos-run generate --json --dump-logits` outputs result by result: generated ids
and every logit bit for bit (timings aside). Prints "identical: N results" or the first
difference, and exits non-zero on one."""
import json
import sys


def results(path):
    with open(path) as f:
        out = [json.loads(line) for line in f if line.strip()]
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
