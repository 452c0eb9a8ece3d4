#!/usr/bin/env bash
# The quick-start demo: a Node workload with an obvious hot function
# (fibonacciHot in demo.js) under --inspect, profiled by isoprofd for ~20 s
# with a short schedule (5 s windows every 8 s, so 2-3 windows), then
# `isoprof top` of what was captured.
#
#   packaging/demo/run.sh BUILD_DIR [SECONDS]
#
# Uses 127.0.0.1:9229, or a free port if 9229 is taken. The store lives in
# a temp dir that is removed at the end unless ISOPROF_DEMO_KEEP=1.
set -euo pipefail
usage="usage: packaging/demo/run.sh BUILD_DIR [SECONDS]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
build=$(cd "$1" 2>/dev/null && pwd) || { echo "demo: no build dir '$1'; $usage" >&2; exit 2; }
seconds=${2:-20}
case "$seconds" in ''|*[!0-9]*) echo "demo: SECONDS must be a number; $usage" >&2; exit 2 ;; esac
isoprofd="$build/agent/isoprofd"
isoprof="$build/agent/isoprof"
for b in "$isoprofd" "$isoprof"; do
  [ -x "$b" ] || { echo "demo: $b not found; build first: cmake -S . -B build && cmake --build build -j2" >&2; exit 2; }
done
command -v node >/dev/null || { echo "demo: node not found (Node 20 is needed)" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/isoprof-demo.XXXXXX")

node_pid="" daemon_pid="" sleep_pid=""
cleanup() {
  # Only what this script started, by PID.
  for p in $sleep_pid $daemon_pid $node_pid; do kill "$p" 2>/dev/null || true; done
  for p in $daemon_pid $node_pid; do wait "$p" 2>/dev/null || true; done
  if [ "${ISOPROF_DEMO_KEEP:-0}" = 1 ]; then
    echo "demo: kept $work (store: $work/isoprof-data)" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port=9229
if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
  port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  echo "demo: 127.0.0.1:9229 is in use; using port $port" >&2
fi
# The embedded defaults (127.0.0.1:9229, ./isoprof-data, 10 s windows every
# 60 s, the first within 6 s of attach); a config only when 9229 is taken.
config=()
if [ "$port" != 9229 ]; then
  printf 'targets:\n  - {inspector: "127.0.0.1:%s"}\n' "$port" >"$work/isoprof.yaml"
  config=(--config "$work/isoprof.yaml")
fi

ISOPROF_DEMO_PARENT=$$ node --inspect=127.0.0.1:"$port" "$here/demo.js" 2>"$work/node.log" &
node_pid=$!
for _ in $(seq 100); do
  grep -q 'Debugger listening' "$work/node.log" && break
  kill -0 "$node_pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q 'Debugger listening' "$work/node.log"; then
  cat "$work/node.log" >&2
  echo "demo: node's inspector did not start on 127.0.0.1:$port" >&2
  exit 1
fi

echo "demo: profiling demo.js (pid $node_pid, inspector 127.0.0.1:$port) for ${seconds}s ..." >&2
(cd "$work" && exec "$isoprofd" "${config[@]}") 2>"$work/isoprofd.log" &
daemon_pid=$!
# sleep in the background and wait, so INT/TERM reach the traps at once.
sleep "$seconds" &
sleep_pid=$!
wait "$sleep_pid" || true
sleep_pid=""
if ! kill -0 "$daemon_pid" 2>/dev/null; then
  cat "$work/isoprofd.log" >&2
  echo "demo: isoprofd exited early" >&2
  exit 1
fi
kill -INT "$daemon_pid"
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=""
if [ "$rc" != 0 ]; then
  cat "$work/isoprofd.log" >&2
  echo "demo: isoprofd exited with status $rc" >&2
  exit 1
fi
stored=$(grep -c 'msg="window stored"' "$work/isoprofd.log" || true)
echo "demo: isoprofd stored $stored window(s)" >&2
if [ "$stored" = 0 ]; then
  cat "$work/isoprofd.log" >&2
  exit 1
fi
echo
"$isoprof" windows --store "$work/isoprof-data"
echo
"$isoprof" top --store "$work/isoprof-data" -n 15
