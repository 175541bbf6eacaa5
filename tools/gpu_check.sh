#!/usr/bin/env bash
# The GPU suite of codegen's kernels and the GPU engine, in one invocation on the GPU machine:
#   1. every kernel template against f64 references on fresh random inputs, the small-M GEMM
#      against the prefill GEMM bit for bit (gpu_kernels_test),
#   2. the tiny models end to end against transformers' golden outputs, alone and in a mixed
#      batch, graphs vs direct launches, seeded sampling vs batch, the engine's GPU sampling vs
#      host sampling (gpu_model_test), on the committed buckets and again with one 512-token
#      prefill bucket (the models' positions raised to 512: every prompt through the prefill
#      GEMM, decode through the small-M GEMM; tiny-llama also with e4m3 weights),
#      tokens with and without prefix-cache hits (tools/prefix_cache_check.py),
#   3. compute-sanitizer: memcheck on both, racecheck and synccheck on the kernels, synccheck on
#      the tiny models' test, racecheck on short telos-run generate runs of each tiny model
#      (racecheck of the whole gpu_model_test process dies without a hazard after its work ran
#      clean: docs/gpu-check.md),
#   4. timings: telos-kernel-bench (decode GEMM and attention against the copy bandwidth; its
#      decode GEMMs also beside torch.matmul, codegen/bench/decode_gemm_torch.py),
#      the prefill GEMM beside torch.matmul and attn_prefill beside torch SDPA (each pair
#      interleaved in one process), telos-run bench on tiny-llama (host time per step, GPU idle
#      gap, graph capture and memory report), telos-launch-bench (the host's cost of each CUDA
#      call of a step, two passes), telos-device-launch-probe (steps launched from the device:
#      host time and GPU gaps against host launches). GPU_CHECK_QUICK=1 skips racecheck,
#      synccheck and the timings; GPU_CHECK_SANITIZERS_ONLY=1 runs racecheck and synccheck alone;
#      GPU_CHECK_TIMINGS_ONLY=1 runs the timings alone (the whole suite takes more than one
#      600-second call: quick, then sanitizers, then timings, is three that fit); a timing is
#      skipped when it would end past GPU_CHECK_BUDGET_S seconds of the script (default 540), so
#      that a 570-second call still ends with the table.
# It prints a table last; logs go to $OUT (or /tmp/telos-gpu-check).
#
#   tools/gpu_check.sh --prepare [BUILD_DIR]   on the build machine: builds the binaries in
#                                              BUILD_DIR (default build-cg), compiles the tiny
#                                              models with telosc, fills .gpu-carry/ (~20 MB)
#   tools/gpu_check.sh                         on the GPU machine, from the repository root, with
#                                              .gpu-carry carried along
# TELOS_GPU_TARGET (--prepare) names the artifacts' kernel sets: sm_90a (the default: H100, H200),
# sm_100a (B200) or sm_90a,sm_100a (both); the carry records it ($CARRY/target). On the GPU machine
# the script reads the GPU's compute capability, refuses (exit 2) where the carry has no kernel set
# for it, and on sm_100 runs the kernel tests (the wgmma kernels' tests skip there, the tcgen05
# kernels' run), the model tests, the sanitizers, sass_check.sh --artifact on the tiny model's
# sm_100a cubin and the engine's overhead, and skips the sm_90a benchmarks with a row saying so
# (docs/gpu-check.md, "On a B200"). Artifacts the sm_100a set has no kernels for (FP8 weights) are
# left out with a line naming telosc's refusal, and their tests skip.
# The GPU run packs the kernel cache entries it used into $OUT/kernel-cache.tar.xz; saved on the
# build machine as .gpu-kernel-cache.tar.xz (or $KERNEL_CACHE), the next --prepare carries it and
# the next run's tests and benches load their modules instead of compiling them (tools/gpu_env.sh).
# CARRY=DIR (both sides; tools/gpu_env.sh reads it too) names another folder than .gpu-carry, so
# that a branch's build can travel in the same call as main's: check the branch out, build, and
# `CARRY=.gpu-carry-BRANCH tools/gpu_check.sh --prepare`; on the GPU machine
# `CARRY=.gpu-carry-BRANCH tools/gpu_check.sh` (or source gpu_env.sh with it) runs that build.
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=${CARRY:-.gpu-carry}

if [ "${1:-}" = "--prepare" ]; then
  set -e
  BUILD=${2:-build-cg}
  TARGET=${TELOS_GPU_TARGET:-sm_90a}
  case "$TARGET" in
    sm_90a | sm_100a | sm_90a,sm_100a | sm_100a,sm_90a) ;;
    *) echo "gpu_check.sh --prepare: TELOS_GPU_TARGET is '$TARGET'; expected sm_90a, sm_100a or sm_90a,sm_100a" >&2
       exit 2 ;;
  esac
  # sm_90a is telosc's default target: its artifacts are compiled with the same command lines as
  # ever.
  target_args=()
  [ "$TARGET" = sm_90a ] || target_args=(--target "$TARGET")
  telosc_compile() { "$BUILD/bin/telosc" compile "$@" "${target_args[@]}"; }
  # An artifact of a kind the sm_100a set may lack (FP8 weights, an e4m3 KV cache): where the target
  # includes sm_100a and telosc refuses it, a line says so and the artifact is left out (its tests
  # skip); on sm_90a alone a refusal stops the prepare as any other.
  telosc_compile_where_lowered() {
    local err
    err=$(mktemp)
    if telosc_compile "$@" 2>"$err"; then rm -f "$err"; return 0; fi
    if [[ "$TARGET" != *sm_100a* ]]; then cat "$err" >&2; rm -f "$err"; return 1; fi
    echo "gpu_check.sh --prepare: not compiled for $TARGET (its tests skip): telosc compile $*: $(tail -1 "$err")"
    rm -f "$err"
  }
  cmake --build "$BUILD" --target telosc telos-run gpu_kernels_test gpu_model_test telos-kernel-bench \
    telos-prefill-bench telos-attn-prefill-bench telos-allreduce-bench -j2
  # telos-launch-bench and telos-device-launch-probe are built where CMake found nvcc
  # (executor/bench).
  cmake --build "$BUILD" --target telos-launch-bench telos-device-launch-probe -j2 2>/dev/null || true
  rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/lib" "$CARRY/artifacts" "$CARRY/artifacts-p512"
  echo "$TARGET" >"$CARRY/target"
  p512=$(mktemp) b64=$(mktemp) kvfp8=$(mktemp) tiny=$(mktemp) wo=$(mktemp) w8a8=$(mktemp -d)
  echo '{"max_batch": 8, "max_seq_len": 512, "kv_page_size": 16, "kv_pool": {"pages": 128},
         "prefill_chunk": 512, "prefill_buckets": [512]}' >"$p512"
  echo '{"max_batch": 64, "max_seq_len": 256, "kv_page_size": 16, "kv_pool": {"pages": 1152},
         "prefill_chunk": 256}' >"$b64"
  # Weight-only FP8 for block-quantized weights (tiny-llama's serving config and fp8_activations
  # bf16): tiny-llama-fp8 runs decode_layer_persistent_e4m3 and the e4m3 GEMMs (GpuModelFp8).
  echo '{"max_batch": 8, "max_seq_len": 256, "kv_page_size": 16, "kv_pool": {"pages": 128},
         "prefill_chunk": 128}' >"$tiny"
  sed 's/"prefill_chunk": 128}/"prefill_chunk": 128, "fp8_activations": "bf16"}/' "$tiny" >"$wo"
  # tiny-w8a8: tiny-llama's shape with 2 query heads and 1 KV head of 128 dims, hidden 256 and
  # intermediate 512 (random weights), so that every layer weight keeps 128x128 scale blocks and
  # its --quantize fp8 artifact runs all W8A8: decode_layer_persistent_w8a8, the small-M and (p512)
  # prefill W8A8 GEMMs (GpuModelFp8).
  python3 - "$w8a8" <<'PY'
import json, sys
sys.path.insert(0, "test/telosc/Inputs")
import config_matrix as m
c = json.load(open("models/tiny-llama/config.json"))
c.update(hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
         intermediate_size=512, max_position_embeddings=512)
json.dump(c, open(sys.argv[1] + "/config.json", "w"))
m.write_checkpoint(sys.argv[1] + "/model.safetensors", m.tensor_shapes(c), 5)
PY
  # The tiny models with an e4m3 KV cache (gpu_model_test, E4m3KvCache...; docs/fp8.md).
  echo '{"max_batch": 8, "kv_pool": {"pages": 256}, "kv_dtype": "fp8_e4m3"}' >"$kvfp8"
  for m in models/tiny-llama test/fixtures/tiny-qwen2 test/fixtures/tiny-qwen3; do
    name=$(basename "$m")
    telosc_compile "$m" -o "$CARRY/artifacts/$name.telos"
    telosc_compile_where_lowered "$m" --serving "$kvfp8" -o "$CARRY/artifacts/$name-kv-fp8.telos"
  done
  # The tiny models with one 512-token prefill bucket, the smallest that takes the prefill GEMM
  # (kPrefillGemmMinRows), past their committed 256 positions (copies with max_position_embeddings
  # 512; positions change no arithmetic): gpu_model_test runs them as it runs the committed ones,
  # tiny-llama with e4m3 weights too (GpuModelFp8: the e4m3 prefill GEMM).
  p512_model=$(mktemp -d)
  for m in models/tiny-llama test/fixtures/tiny-qwen2 test/fixtures/tiny-qwen3; do
    name=$(basename "$m")
    rm -rf "${p512_model:?}"/* && cp "$m"/* "$p512_model/"
    sed -i 's/"max_position_embeddings": 256/"max_position_embeddings": 512/' "$p512_model/config.json"
    telosc_compile "$p512_model" --serving "$p512" -o "$CARRY/artifacts-p512/$name.telos"
    if [ "$name" = tiny-llama ]; then
      sed 's/"prefill_buckets": \[512\]}/"prefill_buckets": [512], "fp8_activations": "bf16"}/' \
        "$p512" >"$p512.wo"
      telosc_compile_where_lowered "$p512_model" --serving "$p512.wo" --quantize fp8 \
        -o "$CARRY/artifacts-p512/tiny-llama-fp8.telos"
    fi
  done
  rm -rf "$p512_model" "$p512.wo"
  telosc_compile_where_lowered "$w8a8" --serving "$p512" --quantize fp8 \
    -o "$CARRY/artifacts-p512/tiny-w8a8.telos"
  telosc_compile_where_lowered "$w8a8" --serving "$p512" --quantize fp8 --quantize-lm-head \
    -o "$CARRY/artifacts-p512/tiny-w8a8-lm-head.telos"
  # tiny-llama past its committed 256 positions (a copy with max_position_embeddings 512), for
  # one-token steps past the first attention split (gpu_model_test, GpuModelLongContext).
  long=$(mktemp -d) long_serving=$(mktemp)
  cp models/tiny-llama/* "$long/"
  sed -i 's/"max_position_embeddings": 256/"max_position_embeddings": 512/' "$long/config.json"
  echo '{"max_batch": 8, "max_seq_len": 512, "kv_page_size": 16, "kv_pool": {"pages": 128}}' >"$long_serving"
  telosc_compile "$long" --serving "$long_serving" -o "$CARRY/artifacts/tiny-llama-long.telos"
  # And at 1024 positions with the serving config's 512-position attention split.
  sed -i 's/"max_position_embeddings": 512/"max_position_embeddings": 1024/' "$long/config.json"
  echo '{"max_batch": 8, "max_seq_len": 1024, "kv_page_size": 16, "kv_pool": {"pages": 256},
         "attention_split": 512}' >"$long_serving"
  telosc_compile "$long" --serving "$long_serving" -o "$CARRY/artifacts/tiny-llama-long-split512.telos"
  rm -rf "$long" "$long_serving"
  # tiny-llama with e4m3 weights: its one-token steps on decode_layer_persistent_e4m3, against the
  # CPU engine (gpu_model_test, GpuModelFp8).
  telosc_compile_where_lowered models/tiny-llama --quantize fp8 --serving "$wo" \
    -o "$CARRY/artifacts/tiny-llama-fp8.telos"
  telosc_compile_where_lowered "$w8a8" --quantize fp8 --serving "$tiny" \
    -o "$CARRY/artifacts/tiny-w8a8.telos"
  # And with its LM head quantized too (W8A8: gemm_small_w8a8_f32cand).
  telosc_compile_where_lowered "$w8a8" --quantize fp8 --quantize-lm-head --serving "$tiny" \
    -o "$CARRY/artifacts/tiny-w8a8-lm-head.telos"
  # tiny-llama as committed has max_batch 8; the engine's overhead is wanted at batch 1 and 64.
  telosc_compile models/tiny-llama --serving "$b64" -o "$CARRY/artifacts/tiny-llama-b64.telos"
  rm -f "$p512" "$b64" "$kvfp8" "$tiny" "$wo"
  rm -rf "$w8a8"
  cp "$BUILD/bin/gpu_kernels_test" "$BUILD/bin/gpu_model_test" "$BUILD/bin/telos-kernel-bench" \
     "$BUILD/bin/telos-prefill-bench" "$BUILD/bin/telos-attn-prefill-bench" "$BUILD/bin/telos-run" \
     "$BUILD/bin/telosc" "$BUILD/bin/telos-allreduce-bench" "$CARRY/bin/"
  [ -x "$BUILD/bin/telos-launch-bench" ] && cp "$BUILD/bin/telos-launch-bench" "$CARRY/bin/"
  [ -x "$BUILD/bin/telos-device-launch-probe" ] && cp "$BUILD/bin/telos-device-launch-probe" "$CARRY/bin/"
  strip "$CARRY"/bin/*
  "$BUILD/bin/telos-prefill-bench" --compile-only "$CARRY/prefill-bench.cubin"
  # The W8A8 GEMM beside our bf16 GEMM and torch._scaled_mm: prefill_gemm_torch.py --w8a8.
  "$BUILD/bin/telos-prefill-bench" --compile-only-w8a8 "$CARRY/prefill-w8a8.cubin"
  cp codegen/bench/prefill_gemm_torch.py "$CARRY/"
  "$BUILD/bin/telos-attn-prefill-bench" --compile-only "$CARRY/attn-prefill.cubin"
  cp codegen/bench/attention_prefill_torch.py codegen/bench/decode_gemm_torch.py "$CARRY/"
  # telos-run's shared libraries that a bare GPU machine lacks (the CUDA runtime is static).
  for l in $(ldd "$BUILD/bin/telos-run" | awk '/pcre2|icu/ {print $3}'); do cp -L "$l" "$CARRY/lib/"; done
  # Compressed: the artifacts' PTX and ICU's data are most of the bytes.
  tar cJf "$CARRY/payload.tar.xz" -C "$CARRY" lib artifacts artifacts-p512
  rm -rf "$CARRY/lib" "$CARRY/artifacts" "$CARRY/artifacts-p512"
  # The kernel cache the last GPU run packed ($OUT/kernel-cache.tar.xz there, saved here as
  # KERNEL_CACHE, default .gpu-kernel-cache.tar.xz): tools/gpu_env.sh unpacks it.
  KERNEL_CACHE=${KERNEL_CACHE:-.gpu-kernel-cache.tar.xz}
  [ -f "$KERNEL_CACHE" ] && cp "$KERNEL_CACHE" "$CARRY/kernel-cache.tar.xz"
  du -sh "$CARRY"
  exit 0
fi

OUT=${OUT:-/tmp/telos-gpu-check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

# NVRTC, compute-sanitizer, the payload in $P, the binaries in $B.
source tools/gpu_env.sh || exit 1

# The GPU's kernel target, and the kernel sets the carry's artifacts hold (a carry without the
# record is from before it: sm_90a).
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' ')
case "$cc" in
  9.0) ARCH=sm_90a ;;
  10.0) ARCH=sm_100a ;;
  *) echo "gpu_check.sh: GPU 0 has compute capability ${cc:-unknown}; the suite runs on 9.0 (sm_90a:" \
          "H100, H200) and 10.0 (sm_100a: B200)" >&2
     exit 2 ;;
esac
CARRIED=$(cat "$CARRY/target" 2>/dev/null || echo sm_90a)
if [[ ",$CARRIED," != *",$ARCH,"* ]]; then
  echo "gpu_check.sh: $CARRY's artifacts hold the kernel set $CARRIED, none for this GPU (compute" \
       "capability $cc, $ARCH): on the build machine run" \
       "TELOS_GPU_TARGET=$ARCH tools/gpu_check.sh --prepare (or TELOS_GPU_TARGET=sm_90a,sm_100a for" \
       "both) and carry $CARRY again" >&2
  exit 2
fi

declare -a rows
row() { rows+=("$(printf '%-44s | %-6s | %4ss | %s' "$@")"); }  # row NAME RESULT SECONDS LOG
run() {  # run NAME LOG COMMAND... (STEP_TIMEOUT=SECONDS before it: a limit other than 150 s)
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  timeout "${STEP_TIMEOUT:-150}" "$@" >"$OUT/$log" 2>&1
  local rc=$?
  row "$name" "$([ $rc = 0 ] && echo pass || echo FAIL:$rc)" $((SECONDS - t0)) "$log"
}

# The timings come after every check; a timing that would end past GPU_CHECK_BUDGET_S seconds of
# this script (default 540, so that a call of 570 s still prints the table), by the length given
# for it (its usual time with some margin; 60 s if none), is skipped with a row that says so, the
# checks never. (A rule on a timing's start time alone lets a long timing begin just before the
# budget, and a call's limit then cuts it, the table and the kernel cache's pack.)
skip_late() {  # skip_late NAME [SECONDS]: true, and a "skipped" row, when the budget is spent
  [ $((SECONDS + ${2:-60})) -le "${GPU_CHECK_BUDGET_S:-540}" ] && return 1
  row "$1" skip 0 "(past GPU_CHECK_BUDGET_S)"
}
# The benchmarks whose kernels are sm_90a only (their binaries compile sm_90a modules or are built
# for it): on another GPU, true and a "skipped" row.
sm90_only() {  # sm90_only NAME
  [ "$ARCH" = sm_90a ] && return 1
  row "$1" skip 0 "(sm_90a benchmark; GPU is $ARCH)"
}

CS="compute-sanitizer --error-exitcode 9 --print-limit 20"
# The all-reduce tests whose ranks wait for each other's kernels, which the sanitizer runs one at a
# time: they hang under it (their one-rank-at-a-time form runs instead; docs/multi-gpu.md).
SIDE_BY_SIDE='GpuKernels.AllReduceAdds*:GpuKernels.AllReduceTwoShotAdds*:GpuKernels.AllReduceWithNorm*'
# GPU_CHECK_TIMINGS_ONLY=1: the timings alone (a call of their own: the checks take most of a
# call). GPU_CHECK_SANITIZERS_ONLY=1: racecheck and synccheck alone (with them the whole suite
# takes more than one 600-second call).
if [ -z "${GPU_CHECK_TIMINGS_ONLY:-}" ] && [ -z "${GPU_CHECK_SANITIZERS_ONLY:-}" ]; then
  # About two minutes with a carried kernel cache; compiling every module here (none carried) took
  # past 300 s on an H100, so that case gets 480.
  kernels_limit=300
  [ -f "$CARRY/kernel-cache.tar.xz" ] || kernels_limit=480
  STEP_TIMEOUT=$kernels_limit run "kernels vs f64; small GEMM == prefill GEMM" kernels.log "$B/gpu_kernels_test"
  run "tiny models vs transformers" model.log "$B/gpu_model_test"
  run "tiny models, prefill bucket 512" model-p512.log env TELOS_GPU_ARTIFACTS="$P/artifacts-p512" "$B/gpu_model_test"
  run "memcheck: kernels" memcheck-kernels.log $CS --tool memcheck "$B/gpu_kernels_test" \
      --gtest_filter="-$SIDE_BY_SIDE"
  # Tokens with and without prefix-cache hits, alone and in a batch, on the GPU engine.
  run "prefix cache: same tokens with hits" prefix-cache.log python3 tools/prefix_cache_check.py \
      --telos-run "$B/telos-run" --engine gpu "$P/artifacts/tiny-llama.telos" \
      "$P/artifacts/tiny-qwen2.telos" "$P/artifacts/tiny-qwen3.telos" "$P/artifacts-p512/tiny-llama.telos"
  run "memcheck: tiny models" memcheck-model.log $CS --tool memcheck "$B/gpu_model_test" \
      --gtest_filter='*MatchesTransformers*:*LongContext*:*E4m3Kv*:GpuModelFp8.*:*GpuModelFp8Artifact.*'
  # The sm_100a set's SASS (tcgen05 MMAs, commits, TMA and Tensor Memory loads; no wgmma, no local
  # memory): where the carry holds it.
  [[ "$CARRIED" == *sm_100a* ]] &&
    run "SASS of the sm_100a kernel set" sass-check.log tools/sass_check.sh --artifact \
      "$P/artifacts/tiny-llama.telos"
fi
if [ -z "${GPU_CHECK_QUICK:-}" ] && [ -z "${GPU_CHECK_TIMINGS_ONLY:-}" ]; then
  # Longer than the other steps: the small GEMM's bit test fills shared memory with NaNs before
  # each launch, and racecheck tracks every one of those stores (about 340 s on an H100).
  STEP_TIMEOUT=420 run "racecheck: kernels" racecheck.log $CS --tool racecheck "$B/gpu_kernels_test" --gtest_filter="-*Sample*:$SIDE_BY_SIDE"
  run "synccheck: kernels" synccheck.log $CS --tool synccheck "$B/gpu_kernels_test" --gtest_filter="-*Sample*:$SIDE_BY_SIDE"
  # The tiny models' steps: their one-token steps run decode_layer_persistent whole (its attention
  # phases are not in the kernel tests). Racecheck on short telos-run generate runs (a 40- and a
  # 3-token prompt, 20 tokens each; one request with logprobs, the logits' copy back): a long
  # gpu_model_test process dies under racecheck with no hazard reported.
  # shellcheck disable=SC2016  # expanded by the inner bash, from the exported CS, B and P
  CS="$CS" B="$B" P="$P" run "racecheck: tiny models (telos-run generate)" racecheck-model.log bash -c '
    rc=0
    for m in tiny-llama tiny-qwen2 tiny-qwen3; do
      $CS --tool racecheck "$B/telos-run" generate "$P/artifacts/$m.telos" --engine gpu \
          --prompt-ids "$(seq -s, 1 40)" --prompt-ids 7,8,9 --max-tokens 20 || rc=1
      $CS --tool racecheck "$B/telos-run" generate "$P/artifacts/$m.telos" --engine gpu \
          --prompt-ids 1,2,3,4,5 --max-tokens 5 --logprobs 2 || rc=1
    done
    # One-token steps past the first attention split (positions 250-261: the combine phase).
    $CS --tool racecheck "$B/telos-run" generate "$P/artifacts/tiny-llama-long.telos" --engine gpu \
        --prompt-ids "$(seq -s, 1 250)" --max-tokens 12 || rc=1
    # The same past a 512-position split (positions 506-517), alone and beside a second prompt.
    $CS --tool racecheck "$B/telos-run" generate "$P/artifacts/tiny-llama-long-split512.telos" \
        --engine gpu --prompt-ids "$(seq -s, 1 506)" --prompt-ids "$(seq -s, 3 508)" --max-tokens 12 || rc=1
    exit $rc'
  run "synccheck: tiny models" synccheck-model.log $CS --tool synccheck "$B/gpu_model_test" \
      --gtest_filter='*MatchesTransformers*:*LongContext*:*E4m3Kv*'
fi
if [ -z "${GPU_CHECK_QUICK:-}" ] && [ -z "${GPU_CHECK_SANITIZERS_ONLY:-}" ]; then
  # The kernel cache entries used so far, packed before the timings (a call cut short in them
  # still brings the checks' entries back) and again at the end with the timings' own modules.
  pack_kernel_cache "$OUT/kernel-cache.tar.xz"
  # The timings in the order their figures are awaited, so that a check that ran long skips the
  # least awaited: attn_prefill's variants first (the kernel target furthest from being met),
  # then the decode kernels, the prefill GEMM (its target met), the rest.
  # The prefill GEMM beside torch.matmul and attn_prefill beside torch SDPA, each pair interleaved
  # in one process (our kernels loaded from the benches' cubins through the driver API), so both
  # sides run on the same clocks.
  sm90_only "prefill attention beside torch SDPA (2 rounds)" ||
    skip_late "prefill attention beside torch SDPA (2 rounds)" 40 ||
    STEP_TIMEOUT=180 run "prefill attention beside torch SDPA (2 rounds)" attn-prefill-bench.log \
      python3 "$CARRY/attention_prefill_torch.py" "$CARRY/attn-prefill.cubin" 2
  sm90_only "kernel timings (decode)" || skip_late "kernel timings (decode)" 90 ||
    run "kernel timings (decode)" bench.log "$B/telos-kernel-bench"
  # The decode GEMMs' peer: torch.matmul (cuBLAS) on the same shapes, timed the same way.
  [ -s "$OUT/bench.log" ] && ! skip_late "decode GEMM timings of torch.matmul" 40 &&
    STEP_TIMEOUT=90 run "decode GEMM timings of torch.matmul" decode-gemm-torch.log \
      python3 "$CARRY/decode_gemm_torch.py" "$OUT/bench.log"
  # Each shape twice: from the weight's own map and from its slot image.
  sm90_only "prefill GEMM beside torch.matmul (3 rounds)" ||
    skip_late "prefill GEMM beside torch.matmul (3 rounds)" 90 ||
    STEP_TIMEOUT=240 run "prefill GEMM beside torch.matmul (3 rounds)" prefill-bench.log \
      python3 "$CARRY/prefill_gemm_torch.py" "$CARRY/prefill-bench.cubin" 3
  skip_late "engine overhead (telos-run bench)" 40 ||
    run "engine overhead (telos-run bench)" engine-bench.log "$B/telos-run" bench --profile \
      "$P/artifacts/tiny-llama-b64.telos" --engine gpu --batch 1,8,64 --prompt-len 32 --gen 128 \
      --mixed 32 --seed 1 --ttft 32,128,224
  [ -x "$B/telos-launch-bench" ] && ! sm90_only "host cost per CUDA call (2 passes)" &&
    ! skip_late "host cost per CUDA call (2 passes)" 80 &&
    run "host cost per CUDA call (2 passes)" launch-bench.log \
      bash tools/launch_bench.sh "$B/telos-launch-bench" "$OUT/launch-bench"
  [ -x "$B/telos-device-launch-probe" ] && ! sm90_only "steps launched from the device (probe)" &&
    ! skip_late "steps launched from the device (probe)" 40 &&
    run "steps launched from the device (probe)" device-launch.log "$B/telos-device-launch-probe"
fi

echo
[ -f "$OUT/model.log" ] && grep -h "^CHECK" "$OUT/model.log" | sed 's/^CHECK | //' | tee "$OUT/model-table.txt"
echo
grep -hE "^\[  (FAILED|SKIPPED) |ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/*.log | sort | uniq -c | head -40
for f in bench.log decode-gemm-torch.log prefill-bench.log attn-prefill-bench.log engine-bench.log launch-bench.log \
  device-launch.log; do
  [ -f "$OUT/$f" ] && { echo; grep -v '^\s*$' "$OUT/$f" | tail -40; }
done
echo
pack_kernel_cache "$OUT/kernel-cache.tar.xz"
echo
printf '%-44s | %-6s | %5s | %s\n' check result time log
for r in "${rows[@]}"; do echo "$r"; done | tee "$OUT/summary.txt"
