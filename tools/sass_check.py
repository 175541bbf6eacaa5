"""Checks the SASS of a Blackwell (sm_100a) GEMM cubin against the checks in a patterns file
(tools/sass_check.patterns), kernel by kernel: whether the loop that issues the MMAs holds the
tcgen05 MMA and its commit, the TMA producer's loop its tensor loads, the epilogue's loop its
Tensor Memory loads, and the kernel no local memory. tools/sass_check.sh disassembles the cubin
(nvdisasm or cuobjdump, on the GPU machine) and pipes the text here.

    python3 sass_check.py [--patterns FILE] [--loops] DISASSEMBLY.txt|-

Reads nvdisasm's or cuobjdump -sass's text: a kernel starts at `.section .text.NAME` (nvdisasm) or
`Function : NAME` (cuobjdump); an instruction is `/*ADDR*/ [@PRED] OPCODE operands ;`; a label
is `.L_x_N:`; a loop runs from a label to the last branch back to it (`BRA `(.L_x_N)`), nested
loops included. Each loop is summarised as `loop OP xN, OP xN, ...`: the opcodes (qualifiers
included, predicates dropped) of the families in FAMILIES, in order of first appearance, with
their counts. --loops prints those lines too.

The patterns file holds one check a line, `LOOP NAME: PATTERN`, `HAS NAME: PATTERN` or `NOT NAME:
PATTERN`, the pattern FileCheck-style (literal text; {{...}} a regular expression): a LOOP check
passes when the summary line of some loop of the kernel contains a match, a HAS check when some
instruction of the kernel does, a NOT check when none does. `NAME @REGEX` limits a check to the
kernels whose (mangled) name REGEX matches (an artifact's cubin holds every kernel of its set). Prints per kernel one line per check, `KERNEL: NAME yes (loop ...)`, `KERNEL: NAME
MISSING`, `KERNEL: NAME none` or `KERNEL: NAME FOUND (instruction)`, then a summary line. Exit
status 0 when every check of every kernel passes, 1 when one fails, 2 when the input has no kernel
or the patterns file is malformed (the message names the file and line).
"""
import argparse
import os
import re
import sys

FAMILIES = ("UTC", "UTMA", "LDTM", "LDT.", "STTM", "SYNCS", "UBLK", "HGMMA", "LDL", "STL", "BAR")

KERNEL = re.compile(r"^\s*(?:\.section\s+\.text\.([^,\s]+)|Function\s*:\s*(\S+))")
LABEL = re.compile(r"^\s*(\.L[\w$]*):")
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(.*?)\s*;")
PREDICATE = re.compile(r"^@!?U?P\w+\s+")
BRANCH_TARGET = re.compile(r"`\((\.L[\w$]*)\)")
CHECK = re.compile(r"^(LOOP|HAS|NOT)\s+([\w-]+)(?:\s+@(\S+))?:\s*(.+?)\s*$")


class Kernel:
    def __init__(self, name):
        self.name = name
        self.instructions = []  # (opcode, text)
        self.labels = {}  # label -> index of the next instruction
        self.spans = {}  # label -> (first, last) instruction index of its loop


def parse(lines):
    """[Kernel] in the order of the text."""
    kernels, kernel = [], None
    for line in lines:
        m = KERNEL.match(line)
        if m:
            kernel = Kernel(m.group(1) or m.group(2))
            kernels.append(kernel)
            continue
        if kernel is None:
            continue
        m = LABEL.match(line)
        if m:
            kernel.labels[m.group(1)] = len(kernel.instructions)
            continue
        m = INSTRUCTION.match(line)
        if not m:
            continue
        text = PREDICATE.sub("", m.group(1))
        opcode = text.split()[0] if text else ""
        if opcode in ("BRA", "BRX", "JMP"):
            t = BRANCH_TARGET.search(text)
            if t and t.group(1) in kernel.labels:
                kernel.spans[t.group(1)] = (kernel.labels[t.group(1)], len(kernel.instructions))
        kernel.instructions.append((opcode, text))
    return kernels


def loop_lines(kernel):
    """The summary line of each loop holding an instruction of FAMILIES, in program order."""
    out = []
    for first, last in sorted(kernel.spans.values()):
        counts = {}
        for opcode, _ in kernel.instructions[first:last + 1]:
            if opcode.startswith(FAMILIES):
                counts[opcode] = counts.get(opcode, 0) + 1
        if counts:
            out.append("loop " + ", ".join(f"{op} x{n}" for op, n in counts.items()))
    return out


def filecheck_regex(pattern):
    """A FileCheck-style pattern (literal text, {{regex}} parts) as a compiled regex."""
    parts, at = [], 0
    for m in re.finditer(r"\{\{(.*?)\}\}", pattern):
        parts.append(re.escape(pattern[at:m.start()]))
        parts.append("(?:" + m.group(1) + ")")
        at = m.end()
    parts.append(re.escape(pattern[at:]))
    return re.compile("".join(parts))


def read_checks(path):
    checks = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            m = CHECK.match(line)
            if not m:
                raise ValueError(f"{path}:{number}: expected 'LOOP|HAS|NOT NAME [@KERNELS]: PATTERN'")
            try:
                kernels = re.compile(m.group(3)) if m.group(3) else None
                checks.append((m.group(1), m.group(2), kernels, filecheck_regex(m.group(4))))
            except re.error as e:
                raise ValueError(f"{path}:{number}: bad regular expression: {e}") from None
    if not checks:
        raise ValueError(f"{path}: no checks")
    return checks


def report(kernel, checks, show_loops):
    """Prints the kernel's check lines; returns the number that failed."""
    loops, failed = loop_lines(kernel), 0
    if show_loops:
        for line in loops:
            print(f"{kernel.name}: {line}")
    for kind, name, kernels, regex in checks:
        if kernels is not None and not kernels.search(kernel.name):
            continue
        if kind == "LOOP":
            hit = next((line for line in loops if regex.search(line)), None)
            print(f"{kernel.name}: {name} " + (f"yes ({hit})" if hit else "MISSING"))
            failed += hit is None
        elif kind == "HAS":
            hit = next((text for _, text in kernel.instructions if regex.search(text)), None)
            print(f"{kernel.name}: {name} " + (f"yes ({hit})" if hit else "MISSING"))
            failed += hit is None
        else:
            hit = next((text for _, text in kernel.instructions if regex.search(text)), None)
            print(f"{kernel.name}: {name} " + (f"FOUND ({hit})" if hit else "none"))
            failed += hit is not None
    return failed


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--patterns", default=os.path.join(here, "sass_check.patterns"))
    ap.add_argument("--loops", action="store_true", help="also print every loop's summary line")
    ap.add_argument("disassembly", help="nvdisasm or cuobjdump -sass text, - for stdin")
    args = ap.parse_args()
    try:
        checks = read_checks(args.patterns)
        if args.disassembly == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(args.disassembly) as f:
                lines = f.read().splitlines()
    except (OSError, ValueError) as e:
        print(f"sass_check: {e}", file=sys.stderr)
        return 2
    kernels = parse(lines)
    if not kernels:
        print(f"sass_check: {args.disassembly}: no kernel (expected nvdisasm or cuobjdump -sass text)",
              file=sys.stderr)
        return 2
    failed = sum(report(k, checks, args.loops) for k in kernels)
    print(f"{len(kernels)} kernels, {len(checks)} checks: " +
          ("all pass" if failed == 0 else f"{failed} failed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
