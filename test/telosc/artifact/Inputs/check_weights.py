#!/usr/bin/env python3
"""Checks an artifact's weights.bin against its checkpoint, independently of telosc's C++.

    check_weights.py ARTIFACT CHECKPOINT_DIR

For every tensor in manifest.json: the offset is 256-byte aligned, the padding before it is zero,
and its bytes equal the concatenation of its sources converted to its dtype (bf16 with
round-to-nearest-even, or f32), with layout qkv_rope_pairs each head's rows in RoPE's pair order
(docs/artifact.md: for g = 0 .. D/8 - 1, rows 4g .. 4g+3, then D/2 + 4g .. D/2 + 4g+3). Pure Python
(struct only): the CI machine has no numpy.
Prints one line per tensor and exits non-zero on the first mismatch.
"""
import json
import os
import struct
import sys


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            f.seek(base + begin)
            out[name] = (info["dtype"], f.read(end - begin))
        return out


def to_floats(dtype, data):
    if dtype == "F32":
        return list(struct.unpack("<%df" % (len(data) // 4), data))
    if dtype == "F16":
        return list(struct.unpack("<%de" % (len(data) // 2), data))
    if dtype == "BF16":
        halves = struct.unpack("<%dH" % (len(data) // 2), data)
        return list(struct.unpack("<%df" % len(halves), struct.pack("<%dI" % len(halves), *[h << 16 for h in halves])))
    raise SystemExit("unexpected checkpoint dtype " + dtype)


def bf16_rne(values):
    bits = struct.unpack("<%dI" % len(values), struct.pack("<%df" % len(values), *values))
    out = []
    for u in bits:
        if (u & 0x7FFFFFFF) > 0x7F800000:
            out.append((u >> 16) | 0x40)
        else:
            out.append(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
    return struct.pack("<%dH" % len(out), *out)


def main():
    artifact, checkpoint = sys.argv[1], sys.argv[2]
    manifest = json.load(open(os.path.join(artifact, "manifest.json")))
    tensors = {}
    for name in sorted(os.listdir(checkpoint)):
        if name.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(checkpoint, name)))
    blob = open(os.path.join(artifact, "weights.bin"), "rb").read()
    if len(blob) != manifest["weights"]["size"]:
        raise SystemExit("weights.bin size %d != manifest %d" % (len(blob), manifest["weights"]["size"]))
    end = 0
    for t in manifest["weights"]["tensors"]:
        if t["offset"] % 256 or t["offset"] < end:
            raise SystemExit("%s: offset %d not aligned or overlapping" % (t["name"], t["offset"]))
        if any(blob[end:t["offset"]]):
            raise SystemExit("%s: padding before it is not zero" % t["name"])
        values = []
        for src in t["sources"]:
            dtype, data = tensors[src]
            values += to_floats(dtype, data)
        if t["layout"] == "qkv_rope_pairs":
            d, cols = manifest["model"]["head_dim"], t["shape"][1]
            order = []
            for head in range(t["shape"][0] // d):
                for g in range(d // 8):
                    for half in (0, d // 2):
                        order += [head * d + half + 4 * g + r for r in range(4)]
            values = [v for row in order for v in values[row * cols:(row + 1) * cols]]
        elif t["layout"] != "row_major":
            raise SystemExit("%s: unknown layout %s" % (t["name"], t["layout"]))
        want = bf16_rne(values) if t["dtype"] == "bf16" else struct.pack("<%df" % len(values), *values)
        got = blob[t["offset"]:t["offset"] + t["bytes"]]
        if got != want:
            raise SystemExit("%s: packed bytes differ from its sources %s" % (t["name"], t["sources"]))
        end = t["offset"] + t["bytes"]
        print("ok %s %s %s" % (t["name"], t["dtype"], t["shape"]))
    print("all %d tensors match" % len(manifest["weights"]["tensors"]))


if __name__ == "__main__":
    main()
