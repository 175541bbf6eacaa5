#!/usr/bin/env bash
# Whether the PTX of every kernel instance telosc emits is unchanged by a change to the kernel
# headers (codegen/kernels/, hexel/): a refactoring of the kernels must leave it byte-identical.
#
#   tools/ptx_identity.sh [--telosc BIN] [--out DIR] BASELINE_DIR
#
# BASELINE_DIR absent (or holding no recorded compile): compiles every model config under test/ (test/telosc/Inputs/configs/*,
# test/fixtures/*, models/tiny-llama) with --no-weights --emit=kernels, each with the default
# serving config and the serving variants the lit and GPU tests compile (decode_qkv_flags,
# decode_weight_images false, attention_split 512), and saves the PTX of each kernel instance
# there. BASELINE_DIR present: records the current tree the same way (into --out DIR, default a
# temporary folder) and compares instance by instance, in plan order, and each module's
# declarations outside the kernels (static shared memory, constants). Every instance is one of
#   IDENTICAL  byte for byte
#   LINES      equal once the line information is dropped (.loc and .file lines: source moved)
#   SYMBOLS    equal once also every mangled name (_Z...) is replaced by its order of appearance
#              (a renamed kernel template, or a static __shared__ variable of a renamed function)
#   CODE       the instructions differ (the start of a unified diff follows)
# Exit status 0 when no instance is CODE and every config has the same instances; else 1.
# telosc runs from / so that the .file paths (NVRTC's working directory) do not depend on the
# tree's location; all compiles share one kernel cache, so a variant that does not change a
# config's source is not compiled twice. About 15-25 minutes of NVRTC on a 2-core machine.
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
# kernels.json (telosc's kernel table), one NNN.ptx per instance in plan order and
# declarations.ptx (the module's declarations outside the kernels).
record() {
  local dest="$1" cache serving
  mkdir -p "$dest"
  dest=$(cd "$dest" && pwd)
  cache="$dest/.cache"
  serving="$dest/.serving"
  mkdir -p "$serving"
  echo '{}' >"$serving/default.json"
  echo '{"decode_qkv_flags": true}' >"$serving/flags.json"
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
    for v in default flags no-images split512; do
      local run="$dest/$name.$v"
      mkdir -p "$run"
      local args=(compile "$c" --no-weights --emit=kernels)
      [ "$v" = default ] || args+=(--serving "$serving/$v.json")
      echo "ptx_identity: compiling $name ($v)" >&2
      (cd / && TELOS_CACHE_DIR="$cache" "$telosc" "${args[@]}") >"$run/kernels.json"
      # The entry this compile made or read (a cache hit marks its entry as used now).
      local entry
      entry=$(ls -td "$cache"/*/ | head -1)
      python3 - "$run" "$entry" <<'EOF'
import json, re, sys
run, entry = sys.argv[1], sys.argv[2]
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
for i, k in enumerate(table):
    at = starts[k["entry"]]
    end = end_re.search(ptx, at).end()
    open(f"{run}/{i:03d}.ptx", "w").write(ptx[at:end])
# The module's declarations outside the kernels, up to the debug sections.
body = ptx.split("\t.file\t")[0]
for k in table:
    at = starts[k["entry"]]
    body = body.replace(ptx[at:end_re.search(ptx, at).end()], "")
decls = [l for l in body.split("\n") if re.match(r"(\.weak |\.visible )?\.(global|shared|const|extern)\b", l.strip())]
open(f"{run}/declarations.ptx", "w").write("\n".join(decls) + "\n")
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

def no_lines(text):
    return "\n".join(l for l in text.split("\n") if not re.match(r"\s*\.(loc|file)\s", l))

def no_symbols(text):
    order = {}
    return re.sub(r"_Z[A-Za-z0-9_$]+", lambda m: order.setdefault(m.group(0), f"SYM{len(order)}"), text)

counts = {"IDENTICAL": 0, "LINES": 0, "SYMBOLS": 0, "CODE": 0}
problems = 0
for run in sorted(os.listdir(base)):
    b_dir, n_dir = os.path.join(base, run), os.path.join(new, run)
    b_tab = json.load(open(f"{b_dir}/kernels.json"))["kernels"]
    n_tab = json.load(open(f"{n_dir}/kernels.json"))["kernels"]
    if len(b_tab) != len(n_tab):
        print(f"{run}: {len(b_tab)} instances before, {len(n_tab)} now")
        problems += 1
        continue
    for i, (bk, nk) in enumerate(zip(b_tab, n_tab)):
        b = open(f"{b_dir}/{i:03d}.ptx").read()
        n = open(f"{n_dir}/{i:03d}.ptx").read()
        renamed = "" if bk["instance"] == nk["instance"] else f" (now {nk['instance']})"
        if b == n:
            kind = "IDENTICAL"
        elif no_lines(b) == no_lines(n):
            kind = "LINES"
        elif no_symbols(no_lines(b)) == no_symbols(no_lines(n)):
            kind = "SYMBOLS"
        else:
            kind = "CODE"
        counts[kind] += 1
        if kind != "IDENTICAL" or renamed:
            print(f"{kind:9} {run} #{i} {bk['instance']}{renamed}")
        if kind == "CODE":
            diff = difflib.unified_diff(no_symbols(no_lines(b)).split("\n"),
                                        no_symbols(no_lines(n)).split("\n"), lineterm="", n=2)
            for line in list(diff)[:40]:
                print("    " + line)
        if kind == "CODE":
            problems += 1
    b_decl = open(f"{b_dir}/declarations.ptx").read()
    n_decl = open(f"{n_dir}/declarations.ptx").read()
    strip = lambda t: sorted(re.sub(r"_Z[A-Za-z0-9_$]+", "SYM", t).split("\n"))
    if b_decl != n_decl:
        same = strip(b_decl) == strip(n_decl)
        print(f"{'SYMBOLS' if same else 'CODE':9} {run} declarations outside the kernels")
        problems += 0 if same else 1
total = sum(counts.values())
print(f"ptx_identity: {total} instances: " + ", ".join(f"{v} {k.lower()}" for k, v in counts.items()))
sys.exit(1 if problems else 0)
EOF
