#!/usr/bin/env python3
"""Whatever telosc accepts, telos-run runs: compiles every model config under test/ and variants of
each with optional fields null or absent, then loads each artifact with `telos-run check` and
generates a few tokens with the CPU engine.

    config_matrix.py TELOSC TELOS_RUN SRC OUT

The configs: the bundled model and the fixtures (with their own weights as they are), and the
real-shape configs of test/telosc/Inputs/configs, shrunk to the fixtures' tiny shapes (everything
else kept) with a small random checkpoint written here; each real-shape config, and each of its
variants, also passes `--no-weights --emit=plan` at its real shape (where the configuration gets
the manifest's checks too). Variants that change the kernels (the RoPE, tied embeddings, the KV
heads) run on the bundled model only, so that a cold kernel cache compiles a dozen small modules.
Prints one line per case; exits 1 at the first case a tool refuses, with what it said.
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys

TINY = {"vocab_size": 512, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2}
# One small serving config for every case: one decode and one prefill bucket to compile.
SERVING = {"max_batch": 1, "max_seq_len": 32, "kv_page_size": 8, "kv_pool": {"pages": 4},
           "prefill_chunk": 16}


# The optional fields that keep the base's kernels: token ids, head_dim (the fixtures' equals
# hidden_size / num_attention_heads, its value when absent), the window, the RoPE theta.
OPTIONAL = ["bos_token_id", "eos_token_id", "pad_token_id", "head_dim", "sliding_window",
            "rope_theta"]


def set_all(fields, to_null):
    def change(c):
        for key in fields:
            if to_null:
                c[key] = None
            else:
                c.pop(key, None)
    return change


# Every config: each optional field null, each absent (all at once), the BOS id alone null (as
# transformers writes Qwen2/Qwen3 configs made without one), several EOS ids.
CHEAP = {
    "optional-null": set_all(OPTIONAL, True), "optional-absent": set_all(OPTIONAL, False),
    "bos-null": set_all(["bos_token_id"], True),
    "eos-list": lambda c: c.update(eos_token_id=[2, 3]),
}
# Variants that change the kernels: the bundled model only.
KERNELS = {
    "rope-null": set_all(["rope_parameters", "rope_scaling"], True),
    "tie-null": set_all(["tie_word_embeddings"], True),
    "tie-absent": set_all(["tie_word_embeddings"], False),
    "kv_heads-null": set_all(["num_key_value_heads"], True),
}


def tensor_shapes(c):
    """Every tensor the checkpoint of config `c` holds, as telosc expects them."""
    arch = c["architectures"][0]
    h, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hq = c["num_attention_heads"]
    hkv = c.get("num_key_value_heads") or hq
    d = c.get("head_dim") or h // hq
    shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    if not c.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = [v, h]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = [h]
        shapes[p + "post_attention_layernorm.weight"] = [h]
        for name, rows in (("q", hq * d), ("k", hkv * d), ("v", hkv * d)):
            shapes[p + f"self_attn.{name}_proj.weight"] = [rows, h]
            if arch == "Qwen2ForCausalLM":
                shapes[p + f"self_attn.{name}_proj.bias"] = [rows]
        if arch == "Qwen3ForCausalLM":
            shapes[p + "self_attn.q_norm.weight"] = [d]
            shapes[p + "self_attn.k_norm.weight"] = [d]
        shapes[p + "self_attn.o_proj.weight"] = [h, hq * d]
        shapes[p + "mlp.gate_proj.weight"] = [inter, h]
        shapes[p + "mlp.up_proj.weight"] = [inter, h]
        shapes[p + "mlp.down_proj.weight"] = [h, inter]
    return shapes


def write_checkpoint(path, shapes, seed):
    """bf16 safetensors: matrices of small random values, vectors near 1 (norms) or 0 (biases)."""
    rng = random.Random(seed)
    header, blobs, offset = {}, [], 0
    for name, shape in sorted(shapes.items()):
        n = shape[0] * (shape[1] if len(shape) > 1 else 1)
        center = 1.0 if name.endswith("norm.weight") else 0.0
        values = [center + rng.gauss(0.0, 0.05) for _ in range(n)]
        blob = b"".join(struct.pack("<f", x)[2:] for x in values)  # bf16: the f32's high half
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAILED {what}: {' '.join(cmd)} exited {r.returncode}:\n{r.stderr}{r.stdout}")
        sys.exit(1)
    return r.stdout


class Matrix:
    def __init__(self, telosc, telos_run, out):
        self.telosc, self.telos_run, self.out = telosc, telos_run, out
        self.checkpoints = {}  # tensor shapes -> a checkpoint file holding them
        self.serving = os.path.join(out, "serving.json")
        with open(self.serving, "w") as f:
            json.dump(SERVING, f)

    def checkpoint_for(self, config):
        key = json.dumps(tensor_shapes(config), sort_keys=True)
        if key not in self.checkpoints:
            path = os.path.join(self.out, f"weights-{len(self.checkpoints)}.safetensors")
            write_checkpoint(path, tensor_shapes(config), seed=len(self.checkpoints))
            self.checkpoints[key] = path
        return self.checkpoints[key]

    def run_case(self, name, config, weights_dir=None):
        """Compiles `config` (with weights_dir's checkpoint, else a written one), checks, runs."""
        d = os.path.join(self.out, name)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        if weights_dir:
            for n in os.listdir(weights_dir):
                if n.endswith(".safetensors") or n.endswith(".index.json"):
                    os.symlink(os.path.abspath(os.path.join(weights_dir, n)), os.path.join(d, n))
        else:
            os.symlink(os.path.abspath(self.checkpoint_for(config)),
                       os.path.join(d, "model.safetensors"))
        artifact = d + ".telos"
        run([self.telosc, "compile", d, "--serving", self.serving, "-o", artifact], name)
        run([self.telos_run, "check", artifact, "--arch", "sm_90a"], name)
        tokens = run([self.telos_run, "generate", artifact, "--engine", "cpu", "--prompt-ids",
                      "1,2,3", "--max-tokens", "3", "--temperature", "0"], name)
        print(f"ok {name}: {tokens.strip()}")
        shutil.rmtree(artifact)

    def plan_case(self, name, config):
        """The real shape, without weights: the configuration's checks and the plan."""
        d = os.path.join(self.out, name + ".plan")
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        run([self.telosc, "compile", os.path.join(d, "config.json"), "--no-weights",
             "--emit=plan"], name)
        print(f"ok {name}: planned at its real shape")


def variants(config, table):
    for name, change in table.items():
        c = json.loads(json.dumps(config))
        change(c)
        if c != config:
            yield name, c


def main(argv):
    telosc, telos_run, src, out = argv[1:5]
    m = Matrix(telosc, telos_run, out)
    fixtures = {"tiny-llama": os.path.join(src, "models", "tiny-llama"),
                "tiny-qwen2": os.path.join(src, "test", "fixtures", "tiny-qwen2"),
                "tiny-qwen3": os.path.join(src, "test", "fixtures", "tiny-qwen3")}
    for name, d in fixtures.items():
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
        m.run_case(name, config, weights_dir=d)
        for variant, c in variants(config, CHEAP):
            m.run_case(f"{name}.{variant}", c)
        if name == "tiny-llama":
            for variant, c in variants(config, KERNELS):
                m.run_case(f"{name}.{variant}", c)

    configs = os.path.join(src, "test", "telosc", "Inputs", "configs")
    for name in sorted(os.listdir(configs)):
        with open(os.path.join(configs, name, "config.json")) as f:
            real = json.load(f)
        m.plan_case(name, real)
        for variant, c in variants(real, CHEAP):
            m.plan_case(f"{name}.{variant}", c)
        # Tiny shapes, the token ids within the tiny vocabulary; everything else as it is.
        tiny = dict(real, **TINY, bos_token_id=1, eos_token_id=2)
        if "head_dim" in real:
            tiny["head_dim"] = TINY["hidden_size"] // TINY["num_attention_heads"]
        m.run_case(f"{name}.tiny", tiny)
        for variant, c in variants(tiny, CHEAP):
            m.run_case(f"{name}.tiny.{variant}", c)
    print(f"all cases ran: {len(m.checkpoints)} checkpoints written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
