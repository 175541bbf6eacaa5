#!/usr/bin/env bash
# GPU check of the prefill GEMM (issue 4), prepared on the build machine (no GPU needed):
#   tools/prefill_gpu_prepare.sh [BUILD_DIR] [CARRY_DIR]
# builds telosc, gpu_kernels_test, gpu_model_test and telos-prefill-bench in BUILD_DIR (default
# build-prefill), compiles the three tiny models twice into CARRY_DIR/artifacts (as committed,
# and with a single 128-token prefill bucket so every prompt runs through the tensor-core GEMM),
# NVRTC-compiles the benchmark's kernels, and writes CARRY_DIR/run.sh, which runs on the GPU
# machine from the repository root:  bash .gpu-carry-prefill/run.sh "$OUT/prefill"
# (the residual-epilogue branch: tools/prefill_gpu_prepare.sh build-resid /work/main/.gpu-carry-resid,
# then bash .gpu-carry-resid/run.sh "$OUT/resid"). The kernel templates are embedded in the
# binaries, so the GPU machine's tree (main) only supplies the golden fixtures.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-prefill}
CARRY=${2:-/work/main/.gpu-carry-prefill}
cmake --build "$BUILD" --target telosc gpu_kernels_test gpu_model_test telos-prefill-bench -j2
rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/artifacts" "$CARRY/artifacts-p128"
serving=$(mktemp)
cat >"$serving" <<'JSON'
{"max_batch": 8, "max_seq_len": 256, "kv_page_size": 16, "kv_pool": {"pages": 128},
 "prefill_chunk": 128, "prefill_buckets": [128], "targets": ["sm_90a"], "batch_invariant": false}
JSON
for m in models/tiny-llama test/fixtures/tiny-qwen2 test/fixtures/tiny-qwen3; do
  name=$(basename "$m")
  "$BUILD/bin/telosc" compile "$m" -o "$CARRY/artifacts/$name.telos"
  "$BUILD/bin/telosc" compile "$m" --serving "$serving" -o "$CARRY/artifacts-p128/$name.telos"
done
rm -f "$serving"
# The artifacts' PTX is most of their size and compresses well; run.sh unpacks them to /tmp.
tar -C "$CARRY" -cJf "$CARRY/artifacts.tar.xz" artifacts artifacts-p128
rm -rf "$CARRY/artifacts" "$CARRY/artifacts-p128"
cp "$BUILD/bin/gpu_kernels_test" "$BUILD/bin/gpu_model_test" "$BUILD/bin/telos-prefill-bench" "$CARRY/bin/"
strip "$CARRY"/bin/*
"$BUILD/bin/telos-prefill-bench" --compile-only "$CARRY/prefill-bench.cubin"
cp codegen/bench/prefill_gemm_torch.py "$CARRY/"
cp tools/prefill_gpu_run.sh "$CARRY/run.sh"
du -sh "$CARRY"
name=$(basename "$CARRY")
echo "GPU command (repository root): bash $name/run.sh \"\$OUT/${name#.gpu-carry-}\""
