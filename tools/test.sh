#!/usr/bin/env bash
# The README's test command: install what is missing, build, and run every test. Ends with
# ctest's summary. GPU tests report themselves skipped on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
build=${TELOS_BUILD:-build}
cd "$build"
ctest --output-on-failure -j "$(nproc)" "$@"
