#!/usr/bin/env bash
# Long fuzz runs, on demand (not in CI): builds the libFuzzer targets with
# clang in build-fuzz/ (as tests/run-all.sh does) and runs every target, or
# the ones named, for SECONDS each (default 600), one after another, on the
# seed corpus kept in the tree (tests/fuzz/corpus/<name>/). New inputs that
# add coverage are merged back into that corpus, minimised, so the next run
# (and CI's short one) starts from them: commit what it adds.
#
#   tests/fuzz/run-long.sh [-s SECONDS] [-j JOBS] [-r] [-n] [TARGET...]
#
#   -s SECONDS   time per target (default 600)
#   -j JOBS      libFuzzer worker processes per target (default 1)
#   -r           report only: do not merge new inputs into the tree corpus
#   -n           no build: run the binaries build-fuzz/ already has
#   TARGET       e.g. discover cdp control (default: every fuzz_*.c)
#
# Prints one line per target (executions, executions per second, corpus
# size, peak RSS) and exits non-zero if any target found a crash, a leak or
# a timeout; the reproducer is left in build-fuzz/long-<name>/ and named in
# the report.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=600 jobs=1 merge=1 build=1
while getopts "s:j:rnh" o; do
  case "$o" in
    s) secs=$OPTARG ;;
    j) jobs=$OPTARG ;;
    r) merge=0 ;;
    n) build=0 ;;
    h) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in tests/fuzz/fuzz_*.c; do n=${f##*/fuzz_}; targets+=("${n%.c}"); done
fi

if [ "$build" = 1 ]; then
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
    -DISOPROF_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j2 $(printf -- '--target fuzz_%s ' "${targets[@]}") >/dev/null
fi

printf '%-14s %14s %10s %8s %8s  %s\n' target execs execs/s corpus rss_mb result
fail=0
for t in "${targets[@]}"; do
  bin=build-fuzz/tests/fuzz/fuzz_$t
  [ -x "$bin" ] || { echo "run-long.sh: no target fuzz_$t" >&2; exit 2; }
  seeds=tests/fuzz/corpus/$t
  work=build-fuzz/long-$t
  mkdir -p "$work/corpus" "$seeds"
  log=$work/fuzz.log
  rc=0
  # -fork keeps going past a slow unit only with -ignore_*; a finding must
  # stop the run, so one process (or -jobs N workers), stopped by time.
  if [ "$jobs" -gt 1 ]; then
    (cd "$work" && "$OLDPWD/$bin" -max_total_time="$secs" -rss_limit_mb=1024 -timeout=10 \
      -print_final_stats=1 -jobs="$jobs" -workers="$jobs" corpus "$OLDPWD/$seeds") >"$log" 2>&1 || rc=$?
    cat "$work"/fuzz-*.log >>"$log" 2>/dev/null || true
  else
    (cd "$work" && "$OLDPWD/$bin" -max_total_time="$secs" -rss_limit_mb=1024 -timeout=10 \
      -print_final_stats=1 corpus "$OLDPWD/$seeds") >"$log" 2>&1 || rc=$?
  fi
  execs=$(grep -ah 'stat::number_of_executed_units' "$log" | awk '{s += $2} END {print s + 0}')
  rate=$(grep -ah 'stat::average_exec_per_sec' "$log" | awk '{s += $2} END {print s + 0}')
  rss=$(grep -ah 'stat::peak_rss_mb' "$log" | awk '{if ($2 > m) m = $2} END {print m + 0}')
  size=$(find "$work/corpus" -type f | wc -l)
  found=$(find "$work" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | head -1)
  result=ok
  if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
    result="FOUND ${found:-exit $rc} (see $log)"
    fail=1
  elif [ "$merge" = 1 ]; then
    "$bin" -merge=1 -rss_limit_mb=1024 -timeout=10 "$seeds" "$work/corpus" >>"$log" 2>&1 || true
  fi
  printf '%-14s %14s %10s %8s %8s  %s\n' "$t" "$execs" "$rate" "$size" "$rss" "$result"
done
exit "$fail"
