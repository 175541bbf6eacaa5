#!/usr/bin/env python3
"""tools/bench_suite.py's FP8 measures without a GPU: the KV pool's capacity through the real
telosc on the bundled tiny model, the kernel benches' outputs parsed from the samples below (in
the formats telos-kernel-bench --attention and prefill_gemm_torch.py --w8a8 print: their printf
formats, values near the H100/H200 runs), the failures a run meets (a missing binary, a tool that
exits non-zero, an output without its rows, a refused config) as their rows, and the report's FP8
section of all of them.

    bench_suite_fp8.py SRC_ROOT TELOSC BENCH_JSON OUT_DIR
"""
import os
import sys

from bench_suite_report import import_bench_suite, model_row

# telos-kernel-bench --attention (codegen/bench/kernel_bench.cpp: bench_copy's rows, attn_row's
# "%-34s | %-26s | %9.1f | %8.0f | %6.1f"), cut to the decode rows at batches 1-64 and one of the
# 32-slot model's.
ATTENTION = """NVIDIA H200, 132 SMs

kernel                             | shape                      | median us |     GB/s | % copy
cudaMemcpy D2D (read+write)        | 2 GiB                      |    1010.4 |     4251 |    100
attn_split+combine alone           | B=1 ctx=4096               |       7.9 |     2126 |   50.0
attn_split+combine PDL             | B=1 ctx=4096               |       5.6 |     2976 |   70.0
attn_split+combine PDL plan s256 z=32 | B=1 ctx=4096               |       4.9 |     3401 |   80.0
attn_split+combine PDL plan s512 z=32 | B=1 ctx=4096               |       5.1 |     3316 |   78.0
attn_split+combine PDL plan e4m3 z=32 | B=1 ctx=4096               |      10.5 |      799 |   18.8
attn_split+combine alone           | B=16 ctx=4096              |     126.3 |     2126 |   50.0
attn_split+combine PDL plan s256 z=4 | B=16 ctx=4096              |      78.9 |     3401 |   80.0
attn_split+combine PDL plan e4m3 z=4 | B=16 ctx=4096              |      59.7 |     2249 |   52.9
attn_split+combine PDL plan s256 z=1 | B=64 ctx=4096              |     315.7 |     3401 |   80.0
attn_split+combine PDL plan e4m3 z=1 | B=64 ctx=4096              |     206.7 |     2597 |   61.1
attn_split+combine alone           | B=1 ctx=32768              |      63.1 |     2126 |   50.0
attn_split+combine PDL             | B=1 ctx=32768              |      45.1 |     2976 |   70.0
attn_split+combine PDL plan s256 z=32 | B=1 ctx=32768              |      39.5 |     3401 |   80.0
attn_split+combine PDL plan s512 z=32 | B=1 ctx=32768              |      40.5 |     3316 |   78.0
attn_split+combine PDL plan e4m3 z=32 | B=1 ctx=32768              |      27.8 |     2415 |   56.8
attn_split+combine PDL plan s256 z=4 | B=16 ctx=32768             |     631.5 |     3401 |   80.0
attn_split+combine PDL plan e4m3 z=4 | B=16 ctx=32768             |     287.4 |     3737 |   87.9
attn_split+combine PDL plan s256 z=1 | B=64 ctx=32768             |    2525.9 |     3401 |   80.0
attn_split+combine PDL plan e4m3 z=1 | B=64 ctx=32768             |    1144.2 |     3754 |   88.3
attn_split+combine PDL plan s256 z=8 | B=16 ctx=576 of 32 slots   |      20.0 |     1887 |   44.4
"""

# prefill_gemm_torch.py --w8a8 CUBIN 2 (codegen/bench/prefill_gemm_torch.py, w8a8: each round's
# header and table, then the ratios over the rounds), cut to M = 4096 and 16384.
W8A8 = """round 1: W8A8, our bf16 GEMM and torch._scaled_mm (blockwise 1x128 / 128x128) interleaved in one process (NVIDIA H200, torch 2.11.0+cu130)
| shape | M | N | K | epilogue | w8a8 ms | TFLOP/s | bf16 ms | scaled_mm ms | quant ms | scaled_mm/w8a8 (>= 0.95) | bf16/w8a8 (>= 1.5) | rel err |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
| qkv | 4096 | 6144 | 4096 | bf16 | 0.226 | 912 | 0.303 | 0.192 | 0.031 | 0.850 | 1.341 | 1.2e-03 |
| gate_up | 4096 | 28672 | 4096 | swiglu | 1.090 | 883 | 1.451 | 0.883 | 0.031 | 0.810 | 1.331 | - |
| down | 4096 | 4096 | 14336 | residual | 0.564 | 853 | 0.732 | 0.425 | 0.108 | 0.754 | 1.298 | - |
| qkv | 16384 | 6144 | 4096 | bf16 | 0.893 | 923 | 1.237 | 0.768 | 0.104 | 0.860 | 1.385 | 1.1e-03 |
| gate_up | 16384 | 28672 | 4096 | swiglu | 4.383 | 878 | 5.624 | 3.399 | 0.104 | 0.775 | 1.283 | - |
| down | 16384 | 4096 | 14336 | residual | 2.411 | 798 | 2.876 | 1.650 | 0.370 | 0.684 | 1.193 | - |
round 2: W8A8, our bf16 GEMM and torch._scaled_mm (blockwise 1x128 / 128x128) interleaved in one process (NVIDIA H200, torch 2.11.0+cu130)
| shape | M | N | K | epilogue | w8a8 ms | TFLOP/s | bf16 ms | scaled_mm ms | quant ms | scaled_mm/w8a8 (>= 0.95) | bf16/w8a8 (>= 1.5) | rel err |
|---|---|---|---|---|---|---|---|---|---|---|---|---|
| qkv | 4096 | 6144 | 4096 | bf16 | 0.228 | 903 | 0.303 | 0.192 | 0.031 | 0.841 | 1.327 | - |
| gate_up | 4096 | 28672 | 4096 | swiglu | 1.101 | 874 | 1.451 | 0.883 | 0.031 | 0.802 | 1.318 | - |
| down | 4096 | 4096 | 14336 | residual | 0.570 | 844 | 0.732 | 0.425 | 0.108 | 0.746 | 1.285 | - |
| qkv | 16384 | 6144 | 4096 | bf16 | 0.902 | 914 | 1.237 | 0.768 | 0.104 | 0.852 | 1.372 | - |
| gate_up | 16384 | 28672 | 4096 | swiglu | 4.427 | 869 | 5.624 | 3.399 | 0.104 | 0.768 | 1.270 | - |
| down | 16384 | 4096 | 14336 | residual | 2.435 | 790 | 2.876 | 1.650 | 0.370 | 0.678 | 1.181 | - |
over 2 rounds (median, min, max)
| shape | M | N | K | epilogue | scaled_mm/w8a8 | bf16/w8a8 |
|---|---|---|---|---|---|---|
| qkv | 4096 | 6144 | 4096 | bf16 | 0.850 (0.841-0.850) | 1.341 (1.327-1.341) |
| gate_up | 4096 | 28672 | 4096 | swiglu | 0.810 (0.802-0.810) | 1.331 (1.318-1.331) |
| down | 4096 | 4096 | 14336 | residual | 0.754 (0.746-0.754) | 1.298 (1.285-1.298) |
| qkv | 16384 | 6144 | 4096 | bf16 | 0.860 (0.852-0.860) | 1.385 (1.372-1.385) |
| gate_up | 16384 | 28672 | 4096 | swiglu | 0.775 (0.768-0.775) | 1.283 (1.270-1.283) |
| down | 16384 | 4096 | 14336 | residual | 0.684 (0.678-0.684) | 1.193 (1.181-1.193) |
"""


def fp8_section(suite, rows, meta, kernels, out):
    """The report's FP8 section, written by write_report."""
    os.makedirs(out, exist_ok=True)
    suite.write_report(rows, meta, out, kernels)
    text = open(os.path.join(out, "benchmarks.md")).read()
    return text[text.index("## FP8"):text.index("## Batch 64 decode")]


def parse_error(parse, text):
    try:
        parse(text)
    except ValueError as e:
        return f"refused: {e}"
    return "accepted"


def main():
    src, telosc, bench_json, out = sys.argv[1:5]
    suite = import_bench_suite(src)
    row, meta = model_row(suite, bench_json)
    work = os.path.join(out, "work")
    os.makedirs(work, exist_ok=True)
    tiny = os.path.join(src, "models", "tiny-llama")
    pool = {"max_batch": 8, "kv_pool": {"pages": 64}}

    row.update(fp8_decode={"fp8": {"ms_per_token": 0.899, "floor_ms_per_token": 0.510},
                           "fp8_lm_head": {"ms_per_token": 0.837, "floor_ms_per_token": 0.447}},
               kv_capacity=suite.kv_capacity(telosc, tiny, pool, work))
    kernels = {"attention_e4m3": suite.parse_attention_e4m3(ATTENTION),
               "prefill_w8a8": suite.parse_w8a8(W8A8)}
    print("artifacts left:", sorted(f for f in os.listdir(work) if f.endswith(".telos")))
    print(fp8_section(suite, [row, {"model": "Llama-3.1-8B", "error": "not run"}], meta, kernels,
                      os.path.join(out, "measured")))

    # Outputs without their rows: the GPU-less machine's line, a run cut before its last table.
    print("attention, no GPU:", parse_error(suite.parse_attention_e4m3, "telos-kernel-bench: no CUDA GPU\n"))
    print("w8a8, cut short:", parse_error(suite.parse_w8a8, W8A8[:W8A8.index("over 2 rounds")]))
    print("inspect without a kv line:", parse_error(suite.parse_kv_cache, "artifact: x.telos\n"))

    # Each failure is its section's line; the run goes on to the next.
    row["kv_capacity"] = suite.kv_capacity(telosc, tiny, dict(pool, max_seq_len=100000), work)
    kernels = {"attention_e4m3": suite.attention_e4m3(os.path.join(work, "telos-kernel-bench")),
               "prefill_w8a8": suite.prefill_w8a8("/bin/false", work)}
    print(fp8_section(suite, [row], meta, kernels, os.path.join(out, "failed")))


if __name__ == "__main__":
    main()
