#!/usr/bin/env bash
# The small-M GEMM's GPU check (copied to .gpu-carry-small/run.sh by small_gpu_prepare.sh), run
# from the repository root on the GPU machine:  bash .gpu-carry-small/run.sh OUT_DIR
# First the question everything rests on: is the small GEMM's output the prefill GEMM's, bit for
# bit (wgmma's per-element result independent of the instruction's N and of the M tile)? Then all
# kernel tests, the tiny models end to end (committed buckets, and a 128-token prefill bucket so
# prompts and decode run different GEMMs), memcheck on the GEMM tests, telos-kernel-bench.
# Writes OUT_DIR/checks.log and OUT_DIR/bench.log; prints the bench table and the checks last.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: run.sh OUT_DIR}
mkdir -p "$OUT"
LOG=$OUT/checks.log BENCH=$OUT/bench.log
: >"$LOG"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
command -v compute-sanitizer >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
export TELOS_CACHE_DIR=/tmp/telos-kernel-cache-small TELOS_SOURCE_DIR=$PWD
ART=/tmp/telos-small-artifacts
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
BIT='*SmallGemmMatchesPrefillGemmBitForBit*'
run "small GEMM == prefill GEMM, bit for bit" 40 "$C/bin/gpu_kernels_test" --gtest_filter="$BIT"
run "all other kernel tests" 35 "$C/bin/gpu_kernels_test" --gtest_filter="-$BIT"
run "tiny models (committed buckets)" 12 env TELOS_GPU_ARTIFACTS=$ART/artifacts "$C/bin/gpu_model_test"
run "tiny models (prefill bucket 128)" 12 env TELOS_GPU_ARTIFACTS=$ART/artifacts-p128 "$C/bin/gpu_model_test"
run "memcheck: QKV GEMM + rows (both GEMMs)" 12 \
    compute-sanitizer --error-exitcode 9 --print-limit 20 --tool memcheck "$C/bin/gpu_kernels_test" \
    --gtest_filter='*QkvGemmThenRows*'
t0=$SECONDS
timeout 39 stdbuf -oL "$C/bin/telos-kernel-bench" >"$BENCH" 2>&1
rc=$?
rows+=("$(printf '%-40s | %-8s | %4ss' "telos-kernel-bench" "$([ $rc = 0 ] && echo done || echo FAIL:$rc)" $((SECONDS - t0)))")
echo
echo "model checks passed: $(grep -c '^CHECK .*| pass$' "$LOG"), failed: $(grep -c '^CHECK .*| FAIL$' "$LOG")"
grep -h '^CHECK .*| FAIL$' "$LOG" | sed 's/^CHECK | //' | head -12
grep -hE "^\[  (FAILED|PASSED|SKIPPED) |ERROR SUMMARY|Failure|memcmp" "$LOG" | sort | uniq -c | head -20
echo
grep -E "^kernel |^cudaMemcpy|^gemm_small|^linear_f32" "$BENCH"
echo
printf '%-40s | %-8s | %5s\n' check result time
for r in "${rows[@]}"; do echo "$r"; done
