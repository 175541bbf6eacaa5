#!/usr/bin/env python3
"""PyTorch tensor-parallel Llama decode: the peer Telos's decode is measured beside
(docs/multi-gpu.md, tools/multi_gpu_check.sh step 4).

A self-contained Llama decoder (RMSNorm, RoPE, grouped-query attention over a static
preallocated KV cache, SwiGLU MLP) in bf16, split over the ranks of torch.distributed (NCCL),
one rank a GPU, Megatron-style:
  - QKV column-parallel by heads (a rank holds heads/N query and kv_heads/N KV heads, one fused
    matrix), gate and up column-parallel by intermediate rows (one fused matrix);
  - o and down row-parallel, each followed by an all-reduce (sum) of its [batch, hidden] partial
    (the functional form of dist.all_reduce, which torch.compile traces into its graph);
  - the embedding, the norms and the LM head replicated on every rank.
The weights are random (normal, std 0.02, a fixed seed a rank), generated on the GPU layer by
layer in place: no checkpoint, and no copy larger than one matrix.

A decode step takes one token a sequence at position CTX and attends over CTX + 1 cached
positions (the cache's last slot is the step's own, rewritten each step): every timed step does
the work of a step at context CTX, with static shapes, so the whole step is one CUDA graph under
torch.compile(mode="reduce-overhead"). Greedy argmax feeds the next step. A step that does not
compile with fullgraph=True is compiled with graph breaks, and one that does not compile at all
runs eagerly; rank 0 says which on stderr and in its JSON.

For each batch rank 0 prints one JSON line: the shape, ranks, batch, context, the median
(and min, max) ms a step over --steps steps after --warmup (at batch 1, ms a token), tokens/s,
and the weight bytes a rank reads a step: its layers' shards, the norms and the LM head (the
embedding table is left out: a step reads only its tokens' rows).

  torchrun --standalone --nproc-per-node 2 tools/torch_tp_decode.py --model llama-8b
  python3 tools/torch_tp_decode.py --dry-run --model llama-70b   the plan, without torch

NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 (NVLink multicast off, as for every
Telos multi-GPU run) are set when unset; another value is refused.
Exit codes: 0 done, 1 a failure on the GPU side, 2 a usage error (arguments, environment,
a rank count the shape does not divide).
"""

import argparse
import json
import os
import sys

SHAPES = {
    "llama-8b": {"layers": 32, "hidden": 4096, "intermediate": 14336, "heads": 32,
                 "kv_heads": 8, "head_dim": 128, "vocab": 128256},
    "llama-70b": {"layers": 80, "hidden": 8192, "intermediate": 28672, "heads": 64,
                  "kv_heads": 8, "head_dim": 128, "vocab": 128256},
}
REQUIRED_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
BF16_BYTES = 2
ROPE_THETA = 500000.0
RMS_EPS = 1e-5
INIT_STD = 0.02
SEED = 1234
PLAN_RANKS = (1, 2, 4, 8)


class UsageError(Exception):
    pass


def positive_int(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return int(text)


def positive_ints(text):
    if not all(v.isdigit() and int(v) > 0 for v in text.split(",")):
        raise argparse.ArgumentTypeError(
            f"expected positive integers separated by commas, got '{text}'")
    return [int(v) for v in text.split(",")]


def non_negative_int(text):
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got '{text}'")
    return int(text)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="PyTorch tensor-parallel Llama decode with random bf16 weights "
        "(the peer of Telos's decode; run under torchrun, a rank a GPU).",
        epilog="Exit codes: 0 done, 1 a failure on the GPU side, 2 a usage error.")
    p.add_argument("--model", choices=sorted(SHAPES), default="llama-8b", help="the shape")
    p.add_argument("--layers", type=positive_int,
                   help="the number of layers (default: the model's)")
    p.add_argument("--batch", type=positive_ints, default=[1, 64, 256],
                   help="batch sizes, comma-separated (default 1,64,256)")
    p.add_argument("--ctx", type=positive_int, default=512,
                   help="the context length each step attends over (default 512)")
    p.add_argument("--steps", type=positive_int, default=100, help="timed steps (default 100)")
    p.add_argument("--warmup", type=non_negative_int, default=10,
                   help="untimed steps first, compilation and graph capture included (default 10)")
    p.add_argument("--no-compile", action="store_true", help="run the step eagerly")
    p.add_argument("--dry-run", action="store_true", help="print the plan; imports no torch")
    args = p.parse_args(argv)
    args.shape = dict(SHAPES[args.model])
    if args.layers:
        args.shape["layers"] = args.layers
    return args


def check_env():
    """Sets the required variables where unset; raises UsageError where one is set otherwise."""
    for name, want in REQUIRED_ENV.items():
        have = os.environ.setdefault(name, want)
        if have != want:
            raise UsageError(f"{name}={have} in the environment: this run needs {name}={want} "
                             "(NVLink multicast off, as tools/multi_gpu_check.sh exports)")


def check_ranks(shape, tp):
    for field in ("heads", "kv_heads", "intermediate"):
        if shape[field] % tp:
            raise UsageError(f"{tp} ranks do not divide the shape's {field} ({shape[field]})")


def layer_bytes(shape, tp):
    """Bytes of one layer a rank holds: its QKV, o, gate, up and down shards and both norms."""
    h, i, d = shape["hidden"], shape["intermediate"], shape["head_dim"]
    attn = h * (shape["heads"] + 2 * shape["kv_heads"]) * d + shape["heads"] * d * h
    mlp = 3 * h * i
    return ((attn + mlp) // tp + 2 * h) * BF16_BYTES


def head_bytes(shape):
    """The final norm and the LM head, replicated."""
    return (shape["hidden"] + shape["vocab"] * shape["hidden"]) * BF16_BYTES


def weight_bytes_read(shape, tp):
    """Weight bytes a rank reads a step (the embedding's rows left out)."""
    return shape["layers"] * layer_bytes(shape, tp) + head_bytes(shape)


def kv_bytes(shape, tp, batch, ctx):
    return (2 * shape["layers"] * batch * (ctx + 1) * shape["kv_heads"] // tp * shape["head_dim"]
            * BF16_BYTES)


def gb(n):
    return f"{n / 1e9:.2f}"


def print_plan(args, argv):
    s = args.shape
    print(f"shape: {args.model}, {s['layers']} layers, hidden {s['hidden']}, intermediate "
          f"{s['intermediate']}, {s['heads']}/{s['kv_heads']} heads of {s['head_dim']}, "
          f"vocab {s['vocab']}, bf16")
    mode = "eager" if args.no_compile else 'torch.compile(mode="reduce-overhead", fullgraph=True)'
    batches = ",".join(str(b) for b in args.batch)
    print(f"runs: batch {batches} at context {args.ctx}, {args.warmup} warm-up and {args.steps} "
          f"timed steps each, {mode}")
    embed = s["vocab"] * s["hidden"] * BF16_BYTES
    for tp in PLAN_RANKS:
        try:
            check_ranks(s, tp)
        except UsageError as e:
            print(f"TP={tp}: not runnable: {e}")
            continue
        read = weight_bytes_read(s, tp)
        kv = " / ".join(gb(kv_bytes(s, tp, b, args.ctx)) for b in args.batch)
        print(f"TP={tp}: a rank reads {read} weight bytes a step ({gb(read)} GB: layers "
              f"{gb(s['layers'] * layer_bytes(s, tp))}, LM head and final norm "
              f"{gb(head_bytes(s))}); holds {gb(read + embed)} GB of weights with the embedding, "
              f"KV {kv} GB at batch {batches.replace(',', ' / ')}")
    rest = [a for a in argv if a != "--dry-run"]
    print(" ".join(["command: torchrun --standalone --nproc-per-node TP tools/torch_tp_decode.py"]
                   + rest))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        check_env()
        if args.dry_run:
            print_plan(args, argv)
            return 0
        return run(args)
    except UsageError as e:
        print(f"torch_tp_decode.py: error: {e}", file=sys.stderr)
        return 2


def run(args):
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    tp = int(os.environ.get("WORLD_SIZE", "1"))
    check_ranks(args.shape, tp)
    if not torch.cuda.is_available():
        print("torch_tp_decode.py: error: no CUDA device visible", file=sys.stderr)
        return 1
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    if tp > 1:
        dist.init_process_group("nccl", device_id=device)
    try:
        weights = make_weights(torch, args.shape, tp, rank, device)
        for batch in args.batch:
            result = measure(torch, args, weights, tp, batch, device)
            if rank == 0:
                print(json.dumps(result), flush=True)
    finally:
        if tp > 1:
            dist.destroy_process_group()
    return 0


def make_weights(torch, shape, tp, rank, device):
    """This rank's weights, a module of parameters generated matrix by matrix on the GPU."""
    nn = torch.nn
    torch.manual_seed(SEED + rank)
    h, d = shape["hidden"], shape["head_dim"]
    qkv_rows = (shape["heads"] + 2 * shape["kv_heads"]) // tp * d

    def matrix(rows, cols):
        t = torch.empty(rows, cols, dtype=torch.bfloat16, device=device).normal_(0.0, INIT_STD)
        return nn.Parameter(t, requires_grad=False)

    def ones(n):
        return nn.Parameter(torch.ones(n, dtype=torch.bfloat16, device=device), requires_grad=False)

    def layer():
        m = nn.Module()
        m.attn_norm, m.mlp_norm = ones(h), ones(h)
        m.wqkv = matrix(qkv_rows, h)
        m.wo = matrix(h, shape["heads"] // tp * d)
        m.wgate_up = matrix(2 * shape["intermediate"] // tp, h)
        m.wdown = matrix(h, shape["intermediate"] // tp)
        return m

    w = nn.Module()
    w.embed = matrix(shape["vocab"], h)
    w.layers = nn.ModuleList(layer() for _ in range(shape["layers"]))
    w.norm = ones(h)
    w.lm_head = matrix(shape["vocab"], h)
    return w


def decoder(torch, shape, tp, weights, batch, ctx, device):
    """A module whose forward is one decode step at position ctx for `batch` sequences; its KV
    cache is a buffer (static under CUDA graphs) and the weights are shared between batches."""
    import torch.distributed._functional_collectives as funcol

    nn, F = torch.nn, torch.nn.functional
    d = shape["head_dim"]
    q_heads, kv_heads = shape["heads"] // tp, shape["kv_heads"] // tp
    group = torch.distributed.group.WORLD if tp > 1 else None
    freqs = ROPE_THETA ** (-torch.arange(0, d, 2, dtype=torch.float32, device=device) / d)

    def rms_norm(x, w):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + RMS_EPS)).to(x.dtype) * w

    def all_reduce(x):
        return funcol.all_reduce(x, "sum", group) if group is not None else x

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = weights
            cache = (shape["layers"], batch, kv_heads, ctx + 1, d)
            self.register_buffer("k_cache", torch.empty(cache, dtype=torch.bfloat16, device=device)
                                 .normal_())
            self.register_buffer("v_cache", torch.empty(cache, dtype=torch.bfloat16, device=device)
                                 .normal_())
            angle = ctx * freqs
            self.register_buffer("cos", angle.cos())
            self.register_buffer("sin", angle.sin())

        def rope(self, x):
            x1, x2 = x.float().chunk(2, dim=-1)
            return torch.cat((x1 * self.cos - x2 * self.sin, x2 * self.cos + x1 * self.sin),
                             dim=-1).to(x.dtype)

        def attention(self, i, layer, x):
            qkv = F.linear(x, layer.wqkv)
            q, k, v = qkv.split((q_heads * d, kv_heads * d, kv_heads * d), dim=-1)
            q = self.rope(q.view(batch, q_heads, d))
            self.k_cache[i, :, :, ctx] = self.rope(k.view(batch, kv_heads, d))
            self.v_cache[i, :, :, ctx] = v.view(batch, kv_heads, d)
            q = q.view(batch, kv_heads, q_heads // kv_heads, d)
            scores = torch.matmul(q, self.k_cache[i].transpose(-1, -2)).float() * d ** -0.5
            p = torch.softmax(scores, dim=-1).to(x.dtype)
            out = torch.matmul(p, self.v_cache[i]).reshape(batch, q_heads * d)
            return all_reduce(F.linear(out, layer.wo))

        def mlp(self, layer, x):
            gate, up = F.linear(x, layer.wgate_up).chunk(2, dim=-1)
            return all_reduce(F.linear(F.silu(gate) * up, layer.wdown))

        def forward(self, tokens):
            x = F.embedding(tokens, self.w.embed)
            for i, layer in enumerate(self.w.layers):
                x = x + self.attention(i, layer, rms_norm(x, layer.attn_norm))
                x = x + self.mlp(layer, rms_norm(x, layer.mlp_norm))
            logits = F.linear(rms_norm(x, self.w.norm), self.w.lm_head)
            return logits.argmax(dim=-1)

    return Decoder()


def compiled_step(torch, model, tokens, rank, no_compile):
    """The step and how it runs: the first of fullgraph, graph breaks, eager whose first call
    succeeds (that call compiles and runs one step)."""
    if no_compile:
        return model, "eager"
    for fullgraph, mode in ((True, "compiled"), (False, "compiled with graph breaks")):
        step = torch.compile(model, mode="reduce-overhead", fullgraph=fullgraph)
        try:
            tokens.copy_(step(tokens))
            return step, mode
        except Exception as e:  # compilation failures come in many types; the run goes on
            torch._dynamo.reset()
            if rank == 0:
                print(f"torch_tp_decode.py: note: torch.compile(fullgraph={fullgraph}) failed "
                      f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})",
                      file=sys.stderr)
    if rank == 0:
        print("torch_tp_decode.py: note: running the step eagerly", file=sys.stderr)
    return model, "eager"


def measure(torch, args, weights, tp, batch, device):
    shape, rank = args.shape, int(os.environ.get("RANK", "0"))
    with torch.no_grad():
        model = decoder(torch, shape, tp, weights, batch, args.ctx, device)
        tokens = torch.randint(shape["vocab"], (batch,), device=device)
        step, mode = compiled_step(torch, model, tokens, rank, args.no_compile)
        for _ in range(args.warmup):
            tokens.copy_(step(tokens))
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.steps)]
        for start, end in events:
            start.record()
            out = step(tokens)
            end.record()
            tokens.copy_(out)
        torch.cuda.synchronize()
        ms = sorted(start.elapsed_time(end) for start, end in events)
    del model, step
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    median = ms[len(ms) // 2]
    return {"peer": "pytorch-tp", "model": args.model, **shape, "tp": tp, "batch": batch,
            "ctx": args.ctx, "mode": mode, "steps": args.steps, "ms_per_step": round(median, 4),
            "ms_per_step_min": round(ms[0], 4), "ms_per_step_max": round(ms[-1], 4),
            "tokens_per_s": round(batch * 1000.0 / median, 1),
            "weight_bytes_per_rank": weight_bytes_read(shape, tp),
            "device": torch.cuda.get_device_name(device), "torch": torch.__version__}


if __name__ == "__main__":
    sys.exit(main())
