#!/usr/bin/env python3
"""An FP8 checkpoint made from a bf16, f16 or f32 one, with the Hugging Face hub's tensor names and
config.json, in pure Python (no numpy, no torch): the FP8 models users download, at any size the
source checkpoint has, for telosc's import tests and the GPU suite.

    python3 tools/make_fp8_checkpoint.py SRC_DIR OUT_DIR [--format fp8|channel|tensor]
        [--ignore MODULE ...] [--pow2-scales] [--dequantized DEQ_DIR]

SRC_DIR holds config.json and model.safetensors. Every linear layer's weight (q, k, v, o, gate,
up and down projections, and lm_head) becomes E4M3 (F8_E4M3) beside f32 scales, except the
modules named by --ignore (default: lm_head):
  fp8      quant_method "fp8", weight_block_size [128, 128]: "M.weight_scale_inv" of
           [ceil(rows/128), ceil(cols/128)], as Qwen3-*-FP8 and DeepSeek-V3 ship
  channel  quant_method "compressed-tensors", strategy "channel": "M.weight_scale" of [rows, 1],
           dynamic per-token input activations (the "FP8-dynamic" models)
  tensor   the same with strategy "tensor": one "M.weight_scale" of [1] a weight
Each scale is amax / 448 over its block (1 for a block of zeros), computed in f32, and each
element w / scale rounded to nearest even E4M3, saturating at 448: the arithmetic of telosc
--quantize, so an "fp8" checkpoint of this script and `telosc compile --quantize fp8` of the same
source pack the same bytes. --pow2-scales rounds each scale up to a power of two, so that every
dequantized weight float(q) * scale is exact in bf16. --dequantized also writes DEQ_DIR, the
unquantized checkpoint of exactly those dequantized weights (f32), to compare against.
"""
import argparse
import json
import math
import os
import shutil
import struct

E4M3_MAX = 448.0
BLOCK = 128
LINEAR = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def f32(x):
    """x rounded to the nearest f32 (a quotient of two f32s rounded so is the f32 quotient)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def to_e4m3(x):
    """Round to nearest even, saturating at +-448; the bit steps of support/dtype.cpp."""
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    sign = (u >> 24) & 0x80
    a = u & 0x7FFFFFFF
    if a > 0x7F800000:
        return 0x7F
    if a >= 0x43E00000:
        return sign | 0x7E
    if a < 0x3C800000:
        (v,) = struct.unpack("<f", struct.pack("<I", a))
        return sign | round(v * 512.0)  # Python rounds halves to even
    r = a + 0x7FFFF + ((a >> 20) & 1)
    return sign | ((r - (120 << 23)) >> 20)


def from_e4m3(q):
    exp, man = (q >> 3) & 0xF, q & 7
    v = math.ldexp(man, -9) if exp == 0 else math.ldexp(man | 8, exp - 10)
    return -v if q & 0x80 else v


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    return {name: (e["dtype"], e["shape"], data[e["data_offsets"][0]:e["data_offsets"][1]])
            for name, e in header.items()}


def floats(dtype, raw):
    if dtype == "BF16":
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                for h in struct.unpack(f"<{len(raw) // 2}H", raw)]
    if dtype == "F16":
        return list(struct.unpack(f"<{len(raw) // 2}e", raw))
    if dtype == "F32":
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    raise SystemExit(f"make_fp8_checkpoint: cannot quantize a tensor of {dtype}")


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def quantize(w, rows, cols, block_rows, block_cols, pow2):
    """(E4M3 bytes, f32 scales row-major over the block grid, dequantized f32 weights)."""
    grid_rows, grid_cols = -(-rows // block_rows), -(-cols // block_cols)
    q, deq, scales = bytearray(len(w)), [0.0] * len(w), []
    for gr in range(grid_rows):
        for gc in range(grid_cols):
            rs = range(gr * block_rows, min(rows, (gr + 1) * block_rows))
            cs = range(gc * block_cols, min(cols, (gc + 1) * block_cols))
            amax = max(abs(w[r * cols + c]) for r in rs for c in cs)
            scale = f32(amax / E4M3_MAX) if amax > 0 else 1.0
            if pow2:
                m, e = math.frexp(scale)
                scale = scale if m == 0.5 else math.ldexp(1.0, e)
            scales.append(scale)
            for r in rs:
                for c in cs:
                    i = r * cols + c
                    q[i] = to_e4m3(f32(w[i] / scale))
                    deq[i] = f32(from_e4m3(q[i]) * scale)
    return bytes(q), scales, deq


def quantization_config(fmt, ignore):
    if fmt == "fp8":
        return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": ignore or None}
    args = {"num_bits": 8, "type": "float", "symmetric": True}
    return {"quant_method": "compressed-tensors", "format": "float-quantized",
            "quantization_status": "compressed", "kv_cache_scheme": None, "ignore": ignore,
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": dict(args, strategy="channel" if fmt == "channel" else "tensor",
                                dynamic=False),
                "input_activations": dict(args, strategy="token", dynamic=True)}}}


def copy_beside(src, dst, config):
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name.startswith("tokenizer") or name == "generation_config.json" or name.endswith(".jinja"):
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--format", choices=["fp8", "channel", "tensor"], default="fp8")
    ap.add_argument("--ignore", action="append", help="module left unquantized (default lm_head)")
    ap.add_argument("--pow2-scales", action="store_true")
    ap.add_argument("--dequantized")
    o = ap.parse_args()
    ignore = o.ignore if o.ignore is not None else ["lm_head"]

    with open(os.path.join(o.src, "config.json")) as f:
        config = json.load(f)
    if "quantization_config" in config:
        raise SystemExit(f"make_fp8_checkpoint: {o.src} is quantized already")
    source = read_safetensors(os.path.join(o.src, "model.safetensors"))
    modules = ["lm_head"] + [f"model.layers.{n}.{m}" for n in range(config["num_hidden_layers"])
                             for m in LINEAR]
    quantized = {m + ".weight": m for m in modules if m not in ignore and m + ".weight" in source}

    fp8, dequantized = {}, {}
    for name, (dtype, shape, raw) in source.items():
        if name not in quantized:
            fp8[name] = dequantized[name] = (dtype, shape, raw)
            continue
        rows, cols = shape
        block = {"fp8": (BLOCK, BLOCK), "channel": (1, cols), "tensor": (rows, cols)}[o.format]
        q, scales, deq = quantize(floats(dtype, raw), rows, cols, *block, o.pow2_scales)
        scale_shape = ([-(-rows // BLOCK), -(-cols // BLOCK)] if o.format == "fp8"
                       else [rows, 1] if o.format == "channel" else [1])
        suffix = "weight_scale_inv" if o.format == "fp8" else "weight_scale"
        fp8[name] = ("F8_E4M3", shape, q)
        fp8[quantized[name] + "." + suffix] = ("F32", scale_shape,
                                               struct.pack(f"<{len(scales)}f", *scales))
        dequantized[name] = ("F32", shape, struct.pack(f"<{len(deq)}f", *deq))

    copy_beside(o.src, o.out, dict(config, quantization_config=quantization_config(o.format, ignore)))
    write_safetensors(os.path.join(o.out, "model.safetensors"), fp8)
    if o.dequantized:
        copy_beside(o.src, o.dequantized, config)
        write_safetensors(os.path.join(o.dequantized, "model.safetensors"), dequantized)


if __name__ == "__main__":
    main()
