#!/usr/bin/env python3
"""Checks a tensor-parallel artifact's weight files against the same model's one-rank artifact.

    check_tp_weights.py TP_ARTIFACT ONE_RANK_ARTIFACT

Every rank must hold the one-rank artifact's tensors: a tensor without "split" byte for byte the
same, a split tensor exactly the rows (dim 0) or columns (dim 1) its ranges name, taken from the
one-rank tensor as stored (the QKV projection's pair order groups rows within a head, and a split
takes whole heads, so its ranges slice the stored rows too). An e4m3 tensor's elements are split
so; its scale tensor (in the rank's own blocks, said in its "scale") must give every element the
scale that element has in the one-rank tensor, so that each rank's dequantized part is exactly
that part of the whole's. Prints one line per split tensor of rank 0 and a summary; exits 1 on a
mismatch.
"""
import json
import os
import struct
import sys


def tensors(artifact, entry):
    with open(os.path.join(artifact, entry["file"]), "rb") as f:
        data = f.read()
    return {t["name"]: (t, data[t["offset"]:t["offset"] + t["bytes"]]) for t in entry["tensors"]}


def part(whole, t, split):
    """The rows or columns of `whole` (the one-rank tensor's bytes) that `split` names."""
    if split["dim"] == 0:
        row = len(whole) // split["of"]  # bytes a row (an element of a vector)
        return b"".join(whole[b * row:e * row] for b, e in split["ranges"])
    elem = {"e4m3": 1, "bf16": 2, "f16": 2, "f32": 4}[t["dtype"]]
    row = split["of"] * elem
    rows = len(whole) // row
    return b"".join(whole[r * row + b * elem:r * row + e * elem]
                    for r in range(rows) for b, e in split["ranges"])


def indices(n, split, dim):
    """The whole tensor's index along `dim` of each of the part's `n` indices there."""
    if split is None or split["dim"] != dim:
        return range(n)
    return [i for b, e in split["ranges"] for i in range(b, e)]


def scales_match(t, data_of, w, whole):
    """Whether every element of the part `t` gets the scale its element of the whole `w` has."""
    def grid(entry, tensors):
        s = tensors[entry["scale"]["tensor"]][1]
        return struct.unpack(f"<{len(s) // 4}f", s), entry["scale"]["block"]
    (rs, (rbr, rbc)), (ws, (wbr, wbc)) = grid(t, data_of), grid(w, whole)
    rows, cols = t["shape"]
    rcols, wcols = -(-cols // rbc), -(-w["shape"][1] // wbc)
    whole_cols = list(indices(cols, t.get("split"), 1))
    return all(rs[r // rbr * rcols + c // rbc] == ws[wr // wbr * wcols + whole_cols[c] // wbc]
               for r, wr in enumerate(indices(rows, t.get("split"), 0)) for c in range(cols))


def main():
    tp_dir, one_dir = sys.argv[1], sys.argv[2]
    tp = json.load(open(os.path.join(tp_dir, "manifest.json")))
    one = json.load(open(os.path.join(one_dir, "manifest.json")))
    whole = tensors(one_dir, one["weights"])
    ok = True
    checked = 0
    for rank, entry in enumerate(tp["weights"]["ranks"]):
        mine = tensors(tp_dir, entry)
        scale_tensors = {t["scale"]["tensor"] for t, _ in mine.values() if "scale" in t}
        for name, (t, data) in mine.items():
            if name in scale_tensors:
                continue
            w, wdata = whole[name]
            want = part(wdata, w, t["split"]) if "split" in t else wdata
            if data != want:
                print(f"rank {rank}: {name} DIFFERS")
                ok = False
            elif "scale" in t and not scales_match(t, mine, w, whole):
                print(f"rank {rank}: {name} SCALES DIFFER")
                ok = False
            elif rank == 0 and "split" in t:
                s = t["split"]
                scales = f" scales {t['scale']['block']}" if "scale" in t else ""
                print(f"ok {name} {t['shape']} {'rows' if s['dim'] == 0 else 'columns'} "
                      f"{s['ranges']} of {s['of']}{scales}")
            checked += 1
    print(f"{len(tp['weights']['ranks'])} ranks, {checked} tensors: "
          + ("all match" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
