#!/usr/bin/env bash
# The README's test command (CI runs it through .ci/run):
#   1. Node.js and the client suites' npm packages (tools/setup_node.sh),
#   2. the Debian packages and a build of everything into build/ (or $TELOS_BUILD) with warnings
#      as errors (tools/setup.sh, TELOS_WERROR=ON),
#   3. telosc and telos-run in the Release configuration (-O3), also with warnings as errors, in
#      a second build directory ($TELOS_BUILD-release): only those two, to keep CI short,
#   4. every test, under ctest -j (arguments go to ctest, e.g. -R lit-telosc).
# Ends with ctest's summary, the skipped tests grouped by the reason each gives (GPU tests skip
# themselves on machines without one), the ten slowest tests, and one plain line
# "N passed, N failed, N skipped". Exit status: ctest's, or the first step's that failed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${TELOS_BUILD:-build}

bash tools/setup_node.sh
TELOS_CMAKE_ARGS="-DTELOS_WERROR=ON ${TELOS_CMAKE_ARGS:-}" bash tools/setup.sh
TELOS_BUILD="$build-release" \
  TELOS_CMAKE_ARGS="-DCMAKE_BUILD_TYPE=Release -DTELOS_WERROR=ON -DTELOS_FUZZ=OFF" \
  bash tools/setup.sh telosc telos-run

junit="$build/ctest-junit.xml"
rm -f "$junit"
set +e
(cd "$build" && ctest --output-on-failure --output-junit ctest-junit.xml -j "$(nproc)" "$@")
rc=$?
set -e
if [ -f "$junit" ]; then
  python3 tools/ctest_report.py "$junit"
fi
exit "$rc"
