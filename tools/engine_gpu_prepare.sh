#!/usr/bin/env bash
# Builds what the GPU check of the engine work needs and fills .gpu-carry-engine/ (git-ignored):
# gpu_model_test and telos-run (stripped), the shared libraries telos-run needs that the GPU
# machine lacks, the three tiny artifacts (kernels included) plus tiny-llama compiled for batch
# 64 (both compressed), and run.sh. On the GPU machine, from the repository root:
#   bash .gpu-carry-engine/run.sh "$OUT/engine"
#
#   tools/engine_gpu_prepare.sh [BUILD_DIR]   (default build-engine)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-engine}
CARRY=.gpu-carry-engine
cmake --build "$BUILD" --target telosc telos-run gpu_model_test -j2
rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/lib" "$CARRY/artifacts"
for m in models/tiny-llama test/fixtures/tiny-qwen2 test/fixtures/tiny-qwen3; do
  "$BUILD/bin/telosc" compile "$m" -o "$CARRY/artifacts/$(basename "$m").telos"
done
# tiny-llama as compiled has max_batch 8; the overhead figures are wanted at batch 1 and 64.
cat > "$CARRY/serving-b64.json" <<'JSON'
{"max_batch": 64, "max_seq_len": 256, "kv_page_size": 16, "kv_pool": {"pages": 1152},
 "prefill_chunk": 256}
JSON
"$BUILD/bin/telosc" compile models/tiny-llama --serving "$CARRY/serving-b64.json" \
  -o "$CARRY/artifacts/tiny-llama-b64.telos"
rm "$CARRY/serving-b64.json"
cp "$BUILD/bin/gpu_model_test" "$BUILD/bin/telos-run" "$CARRY/bin/"
strip "$CARRY"/bin/*
# Shared libraries of telos-run that a bare GPU machine may not have (the CUDA runtime is static).
for l in $(ldd "$BUILD/bin/telos-run" | awk '/pcre2|icu|httplib|brotli/ {print $3}'); do
  cp -L "$l" "$CARRY/lib/"
done
# Compressed, to stay within the carry's 20 MB (ICU's data alone is 30 MB).
tar cJf "$CARRY/lib.tar.xz" -C "$CARRY" lib && rm -rf "$CARRY/lib"
tar cJf "$CARRY/artifacts.tar.xz" -C "$CARRY" artifacts && rm -rf "$CARRY/artifacts"
cp tools/engine_gpu_run.sh "$CARRY/run.sh"
du -sh "$CARRY"
