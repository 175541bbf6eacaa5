#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's stall samples by SASS instruction.

On the GPU machine, profile one launch and export its source page:
    ncu --kernel-name-base mangled --kernel-id ::regex:NAME:6 --set full --clock-control none \\
        -o /tmp/k -f BINARY ARGS
    ncu --import /tmp/k.ncu-rep --page source --csv --print-source sass > k_sass.csv
then here:
    python3 tools/ncu_stalls.py [--top N] k_sass.csv [more.csv ...]

For each file: the samples in all, the share of each stall reason (those over 1%), the samples of
each region in program order, hot (instructions executed at least 1/16 as often as the most
executed one: a GEMM's K loop, its producer's loop) or cold (a prologue, an epilogue), and the N
instructions with the most samples, in program order, with their two main reasons: e.g. a stall
ahead of a GEMM's K loop (a prologue) or after it (an epilogue that ends on a read).
"""
import argparse
import csv
import sys

GAP = 8  # instructions


def load(path):
    """The SASS rows of one export: (source, executed, samples, {reason: samples})."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if header is None:
        sys.exit(f"ncu_stalls: {path}: no 'Address' and 'Source' header: not an ncu source-page CSV")
    names = rows[header]
    try:
        src = names.index("Source")
        samples = names.index("Warp Stall Sampling (All Samples)")
        executed = names.index("Instructions Executed")
    except ValueError as e:
        sys.exit(f"ncu_stalls: {path}: missing column {e}: export with --page source --print-source sass")
    reasons = [(i, n[len("stall_"):]) for i, n in enumerate(names)
               if n.startswith("stall_") and "Not Issued" not in n]

    def num(row, i):
        v = row[i].replace(",", "") if i < len(row) else ""
        return int(float(v)) if v not in ("", "-") else 0

    out = []
    for r in rows[header + 1:]:
        if len(r) <= max(src, samples, executed):
            continue
        out.append((r[src].strip(), num(r, executed), num(r, samples), {n: num(r, i) for i, n in reasons}))
    if not out:
        sys.exit(f"ncu_stalls: {path}: no instruction rows")
    return out


def report(path, top):
    rows = load(path)
    total = sum(s for _, _, s, _ in rows)
    print(f"{path}: {total} samples, {len(rows)} instructions")
    if total == 0:
        return
    by_reason = {}
    for _, _, _, rs in rows:
        for n, v in rs.items():
            by_reason[n] = by_reason.get(n, 0) + v
    shares = sorted(((v, n) for n, v in by_reason.items() if v > total / 100), reverse=True)
    print("  by reason: " + ", ".join(f"{n} {100 * v / total:.1f}%" for v, n in shares))
    # Regions in program order: runs of hot instructions (cold runs shorter than GAP inside them,
    # a loop's rarely taken branches, count as hot) and the cold code between them.
    most = max(e for _, e, _, _ in rows)
    hot = [e * 16 >= most for _, e, _, _ in rows]
    i = 0
    while i < len(hot):
        j = i + 1
        while j < len(hot) and hot[j] == hot[i]:
            j += 1
        if not hot[i] and 0 < i and j < len(hot) and j - i < GAP:
            hot[i:j] = [True] * (j - i)
        i = j
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or hot[i] != hot[start]:
            s = sum(r[2] for r in rows[start:i])
            print(f"  {'hot ' if hot[start] else 'cold'} {start:5d}-{i - 1:<5d} {s:6d} samples "
                  f"({100 * s / total:5.1f}%)")
            start = i
    chosen = sorted(sorted(range(len(rows)), key=lambda i: -rows[i][2])[:top])
    for i in chosen:
        text, e, s, rs = rows[i]
        if s == 0:
            continue
        main = sorted(((v, n) for n, v in rs.items() if v), reverse=True)[:2]
        why = ", ".join(f"{n} {v}" for v, n in main)
        print(f"  {i:5d} {100 * s / total:6.2f}%  executed {e:>9}  {text[:64]:<64}  {why}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=15, help="instructions listed per file (default 15)")
    ap.add_argument("csv", nargs="+")
    args = ap.parse_args()
    for path in args.csv:
        report(path, args.top)


if __name__ == "__main__":
    main()
