#!/usr/bin/env bash
# The test command: installs what is missing (Debian packages and the test
# runtimes), then builds and runs the whole CTest suite twice: a
# RelWithDebInfo build and an ASan+UBSan build.
#
#   tests/run-all.sh            both builds
#   ISOPROF_SKIP_SANITIZE=1 tests/run-all.sh   the plain build only
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${ISOPROF_JOBS:-2}

packaging/setup.sh --quiet --runtimes

run_suite() {
  local dir=$1; shift
  cmake -S . -B "$dir" "$@" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  ctest --test-dir "$dir" --output-on-failure -j"$jobs"
}

echo "== build: RelWithDebInfo"
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${ISOPROF_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== build: ASan + UBSan"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DISOPROF_SANITIZE=ON
fi
