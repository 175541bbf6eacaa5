#!/usr/bin/env bash
# The server's client suites (test/server/*.test.mjs: openai SDK, load, malformed HTTP, hostile
# clients and hostile request data) against telos-run's GPU engine, on the GPU machine, which has
# neither node nor telos-run's shared libraries: both travel xz-compressed in a carry folder.
#
#   tools/gpu_clients_check.sh --prepare [BUILD_DIR]   here: fills .gpu-carry2/ (node, libs,
#                                                      node_modules, test artifacts with kernels (xz),
#                                                      stripped telos-run and telosc) from BUILD_DIR
#                                                      (default build-cg), ~45 MB
#   tools/gpu_clients_check.sh [OUT_DIR]               on the GPU machine, from the repository root,
#                                                      with .gpu-carry2 carried; a line per suite
set -uo pipefail
cd "$(dirname "$0")/.."
C=.gpu-carry2

if [ "${1:-}" = "--prepare" ]; then
  set -e
  BUILD=${2:-build-cg}
  cmake --build "$BUILD" --target telosc telos-run -j2
  rm -rf "$C" && mkdir -p "$C/lib"
  node test/server/make_test_models.mjs "$C/models" "$BUILD/bin/telosc" .
  cp "$BUILD/bin/telos-run" "$BUILD/bin/telosc" "$C/" && strip "$C/telos-run" "$C/telosc"
  for l in $(ldd "$BUILD/bin/telos-run" | awk '/pcre2|icu/ {print $3}'); do cp -L "$l" "$C/lib/"; done
  tar cJf "$C/lib.tar.xz" -C "$C" lib && rm -rf "$C/lib"
  xz -9 -c "$(command -v node)" > "$C/node.xz"
  tar cJf "$C/node_modules.tar.xz" -C test/server node_modules
  # The artifacts' PTX compresses ~4x; the carry limit is 64 MiB with gpu_check's beside it.
  tar cJf "$C/models.tar.xz" -C "$C" models && rm -rf "$C/models"
  du -sh "$C"
  exit 0
fi

OUT=${1:-/tmp/telos-clients-check}
mkdir -p "$OUT" /tmp/telos-clients
python3 - <<'PY'
import lzma, os, shutil, tarfile
with lzma.open(".gpu-carry2/node.xz") as f, open("/tmp/telos-clients/node", "wb") as o:
    shutil.copyfileobj(f, o)
os.chmod("/tmp/telos-clients/node", 0o755)
if os.path.exists(".gpu-carry2/lib.tar.xz"):
    tarfile.open(".gpu-carry2/lib.tar.xz").extractall("/tmp/telos-clients")
tarfile.open(".gpu-carry2/node_modules.tar.xz").extractall("test/server")
tarfile.open(".gpu-carry2/models.tar.xz").extractall("/tmp/telos-clients")
PY
export LD_LIBRARY_PATH=/tmp/telos-clients/lib:${LD_LIBRARY_PATH:-}
# A call that also runs gpu_check.sh can leave telos-run and lib.tar.xz out of .gpu-carry2 (the two
# carries then fit the 64 MiB a call takes) and source tools/gpu_env.sh first: $B has telos-run and
# LD_LIBRARY_PATH its libraries.
TELOS_RUN=$PWD/$C/telos-run
[ -x "$TELOS_RUN" ] || TELOS_RUN=${B:?.gpu-carry2 has no telos-run: source tools/gpu_env.sh first}/telos-run
export TELOS_RUN TELOS_TEST_MODELS=/tmp/telos-clients/models TELOS_TEST_ENGINE=gpu
status=0
for s in openai_sdk load http_errors hostile_http hostile_requests; do
  t0=$SECONDS
  timeout 200 /tmp/telos-clients/node --test "test/server/$s.test.mjs" >"$OUT/server-$s.log" 2>&1 || status=1
  echo "server $s | $((SECONDS - t0)) s | $(grep -E '^# (pass|fail) ' "$OUT/server-$s.log" | tr '\n' ' ')"
done
exit $status
