#!/usr/bin/env bash
# GPU check of the overlapped engine (issue 5: step N+1 launched before step N is back, its tokens
# fed on the device). On the build machine, from this worktree:
#
#   tools/overlap_gpu_prepare.sh [BUILD_DIR] [CARRY_DIR]
#
# builds telos-run, telosc, gpu_model_test and gpu_kernels_test in BUILD_DIR (default build-ov),
# compiles the tiny models with this tree's telosc (embed_gather reads fed tokens), and fills
# CARRY_DIR (default /work/main/.gpu-carry-overlap) with the stripped binaries, the artifacts, the
# shared libraries a bare GPU machine lacks and run.sh. Then, on the GPU machine, from the
# repository root of main (goldens come from its tree):
#
#   bash .gpu-carry-overlap/run.sh "$OUT/overlap"
#
# which runs in under 150 s, writes tests.log and bench.log there and prints a table last:
# embed_gather with fed tokens, the tiny models vs transformers (which includes the overlapped
# engine against the host-sampled one), memcheck of the engine test, and telos-run bench at batch
# 1 and 64 with and without --no-overlap (host us per step, GPU idle gap, ms per token).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-ov}
CARRY=${2:-/work/main/.gpu-carry-overlap}

cmake --build "$BUILD" --target telosc telos-run gpu_model_test gpu_kernels_test -j2
rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/lib" "$CARRY/artifacts"
b64=$(mktemp)
echo '{"max_batch": 64, "max_seq_len": 256, "kv_page_size": 16, "kv_pool": {"pages": 1152},
       "prefill_chunk": 256}' >"$b64"
for m in models/tiny-llama test/fixtures/tiny-qwen2 test/fixtures/tiny-qwen3; do
  "$BUILD/bin/telosc" compile "$m" -o "$CARRY/artifacts/$(basename "$m").telos"
done
# tiny-llama as committed has max_batch 8; the engine's overhead is wanted at batch 1 and 64.
"$BUILD/bin/telosc" compile models/tiny-llama --serving "$b64" -o "$CARRY/artifacts/tiny-llama-b64.telos"
rm -f "$b64"
cp "$BUILD/bin/telos-run" "$BUILD/bin/gpu_model_test" "$BUILD/bin/gpu_kernels_test" "$CARRY/bin/"
strip "$CARRY"/bin/*
for l in $(ldd "$BUILD/bin/telos-run" | awk '/pcre2|icu|httplib|brotli/ {print $3}'); do cp -L "$l" "$CARRY/lib/"; done
tar cJf "$CARRY/payload.tar.xz" -C "$CARRY" lib artifacts
rm -rf "$CARRY/lib" "$CARRY/artifacts"

cat >"$CARRY/run.sh" <<'RUN'
#!/usr/bin/env bash
# The overlapped engine on the GPU (tools/overlap_gpu_prepare.sh in the overlap branch says what).
# Usage, from the repository root: bash .gpu-carry-overlap/run.sh OUT_DIR
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-/tmp/overlap-gpu}
mkdir -p "$OUT"
P=/tmp/overlap-gpu-payload
rm -rf "$P" && mkdir -p "$P" && tar -C "$P" -xJf "$C/payload.tar.xz"
# NVRTC for gpu_kernels_test: the toolkit's, else the one PyTorch's wheels carry.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in os.listdir(p)))' 2>/dev/null); do
  if ls "$d"/libnvrtc.so.13* >/dev/null 2>&1; then export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"; break; fi
done
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
export LD_LIBRARY_PATH="$P/lib:${LD_LIBRARY_PATH:-}"
export TELOS_CACHE_DIR=/tmp/telos-kernel-cache TELOS_GPU_ARTIFACTS=$P/artifacts TELOS_SOURCE_DIR=$PWD
T=$OUT/tests.log B=$OUT/bench.log
: >"$T"; : >"$B"
declare -a rows
run() {  # run NAME LIMIT_S LOG COMMAND...
  local name=$1 limit=$2 log=$3; shift 3
  local t0=$SECONDS
  echo "==== $name: $*" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  local rc=$?
  rows+=("$(printf '%-46s | %-7s | %4ss' "$name" "$([ $rc = 0 ] && echo pass || echo FAIL:$rc)" $((SECONDS - t0)))")
}
# Limits add up to 145 s.
run "embed_gather with fed tokens" 20 "$T" "$C/bin/gpu_kernels_test" --gtest_filter='*EmbedAndRmsNorm*'
run "tiny models vs transformers; engine overlap" 50 "$T" "$C/bin/gpu_model_test"
run "memcheck: overlapped engine" 35 "$T" compute-sanitizer --error-exitcode 9 --print-limit 20 \
    --tool memcheck "$C/bin/gpu_model_test" --gtest_filter='*EngineSamplesGreedy*/0'
for mode in overlap no-overlap; do
  flag=""; [ $mode = no-overlap ] && flag=--no-overlap
  run "telos-run bench batch 1,64 ($mode)" 20 "$B" "$C/bin/telos-run" bench "$P/artifacts/tiny-llama-b64.telos" \
      --engine gpu --batch 1,64 --prompt-len 32 --gen 128 --seed 1 --json $flag
done
echo
grep -h "^CHECK" "$T" | sed 's/^CHECK | //'
grep -hE "^\[  FAILED |ERROR SUMMARY" "$T" | sort | uniq -c
echo
python3 - "$B" <<'PY'
import json, sys
print("%-11s %5s %10s %12s %12s %12s %11s" % ("mode", "batch", "ms/token", "host us p50", "idle us p50", "idle us p90", "overlapped"))
mode = None
for line in open(sys.argv[1]):
    if line.startswith("===="):
        mode = "no-overlap" if "--no-overlap" in line else "overlap"
    elif line.startswith("{"):
        for r in json.loads(line)["runs"]:
            f = lambda k: "-" if r.get(k) is None else "%.1f" % r[k]
            print("%-11s %5d %10s %12s %12s %12s %11s" % (mode, r["batch"], "-" if r.get("ms_per_token") is None else "%.3f" % r["ms_per_token"],
                  f("host_us_per_step"), f("gpu_idle_gap_us"), f("gpu_idle_gap_us_p90"),
                  "%d/%d" % (r["overlapped_steps"], r["decode_steps"])))
PY
echo
printf '%-46s | %-7s | %5s\n' check result time
for r in "${rows[@]}"; do echo "$r"; done
RUN
chmod +x "$CARRY/run.sh"
du -sh "$CARRY"
echo "on the GPU machine, from the repository root: bash .gpu-carry-overlap/run.sh \"\$OUT/overlap\""
