#!/usr/bin/env bash
# The GPU check of the engine work (tools/engine_gpu_prepare.sh copies this to
# .gpu-carry-engine/run.sh): gpu_model_test (all, including the engine's device vs host greedy
# sampling), then telos-run bench on tiny-llama compiled for batch 64: decode at batch 1 and 64
# with host time per step and GPU idle gap, a mixed run and TTFT. Two logs in the directory given
# (model.log, bench.log: the load log with graph capture and memory report, the table, the JSON);
# a table last.
#   bash .gpu-carry-engine/run.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
C=.gpu-carry-engine
OUT=${1:-/tmp/telos-engine-check}
mkdir -p "$OUT" /tmp/telos-engine
python3 -c 'import tarfile
for t in ("lib", "artifacts"): tarfile.open(f".gpu-carry-engine/{t}.tar.xz").extractall("/tmp/telos-engine")'
export LD_LIBRARY_PATH=/tmp/telos-engine/lib:${LD_LIBRARY_PATH:-}
A=/tmp/telos-engine/artifacts
export TELOS_GPU_ARTIFACTS=$A TELOS_SOURCE_DIR=$PWD

t0=$SECONDS
timeout 90 "$C/bin/gpu_model_test" >"$OUT/model.log" 2>&1
model_rc=$?
model_s=$((SECONDS - t0))

t0=$SECONDS
BENCH=("$C/bin/telos-run" bench "$A/tiny-llama-b64.telos" --engine gpu --batch 1,8,64
       --prompt-len 32 --gen 128 --mixed 32 --seed 1 --ttft 32,128,224)
{
  echo "== telos-run bench (table; stderr has the load log)"
  timeout 25 "${BENCH[@]}" 2>&1
  echo "rc=$?"
  echo "== telos-run bench --json"
  timeout 25 "${BENCH[@]}" --json 2>/dev/null
  echo "rc=$?"
} >"$OUT/bench.log" 2>&1
bench_rc=$(grep -c '^rc=0$' "$OUT/bench.log")
bench_s=$((SECONDS - t0))

echo "== gpu_model_test checks"
grep -h "^CHECK" "$OUT/model.log" | sed 's/^CHECK | //'
grep -hE "^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]+ test|^\[  FAILED  \] [A-Z]" "$OUT/model.log" | sort -u
echo
echo "== load log and bench table (tiny-llama, max_batch 64)"
sed -n '/^== telos-run bench (table/,/^rc=/p' "$OUT/bench.log" | grep -v '^==\|^rc='
echo
printf '%-36s | %-8s | %5s | %s\n' check result time log
printf '%-36s | %-8s | %4ss | %s\n' "gpu_model_test (all)" "$([ $model_rc = 0 ] && echo pass || echo FAIL:$model_rc)" "$model_s" model.log
printf '%-36s | %-8s | %4ss | %s\n' "telos-run bench (table + json)" "$([ "$bench_rc" = 2 ] && echo pass || echo FAIL)" "$bench_s" bench.log
