#!/usr/bin/env bash
# telos-run's runtime limits and KV pool sizing on the GPU engine, on the GPU machine, with
# .gpu-carry carried (tools/gpu_check.sh --prepare on the build machine):
#   1. greedy tokens of tiny-llama do not change with --max-batch, --max-seq-len,
#      --prefill-chunk or --kv-pages below the artifact's;
#   2. an artifact whose KV pool (2^24 pages, 128 GiB) is larger than the device memory left free
#      by another process (torch holding all but 8 GiB) starts anyway: the default pool is sized
#      to what is free, telos-run says so and names --kv-pages, and the tokens are the same;
#   3. --kv-pages past what is free is refused before anything runs, naming --kv-pages, without
#      "out of memory";
#   4. a limit past the artifact's is refused naming the flag.
# A line per check and a table last; logs in $OUT (default /tmp/telos-limits-check).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/gpu_env.sh || exit 1
OUT=${OUT:-/tmp/telos-limits-check}
mkdir -p "$OUT"
A=$P/artifacts/tiny-llama.telos
declare -a rows
status=0
result() {  # result NAME OK DETAIL
  local r=pass
  [ "$2" = 1 ] || { r=FAIL; status=1; }
  rows+=("$(printf '%-46s | %-4s | %s' "$1" "$r" "$3")")
}
tokens() {  # tokens LOG: the generated ids of a --json run
  python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["generated_ids"])' "$1" 2>/dev/null
}
gen() {  # gen LOG ARTIFACT [FLAGS...]: greedy, 40 tokens; stdout in LOG, stderr in LOG.err
  local log=$1 art=$2; shift 2
  timeout 120 "$B/telos-run" generate "$art" --engine gpu --prompt-ids 1,2,3,4,5,6,7 \
    --max-tokens 40 --temperature 0 --json "$@" >"$OUT/$log" 2>"$OUT/$log.err"
}

gen base.json "$A"
base=$(tokens "$OUT/base.json")
result "tiny-llama, the artifact's limits" "$([ -n "$base" ] && echo 1)" "$base"
for flags in "--max-batch 2" "--max-seq-len 64" "--prefill-chunk 16" "--max-seq-len 128 --kv-pages 8" \
             "--max-batch 1 --max-seq-len 48 --prefill-chunk 4 --kv-pages 3"; do
  name=$(echo "$flags" | tr -d ' -')
  # shellcheck disable=SC2086  # the flags split into words
  gen "$name.json" "$A" $flags
  got=$(tokens "$OUT/$name.json")
  result "same tokens with $flags" "$([ -n "$got" ] && [ "$got" = "$base" ] && echo 1)" "$got"
done
# shellcheck disable=SC2086
for flags in "--max-batch 100000" "--max-seq-len 100000" "--prefill-chunk 100000"; do
  name=past$(echo "$flags" | tr -d ' -')
  gen "$name.json" "$A" $flags
  rc=$?
  flag=${flags%% *}
  result "refused: $flags" "$([ $rc = 1 ] && grep -q -- "$flag" "$OUT/$name.json.err" && echo 1)" \
    "rc $rc: $(head -c 160 "$OUT/$name.json.err")"
done

# The artifact asks for 2^24 pages of 8 KiB: more than is free once torch holds all but 8 GiB.
big=/tmp/tiny-llama-bigpool.telos serving=$(mktemp)
echo '{"max_batch": 8, "max_seq_len": 256, "kv_page_size": 16, "kv_pool": {"pages": 16777216}}' >"$serving"
"$B/telosc" compile models/tiny-llama --serving "$serving" -o "$big" >"$OUT/bigpool-compile.log" 2>&1
python3 - >"$OUT/hog.log" 2>&1 <<'PY' &
import time, torch
free, total = torch.cuda.mem_get_info()
held = torch.empty(free - (8 << 30), dtype=torch.uint8, device="cuda")
print(f"holding {held.numel() / 2**30:.1f} GiB of {total / 2**30:.1f}", flush=True)
open("/tmp/hog-ready", "w").close()
time.sleep(300)
PY
hog=$!
for _ in $(seq 60); do [ -f /tmp/hog-ready ] && break; sleep 1; done
gen bigpool.json "$big"
rc=$?
got=$(tokens "$OUT/bigpool.json")
result "128 GiB pool, 8 GiB free: sized down" \
  "$([ $rc = 0 ] && [ "$got" = "$base" ] && grep -q -- "--kv-pages" "$OUT/bigpool.json.err" && echo 1)" \
  "rc $rc: $(grep -o 'does not fit.*' "$OUT/bigpool.json.err" | head -c 200)"
gen bigask.json "$big" --kv-pages 4000000
rc=$?
result "--kv-pages 4000000 (31 GiB), 8 GiB free: refused" \
  "$([ $rc = 1 ] && grep -q -- "--kv-pages" "$OUT/bigask.json.err" && ! grep -qi "out of memory" "$OUT/bigask.json.err" && echo 1)" \
  "rc $rc: $(head -c 200 "$OUT/bigask.json.err")"
kill $hog 2>/dev/null
wait $hog 2>/dev/null
rm -f "$serving" /tmp/hog-ready
cat "$OUT/hog.log"

printf '%-46s | %-4s | %s\n' check result detail
printf '%s\n' "${rows[@]}"
exit $status
