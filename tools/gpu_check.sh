#!/usr/bin/env bash
# The GPU check of codegen and the GPU engine, in one invocation on the GPU machine:
#   1. every kernel template against f64 references on fresh random inputs (gpu_kernels_test),
#   2. the tiny models end to end against transformers' golden outputs, alone and in a mixed
#      batch, graphs vs direct launches, seeded sampling vs batch (gpu_model_test),
#   3. compute-sanitizer memcheck on both, racecheck and synccheck on the kernels,
#   4. kernel timings against the copy bandwidth (telos-kernel-bench; GPU_CHECK_QUICK=1 skips
#      this and racecheck/synccheck).
# It prints a table last; full logs go to $OUT (or /tmp/telos-gpu-check).
#
#   tools/gpu_check.sh --prepare [BUILD_DIR]   on the build machine: builds the tests and telosc in
#                                              BUILD_DIR (default build-cg), compiles the tiny
#                                              models (with their kernels) into
#                                              .gpu-carry/artifacts, copies binaries
#   tools/gpu_check.sh                         on the GPU machine, from the repository root, with
#                                              .gpu-carry carried along
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=.gpu-carry

if [ "${1:-}" = "--prepare" ]; then
  set -e
  BUILD=${2:-build-cg}
  cmake --build "$BUILD" --target telosc gpu_kernels_test gpu_model_test telos-kernel-bench -j2
  rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/artifacts"
  for m in models/tiny-llama test/fixtures/tiny-qwen2 test/fixtures/tiny-qwen3; do
    name=$(basename "$m")
    "$BUILD/bin/telosc" compile "$m" -o "$CARRY/artifacts/$name.telos"
  done
  cp "$BUILD/bin/gpu_kernels_test" "$BUILD/bin/gpu_model_test" "$BUILD/bin/telos-kernel-bench" "$CARRY/bin/"
  strip "$CARRY"/bin/*
  du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-/tmp/telos-gpu-check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

# NVRTC for the kernel tests (they compile their instances at run time): the toolkit's, else the
# one PyTorch's wheels carry.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
export TELOS_CACHE_DIR=/tmp/telos-kernel-cache TELOS_GPU_ARTIFACTS=$PWD/$CARRY/artifacts TELOS_SOURCE_DIR=$PWD

declare -a rows
run() {  # run NAME LOG COMMAND...
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  timeout 150 "$@" >"$OUT/$log" 2>&1
  local rc=$?
  rows+=("$(printf '%-44s | %-6s | %4ss | %s' "$name" "$([ $rc = 0 ] && echo pass || echo FAIL:$rc)" $((SECONDS - t0)) "$log")")
}

run "kernels vs f64 references" kernels.log "$CARRY/bin/gpu_kernels_test"
run "tiny models vs transformers" model.log "$CARRY/bin/gpu_model_test"
CS="compute-sanitizer --error-exitcode 9 --print-limit 20"
run "memcheck: kernels" memcheck-kernels.log $CS --tool memcheck "$CARRY/bin/gpu_kernels_test"
run "memcheck: tiny models" memcheck-model.log $CS --tool memcheck "$CARRY/bin/gpu_model_test" \
    --gtest_filter='*MatchesTransformers*'
# GPU_CHECK_QUICK=1 leaves out racecheck and synccheck (the slowest part).
if [ -z "${GPU_CHECK_QUICK:-}" ]; then
  run "racecheck: kernels" racecheck.log $CS --tool racecheck "$CARRY/bin/gpu_kernels_test" \
      --gtest_filter='-*Sample*'
  run "synccheck: kernels" synccheck.log $CS --tool synccheck "$CARRY/bin/gpu_kernels_test" \
      --gtest_filter='-*Sample*'
  run "kernel timings" bench.log "$CARRY/bin/telos-kernel-bench"
fi

echo
grep -h "^CHECK" "$OUT/model.log" | sed 's/^CHECK | //' | tee "$OUT/model-table.txt"
echo
grep -hE "^\[  (FAILED|SKIPPED) |ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/*.log | sort | uniq -c | head -40
[ -f "$OUT/bench.log" ] && { echo; cat "$OUT/bench.log"; }
echo
printf '%-44s | %-6s | %5s | %s\n' check result time log
for r in "${rows[@]}"; do echo "$r"; done | tee "$OUT/summary.txt"
