#!/usr/bin/env bash
# Tensor parallelism on the GPU machine, in one invocation (docs/multi-gpu.md, docs/gpu-check.md):
#   1. the tiny models compiled at serving.tensor_parallel 2 (<model>-tp2.telos, and
#      tiny-llama --quantize fp8 as tiny-llama-fp8-tp2.telos, beside the
#      one-rank artifacts of tools/gpu_check.sh --prepare),
#   2. on one GPU: the all-reduce's forms (one-shot, two-shot, with the next RMSNorm) against a
#      host sum and the unfused path, bit for bit, over 2, 4 and 8 ranks, and the NCCL form's
#      gather_sum_residual against the host sum (gpu_kernels_test), the
#      same one rank at a time under compute-sanitizer memcheck and racecheck, and the tiny
#      models' two ranks on that GPU against transformers' goldens and the one-rank artifact
#      (gpu_model_test),
#   3. the all-reduce latency at 8 KB, 64 KB, 1 MB and 16 MB, ours beside NCCL graph-captured
#      (telos-allreduce-bench: over every visible GPU; on one GPU, ours with two ranks on it),
#   4. on two GPUs or more: telos-run generate at TP=2 (a rank a GPU, peer access) against TP=1,
#      greedy ids identical for every tiny model; a 4200-token prompt through tiny-llama's
#      8192-token prefill bucket (its positions raised to 8192: 4 MiB all-reduces, the launch
#      programs' collective entries) with NCCL's all-gathers against TELOS_NCCL=0's fallback
#      kernels, greedy ids identical; decode batch 1 and throughput at batch 64 and
#      256, TP=2 beside TP=1, on MULTI_GPU_MODEL (a model directory telosc compiles, e.g. a
#      Llama-3.1-8B checkpoint of tools/e2e_check.py --keep-work; default: tiny-llama), and
#      beside it the peer, PyTorch's tensor-parallel decode of the 8B's shape at TP=1 and TP=2
#      (tools/torch_tp_decode.py under torchrun),
#   5. real shapes at TP=2 against transformers (tools/e2e_check.py --tensor-parallel 2: logits,
#      greedy ids against transformers and against TP=1, batch invariance): on two GPUs
#      Llama-3.1-8B and Qwen2.5-7B, a rank a GPU; on one GPU Llama-3.2-1B, both ranks on it.
#      A model whose usual time would end the script past MULTI_GPU_CHECK_BUDGET_S seconds
#      (default 540) is skipped with a row naming the call that runs it:
#      MULTI_GPU_CHECK_E2E_ONLY=1 runs step 5 alone, MULTI_GPU_E2E_MODELS="A B" picks its models.
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
# NVSHMEM_DISABLE_NVLS=1 are exported for everything it runs.
#
#   tools/multi_gpu_check.sh            on the GPU machine, from the repository root, with
#                                       .gpu-carry carried along (tools/gpu_check.sh --prepare)
#   tools/multi_gpu_check.sh --dry-run  anywhere: prints every command it would run, runs none
# Logs go to $OUT (or /tmp/telos-multi-gpu-check); a table is printed last. Exits 1 when a check
# fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: tools/multi_gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac
OUT=${OUT:-/tmp/telos-multi-gpu-check}
mkdir -p "$OUT"
if [ $DRY = 1 ]; then
  B=${B:-\$B} P=${P:-\$P} TELOS_GPU_ARTIFACTS=${TELOS_GPU_ARTIFACTS:-\$P/artifacts} GPUS=2
else
  # shellcheck source=tools/gpu_env.sh
  source tools/gpu_env.sh || exit 1
  GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
fi
ARTS=$TELOS_GPU_ARTIFACTS
TINY="tiny-llama:models/tiny-llama tiny-qwen2:test/fixtures/tiny-qwen2 tiny-qwen3:test/fixtures/tiny-qwen3"
ROWS=() FAILED=0
CS=(compute-sanitizer --error-exitcode 9 --print-limit 20)

# step NAME CMD...: runs CMD with its output in $OUT/NAME.log (the name's spaces and other
# characters as dashes) and records a table row. A googletest that skipped fails the step: a
# check that did not run has proven nothing.
step() {
  local name=$1
  shift
  echo "+ $*"
  [ $DRY = 1 ] && return 0
  local t0=$SECONDS log
  log="$OUT/$(printf '%s' "$name" | tr -c 'A-Za-z0-9_.\n-' '-').log"
  if "$@" >"$log" 2>&1 && ! grep -q '^\[  SKIPPED \]' "$log"; then
    ROWS+=("$(printf '%-44s | pass | %4d s' "$name" $((SECONDS - t0)))")
  else
    ROWS+=("$(printf '%-44s | FAIL | %4d s | %s' "$name" $((SECONDS - t0)) "$log")")
    FAILED=1
  fi
}

# skip_late NAME SECONDS: true, and a row naming the call that runs NAME, when SECONDS more would
# end this script past its budget.
skip_late() {
  [ $((SECONDS + $2)) -le "${MULTI_GPU_CHECK_BUDGET_S:-540}" ] && return 1
  ROWS+=("$(printf '%-44s | skip | past MULTI_GPU_CHECK_BUDGET_S: %s' "$1" "$3")")
}

# The serving config of a tiny model at tensor_parallel 2: its model.json's section (or the
# defaults) with the degree set, so that the two artifacts differ only in it.
tp2_serving() {
  python3 -c 'import json, os, sys
d = sys.argv[1]
p = os.path.join(d, "model.json")
s = json.load(open(p)).get("serving", {}) if os.path.exists(p) else {}
s["tensor_parallel"] = 2
print(json.dumps(s))' "$1"
}

# tiny-llama with max_position_embeddings 8192 in $OUT/tiny-llama-long: its 8192-token prefill
# bucket's all-reduces (8192 x 128 f32, 4 MiB) reach kAllReduceNcclMinBytes and take NCCL.
long_tiny_llama() {
  mkdir -p "$OUT/tiny-llama-long" &&
    cp models/tiny-llama/*.safetensors models/tiny-llama/tokenizer*.json \
      models/tiny-llama/generation_config.json "$OUT/tiny-llama-long" &&
    python3 -c 'import json, sys
c = json.load(open(sys.argv[1])); c["max_position_embeddings"] = 8192
json.dump(c, open(sys.argv[2], "w"))' models/tiny-llama/config.json "$OUT/tiny-llama-long/config.json" &&
    "$B/telosc" compile "$OUT/tiny-llama-long" --serving "$OUT/long-tp2.serving.json" -o "$1"
}

# Greedy ids of a prompt through telos-run generate, TP=2 on two GPUs against TP=1 (the text and
# ids generate prints, less its time to first token).
greedy() {
  "$B/telos-run" generate "$1" --engine gpu --prompt-ids 1,2,3,4,5 --max-tokens 32 |
    sed 's/, first token after [^)]*//'
}
same_tokens() {
  greedy "$1" >"$OUT/one.txt" && greedy "$2" >"$OUT/two.txt" && diff "$OUT/one.txt" "$OUT/two.txt"
}

# A 4200-token prompt through artifact $1 on two GPUs with NCCL (its load log must say so) and with
# TELOS_NCCL=0 (the collective entries' fallbacks): the same greedy ids.
long_greedy() {
  "$B/telos-run" generate "$1" --engine gpu --max-tokens 32 --prompt-ids \
    "$(python3 -c 'print(",".join(str(i * 37 % 500 + 1) for i in range(4200)))')" |
    sed 's/, first token after [^)]*//'
}
nccl_vs_fallback() {
  long_greedy "$1" 2>"$OUT/nccl.log" >"$OUT/nccl.txt" &&
    grep -q 'NCCL [0-9]*: the large all-reduces are its all-gathers' "$OUT/nccl.log" &&
    TELOS_NCCL=0 long_greedy "$1" >"$OUT/fallback.txt" && diff "$OUT/nccl.txt" "$OUT/fallback.txt"
}

if [ -z "${MULTI_GPU_CHECK_E2E_ONLY:-}" ]; then
  # 1. The tensor-parallel artifacts.
  for entry in $TINY; do
    name=${entry%%:*} dir=${entry#*:}
    serving="$OUT/$name-tp2.serving.json"
    [ $DRY = 1 ] || tp2_serving "$dir" >"$serving"
    step "compile $name at TP=2" "$B/telosc" compile "$dir" --serving "$serving" -o "$ARTS/$name-tp2.telos"
  done
  echo '{"max_batch": 8, "max_seq_len": 8192, "kv_pool": {"pages": 1040}, "prefill_chunk": 8192, "prefill_buckets": [128, 8192], "tensor_parallel": 2}' >"$OUT/long-tp2.serving.json"
  step "compile tiny-llama-long at TP=2" long_tiny_llama "$ARTS/tiny-llama-long-tp2.telos"
  # Weight-only FP8 (fp8_activations bf16), as gpu_check.sh's one-rank tiny-llama-fp8.telos: at
  # tiny-llama's sizes some ranks' blocks are not 128x128, which W8A8 needs.
  [ $DRY = 1 ] || python3 -c 'import json, sys
s = json.load(open(sys.argv[1])); s["fp8_activations"] = "bf16"; print(json.dumps(s))' \
    "$OUT/tiny-llama-tp2.serving.json" >"$OUT/tiny-llama-fp8-tp2.serving.json"
  step "compile tiny-llama --quantize fp8 at TP=2" "$B/telosc" compile models/tiny-llama \
    --quantize fp8 --serving "$OUT/tiny-llama-fp8-tp2.serving.json" -o "$ARTS/tiny-llama-fp8-tp2.telos"

  # 2. One GPU: the kernel and the two ranks on one device.
  step "all-reduce forms, gather-sum vs host sum" "$B/gpu_kernels_test" \
    --gtest_filter='GpuKernels.AllReduce*:GpuKernels.GatherSum*'
  # Under the sanitizer the ranks' launches run one at a time, so only the test whose ranks each pass
  # their barriers alone (the others' flags raised by the host) can run; its modules are compiled by
  # the step above (the kernel cache).
  step "memcheck: all-reduce forms, a rank at a time" timeout 300 "${CS[@]}" --tool memcheck \
    "$B/gpu_kernels_test" --gtest_filter='GpuKernels.AllReduceOneRankAtATime'
  step "racecheck: all-reduce forms, a rank at a time" timeout 300 "${CS[@]}" --tool racecheck \
    "$B/gpu_kernels_test" --gtest_filter='GpuKernels.AllReduceOneRankAtATime'
  step "tiny models, 2 ranks on one GPU vs 1 rank" "$B/gpu_model_test" \
    --gtest_filter='*GpuModel.TwoRanksOnOneDeviceMatchOneRank*:GpuModelFp8.TwoRanksOnOneDeviceMatchOneRank'

  # 3. The all-reduce's latency, ours beside NCCL (its table is in the log).
  step "all-reduce latency, ours and NCCL" "$B/telos-allreduce-bench"

  # 4. Two GPUs: a rank a GPU.
  if [ "$GPUS" -ge 2 ]; then
    for entry in $TINY; do
      name=${entry%%:*}
      step "$name TP=2 on 2 GPUs vs TP=1, greedy ids" same_tokens "$ARTS/$name.telos" "$ARTS/$name-tp2.telos"
    done
    step "tiny-llama-long TP=2, NCCL vs TELOS_NCCL=0" nccl_vs_fallback "$ARTS/tiny-llama-long-tp2.telos"
    model=${MULTI_GPU_MODEL:-models/tiny-llama}
    for tp in 1 2; do
      echo "{\"tensor_parallel\": $tp, \"max_batch\": 256}" >"$OUT/bench-tp$tp.json"
      step "compile $(basename "$model") at TP=$tp" "$B/telosc" compile "$model" \
        --serving "$OUT/bench-tp$tp.json" -o "$OUT/bench-tp$tp.telos"
      step "decode batch 1, 64, 256 at TP=$tp" "$B/telos-run" bench "$OUT/bench-tp$tp.telos" \
        --engine gpu --batch 1,64,256 --prompt-len 128 --gen 128 --json
    done
    # The peer: PyTorch's tensor-parallel decode of Llama-3.1-8B's shape (random weights,
    # torch.compile with CUDA graphs) at the bench's middle context, its JSON lines in the log.
    for tp in 1 2; do
      name="PyTorch peer, llama-8b decode at TP=$tp"
      peer=(python3 -m torch.distributed.run --standalone --nproc-per-node $tp
        tools/torch_tp_decode.py --model llama-8b --batch 1,64,256 --ctx 192)
      [ $DRY = 0 ] && skip_late "$name" 240 "${peer[*]}" && continue
      step "$name" "${peer[@]}"
    done
  else
    ROWS+=("$(printf '%-44s | skip | one GPU: the two-GPU checks need two' "TP=2 on 2 GPUs")")
  fi
fi

# 5. Real shapes at TP=2 against transformers, a model a step (E2E_SECONDS: its time estimated from
# the TP=1 runs, docs/gpu-check.md, plus a TP=1 compile; its checkpoint and artifacts in /tmp,
# removed after each model; e2e.json in $OUT/e2e-MODEL).
declare -A E2E_SECONDS=([Llama-3.2-1B]=180 [Llama-3.1-8B]=360 [Qwen2.5-7B]=360)
if [ "$GPUS" -ge 2 ]; then
  E2E_MODELS=${MULTI_GPU_E2E_MODELS:-Llama-3.1-8B Qwen2.5-7B}
else
  E2E_MODELS=${MULTI_GPU_E2E_MODELS:-Llama-3.2-1B}
fi
for model in $E2E_MODELS; do
  name="$model at TP=2 vs transformers"
  [ $DRY = 0 ] && skip_late "$name" "${E2E_SECONDS[$model]:-360}" \
    "MULTI_GPU_CHECK_E2E_ONLY=1 MULTI_GPU_E2E_MODELS=$model tools/multi_gpu_check.sh" && continue
  step "$name" python3 tools/e2e_check.py --telosc "$B/telosc" --telos-run "$B/telos-run" \
    --work /tmp/telos-e2e-tp2 --out "$OUT/e2e-$model" --models "$model" --tensor-parallel 2
done

[ $DRY = 1 ] && exit 0
echo
printf '%s\n' "${ROWS[@]}"
exit $FAILED
