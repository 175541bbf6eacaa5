#!/usr/bin/env bash
# Whether the code of every kernel instance telosc emits is unchanged by a change to the kernel
# headers (codegen/kernels/, hexel/): a refactoring of the kernels must leave it so.
#
#   tools/ptx_identity.sh [--telosc BIN] [--out DIR] BASELINE_DIR
#
# BASELINE_DIR absent (or holding no recorded compile): compiles every model config under test/
# (test/telosc/Inputs/configs/*, test/fixtures/*, models/tiny-llama) with --no-weights
# --emit=kernels, each with the default serving config and the serving variants the lit and GPU
# tests compile (decode_weight_images false, attention_split 512), and saves
# for each kernel instance its PTX and its machine code (the .text section of the cubin) there.
# BASELINE_DIR present: records the current tree the same way (into --out DIR, default a
# temporary folder) and compares instance by instance, in plan order, and each module's
# declarations outside the kernels (static shared memory, constants). Each instance's PTX is one of
#   IDENTICAL  byte for byte
#   LINES      equal once the line information is dropped (.loc and .file lines: source moved)
#   SYMBOLS    equal once also every mangled name (_Z...) is replaced by its order of appearance
#              in the instructions (a renamed kernel template, a static __shared__ variable of a
#              renamed function, a constant NVVM numbers module-wide)
#   DECLS      so, and the demoted shared variables declared at the top in another order
#   REGISTERS  so, and the virtual registers numbered in another order (a consistent renaming)
#   ORDER      the same instructions, registers unnumbered, some in another order or their
#              register operands not a renaming of each other's (e.g. the copies into a loop's
#              registers, or its counters' updates, in the other order); the diff follows
#   CODE       the instructions differ (the start of a diff, registers unnumbered, follows)
# and its machine code SASS-SAME or SASS-DIFFERS (byte for byte, from telosc's own cubin).
# Exit status 0 when every instance's machine code is the same, no PTX is CODE and every config
# has the same instances; else 1. telosc runs from / so that the .file paths (NVRTC's working
# directory) do not depend on the tree's location; all compiles share one kernel cache, so a
# variant that does not change a config's source is not compiled twice. About 30 minutes of NVRTC
# on a 2-core machine; PTX_IDENTITY_CONFIGS and PTX_IDENTITY_VARIANTS (space-separated names, e.g.
# "Llama-3.2-1B tiny-llama" and "default") record a subset, for a change that touches few kernels
# (both sides with the same subset).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
telosc="$root/build/bin/telosc"
out=""
while [ $# -gt 1 ]; do
  case "$1" in
    --telosc) telosc=$(realpath "$2"); shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "ptx_identity: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ $# -ne 1 ]; then
  echo "usage: tools/ptx_identity.sh [--telosc BIN] [--out DIR] BASELINE_DIR" >&2
  exit 2
fi
baseline="$1"
[ -x "$telosc" ] || { echo "ptx_identity: no telosc at $telosc (build it first)" >&2; exit 2; }

# Compiles every config and variant into $1: per compile a folder CONFIG.VARIANT holding
# kernels.json (telosc's kernel table), NNN.ptx and NNN.sass per instance in plan order, and
# declarations.ptx (the module's declarations outside the kernels).
record() {
  local dest="$1" cache serving
  mkdir -p "$dest"
  dest=$(cd "$dest" && pwd)
  cache="$dest/.cache"
  serving="$dest/.serving"
  mkdir -p "$serving"
  echo '{}' >"$serving/default.json"
  echo '{"decode_weight_images": false}' >"$serving/no-images.json"
  echo '{"attention_split": 512}' >"$serving/split512.json"
  local configs=()
  for c in "$root"/test/telosc/Inputs/configs/*/config.json; do configs+=("$c"); done
  for f in "$root"/test/fixtures/*/; do configs+=("${f%/}"); done
  configs+=("$root/models/tiny-llama")
  for c in "${configs[@]}"; do
    local name
    name=$(basename "$c")
    [ "$name" = config.json ] && name=$(basename "$(dirname "$c")")
    case " ${PTX_IDENTITY_CONFIGS:-$name} " in *" $name "*) ;; *) continue ;; esac
    for v in ${PTX_IDENTITY_VARIANTS:-default no-images split512}; do
      local run="$dest/$name.$v"
      mkdir -p "$run"
      local args=(compile "$c" --no-weights --emit=kernels)
      [ "$v" = default ] || args+=(--serving "$serving/$v.json")
      echo "ptx_identity: compiling $name ($v)" >&2
      (cd / && TELOS_CACHE_DIR="$cache" "$telosc" "${args[@]}") >"$run/kernels.json"
      # The entry this compile made or read (a cache hit marks its entry as used now).
      local entry
      entry=$(ls -td "$cache"/*/ | head -1)
      python3 - "$run" "$entry" "$root/test/hexel" <<'EOF'
import json, re, sys
run, entry = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from sass_waits import text_sections  # the cubin's .text.NAME sections
names_file = f"{entry}/names.json"
table = json.load(open(f"{run}/kernels.json"))["kernels"]
names = json.load(open(names_file))
if sorted(names) != sorted(k["instance"] for k in table):
    sys.exit(f"ptx_identity: {names_file} is not the module of {run}")
ptx = open(f"{entry}/module.ptx").read()
# An entry's text: from its `.weak .entry NAME(` line to the `}` at column 0 that the next
# entry, the line information or the end of the module follows (inline asm blocks have their own
# `}` lines at column 0).
starts = {m.group(1): m.start() for m in re.finditer(r"^\.(?:weak|visible) \.entry (\S+)\($", ptx, re.M)}
end_re = re.compile(r"\n\}\n(?=\t// \.(?:weak|globl)\s|\t\.file\s|\t\.section\s|$)")
texts = {}
for i, k in enumerate(table):
    at = starts[k["entry"]]
    texts[k["entry"]] = ptx[at:end_re.search(ptx, at).end()]
    open(f"{run}/{i:03d}.ptx", "w").write(texts[k["entry"]])
# The module's declarations outside the kernels, up to the line information.
body = ptx.split("\t.file\t")[0]
for t in texts.values():
    body = body.replace(t, "")
decls = [l for l in body.split("\n") if re.match(r"(\.weak |\.visible )?\.(global|shared|const|extern)\b", l.strip())]
open(f"{run}/declarations.ptx", "w").write("\n".join(decls) + "\n")
# Each kernel's machine code: the cubin's (ELF64) section .text.ENTRY.
code = text_sections(open(f"{entry}/module.cubin", "rb").read())
for i, k in enumerate(table):
    open(f"{run}/{i:03d}.sass", "wb").write(code[k["entry"]])
EOF
    done
  done
  rm -rf "$cache" "$serving"
}

if ! compgen -G "$baseline/*/kernels.json" >/dev/null; then
  record "$baseline"
  echo "ptx_identity: baseline recorded in $baseline ($(ls "$baseline"/*/[0-9]*.ptx | wc -l) instances)"
  exit 0
fi
[ -n "$out" ] || out=$(mktemp -d /tmp/ptx_identity.XXXXXX)
record "$out"
python3 - "$baseline" "$out" <<'EOF'
import difflib, json, os, re, sys
base, new = sys.argv[1], sys.argv[2]
SYMBOL = re.compile(r"_Z[A-Za-z0-9_$]+")
REGISTER = re.compile(r"%(rd|rs|r|f|fd|p)\d+")

def no_lines(text):
    return "\n".join(l for l in text.split("\n") if not re.match(r"\s*\.(loc|file)\s", l))

def parts(text):
    """(sorted declarations, instructions) with symbols renamed by first use in the instructions."""
    decl, body = [], []
    for l in no_lines(text).split("\n"):
        s = l.strip()
        (decl if s.startswith((".shared", ".reg", ".local")) or s == "// demoted variable" else body).append(l)
    order = {}
    rename = lambda m: order.setdefault(m.group(0), f"SYM{len(order)}")
    body = [SYMBOL.sub(rename, l) for l in body]
    decl = sorted(SYMBOL.sub(rename, l) for l in decl if l.strip() != "// demoted variable")
    return decl, "\n".join(body)

def renumbered(text):
    order, counts = {}, {}
    def sub(m):
        if m.group(0) not in order:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
            order[m.group(0)] = f"%{m.group(1)}#{counts[m.group(1)]}"
        return order[m.group(0)]
    return REGISTER.sub(sub, text)

def skeleton(text):
    return re.sub(r"\$L__BB\d+_\d+", "$L", REGISTER.sub(r"%\1", text))

def classify(b, n):
    if b == n:
        return "IDENTICAL", []
    if no_lines(b) == no_lines(n):
        return "LINES", []
    (bd, bb), (nd, nb) = parts(b), parts(n)
    if bb == nb:
        return ("SYMBOLS" if bd == nd else "DECLS"), []
    if renumbered(bb) == renumbered(nb):
        return "REGISTERS", []
    diff = list(difflib.unified_diff(skeleton(bb).split("\n"), skeleton(nb).split("\n"), lineterm="", n=1))
    same = sorted(skeleton(bb).split("\n")) == sorted(skeleton(nb).split("\n"))
    return ("ORDER" if same else "CODE"), diff

counts, problems = {}, 0
for run in sorted(os.listdir(base)):
    b_dir, n_dir = os.path.join(base, run), os.path.join(new, run)
    if not os.path.isdir(b_dir):
        continue
    b_tab = json.load(open(f"{b_dir}/kernels.json"))["kernels"]
    n_tab = json.load(open(f"{n_dir}/kernels.json"))["kernels"]
    if len(b_tab) != len(n_tab):
        print(f"{run}: {len(b_tab)} instances before, {len(n_tab)} now")
        problems += 1
        continue
    for i, (bk, nk) in enumerate(zip(b_tab, n_tab)):
        kind, diff = classify(open(f"{b_dir}/{i:03d}.ptx").read(), open(f"{n_dir}/{i:03d}.ptx").read())
        sass = "SASS-SAME" if open(f"{b_dir}/{i:03d}.sass", "rb").read() == open(f"{n_dir}/{i:03d}.sass", "rb").read() else "SASS-DIFFERS"
        counts[(kind, sass)] = counts.get((kind, sass), 0) + 1
        renamed = "" if bk["instance"] == nk["instance"] else f" (now {nk['instance']})"
        if kind not in ("IDENTICAL", "LINES") or sass != "SASS-SAME" or renamed:
            print(f"{kind:9} {sass:12} {run} #{i} {bk['instance']}{renamed}")
        for line in diff[2:42]:
            print("    " + line[:160])
        problems += kind == "CODE" or sass != "SASS-SAME"
    b_decl, n_decl = open(f"{b_dir}/declarations.ptx").read(), open(f"{n_dir}/declarations.ptx").read()
    if b_decl != n_decl:
        same = sorted(SYMBOL.sub("SYM", b_decl).split("\n")) == sorted(SYMBOL.sub("SYM", n_decl).split("\n"))
        print(f"{'SYMBOLS' if same else 'CODE':9} {run} declarations outside the kernels")
        problems += 0 if same else 1
total = sum(counts.values())
print(f"ptx_identity: {total} instances:")
for (kind, sass), n in sorted(counts.items()):
    print(f"  {n:5} {kind} {sass}")
sys.exit(1 if problems else 0)
EOF
