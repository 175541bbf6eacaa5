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

    prefill_gemm_torch.py --paired CUBIN [ROUNDS]

times both in one process, interleaved: the cubin and CUBIN.names that `telos-prefill-bench
--compile-only` writes are loaded through the driver API (ctypes, libcuda), each of our kernels
is launched on torch's stream with tensor maps encoded as the executor encodes them, and every
timed launch of ours is followed by one torch.matmul of the same shape, an event between each
two, after ~2 s of load (the card's power average settles in about a second: before it, clocks
run higher, so whichever side ran first in a fresh process was timed on faster clocks; docs/
perf-log.md, session 25 run 4). Prints one table a round and the summary over the rounds. The bf16
epilogue's output is checked against torch's (relative L2) so a fast wrong kernel does not pass.

"""
import ctypes
import re
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


class Driver:
    """The few driver API calls the paired mode needs (libcuda through ctypes)."""

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        torch.zeros(1, device="cuda")  # torch's (primary) context, current on this thread

    def check(self, r, what):
        if r != 0:
            raise RuntimeError(f"{what}: CUresult {r}")

    def load(self, path):
        data = open(path, "rb").read()
        module = ctypes.c_void_p()
        self.check(self.cu.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(data)), "cuModuleLoadData")
        return module

    def function(self, module, name, smem):
        f = ctypes.c_void_p()
        self.check(self.cu.cuModuleGetFunction(ctypes.byref(f), module, name.encode()), name)
        # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
        self.check(self.cu.cuFuncSetAttribute(f, 8, ctypes.c_int(smem)), "cuFuncSetAttribute")
        return f

    def tensor_map(self, t, box_rows):
        """A 2D map over a row-major matrix as hexel::encode_2d makes one: 128-byte box rows, the
        128-byte swizzle, L2 promotion 256 B; copied to the device (the kernels read maps from
        global memory, as the executor keeps them)."""
        dtype = {torch.bfloat16: 9, torch.float32: 7}[t.dtype]  # CU_TENSOR_MAP_DATA_TYPE_*
        rows, cols = t.shape
        buf = (ctypes.c_uint8 * 192)()  # a CUtensorMap is 128 bytes, 64-byte aligned
        raw = (ctypes.addressof(buf) + 63) & ~63
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        self.check(self.cu.cuTensorMapEncodeTiled(
            ctypes.c_void_p(raw), dtype, u32(2), ctypes.c_void_p(t.data_ptr()),
            (u64 * 2)(cols, rows), (u64 * 1)(cols * t.element_size()),
            (u32 * 2)(128 // t.element_size(), box_rows), (u32 * 2)(1, 1),
            0, 3, 3, 0), "cuTensorMapEncodeTiled")  # no interleave, 128B swizzle, L2 256B, no OOB fill
        return torch.tensor(list(ctypes.string_at(raw, 128)), dtype=torch.uint8, device="cuda")

    def launch(self, f, grid, threads, smem, args):
        ptrs = [ctypes.c_void_p(a) for a in args]
        params = (ctypes.c_void_p * len(ptrs))(*[ctypes.addressof(p) for p in ptrs])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        self.check(self.cu.cuLaunchKernel(f, grid, 1, 1, threads, 1, 1, smem, stream, params, None),
                   "cuLaunchKernel")


# The plan's launch shape (kernel_plan.cpp; telos-prefill-bench's kThreads and kSmem).
THREADS = 384
SMEM = 4 * (128 + 256) * 64 * 2 + 4 * 64 * 64 * 2 + 8 * 8 + 1024


def paired(cubin, rounds):
    drv = Driver()
    module = drv.load(cubin)
    cases = []
    for line in open(cubin + ".names"):
        inst, entry = line.rstrip("\n").split("\t")
        m = re.fullmatch(r"telos_kernels::gemm_prefill_(\w+)<(\d+), (\d+), (\d+)>", inst)
        epi, M, n, K = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
        N = 2 * n if epi == "swiglu" else n
        shape = "gate_up" if epi == "swiglu" else "down" if K > 4096 else "qkv" if N == 6144 else "o"
        cases.append((shape, M, epi, N, K, n, drv.function(module, entry, SMEM)))
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    tables = []
    first = True
    for r in range(rounds):
        rows = []
        for shape, M, epi, N, K, n, f in cases:
            a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
            y = (torch.zeros(M, n, device="cuda", dtype=torch.float32) if epi == "residual"
                 else torch.empty(M, n, device="cuda", dtype=torch.bfloat16))
            maps = [drv.tensor_map(a, 128), drv.tensor_map(w, 128 if epi == "swiglu" else 256),
                    drv.tensor_map(y, 64)]
            tiles = -(-M // 128) * -(-n // (128 if epi == "swiglu" else 256))
            ours = lambda: drv.launch(f, min(tiles, sm), THREADS, SMEM, [t.data_ptr() for t in maps])
            peer = lambda: torch.matmul(a, w.T)
            err = "-"
            if epi == "bf16":
                ours()
                ref = peer().float()
                e = ((y.float() - ref).norm() / ref.norm()).item()
                if not e <= 1e-2:  # NaN fails too
                    raise RuntimeError(f"{shape} M={M}: relative L2 error {e} against torch.matmul")
                err = f"{e:.1e}"
            pair = lambda: (ours(), peer())
            steady_ms(pair, reps=3, warm_ms=2000.0 if first else 200.0)
            first = False
            reps = 20
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * reps + 1)]
            ev[0].record()
            for i in range(reps):
                ours()
                ev[2 * i + 1].record()
                peer()
                ev[2 * i + 2].record()
            ev[-1].synchronize()
            t_ours = sorted(ev[2 * i].elapsed_time(ev[2 * i + 1]) for i in range(reps))[reps // 2]
            t_peer = sorted(ev[2 * i + 1].elapsed_time(ev[2 * i + 2]) for i in range(reps))[reps // 2]
            rows.append((shape, M, epi, N, K, t_ours, t_peer, err))
            del a, w, y, maps
        print(f"round {r + 1}: telos and torch.matmul interleaved in one process ({torch.cuda.get_device_name()})")
        print("| shape | M | N | K | epilogue | telos ms | TFLOP/s | torch ms | TFLOP/s | torch/telos | rel err |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for shape, M, epi, N, K, t_ours, t_peer, err in rows:
            flop = 2.0 * M * N * K
            print(f"| {shape} | {M} | {N} | {K} | {epi} | {t_ours:.3f} | {flop / t_ours / 1e9:.0f} | "
                  f"{t_peer:.3f} | {flop / t_peer / 1e9:.0f} | {t_peer / t_ours:.3f} | {err} |")
        tables.append({(s_, str(M), str(N), str(K), e): tp / to for s_, M, e, N, K, to, tp, _ in rows})
    print(f"torch/telos over {rounds} rounds (median, min, max)")
    print("| shape | M | N | K | epilogue | median | min | max |")
    print("|---|---|---|---|---|---|---|---|")
    for key in tables[0]:
        v = sorted(t[key] for t in tables)
        print(f"| {' | '.join(key)} | {v[len(v) // 2]:.3f} | {v[0]:.3f} | {v[-1]:.3f} |")


def main():
    if sys.argv[1] == "--summary":
        summary(sys.argv[2:])
        return
    if sys.argv[1] == "--paired":
        paired(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 3)
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
