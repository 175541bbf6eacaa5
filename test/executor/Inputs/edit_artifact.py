#!/usr/bin/env python3
"""Breaks a copy of an artifact in one way, for the refusal tests.

    edit_artifact.py DIR truncate-weights BYTES [FILE]   drop BYTES from the end of weights.bin
                                                         (or FILE, a tensor-parallel rank's)
    edit_artifact.py DIR flip-weight-byte OFFSET [FILE]  change one byte of weights.bin (or FILE)
    edit_artifact.py DIR set FIELD.PATH JSON       set a manifest.json field (dotted path)
    edit_artifact.py DIR delete FIELD.PATH         remove a manifest.json field
    edit_artifact.py DIR swap-tensors NAME NAME    swap two weight-table entries' offsets and
                                                   checksums (each name then reads the other's bytes)
    edit_artifact.py DIR resign                    recompute manifest_checksum as telosc computes it
                                                   (docs/artifact.md), so that an edit is refused by
                                                   its own field's check, as when telosc wrote it
"""
import json
import os
import sys

M64 = (1 << 64) - 1
P1, P2, P3 = 11400714785074694791, 14029467366897019727, 1609587929392839161
P4, P5 = 9650029242287828579, 2870177450012600261


def xxh64(data):
    """XXH64 with seed 0 (support/checksum.hpp)."""
    def rotl(x, r):
        return ((x << r) | (x >> (64 - r))) & M64

    def lane_round(acc, lane):
        return rotl((acc + lane * P2) & M64, 31) * P1 & M64

    def u64(i):
        return int.from_bytes(data[i:i + 8], "little")

    n, i = len(data), 0
    if n >= 32:
        v = [(P1 + P2) & M64, P2, 0, (-P1) & M64]
        while i + 32 <= n:
            v = [lane_round(v[j], u64(i + 8 * j)) for j in range(4)]
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M64
        for x in v:
            h = ((h ^ lane_round(0, x)) * P1 + P4) & M64
    else:
        h = P5
    h = (h + n) & M64
    while i + 8 <= n:
        h = (rotl(h ^ lane_round(0, u64(i)), 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (int.from_bytes(data[i:i + 4], "little") * P1 & M64), 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h = rotl(h ^ (data[i] * P5 & M64), 11) * P1 & M64
        i += 1
    h = (h ^ (h >> 33)) * P2 & M64
    h = (h ^ (h >> 29)) * P3 & M64
    return h ^ (h >> 32)


d, action = sys.argv[1], sys.argv[2]
if action == "truncate-weights":
    p = os.path.join(d, sys.argv[4] if len(sys.argv) > 4 else "weights.bin")
    os.truncate(p, os.path.getsize(p) - int(sys.argv[3]))
elif action == "flip-weight-byte":
    with open(os.path.join(d, sys.argv[4] if len(sys.argv) > 4 else "weights.bin"), "r+b") as f:
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
elif action == "resign":
    p = os.path.join(d, "manifest.json")
    m = json.load(open(p))
    sections = {key: m[key] for key in ("graph", "model", "weights")}
    text = json.dumps(sections, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    m["manifest_checksum"] = "xxh64:%016x" % xxh64(text.encode())
    json.dump(m, open(p, "w"), indent=2)
else:
    sys.exit(f"edit_artifact.py: unknown action {action}")
