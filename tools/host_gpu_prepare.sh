#!/usr/bin/env bash
# The GPU check of the host time per decode step (issue 5): telos-run of this branch beside
# telos-run of its merge base with main, on the same H200, in one invocation.
#
#   tools/host_gpu_prepare.sh [BUILD_DIR]     on the build machine (default build-host): builds
#                                             both telos-run binaries (the baseline in a worktree
#                                             of the merge base under BUILD_DIR), compiles
#                                             tiny-llama at bench_suite's SERVING (max_seq_len
#                                             8448: 528-entry page tables, as the real models get)
#                                             and fills /work/main/.gpu-carry-host/
#   bash .gpu-carry-host/run.sh "$OUT/host"   on the GPU machine, from the repository root
#
# tiny-llama keeps the device step short, so the run measures the host: the host time per step
# does not depend on the model's size, only on the batch and the page-table width.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-host}
CARRY=${CARRY:-/work/main/.gpu-carry-host}
BASE=$(git merge-base HEAD main)

if [ ! -e "$BUILD/base-src/.git" ]; then git worktree add --detach "$BUILD/base-src" "$BASE"; fi
git -C "$BUILD/base-src" checkout -q --detach "$BASE"
# CUDA 75 only satisfies CMake's CUDA language check here; telos-run holds no device code (the
# kernels are in the artifact, compiled by telosc for sm_90a).
for b in "$BUILD/base-build:$BUILD/base-src" "$BUILD:."; do
  dir=${b%%:*} src=${b#*:}
  [ -f "$dir/build.ninja" ] || cmake -S "$src" -B "$dir" -G Ninja -DTELOS_FUZZ=OFF -DCMAKE_CUDA_ARCHITECTURES=75
done
cmake --build "$BUILD/base-build" --target telos-run -j2
cmake --build "$BUILD" --target telos-run telosc -j2

rm -rf "$CARRY" && mkdir -p "$CARRY"
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" "$stage/artifacts" "$stage/model"
cp models/tiny-llama/* "$stage/model/"
python3 - "$stage/model/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = 8448  # what bench_suite's SERVING asks of the real models
json.dump(c, open(sys.argv[1], "w"), indent=2)
EOF
# bench_suite's SERVING, with a fixed pool (256 sequences of 272 positions take 4352 pages) so
# that no run preempts and loading does not size a pool to 90% of the GPU.
echo '{"max_batch": 256, "max_seq_len": 8448, "kv_page_size": 16, "prefill_chunk": 2048,
       "kv_pool": {"pages": 8192}}' >"$stage/serving.json"
"$BUILD/bin/telosc" compile "$stage/model" --serving "$stage/serving.json" -o "$stage/artifacts/tiny-llama-8k.telos"
cp "$BUILD/base-build/bin/telos-run" "$stage/bin/telos-run-base"
cp "$BUILD/bin/telos-run" "$stage/bin/telos-run-host"
strip "$stage"/bin/*
# telos-run's shared libraries that a bare GPU machine lacks (the CUDA runtime is static).
for l in $(ldd "$BUILD/bin/telos-run" | awk '/pcre2|icu|httplib|brotli/ {print $3}'); do cp -L "$l" "$stage/lib/"; done
tar cJf "$CARRY/payload.tar.xz" -C "$stage" bin lib artifacts
rm -rf "$stage"
cp tools/host_gpu_run.sh "$CARRY/run.sh"
du -sh "$CARRY"
