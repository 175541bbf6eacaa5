#!/usr/bin/env bash
# Whether two telosc builds write the same outputs: a refactoring of the compiler (the driver, the
# IR, the passes, the plan, the writer) must leave every stage it prints and every artifact it
# writes byte for byte as they were.
#
#   tools/telosc_identity.sh BEFORE_TELOSC AFTER_TELOSC [OUT_DIR]
#
# For every model config under test/ (test/telosc/Inputs/configs/*, test/fixtures/*, models/
# tiny-llama's model.json) the output of --no-weights --emit=ir, --emit=plan and --emit=kernels;
# for every checkpoint among them (test/fixtures/*, models/tiny-llama) the whole artifact of
# `compile -o`: weights.bin, ir.txt, kernels/, the copied tokenizer files, and manifest.json with
# its "generator" field aside. Prints one line per comparison, SAME or DIFFERS (with the start of
# the difference); exit status 0 when all are the same. Both builds share one kernel cache
# (TELOS_CACHE_DIR if set, else OUT_DIR/cache), and every --emit=kernels runs once before it is
# recorded, so both record "from_cache": true and each kernel module is compiled once. OUT_DIR
# (default a temporary folder) keeps both sides' outputs, before/ and after/.
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
before=$(realpath "$1")
after=$(realpath "$2")
out=${3:-$(mktemp -d)}
mkdir -p "$out/before" "$out/after"
export TELOS_CACHE_DIR=${TELOS_CACHE_DIR:-$out/cache}

configs=("$root"/test/telosc/Inputs/configs/*/config.json "$root"/test/fixtures/*
         "$root"/models/tiny-llama/model.json)
checkpoints=("$root"/test/fixtures/* "$root"/models/tiny-llama/model.json)

# A short name for a model argument: its folder (Llama-3.2-1B, tiny-qwen2, tiny-llama).
name_of() {
  case "$1" in
    */config.json | */model.json) basename "$(dirname "$1")" ;;
    *) basename "$1" ;;
  esac
}

failed=0
compare() {  # compare LABEL BEFORE_PATH AFTER_PATH [diff options]
  local label=$1 a=$2 b=$3
  shift 3
  if diff -r "$@" "$a" "$b" > "$out/diff.txt" 2>&1; then
    echo "SAME     $label"
  else
    echo "DIFFERS  $label"
    head -n 20 "$out/diff.txt"
    failed=1
  fi
}

for model in "${configs[@]}"; do
  name=$(name_of "$model")
  "$before" compile "$model" --no-weights --emit=kernels > /dev/null
  for side in before after; do
    bin=${!side}
    for stage in ir plan kernels; do
      "$bin" compile "$model" --no-weights --emit=$stage > "$out/$side/$name.$stage"
    done
  done
  for stage in ir plan kernels; do
    compare "$name --emit=$stage" "$out/before/$name.$stage" "$out/after/$name.$stage"
  done
done

for model in "${checkpoints[@]}"; do
  name=$(name_of "$model")
  for side in before after; do
    bin=${!side}
    rm -rf "$out/$side/$name.telos"
    "$bin" compile "$model" -o "$out/$side/$name.telos"
    grep -v '"generator":' "$out/$side/$name.telos/manifest.json" > "$out/$side/$name.manifest"
  done
  compare "$name.telos (manifest.json aside)" "$out/before/$name.telos" "$out/after/$name.telos" \
    --exclude=manifest.json
  compare "$name.telos/manifest.json (\"generator\" aside)" "$out/before/$name.manifest" \
    "$out/after/$name.manifest"
done
exit $failed
