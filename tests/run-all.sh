#!/usr/bin/env bash
# The test command (the README's second quick-start command; .ci/run calls
# it): installs what is missing (Debian packages, the test runtimes, the
# benchmark harness's tools, so its smoke test runs, and Chromium, which
# the flame graph tests open their pages in),
# then builds and runs the whole CTest suite twice: build/ with Debian's
# flags as the .deb is built (packaging/deb/build.sh), and an ASan+UBSan
# RelWithDebInfo build in build-asan/; then the libFuzzer targets
# (build-fuzz/, clang). Each stage's line says the seconds since the start.
#
#   tests/run-all.sh                           both builds
#   ISOPROF_SKIP_SANITIZE=1 tests/run-all.sh   the plain build only
#   ISOPROF_SKIP_FUZZ=1                        no libFuzzer stage
#   ISOPROF_FUZZ_SECONDS=N                     seconds per fuzz target (5)
#   ISOPROF_JOBS=N                             parallel build/test jobs (2)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${ISOPROF_JOBS:-2}
sanitize=$([ "${ISOPROF_SKIP_SANITIZE:-0}" = 1 ] && echo 0 || echo 1)
fuzz=$([ "${ISOPROF_SKIP_FUZZ:-0}" = 1 ] && echo 0 || echo 1)
t0=$SECONDS

run() { echo "+ $*" >&2; "$@"; }
stage() { echo "== [$((SECONDS - t0)) s] $*" >&2; }

# The later builds, configured and compiled on one core while the plain
# suite runs on the other: its locked chain of integration tests waits on
# runtimes' windows far more than it computes, and every test must pass
# beside a busy core anyway. Off the critical path they take minutes off
# the suite. Their output goes to build/later-builds.log, printed if they fail.
later_builds() {
  if [ "$sanitize" = 1 ]; then
    # Configured for /usr as the .deb's tree is, so integration.packaging
    # builds and checks the .deb here too (cpack refuses another prefix).
    run cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DISOPROF_WERROR=ON \
      -DISOPROF_SANITIZE=ON -DCMAKE_INSTALL_PREFIX=/usr
    run cmake --build build-asan -j1
  fi
  if [ "$fuzz" = 1 ]; then
    run cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DISOPROF_WERROR=ON -DCMAKE_C_COMPILER=clang \
      -DISOPROF_FUZZ=ON -DISOPROF_FUZZ_SECONDS="${ISOPROF_FUZZ_SECONDS:-5}"
    run cmake --build build-fuzz -j1
  fi
}
later=
stop_later() { [ -z "$later" ] || kill -- -"$later" 2>/dev/null || true; }
trap stop_later EXIT

run packaging/setup.sh --quiet --bench --browser
# The plain suite runs on the build a packager makes: Debian's flags
# (dpkg-buildflags, hardening=+all), as packaging/deb/build.sh builds the .deb.
stage "Debian-flags build (build/), as packaging/deb/build.sh makes it"
run packaging/deb/build.sh build -DISOPROF_WERROR=ON
if [ "$sanitize" = 1 ] || [ "$fuzz" = 1 ]; then
  stage "the sanitizer and fuzz builds start on one core beside the plain suite (build/later-builds.log)"
  # set -m: the builds get a process group of their own, which stop_later
  # ends whole if the plain suite fails first.
  set -m
  later_builds > build/later-builds.log 2>&1 &
  later=$!
  set +m
fi
stage "plain suite (build/)"
run ctest --test-dir build --output-on-failure -j"$jobs"
if [ -n "$later" ]; then
  stage "waiting for the sanitizer and fuzz builds"
  if ! wait "$later"; then
    later=
    tail -n 200 build/later-builds.log >&2
    echo "run-all.sh: the sanitizer or fuzz build failed (build/later-builds.log)" >&2
    exit 1
  fi
  later=
fi
if [ "$sanitize" = 1 ]; then
  stage "ASan + UBSan suite (build-asan/)"
  # abort_on_error makes a report fail the test that caused it; the
  # integration harness also fails a test whose daemon printed one.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  run ctest --test-dir build-asan --output-on-failure -j"$jobs"
fi
if [ "$fuzz" = 1 ]; then
  stage "libFuzzer targets, ${ISOPROF_FUZZ_SECONDS:-5} s each (build-fuzz/)"
  run ctest --test-dir build-fuzz --output-on-failure -j"$jobs" -L fuzz
fi
stage "all passed"
