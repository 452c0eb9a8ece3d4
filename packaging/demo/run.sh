#!/usr/bin/env bash
# The quick-start demo: a Node workload with an obvious hot function under
# --inspect, profiled by isoprofd with its embedded defaults for ~20 s, then
# `isoprof top` of what was captured.
#
#   packaging/demo/run.sh BUILD_DIR [SECONDS]
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR [SECONDS]}" && pwd)
seconds=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/isoprof-demo.XXXXXX")
node_pid="" daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null || true
  [ -n "$node_pid" ] && kill "$node_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port=9229
config=()
if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
  # 9229 is taken: use a free port and say so in a config of our own.
  port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  printf 'targets:\n  - inspector: 127.0.0.1:%s\n' "$port" > "$work/isoprof.yaml"
  config=(--config "$work/isoprof.yaml")
  echo "demo: 127.0.0.1:9229 is in use; using port $port" >&2
fi

node --inspect=127.0.0.1:$port "$here/demo.js" 2>"$work/node.log" &
node_pid=$!
for _ in $(seq 50); do
  grep -q 'Debugger listening' "$work/node.log" && break
  sleep 0.1
done
grep -q 'Debugger listening' "$work/node.log" || { cat "$work/node.log" >&2; echo "demo: node did not start" >&2; exit 1; }

echo "demo: profiling demo.js (pid $node_pid) for ${seconds}s with isoprofd's defaults ..." >&2
cd "$work"   # the default store is ./isoprof-data
"$build/agent/isoprofd" "${config[@]}" 2>"$work/isoprofd.log" &
daemon_pid=$!
sleep "$seconds"
kill -INT "$daemon_pid"
wait "$daemon_pid" || { cat "$work/isoprofd.log" >&2; echo "demo: isoprofd failed" >&2; exit 1; }
daemon_pid=""
grep 'msg="window stored"' "$work/isoprofd.log" >&2 || true
echo >&2
"$build/agent/isoprof" windows --store "$work/isoprof-data"
echo
"$build/agent/isoprof" top --store "$work/isoprof-data" -n 15
