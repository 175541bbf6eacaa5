"""torch.matmul on the prefill GEMM shapes, side by side with telos-prefill-bench's lines.

Reads telos-prefill-bench's output (lines "telos SHAPE M EPILOGUE N K MS") from the file named
as argv[1], times y = a @ w.T in bf16 for each distinct (M, N, K) the same way (steady_ms: the
median of 20 back-to-back calls with an event between each two, after ~100 ms of calls, as
bench_support.hpp's steady_event_ms) and prints one table, the ratio being torch time
over Telos time (> 1: Telos is faster).

    prefill_gemm_torch.py --summary ROUND_LOG...

reads the tables of several rounds (telos-prefill-bench, then this script, alternately: Telos and
torch are timed one after the other, so one round can favour either by the run's drift) and
prints per row the median ratio over the rounds and its range.
"""
import sys

import torch


def median_ms(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def steady_ms(fn, reps=20, warm_ms=100.0):
    """Median ms of `reps` back-to-back calls, an event between each two (no host wait between
    them), after calls for about `warm_ms` of GPU time: timed at the clocks of a sustained load."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    events[0].record()
    fn()
    events[1].record()
    events[1].synchronize()
    for _ in range(max(3, int(warm_ms / max(events[0].elapsed_time(events[1]), 1e-3)))):
        fn()
    events[0].record()
    for i in range(reps):
        fn()
        events[i + 1].record()
    events[reps].synchronize()
    times = sorted(events[i].elapsed_time(events[i + 1]) for i in range(reps))
    return times[reps // 2]


def summary(paths):
    ratios = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) == 10 and cells[1].isdigit():
                    ratios.setdefault(tuple(cells[:5]), []).append(float(cells[9]))
    print(f"torch/telos over {len(paths)} rounds (median, min, max)")
    print("| shape | M | N | K | epilogue | median | min | max |")
    print("|---|---|---|---|---|---|---|---|")
    for key, r in ratios.items():
        r.sort()
        print(f"| {' | '.join(key)} | {r[len(r) // 2]:.3f} | {r[0]:.3f} | {r[-1]:.3f} |")


def main():
    if sys.argv[1] == "--summary":
        summary(sys.argv[2:])
        return
    rows = []
    with open(sys.argv[1]) as f:
        for line in f:
            p = line.split()
            if len(p) == 7 and p[0] == "telos":
                rows.append((p[1], int(p[2]), p[3], int(p[4]), int(p[5]), float(p[6])))
    torch_ms = {}
    for _, m, _, n, k, _ in rows:
        if (m, n, k) in torch_ms:
            continue
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        torch_ms[(m, n, k)] = steady_ms(lambda: torch.matmul(a, w.T))
        del a, w
    print("| shape | M | N | K | epilogue | telos ms | TFLOP/s | torch ms | TFLOP/s | torch/telos |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape, m, epi, n, k, ms in rows:
        t = torch_ms[(m, n, k)]
        flop = 2.0 * m * n * k
        print(f"| {shape} | {m} | {n} | {k} | {epi} | {ms:.3f} | {flop / ms / 1e9:.0f} | "
              f"{t:.3f} | {flop / t / 1e9:.0f} | {t / ms:.3f} |")


if __name__ == "__main__":
    main()
