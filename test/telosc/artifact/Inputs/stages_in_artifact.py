#!/usr/bin/env python3
"""Compares what each compiler stage prints (telosc compile --emit) with what the artifact carries.

    stages_in_artifact.py ARTIFACT IR_TXT PLAN_JSON KERNELS_JSON

ARTIFACT/ir.txt must equal --emit=ir, the manifest's "plan" --emit=plan, its "kernels" the kernel
table of --emit=kernels, and its weight table the IR's parameters: the same names in the same
order, each with the IR's type and checkpoint sources. Prints one line per comparison and one per
tensor (name, type, layout); exits non-zero on the first difference.
"""
import json
import os
import re
import sys


def fail(message):
    print("MISMATCH: " + message)
    sys.exit(1)


def ir_params(ir_text):
    """The IR's parameters in order: (name, type, sources) from its `param` lines."""
    out = []
    for line in ir_text.splitlines():
        m = re.fullmatch(r"param @(\S+) : (\S+) = \[(.*)\]", line)
        if m:
            out.append((m.group(1), m.group(2), re.findall(r'"([^"]*)"', m.group(3))))
    return out


def main():
    artifact, ir_path, plan_path, kernels_path = sys.argv[1:5]
    with open(os.path.join(artifact, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(artifact, "ir.txt")) as f:
        ir_text = f.read()
    with open(ir_path) as f:
        if f.read() != ir_text:
            fail("ir.txt differs from --emit=ir")
    print("ir.txt: as --emit=ir")
    with open(plan_path) as f:
        if json.load(f) != manifest["plan"]:
            fail("the manifest's plan differs from --emit=plan")
    print("plan: as --emit=plan")
    with open(kernels_path) as f:
        kernels = json.load(f)["kernels"]
    if kernels != manifest["kernels"]:
        fail("the manifest's kernel table differs from --emit=kernels")
    print("kernels: as --emit=kernels, %d instances" % len(kernels))

    tensors = manifest["weights"]["tensors"]
    params = ir_params(ir_text)
    if [t["name"] for t in tensors] != [p[0] for p in params]:
        fail("the weight table's names are not the IR's parameters in order")
    for t, (name, type_, sources) in zip(tensors, params):
        written = "%s[%s]" % (t["dtype"], ",".join(str(d) for d in t["shape"]))
        if written != type_ or t["sources"] != sources:
            fail("%s: %s from %s, the IR has %s from %s" % (name, written, t["sources"], type_, sources))
        print("weights: %s %s %s" % (name, written, t["layout"]))
    print("weights: the IR's %d parameters in order" % len(params))


if __name__ == "__main__":
    main()
