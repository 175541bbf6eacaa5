"""torch.matmul (cuBLAS) on telos-kernel-bench's decode GEMM shapes, beside its rows.

Reads telos-kernel-bench's output from the file named as argv[1]: the decode GEMMs' plan rows
("gemm_small_EPI NAME plan | M=.. N=.. K=.. | US | GB/s | % copy") and --gemm-m's rows
("MODEL NAME (EPI) | M | N | K | small tiles | SMALL US | CTAs | PREFILL US | ..."). Times
y = a @ w.T in bf16 for each the way the kernel bench times its own: 8 calls back to back between
two CUDA events, each on another copy of the weights (at least 400 MB of copies, so that the
weights come from DRAM, not L2), the median of 30 such runs after 5, divided by 8. N is the
weight's rows (SwiGLU's gate and up together). torch does the matmul only: no residual add, no
SwiGLU, bf16 logits where the LM head's are f32 (so the peer's figure is a lower bound of what the
fused kernel does). Prints one table for each kind of row found; the ratios are torch's time over
Telos's (> 1: Telos is faster).

`decode_gemm_torch.py --rate` prints only torch.matmul's TFLOP/s on a square bf16 product of 8192
(the card's matmul rate, for telos-kernel-bench --gemm-m --matmul-tflops).
"""
import itertools
import re
import sys

import torch

from prefill_gemm_torch import median_ms

ROW = re.compile(r"^gemm_small_(\w+) (\w+) plan\s*\| M=(\d+) N=(\d+) K=(\d+)\s*\|\s*([\d.]+)")
GEMM_M_ROW = re.compile(r"^(\w+) (\w+) \((\w+)\)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|"
                        r"[^|]*\|\s*([\d.]+)\s*\|\s*\d+\s*\|\s*([\d.]+)")
BATCH = 8


def torch_us(M, N, K):
    """torch.matmul's µs for [M, K] @ [N, K].T as the kernel bench times its kernels."""
    wbytes = N * K * 2
    copies = max(2, (400 << 20) // wbytes + 1)
    ws = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    turn = itertools.count()  # the next call's weight copy

    def calls():
        for _ in range(BATCH):
            torch.matmul(a, ws[next(turn) % copies].T)

    t = median_ms(calls, reps=30, warm=5) * 1000.0 / BATCH
    del ws, a
    torch.cuda.empty_cache()
    return t


def matmul_rate():
    """torch.matmul's TFLOP/s on [8192, 8192] @ [8192, 8192] in bf16: the median of 50 calls
    after 600 (about a second: the clocks a sustained load holds)."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return 2.0 * n ** 3 / median_ms(lambda: torch.matmul(a, b), reps=50, warm=600) / 1e9


def main():
    if sys.argv[1:] == ["--rate"]:
        print(f"{matmul_rate():.0f}")
        return
    if len(sys.argv) != 2:
        sys.exit("usage: decode_gemm_torch.py KERNEL_BENCH_LOG | --rate")
    rows, gemm_m_rows = [], []
    with open(sys.argv[1]) as f:
        for line in f:
            m = ROW.match(line)
            if m:
                epi, name, M, N, K, us = m.groups()
                rows.append((name, epi, int(M), int(N), int(K), float(us)))
            m = GEMM_M_ROW.match(line)
            if m:
                model, name, epi, M, N, K, small, prefill = m.groups()
                gemm_m_rows.append((f"{model} {name}", epi, int(M), int(N), int(K), float(small),
                                    float(prefill)))
    if not rows and not gemm_m_rows:
        sys.exit(f"{sys.argv[1]}: no telos-kernel-bench decode GEMM or --gemm-m rows")
    if rows:
        print("torch.matmul (bf16 out, matmul only) beside telos-kernel-bench's plan rows, "
              f"{BATCH} calls back to back on rotating weight copies")
        print("| GEMM | M | N | K | telos µs | torch µs | torch/telos |")
        print("|---|---|---|---|---|---|---|")
        for name, epi, M, N, K, us in rows:
            t = torch_us(M, N, K)
            print(f"| {name} ({epi}) | {M} | {N} | {K} | {us:.1f} | {t:.1f} | {t / us:.3f} |")
    if gemm_m_rows:
        print("torch.matmul (bf16 out, matmul only) beside telos-kernel-bench --gemm-m's rows, "
              f"{BATCH} calls back to back on rotating weight copies")
        print("| GEMM | M | N | K | small µs | prefill µs | torch µs | torch TFLOP/s "
              "| torch/small | torch/prefill |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, epi, M, N, K, small, prefill in gemm_m_rows:
            t = torch_us(M, N, K)
            print(f"| {name} ({epi}) | {M} | {N} | {K} | {small:.1f} | {prefill:.1f} | {t:.1f} "
                  f"| {2.0 * M * N * K / t / 1e6:.0f} | {t / small:.3f} | {t / prefill:.3f} |")


if __name__ == "__main__":
    main()
