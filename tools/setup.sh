#!/usr/bin/env bash
# Installs the Debian packages Telos builds with, checks for the CUDA 13 toolkit, then configures
# and builds into build/ (or $TELOS_BUILD): the targets named as arguments, or all of them.
# Node.js is not needed here: only the test command uses it (tools/setup_node.sh). Safe to run
# again: it skips what is there.
#
#   bash tools/setup.sh [TARGET...]     e.g. `telosc telos-run`, what the demo builds
#
# Environment: TELOS_BUILD (the build directory), TELOS_CMAKE_ARGS (more arguments for cmake; given,
# they re-configure a build directory configured before), CUDA_HOME (default /usr/local/cuda).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install_packages.sh build-essential cmake ninja-build python3 git curl \
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev llvm-14-tools \
  libpcre2-dev libicu-dev python3-jinja2 clang libclang-rt-14-dev

CUDA_ROOT=${CUDA_HOME:-/usr/local/cuda}
if [ ! -x "$CUDA_ROOT/bin/nvcc" ]; then
  echo "setup: the CUDA 13 toolkit was not found at $CUDA_ROOT (set CUDA_HOME)" >&2
  exit 2
fi
export PATH="$CUDA_ROOT/bin:$PATH"

build=${TELOS_BUILD:-build}
# shellcheck disable=SC2086  # TELOS_CMAKE_ARGS is a list of arguments
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -G Ninja -DCUDAToolkit_ROOT="$CUDA_ROOT" ${TELOS_CMAKE_ARGS:-} >&2
elif [ -n "${TELOS_CMAKE_ARGS:-}" ]; then
  # Configured before: again with these arguments (and finding what was installed since).
  cmake -S . -B "$build" ${TELOS_CMAKE_ARGS} >&2
fi
targets=()
(($#)) && targets=(--target "$@")
cmake --build "$build" -j "$(nproc)" "${targets[@]}" >&2
