#!/usr/bin/env bash
# The README's test command: install what is missing, build, and run every test. Ends with
# ctest's summary and then one plain line "N passed, N failed, N skipped". GPU tests report
# themselves skipped (with the reason) on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
build=${TELOS_BUILD:-build}
log="$build/ctest.log"
set +e
(cd "$build" && ctest --output-on-failure -j "$(nproc)" "$@") 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
total=$(grep -oE 'tests failed out of [0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
failed=$(grep -oE '[0-9]+ tests failed out of' "$log" | grep -oE '^[0-9]+' || echo 0)
skipped=$(grep -cE '^[[:space:]]+[0-9]+ - .* \(Skipped\)$' "$log" || true)
echo "$((total - failed - skipped)) passed, $failed failed, $skipped skipped"
exit "$rc"
