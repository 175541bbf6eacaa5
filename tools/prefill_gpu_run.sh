#!/usr/bin/env bash
# The prefill GEMM's GPU check (copied to CARRY_DIR/run.sh by prefill_gpu_prepare.sh):
# prefill GEMM tests, the tiny models end to end (as committed, and with every prompt through the
# tensor-core GEMM), memcheck on the small prefill tests, then telos-prefill-bench beside
# torch.matmul. Writes two logs to the directory given (checks.log, bench.log); prints the
# benchmark table and the check summary last.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/telos-prefill-check}
mkdir -p "$OUT"
LOG=$OUT/checks.log BENCH=$OUT/bench.log
: >"$LOG"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"  # compute-sanitizer
NAME=$(basename "$C")
export TELOS_CACHE_DIR=/tmp/telos-kernel-cache$NAME TELOS_SOURCE_DIR=$PWD
ART=/tmp/telos-artifacts$NAME
rm -rf "$ART" && mkdir -p "$ART" && tar -C "$ART" -xJf "$C/artifacts.tar.xz"
declare -a rows
run() {  # run NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "==== $name: $*" >>"$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  rows+=("$(printf '%-40s | %-8s | %4ss' "$name" "$([ $rc = 0 ] && echo pass || echo FAIL:$rc)" $((SECONDS - t0)))")
}
SMALL='*PrefillGemmEpilogues*:*PrefillGemmRowsDoNotDependOnM*:*PrefillResidualIsOneF32Add*:*PrefillQkvGemmThenRows*'
run "prefill GEMM tests" 35 "$C/bin/gpu_kernels_test" --gtest_filter='*Prefill*'
run "memcheck: prefill GEMM (small shapes)" 25 \
    compute-sanitizer --error-exitcode 9 --print-limit 20 --tool memcheck "$C/bin/gpu_kernels_test" --gtest_filter="$SMALL"
run "tiny models (committed buckets)" 25 env TELOS_GPU_ARTIFACTS=$ART/artifacts "$C/bin/gpu_model_test"
run "tiny models (prefill bucket 128: GEMM)" 25 env TELOS_GPU_ARTIFACTS=$ART/artifacts-p128 "$C/bin/gpu_model_test"
t0=$SECONDS
timeout 15 "$C/bin/telos-prefill-bench" "$C/prefill-bench.cubin" >"$BENCH" 2>&1 &&
  timeout 25 python3 "$C/prefill_gemm_torch.py" "$BENCH" >>"$BENCH" 2>&1
rc=$?
rows+=("$(printf '%-40s | %-8s | %4ss' "bench vs torch.matmul" "$([ $rc = 0 ] && echo done || echo FAIL:$rc)" $((SECONDS - t0)))")
echo
grep -h "^CHECK" "$LOG" | sed 's/^CHECK | //'
grep -hE "^\[  (FAILED|PASSED|SKIPPED) |ERROR SUMMARY" "$LOG" | sort | uniq -c
echo
grep "^|" "$BENCH"
echo
printf '%-40s | %-8s | %5s\n' check result time
for r in "${rows[@]}"; do echo "$r"; done
