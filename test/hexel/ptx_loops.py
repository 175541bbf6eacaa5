"""Lists the loops of each kernel in PTX files with the instructions inside them, so a FileCheck
test can pin what a main loop issues per iteration:

    KERNEL: loop OP xN, OP xN, ...

one line per loop, in program order: a loop runs from a label to the last branch back to it,
nested loops included; OP is an instruction's full mnemonic (qualifiers included; inline-asm
blocks count), listed in order of first appearance, with its count. Only loops that hold one of
the instruction families named in FAMILIES are listed, and only those families are counted
(arithmetic and moves would make the lines depend on the compiler's whims).

    python3 ptx_loops.py FILE.ptx...
"""
import re
import sys

FAMILIES = ("mbarrier.", "cp.async.bulk", "cp.reduce.async.bulk", "tcgen05.", "wgmma.", "st.global",
            "bar.")

ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)")
LABEL = re.compile(r"^(\$[\w$]+):")
BRANCH = re.compile(r"^\s*(?:@!?%\w+\s+)?bra(?:\.uni)?\s+(\$[\w$]+);")


def loops(lines):
    """{kernel: [[mnemonic, ...] per loop]}, loops in the order their labels appear."""
    out, kernel, labels, spans = {}, None, {}, {}
    for i, line in enumerate(lines):
        m = ENTRY.match(line)
        if m:
            kernel, labels, spans = m.group(1), {}, {}
            out[kernel] = spans
            continue
        m = LABEL.match(line)
        if m:
            labels[m.group(1)] = i
            continue
        m = BRANCH.match(line)
        if m and m.group(1) in labels:
            spans[m.group(1)] = (labels[m.group(1)], i)
    result = {}
    for kernel, kernel_spans in out.items():
        bodies = []
        for start, end in sorted(kernel_spans.values()):
            ops = [l.split()[0].rstrip(";") for l in lines[start + 1:end + 1] if l.strip()]
            bodies.append([op for op in ops if op.startswith(FAMILIES)])
        result[kernel] = [b for b in bodies if b]
    return result


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: ptx_loops.py FILE.ptx...")
    for path in sys.argv[1:]:
        with open(path) as f:
            lines = f.read().splitlines()
        for kernel, bodies in loops(lines).items():
            for body in bodies:
                counts = {}
                for op in body:
                    counts[op] = counts.get(op, 0) + 1
                print(f"{kernel}: loop " + ", ".join(f"{op} x{n}" for op, n in counts.items()))


if __name__ == "__main__":
    main()
