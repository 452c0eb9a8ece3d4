#!/usr/bin/env bash
# The test command (the README's second quick-start command; .ci/run calls
# it): installs what is missing (Debian packages, the test runtimes, the
# benchmark harness's tools, so its smoke test runs, and Chromium, which
# the flame graph tests open their pages in),
# then builds and runs the whole CTest suite twice: build/ with Debian's
# flags as the .deb is built (packaging/deb/build.sh), and an ASan+UBSan
# RelWithDebInfo build in build-asan/.
#
#   tests/run-all.sh                           both builds
#   ISOPROF_SKIP_SANITIZE=1 tests/run-all.sh   the plain build only
#   ISOPROF_SKIP_FUZZ=1                        no libFuzzer stage
#   ISOPROF_FUZZ_SECONDS=N                     seconds per fuzz target (10)
#   ISOPROF_JOBS=N                             parallel build/test jobs (2)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${ISOPROF_JOBS:-2}

run() { echo "+ $*" >&2; "$@"; }

suite() {
  local dir=$1; shift
  run cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DISOPROF_WERROR=ON "$@"
  run cmake --build "$dir" -j"$jobs"
  run ctest --test-dir "$dir" --output-on-failure -j"$jobs"
}

run packaging/setup.sh --quiet --bench --browser
# The plain suite runs on the build a packager makes: Debian's flags
# (dpkg-buildflags, hardening=+all), as packaging/deb/build.sh builds the .deb.
echo "== Debian-flags build (build/), as packaging/deb/build.sh makes it" >&2
run packaging/deb/build.sh build -DISOPROF_WERROR=ON
run ctest --test-dir build --output-on-failure -j"$jobs"
if [ "${ISOPROF_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== ASan + UBSan build (build-asan/)" >&2
  # abort_on_error makes a report fail the test that caused it; the
  # integration harness also fails a test whose daemon printed one.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # Configured for /usr as the .deb's tree is, so integration.packaging
  # builds and checks the .deb here too (cpack refuses another prefix).
  suite build-asan -DISOPROF_SANITIZE=ON -DCMAKE_INSTALL_PREFIX=/usr
fi
if [ "${ISOPROF_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== libFuzzer targets, ${ISOPROF_FUZZ_SECONDS:-10} s each (build-fuzz/)" >&2
  run cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DISOPROF_WERROR=ON -DCMAKE_C_COMPILER=clang \
    -DISOPROF_FUZZ=ON -DISOPROF_FUZZ_SECONDS="${ISOPROF_FUZZ_SECONDS:-10}"
  run cmake --build build-fuzz -j"$jobs"
  run ctest --test-dir build-fuzz --output-on-failure -j"$jobs" -L fuzz
fi
