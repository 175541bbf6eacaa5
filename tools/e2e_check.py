#!/usr/bin/env python3
"""Telos against transformers at real model shapes, end to end.

For each named config of test/telosc/Inputs/configs/ (real configs, random weights):
  1. transformers builds the model from the config with a fixed seed, trains it briefly on a
     synthetic language (below), rounds the weights to bf16 (the artifact stores bf16, so both
     sides see the same numbers), and saves the checkpoint;
  2. telosc compiles it (at serving.tensor_parallel N with --tensor-parallel N); telos-run runs
     it (the GPU engine when a GPU is present; a tensor-parallel artifact takes a GPU a rank, or
     every rank on GPU 0 with TELOS_TP_ONE_DEVICE=1 when fewer than N GPUs are visible);
  3. the two are compared, transformers in fp32 being the reference:
     - teacher-forced logits at 64 positions of a fixed random sequence: relative L2 error over
       the 64 positions (the [64, vocab] block; limit 2e-2, the brief's bound), argmax agreement
       (limit 99%), and, reported beside transformers' own bf16 forward, the error per position
       (its median and max: one sharp position of the trained 8B reaches ~2e-2 in either, so the
       max of 64 draws is a yardstick of bf16 noise, not a limit);
     - free-running greedy continuations of four prompts: the number of leading tokens that are
       identical (limit 16), and where they part, transformers' top-2 margin there;
     - batch invariance: 64 mixed requests in one run against eight of them run alone;
     - at N > 1, the same greedy continuations from the model compiled at N = 1: identical ids
       (the brief's bar for tensor parallelism; the ranks' partial sums are ordered differently
       from one GPU's, so a parting shows with transformers' top-2 margin there).

The synthetic language: 2048 words of the vocabulary and a random successor for each, so every
text is a walk word -> successor. Random weights predict nothing (top-2 logit margins of
0.001-0.03 of the logits' std, below bf16 inference noise, so argmax and greedy part at ties that
say nothing about the engine); after --train-steps Adam steps on walks (all weights up to 3B
parameters, beyond that the embeddings, norms and LM head, for memory) the model predicts the
successor with a clear margin, as a real checkpoint predicts real text. The sequence and prompts
below are walks; the batch-invariance prompts stay random.

With --fp8 the checks are of two FP8 artifacts instead. Each layer's linear weights (q, k, v, o,
gate, up, down; not the embedding, the LM head or the norms) are quantized in torch with telosc's
arithmetic (quantize_blocks: 128x128 blocks, scale = amax / 448 in f32, e4m3 rounded to nearest
even) into a checkpoint of the hub's `fp8` format beside the bf16 one (tools/make_fp8_checkpoint.py
--format fp8's names and config). The reference is transformers in fp32 on the dequantized weights
q * scale; the bf16 yardstick stays transformers' bf16 forward on the bf16 weights, and
hf_fp8_weights_vs_bf16_rel_l2_all says how far the dequantized weights move the fp32 logits. The
artifacts, a row each with the same checks and limits: "fp8 hub", that checkpoint compiled as it
is, and "fp8 --quantize", the bf16 checkpoint compiled with --quantize fp8; both run W8A8 (the
activations quantized per token and 128 columns), or weight-only with --fp8-activations bf16
(serving fp8_activations "bf16"). With --fp8-lm-head the LM head is quantized too, the same way
(a tied model's as a copy of its embedding, untied in the checkpoint's config and in the
reference model, the embedding staying bf16): the hub checkpoint's ignore list is empty and
telosc gets --quantize-lm-head. fp8_weight_files_identical records whether the two artifacts'
weight files (each rank's at N > 1) are the same bytes, as they should be; it fails nothing.
Under --work a 1B-class model takes ~6 GB, the 8B ~45 GB (~65 GB at N > 1).

    python3 tools/e2e_check.py --telosc BIN --telos-run BIN --work DIR [--out DIR]
                               [--models Llama-3.2-1B,Qwen2.5-1.5B] [--init-std S]
                               [--train-steps N] [--tensor-parallel N] [--keep-work]
                               [--fp8 [--fp8-activations e4m3|bf16] [--fp8-lm-head]]

Needs torch, transformers and safetensors (the GPU machine has them). Prints one table row per
model and artifact and writes e2e.json (every figure) to --out. Exits 1 when a check fails.
"""
import argparse
import collections
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import time

try:  # not needed for --help
    import safetensors.torch
    import torch
    import transformers
except ImportError:
    torch = transformers = None

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_fp8_checkpoint import (BLOCK, E4M3_MAX, LINEAR, copy_beside,  # noqa: E402
                                 quantization_config)
CONFIGS = os.path.join(HERE, "..", "test", "telosc", "Inputs", "configs")
POSITIONS = 64
GREEDY = 32
# Under --work/MODEL: the bf16 checkpoint and, with --fp8, its hub-format FP8 form.
CHECKPOINT, FP8_CHECKPOINT = "checkpoint", "checkpoint-fp8"
SERVING = {"max_batch": 64, "max_seq_len": 256, "kv_page_size": 16, "kv_pool": {"pages": 1280},
           "prefill_chunk": 256}


class Language:
    """WORDS words of the vocabulary, each with one random successor; a text is a walk."""
    WORDS = 2048

    def __init__(self, vocab, seed):
        g = torch.Generator().manual_seed(seed + 7)
        self.words = torch.randperm(vocab, generator=g)[:min(vocab, self.WORDS)]
        self.succ = torch.full((vocab,), -1, dtype=torch.long)
        self.succ[self.words] = self.words[torch.randperm(len(self.words), generator=g)]

    def walks(self, count, length, g):
        out = torch.empty(count, length, dtype=torch.long)
        out[:, 0] = self.words[torch.randint(0, len(self.words), (count,), generator=g)]
        for i in range(1, length):
            out[:, i] = self.succ[out[:, i - 1]]
        return out


def train(model, language, steps, seed):
    """`steps` Adam steps (warm-up over the first tenth, gradients clipped at norm 1) on batches
    of walks of 64 words: 32 walks, or 8 for models above 3B parameters, which train only their
    embeddings, norms and LM head (memory and time). Returns the first and last loss."""
    big = sum(p.numel() for p in model.parameters()) > 3e9
    params = [p for n, p in model.named_parameters()
              if not big or any(k in n for k in ("embed", "lm_head", "norm"))]
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=1e-3)
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / warm))
    g = torch.Generator().manual_seed(seed + 11)
    torch.backends.cuda.matmul.allow_tf32 = True
    model.train()
    losses = []
    for _ in range(steps):
        ids = language.walks(8 if big else 32, 64, g).cuda()
        loss = model(ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss))
    torch.backends.cuda.matmul.allow_tf32 = False
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
        p.grad = None
    del opt, sched
    torch.cuda.empty_cache()
    if losses and not math.isfinite(losses[-1]):
        raise RuntimeError(f"training diverged: last loss {losses[-1]}")
    return (round(losses[0], 3), round(losses[-1], 4)) if losses else (None, None)


def make_checkpoint(name, out_dir, init_std, seed, train_steps=0):
    """Builds `name` with random weights (trained `train_steps` steps on the synthetic language
    when > 0), rounds them to bf16 and saves the checkpoint. Returns the fp32 model (bf16 values),
    its config and the (first, last) training loss."""
    config = transformers.AutoConfig.from_pretrained(os.path.join(CONFIGS, name))
    if init_std is not None:
        config.initializer_range = init_std
    config.max_position_embeddings = max(getattr(config, "max_position_embeddings", 0), 4096)
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                              attn_implementation="eager")
    losses = train(model, Language(config.vocab_size, seed), train_steps, seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    model.eval()
    model.to(torch.bfloat16).save_pretrained(out_dir, safe_serialization=True)
    model.to(torch.float32)
    return model, config, losses


def test_inputs(vocab, seed):
    """The teacher-forced sequence and the greedy prompts (walks of the synthetic language), and
    the 64 batch-invariance prompts (random ids of 1 to 119 tokens)."""
    g = torch.Generator().manual_seed(seed + 1)
    language = Language(vocab, seed)
    sequence = language.walks(1, POSITIONS, g)[0].tolist()
    prompts = [language.walks(1, n, g)[0].tolist() for n in (8, 1, 33, 100)]
    mixed = [torch.randint(0, vocab, (int(n),), generator=g).tolist()
             for n in torch.randint(1, 120, (64,), generator=g)]
    return sequence, prompts, mixed


def rel_l2(got, want):
    return float((got - want).norm() / want.norm())


def forward_logits(model, sequence):
    """The model's logits at every position of `sequence`, f32 on the host."""
    with torch.no_grad():
        return model(torch.tensor([sequence], device="cuda")).logits[0].float().cpu()


def greedy_reference(model, prompts):
    """Greedy continuations of `prompts`: per prompt (ids, top-2 margin at each step in units of
    the logits' std)."""
    greedy = []
    with torch.no_grad():
        for prompt in prompts:
            out = model(torch.tensor([prompt], device="cuda"), use_cache=True)
            past, tokens, margins = out.past_key_values, [], []
            last = out.logits[0, -1]
            for _ in range(GREEDY):
                top2 = torch.topk(last.float(), 2)
                tokens.append(int(top2.indices[0]))
                margins.append(float(top2.values[0] - top2.values[1]) / float(last.float().std()))
                out = model(torch.tensor([[tokens[-1]]], device="cuda"), past_key_values=past,
                            use_cache=True)
                past, last = out.past_key_values, out.logits[0, -1]
            greedy.append((tokens, margins))
    return greedy


def bf16_yardstick(model, sequence, ref_logits):
    """What bf16 inference costs on this model: transformers itself in bf16 against its fp32
    logits `ref_logits`. The weights must be bf16 values, which the round trip to bf16 keeps."""
    with torch.no_grad():
        bf16 = forward_logits(model.to(torch.bfloat16), sequence)
        model.to(torch.float32)
    yard = sorted(rel_l2(bf16[p], ref_logits[p]) for p in range(POSITIONS))
    agree = int((bf16.argmax(1) == ref_logits.argmax(1)).sum())
    return {"hf_bf16_rel_l2_all": rel_l2(bf16, ref_logits), "hf_bf16_rel_l2_median":
            yard[len(yard) // 2], "hf_bf16_rel_l2_max": yard[-1],
            "hf_bf16_argmax_agreement": agree / POSITIONS}


def quantize_blocks(w):
    """telosc's block FP8 of the matrix `w` (docs/fp8.md, "From a bf16 checkpoint"), on the GPU:
    per 128x128 block (a last partial block of its own elements) scale = amax / 448 in f32 (1
    where amax is 0), q = e4m3(w / scale) rounded to nearest even and saturated at +-448. Returns
    q, the f32 scales [ceil(rows/128), ceil(cols/128)] and the dequantized f32 q * scale."""
    rows, cols = w.shape
    grid = (-(-rows // BLOCK), -(-cols // BLOCK))
    padded = torch.zeros(grid[0] * BLOCK, grid[1] * BLOCK, dtype=torch.float32, device="cuda")
    padded[:rows, :cols] = w
    blocks = padded.view(grid[0], BLOCK, grid[1], BLOCK)
    amax = blocks.abs().amax(dim=(1, 3))
    # A tensor divisor: torch divides a CUDA tensor by a Python number as a product with the
    # number's reciprocal, which can differ from the quotient in the last bit.
    scale = torch.where(amax > 0, amax / torch.full_like(amax, E4M3_MAX), torch.ones_like(amax))
    per_element = scale[:, None, :, None]
    q = (blocks / per_element).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    dequantized = q.float() * per_element

    def unpadded(t):
        return t.reshape(padded.shape)[:rows, :cols].contiguous()
    return unpadded(q), scale, unpadded(dequantized)


def write_fp8_checkpoint(model, config, ckpt, fp8_dir, lm_head):
    """The bf16 checkpoint `ckpt` in the hub's block-FP8 form in `fp8_dir`, with
    tools/make_fp8_checkpoint.py --format fp8's names and config: each layer's linear weight
    `M.weight` (and with `lm_head` lm_head.weight) by quantize_blocks as F8_E4M3 beside
    `M.weight_scale_inv` (f32), every other tensor as `ckpt` has it (a tied model without
    lm_head.weight, unless `lm_head`: then a quantized copy of the embedding, the config and
    `model` untied). Each quantized weight of `model` becomes its dequantized value."""
    tensors = {}
    for path in sorted(glob.glob(os.path.join(ckpt, "*.safetensors"))):
        tensors.update(safetensors.torch.load_file(path))
    tied = getattr(config, "tie_word_embeddings", False)
    if tied:
        tensors.pop("lm_head.weight", None)
    if tied and lm_head:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
        model.config.tie_word_embeddings = False
    linears = [n for n in tensors
               if n.startswith("model.layers.") and any(n.endswith(f".{m}.weight") for m in LINEAR)]
    if lm_head:
        linears.append("lm_head.weight")
    with torch.no_grad():
        for name in linears:
            q, scale, dequantized = quantize_blocks(tensors[name])
            tensors[name] = q.cpu()
            tensors[name + "_scale_inv"] = scale.cpu()
            model.get_parameter(name).copy_(dequantized)
    with open(os.path.join(ckpt, "config.json")) as f:
        hf_config = json.load(f)
    if lm_head:
        hf_config["tie_word_embeddings"] = False
    copy_beside(ckpt, fp8_dir, dict(hf_config, quantization_config=quantization_config(
        "fp8", [] if lm_head else ["lm_head"])))
    safetensors.torch.save_file(tensors, os.path.join(fp8_dir, "model.safetensors"),
                                metadata={"format": "pt"})
    return len(linears)


def telos_generate(telos_run, artifact, prompts, max_tokens, dump_logits=False, env=None):
    cmd = [telos_run, "generate", artifact, "--temperature", "0", "--ignore-eos",
           "--max-tokens", str(max_tokens), "--json"]
    if dump_logits:
        cmd.append("--dump-logits")
    for p in prompts:
        cmd += ["--prompt-ids", ",".join(map(str, p))]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"telos-run failed ({res.returncode}): {res.stderr[-2000:]}")
    results = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    by_prompt = {}
    for r in results:
        by_prompt.setdefault(tuple(r["prompt_ids"]), r)
    return [by_prompt[tuple(p)] for p in prompts], res.stderr


# One artifact to check: its kind in the rows, the checkpoint telosc compiles, telosc's extra
# arguments and the folder of its serving configs and artifacts.
Variant = collections.namedtuple("Variant", "kind checkpoint flags folder")


def variants(args, work):
    """The bf16 checkpoint's artifact; with --fp8 instead the FP8 checkpoint's as it is and the
    bf16 checkpoint's quantized by telosc."""
    ckpt = os.path.join(work, CHECKPOINT)
    if not args.fp8:
        return [Variant("bf16", ckpt, [], os.path.join(work, "bf16"))]
    return [Variant("fp8 hub", os.path.join(work, FP8_CHECKPOINT), [],
                    os.path.join(work, "fp8-hub")),
            Variant("fp8 --quantize", ckpt,
                    ["--quantize", "fp8"] + (["--quantize-lm-head"] if args.fp8_lm_head else []),
                    os.path.join(work, "fp8-quantize"))]


def compile_artifact(args, variant, tensor_parallel):
    """`variant` compiled at serving.tensor_parallel `tensor_parallel` into
    FOLDER/model-tpN.telos (with --fp8-activations bf16, serving.fp8_activations "bf16"); returns
    its path and the seconds telosc took."""
    os.makedirs(variant.folder, exist_ok=True)
    serving = dict(SERVING, tensor_parallel=tensor_parallel)
    if args.fp8_activations == "bf16":
        serving["fp8_activations"] = "bf16"
    serving_path = os.path.join(variant.folder, f"serving-tp{tensor_parallel}.json")
    with open(serving_path, "w") as f:
        json.dump(serving, f)
    artifact = os.path.join(variant.folder, f"model-tp{tensor_parallel}.telos")
    t0 = time.time()
    res = subprocess.run([args.telosc, "compile", variant.checkpoint, "--serving", serving_path,
                          "-o", artifact] + variant.flags, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"telosc ({variant.kind}) at tensor_parallel {tensor_parallel} "
                           f"failed: {res.stderr[-2000:]}")
    return artifact, round(time.time() - t0, 1)


def rank_placement(tensor_parallel):
    """telos-run's environment for an artifact of `tensor_parallel` ranks, and where they run: a
    GPU a rank when that many are visible, else every rank on GPU 0 (TELOS_TP_ONE_DEVICE=1)."""
    env = dict(os.environ)
    if tensor_parallel == 1:
        return env, "one GPU"
    if torch.cuda.device_count() >= tensor_parallel:
        return env, f"{tensor_parallel} GPUs, a rank each"
    env["TELOS_TP_ONE_DEVICE"] = "1"
    return env, f"{tensor_parallel} ranks on GPU 0 (TELOS_TP_ONE_DEVICE=1)"


def identical_prefix(got, want):
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))


def check_model(name, args):
    """The model `name` made, its reference computed and each of its artifacts (variants) checked;
    returns a row an artifact."""
    base = {"model": name, "tensor_parallel": args.tensor_parallel}
    work = os.path.join(args.work, name)
    ckpt = os.path.join(work, CHECKPOINT)
    os.makedirs(ckpt, exist_ok=True)
    t0 = time.time()
    model, config, losses = make_checkpoint(name, ckpt, args.init_std, args.seed, args.train_steps)
    base["init_std"] = config.initializer_range
    base["train_steps"], base["train_loss_first_last"] = args.train_steps, losses
    base["make_s"] = round(time.time() - t0, 1)
    inputs = test_inputs(config.vocab_size, args.seed)
    ref_logits = forward_logits(model, inputs[0])
    # The yardstick is taken on the bf16 weights: bf16 inference noise at this model's shape.
    base.update(bf16_yardstick(model, inputs[0], ref_logits))
    if args.fp8:
        ref_logits = dequantized_reference(model, config, work, inputs[0], ref_logits, base,
                                           args.fp8_lm_head)
    ref = (ref_logits, greedy_reference(model, inputs[1]))
    rows, artifacts = [], {}
    for variant in variants(args, work):
        row = dict(base, artifact=variant.kind,
                   fp8_activations=args.fp8_activations if args.fp8 else None)
        try:
            artifacts[variant.kind] = check_artifact(variant, row, args, inputs, ref)
        except Exception as e:  # report and go on with the next artifact
            row["pass"], row["error"] = False, str(e)[-1500:]
        rows.append(row)
    if args.fp8 and len(artifacts) == 2:
        same = same_weight_files(*artifacts.values())
        for row in rows:
            row["fp8_weight_files_identical"] = same
    del model
    torch.cuda.empty_cache()
    return rows


def dequantized_reference(model, config, work, sequence, bf16_logits, base, lm_head):
    """Writes WORK/FP8_CHECKPOINT (write_fp8_checkpoint), which leaves `model` on the dequantized
    weights, and returns that model's teacher-forced logits, the FP8 artifacts' reference. Adds
    to `base` the time, the count of quantized weights and how far the quantized weights move
    transformers' fp32 logits from the bf16 weights' (`bf16_logits`)."""
    t0 = time.time()
    base["fp8_quantized_weights"] = write_fp8_checkpoint(
        model, config, os.path.join(work, CHECKPOINT), os.path.join(work, FP8_CHECKPOINT), lm_head)
    base["fp8_checkpoint_s"] = round(time.time() - t0, 1)
    logits = forward_logits(model, sequence)
    base["hf_fp8_weights_vs_bf16_rel_l2_all"] = rel_l2(logits, bf16_logits)
    return logits


def check_artifact(variant, row, args, inputs, ref):
    """`variant` compiled and run against the reference `ref` (teacher-forced logits, greedy
    continuations): every check's figures added to `row`. Returns the artifact's path."""
    sequence, prompts, mixed = inputs
    ref_logits, ref_greedy = ref
    artifact, row["compile_s"] = compile_artifact(args, variant, args.tensor_parallel)
    env, row["placement"] = rank_placement(args.tensor_parallel)
    teacher_forced(row, args, artifact, env, sequence, ref_logits)
    greedy, _ = telos_generate(args.telos_run, artifact, prompts, GREEDY, env=env)
    row["greedy"] = []
    for r, (want, margins) in zip(greedy, ref_greedy):
        same = identical_prefix(r["generated_ids"], want)
        row["greedy"].append({"identical_prefix": same,
                              "margin_at_parting": margins[same] if same < len(want) else None,
                              "min_margin_before": min(margins[:same]) if same else None})
    alone_same = batch_invariance(args, artifact, env, mixed)
    row["batch64_alone_identical"] = f"{alone_same}/8"
    row["pass"] = (row["logits_rel_l2_all"] <= 2e-2 and row["argmax_agreement"] >= 0.99 and
                   all(x["identical_prefix"] >= 16 for x in row["greedy"]) and alone_same == 8)
    if args.tensor_parallel > 1:
        same_as_one = check_against_one_rank(row, args, variant, prompts, greedy, ref_greedy)
        row["pass"] = row["pass"] and same_as_one
    return artifact


def teacher_forced(row, args, artifact, env, sequence, ref_logits):
    """Request p is the sequence's first p + 1 tokens; its prompt logits are the logits at
    position p. Adds to `row` the time, the engine and the logits' errors against `ref_logits`."""
    t0 = time.time()
    tf, stderr = telos_generate(args.telos_run, artifact,
                                [sequence[:p + 1] for p in range(POSITIONS)], 1, dump_logits=True,
                                env=env)
    row["teacher_forced_s"] = round(time.time() - t0, 1)
    row["engine"] = "gpu" if "gpu" in stderr.lower() else "cpu?"
    got = torch.stack([torch.tensor(r["prompt_logits"]) for r in tf])
    errs = [rel_l2(got[p], ref_logits[p]) for p in range(POSITIONS)]
    row["logits_rel_l2_all"] = rel_l2(got, ref_logits)
    row["logits_rel_l2_by_position"] = [round(e, 5) for e in errs]
    errs = sorted(errs)
    row["logits_rel_l2_median"] = errs[len(errs) // 2]
    row["logits_rel_l2_max"] = errs[-1]
    row["argmax_agreement"] = int((got.argmax(1) == ref_logits.argmax(1)).sum()) / POSITIONS


def batch_invariance(args, artifact, env, mixed):
    """The 64 `mixed` requests together, and every eighth alone: how many of those eight gave the
    same ids both ways."""
    together, _ = telos_generate(args.telos_run, artifact, mixed, 16, env=env)
    alone_same = 0
    for i in range(0, 64, 8):
        alone, _ = telos_generate(args.telos_run, artifact, [mixed[i]], 16, env=env)
        alone_same += alone[0]["generated_ids"] == together[i]["generated_ids"]
    return alone_same


def check_against_one_rank(row, args, variant, prompts, greedy, ref_greedy):
    """The greedy continuations of `variant` compiled at tensor_parallel 1 against those of the
    N-rank artifact: every id identical. Records per prompt the identical prefix and, where they
    part, transformers' top-2 margin there (a near-tie says the order of the sums chose)."""
    artifact, row["compile_tp1_s"] = compile_artifact(args, variant, 1)
    one, _ = telos_generate(args.telos_run, artifact, prompts, GREEDY)
    row["greedy_vs_tp1"] = []
    for a, b, (want, margins) in zip(greedy, one, ref_greedy):
        same = identical_prefix(a["generated_ids"], b["generated_ids"])
        parting = margins[same] if same < len(want) else None
        row["greedy_vs_tp1"].append({"identical_prefix": same, "margin_at_parting": parting})
    return all(x["identical_prefix"] == GREEDY for x in row["greedy_vs_tp1"])


def same_weight_files(a, b):
    """Whether artifacts `a` and `b` hold the same weight files (weights.bin, or
    weights.rankR.bin a rank), byte for byte."""
    def weight_files(artifact):
        return sorted(f for f in os.listdir(artifact) if f.startswith("weights") and
                      f.endswith(".bin"))
    names = weight_files(a)
    return bool(names) and names == weight_files(b) and all(
        subprocess.run(["cmp", "-s", os.path.join(a, n), os.path.join(b, n)]).returncode == 0
        for n in names)


def print_table(rows, tensor_parallel):
    print()
    print("model | artifact | TP | pass | logits rel L2 over 64 positions; per position "
          "median/max | argmax | transformers bf16: rel L2 over 64; median/max, argmax | "
          "greedy identical prefix (of 32) | batch64 vs alone | greedy identical prefix vs TP=1 | "
          "fp8 weight files identical | compile s | train loss")
    for r in rows:
        kind = r.get("artifact", "-")
        if r.get("fp8_activations"):
            kind += f", {r['fp8_activations']} activations"
        if "error" in r:
            print(f"{r['model']} | {kind} | {tensor_parallel} | ERROR | {r['error'][:300]}")
            continue
        pref = ",".join(str(x["identical_prefix"]) for x in r["greedy"])
        vs_one = ",".join(str(x["identical_prefix"]) for x in r.get("greedy_vs_tp1", [])) or "-"
        same = {True: "yes", False: "NO"}.get(r.get("fp8_weight_files_identical"), "-")
        print(f"{r['model']} | {kind} | {r['tensor_parallel']} | "
              f"{'pass' if r['pass'] else 'FAIL'} | {r['logits_rel_l2_all']:.2e}; "
              f"{r['logits_rel_l2_median']:.2e}/{r['logits_rel_l2_max']:.2e} | "
              f"{r['argmax_agreement']:.3f} | {r['hf_bf16_rel_l2_all']:.2e}; "
              f"{r['hf_bf16_rel_l2_median']:.2e}/{r['hf_bf16_rel_l2_max']:.2e}, "
              f"{r['hf_bf16_argmax_agreement']:.3f} | {pref} | "
              f"{r['batch64_alone_identical']} | {vs_one} | {same} | {r['compile_s']} | "
              f"{r['train_loss_first_last']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--telosc", required=True)
    ap.add_argument("--telos-run", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--models", default="Llama-3.2-1B,Qwen2.5-1.5B,Qwen3-0.6B")
    ap.add_argument("--init-std", type=float, default=None,
                    help="weights' init std (default: the config's initializer_range)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-work", action="store_true",
                    help="keep each model's checkpoint and artifact under --work (default: removed)")
    ap.add_argument("--train-steps", type=int, default=300,
                    help="Adam steps on the synthetic language before the checks (0: random weights)")
    ap.add_argument("--tensor-parallel", type=int, default=1, choices=(1, 2, 4, 8),
                    help="compile at serving.tensor_parallel N and also check greedy ids against "
                         "N = 1; with fewer than N GPUs visible every rank runs on GPU 0 "
                         "(TELOS_TP_ONE_DEVICE=1)")
    ap.add_argument("--fp8", action="store_true",
                    help="check two FP8 artifacts instead of the bf16 one: a hub-format FP8 "
                         "checkpoint and the bf16 one compiled with --quantize fp8, against "
                         "transformers on the dequantized weights")
    ap.add_argument("--fp8-activations", choices=("e4m3", "bf16"), default="e4m3",
                    help="with --fp8: e4m3 (W8A8, telosc's default) or bf16 (serving "
                         "fp8_activations \"bf16\": weight-only FP8)")
    ap.add_argument("--fp8-lm-head", action="store_true",
                    help="with --fp8: quantize the LM head too (telosc --quantize-lm-head)")
    args = ap.parse_args()
    if args.fp8_activations == "bf16" and not args.fp8:
        ap.error("--fp8-activations bf16 needs --fp8")
    if args.fp8_lm_head and not args.fp8:
        ap.error("--fp8-lm-head needs --fp8")
    if torch is None:
        sys.exit("tools/e2e_check.py needs torch, transformers and safetensors "
                 "(pip install torch transformers safetensors)")
    rows = []
    for name in args.models.split(","):
        first = len(rows)
        try:
            rows += check_model(name, args)
        except Exception as e:  # report and go on with the next model
            rows.append({"model": name, "pass": False, "error": str(e)[-1500:]})
        finally:
            # The 8B's checkpoint and artifact take ~32 GB: kept, the next model's (or a
            # bench_suite run after this one) ran out of disk on the GPU machine.
            if not args.keep_work:
                shutil.rmtree(os.path.join(args.work, name), ignore_errors=True)
        for row in rows[first:]:
            print(json.dumps(row), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "e2e.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print_table(rows, args.tensor_parallel)
    sys.exit(0 if all(r["pass"] for r in rows) else 1)


if __name__ == "__main__":
    main()
