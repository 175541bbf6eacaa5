#!/usr/bin/env python3
"""Breaks a copy of an artifact in one way, for the refusal tests.

    edit_artifact.py DIR truncate-weights BYTES    drop BYTES from the end of weights.bin
    edit_artifact.py DIR flip-weight-byte OFFSET   change one byte of weights.bin
    edit_artifact.py DIR set FIELD.PATH JSON       set a manifest.json field (dotted path)
"""
import json
import os
import sys

d, action = sys.argv[1], sys.argv[2]
if action == "truncate-weights":
    p = os.path.join(d, "weights.bin")
    os.truncate(p, os.path.getsize(p) - int(sys.argv[3]))
elif action == "flip-weight-byte":
    with open(os.path.join(d, "weights.bin"), "r+b") as f:
        f.seek(int(sys.argv[3]))
        b = f.read(1)
        f.seek(int(sys.argv[3]))
        f.write(bytes([b[0] ^ 0xFF]))
elif action == "set":
    p = os.path.join(d, "manifest.json")
    m = json.load(open(p))
    *parents, last = sys.argv[3].split(".")
    node = m
    def index(key):  # list indices are numbers in the path
        return int(key) if key.isdigit() else key
    for key in parents:
        node = node[index(key)]
    node[index(last)] = json.loads(sys.argv[4])
    json.dump(m, open(p, "w"), indent=2)
else:
    sys.exit(f"edit_artifact.py: unknown action {action}")
