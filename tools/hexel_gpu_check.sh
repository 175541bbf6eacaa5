#!/usr/bin/env bash
# Hexel's GPU suite in one invocation, with a pass/fail table at the end.
#
#   tools/hexel_gpu_check.sh stage [BUILD] [STAGE]   (here, no GPU needed) builds the GPU test
#       binaries and the GEMM library in BUILD (default build-hexel) and copies what the GPU run
#       needs into STAGE (default build-hexel-gpu, a small git-ignored folder to carry).
#   tools/hexel_gpu_check.sh run [STAGE] [LOGDIR]    (on the H200) runs the GPU tests, the
#       debug-wait test, compute-sanitizer memcheck/racecheck/synccheck, the GEMM's SASS check
#       (HGMMA present, no local memory) and the GEMM benchmark against torch.matmul; logs go to
#       LOGDIR (default $OUT, else ./hexel-gpu-logs), 7 files, summary.txt holding the table.
# Exit code: 0 when every row passes, 1 otherwise, 2 on usage errors.
set -uo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case "$mode" in
stage)
  build=${2:-build-hexel}
  stage=${3:-build-hexel-gpu}
  set -e
  [ -f "$build/build.ninja" ] || cmake -S . -B "$build" -G Ninja >&2
  cmake --build "$build" --target hexel_gpu_test hexel_gpu_debug_test hexel_gemm -j2 >&2
  rm -rf "$stage" && mkdir -p "$stage"
  cp "$build/bin/hexel_gpu_test" "$build/bin/hexel_gpu_debug_test" "$build/lib/libhexel_gemm.so" \
     hexel/examples/gemm_bench.py "$stage/"
  strip --strip-debug "$stage/hexel_gpu_test" "$stage/hexel_gpu_debug_test" "$stage/libhexel_gemm.so"
  du -sh "$stage" >&2
  exit 0
  ;;
run) ;;
*)
  echo "usage: $0 stage [BUILD] [STAGE] | run [STAGE] [LOGDIR]" >&2
  exit 2
  ;;
esac

stage=${2:-build-hexel-gpu}
logs=${3:-${OUT:-hexel-gpu-logs}}
mkdir -p "$logs"
declare -a names results
row() { names+=("$1"); results+=("$2"); }

{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
} | tee "$logs/summary.txt"

step() {  # step NAME TIMEOUT_S LOGFILE COMMAND...
  local name=$1 limit=$2 log=$3
  shift 3
  local t0=$SECONDS
  timeout "$limit" "$@" >"$logs/$log" 2>&1
  local rc=$?
  # gtest's totals; on the GPU machine a skipped test is a test that did not run: a failure.
  local summary skipped
  summary=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?[,.]" "$logs/$log" | tr -s ' \n' ' ')
  skipped=$(grep -cE "^\[  SKIPPED \] [A-Za-z].*\([0-9]+ ms\)" "$logs/$log")
  if [ $rc -eq 0 ] && [ "$skipped" -gt 0 ]; then row "$name" "FAIL ($skipped skipped) $summary"
  elif [ $rc -eq 0 ]; then row "$name" "PASS ($((SECONDS - t0)) s) $summary"
  elif [ $rc -eq 124 ]; then row "$name" "FAIL (timeout ${limit} s) $summary"
  else row "$name" "FAIL (rc $rc) $summary"; fi
}

step "gpu tests" 240 gpu_tests.log "$stage/hexel_gpu_test"
step "debug wait trap" 60 debug_wait.log "$stage/hexel_gpu_debug_test"
# Only a summary of the SASS comes back (the device returns at most 8 files).
sass=$(mktemp)
cuobjdump -sass "$stage/libhexel_gemm.so" >"$sass" 2>&1
hgmma=$(grep -c HGMMA "$sass")
local_mem=$(grep -cE "\b(LDL|STL)\b" "$sass")
{
  echo "HGMMA: $hgmma, LDL/STL: $local_mem, STSM: $(grep -c STSM "$sass"), UTMASTG: $(grep -c UTMASTG "$sass")"
  grep -E "Function :|HGMMA" "$sass"
} >"$logs/gemm_sass_summary.txt"
rm -f "$sass"
if [ "$hgmma" -gt 0 ] && [ "$local_mem" -eq 0 ]; then
  row "gemm sass" "PASS ($hgmma HGMMA, 0 LDL/STL)"
else
  row "gemm sass" "FAIL ($hgmma HGMMA, $local_mem LDL/STL)"
fi

# A GEMM that failed its correctness tests may deadlock: don't spend the budget timing it.
if grep -qE "^\[  FAILED  \] .*GemmBf16\." "$logs/gpu_tests.log"; then
  row "gemm vs torch.matmul" "FAIL (skipped: the GEMM failed its tests)"
else
  PYTHONUNBUFFERED=1 timeout 240 python3 "$stage/gemm_bench.py" "$stage/libhexel_gemm.so" \
    --json "$logs/gemm_bench.json" >"$logs/gemm_bench.log" 2>&1
  rc=$?
  row "gemm vs torch.matmul" "$([ $rc -eq 0 ] && echo PASS || echo "FAIL (rc $rc)") (default variant >= 0.90 of torch on every shape)"
fi

# The sanitizers instrument every access: skip the two large GEMMs there (the ragged and
# one-tile GEMMs still run). racecheck does not model bar.arrive ordering, so the arrive-side
# named-barrier test is left out of it (NamedBarrier.SyncHandOff covers named barriers there).
# Each test suite runs in its own process, so an error in one cannot poison the next one's
# CUDA context; all sanitizer output goes to one log. Suites named *Host launch no kernels
# (the sanitizer rejects a process that makes no CUDA call), so they are not sanitized.
skip='*GemmBf16.LlamaOProjection*:*GemmBf16.PersistentManyTiles*'
suites=$("$stage/hexel_gpu_test" --gtest_list_tests | grep -E '^[A-Za-z].*\.$' | tr -d '.' |
         grep -v 'Host$')
: >"$logs/sanitizers.log"
for tool in memcheck racecheck synccheck; do
  t0=$SECONDS
  bad=""
  for suite in $suites; do
    f="$suite.*-$skip"
    [ "$tool" = racecheck ] && f="$f:NamedBarrier.ArriveSyncHandOff"
    echo "=== $tool $suite" >>"$logs/sanitizers.log"
    timeout "${HEXEL_SANITIZER_TIMEOUT:-120}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$stage/hexel_gpu_test" --gtest_filter="$f" >>"$logs/sanitizers.log" 2>&1 || bad="$bad $suite"
  done
  if [ -z "$bad" ]; then row "sanitizer $tool" "PASS ($((SECONDS - t0)) s, every suite: 0 errors)"
  else row "sanitizer $tool" "FAIL in:$bad"; fi
done

fail=0
{
  echo
  cat "$logs/gemm_bench.log" 2>/dev/null
  echo
  echo "Hexel GPU suite"
  for i in "${!names[@]}"; do
    printf '  %-22s %s\n' "${names[$i]}" "${results[$i]}"
  done
} | tee -a "$logs/summary.txt"
for r in "${results[@]}"; do case "$r" in PASS*) ;; *) fail=1 ;; esac; done
exit $fail
