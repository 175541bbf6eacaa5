#!/usr/bin/env python3
"""Breaks a copy of an artifact in one way, for the refusal tests.

    edit_artifact.py DIR truncate-weights BYTES    drop BYTES from the end of weights.bin
    edit_artifact.py DIR flip-weight-byte OFFSET   change one byte of weights.bin
    edit_artifact.py DIR set FIELD.PATH JSON       set a manifest.json field (dotted path)
    edit_artifact.py DIR delete FIELD.PATH         remove a manifest.json field
    edit_artifact.py DIR swap-tensors NAME NAME    swap two weight-table entries' offsets and
                                                   checksums (each name then reads the other's bytes)
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
elif action in ("set", "delete"):
    p = os.path.join(d, "manifest.json")
    m = json.load(open(p))
    *parents, last = sys.argv[3].split(".")
    node = m
    def index(key):  # list indices are numbers in the path
        return int(key) if key.isdigit() else key
    for key in parents:
        node = node[index(key)]
    if action == "set":
        node[index(last)] = json.loads(sys.argv[4])
    else:
        del node[index(last)]
    json.dump(m, open(p, "w"), indent=2)
elif action == "swap-tensors":
    p = os.path.join(d, "manifest.json")
    m = json.load(open(p))
    by_name = {t["name"]: t for t in m["weights"]["tensors"]}
    a, b = by_name[sys.argv[3]], by_name[sys.argv[4]]
    for key in ("offset", "checksum"):
        a[key], b[key] = b[key], a[key]
    json.dump(m, open(p, "w"), indent=2)
else:
    sys.exit(f"edit_artifact.py: unknown action {action}")
