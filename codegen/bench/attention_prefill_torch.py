"""torch SDPA beside telos-attn-prefill-bench: causal prefill attention, head dim 128.

Reads telos-attn-prefill-bench's output (lines "telos attn_prefill T HQ HKV D MS REL_ERR",
"telos attn_prefill_plain ..." for the kernel without its overlaps,
"telos attn_prefill_plain_qsplit ..." for it with Q in two bf16 parts) from the file named as
argv[1]. For each T, times torch.nn.functional.scaled_dot_product_attention(
is_causal=True) on contiguous bf16 q [1, HQ, T, D], k and v [1, HKV, T, D] with each backend
(flash, efficient, cudnn) through torch.nn.attention.sdpa_kernel: enable_gqa=True where the
backend takes it, else K/V repeated to HQ heads (the table says which). Timed under load as the
Telos side (prefill_gemm_torch.steady_ms). Prints one table: TFLOP/s counted as
4 T^2 D HQ / 2 (causal), and the fastest backend's time over the plan's kernel's (the plain order,
kernel_plan.cpp; > 1: Telos is faster), the overlapped and Q_SPLIT variants beside it.
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# The same timing as the prefill GEMM's peer (both scripts sit side by side, in codegen/bench/ and
# in the GPU carry folder).
from prefill_gemm_torch import steady_ms


def time_backend(backend, q, k, v):
    """(ms, how) for one backend, or (None, reason) when it cannot run the shape."""
    hq, hkv = q.shape[1], k.shape[1]
    with sdpa_kernel([backend]):
        try:
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            torch.cuda.synchronize()
            return steady_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)), "gqa"
        except RuntimeError:
            pass
        kr = k.repeat_interleave(hq // hkv, dim=1).contiguous()
        vr = v.repeat_interleave(hq // hkv, dim=1).contiguous()
        try:
            F.scaled_dot_product_attention(q, kr, vr, is_causal=True)
            torch.cuda.synchronize()
            return steady_ms(lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=True)), "repeat"
        except RuntimeError as e:
            return None, str(e).splitlines()[0][:40]


def main():
    rows, plain, qsplit = [], {}, {}
    with open(sys.argv[1]) as f:
        for line in f:
            p = line.split()
            if len(p) == 8 and p[0] == "telos" and p[1] == "attn_prefill":
                rows.append((int(p[2]), int(p[3]), int(p[4]), int(p[5]), float(p[6]), float(p[7])))
            elif len(p) == 8 and p[0] == "telos" and p[1] == "attn_prefill_plain":
                plain[int(p[2])] = float(p[6])
            elif len(p) == 8 and p[0] == "telos" and p[1] == "attn_prefill_plain_qsplit":
                qsplit[int(p[2])] = float(p[6])
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("| T | telos (plan: plain) ms | TFLOP/s | rel err | overlapped TFLOP/s | plain Q_SPLIT TFLOP/s | "
          " | ".join(f"{n} ms" for n, _ in backends)
          + " | fastest | TFLOP/s | fastest/telos |")
    print("|---|---|---|---|---|---|" + "---|" * len(backends) + "---|---|---|")
    for t, hq, hkv, d, overlapped_ms, err in rows:
        ms = plain.get(t, overlapped_ms)  # the plan's kernel; the overlapped one if plain is missing
        q = torch.randn(1, hq, t, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, hkv, t, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, hkv, t, d, device="cuda", dtype=torch.bfloat16)
        cells, best = [], None
        for name, b in backends:
            bms, how = time_backend(b, q, k, v)
            cells.append(f"{bms:.3f} ({how})" if bms is not None else f"n/a: {how}")
            if bms is not None and (best is None or bms < best[1]):
                best = (name, bms)
        flop = 4.0 * t * t * d * hq / 2
        tail = f"{best[0]} | {flop / best[1] / 1e9:.0f} | {best[1] / ms:.3f}" if best else "none | - | -"
        ov = f"{flop / overlapped_ms / 1e9:.0f}"
        qs = f"{flop / qsplit[t] / 1e9:.0f}" if t in qsplit else "-"
        print(f"| {t} | {ms:.3f} | {flop / ms / 1e9:.0f} | {err:.1e} | {ov} | {qs} | " + " | ".join(cells)
              + f" | {tail} |")
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
