#!/bin/sh
# gotool.sh TOOL FIXTURES - `go tool pprof`, the reference reader, reads what
# the converter writes: every recorded CPU and heap reply, and a merge.
# Exits 77 (CTest: skipped) only when go is not installed.
set -eu
tool=$1
fx=$2
if ! command -v go >/dev/null 2>&1; then
    echo "SKIP: go is not installed (package golang-go); go tool pprof check not run"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
# go wants a writable HOME and build cache, and must not reach the network.
export HOME="$tmp" GOCACHE="$tmp/gocache" GOPATH="$tmp/gopath" GOPROXY=off GOTOOLCHAIN=local
export PPROF_TMPDIR="$tmp"

fail() {
    echo "FAIL: $*"
    exit 1
}

pp() { # pp OUTFILE ARGS... : go tool pprof ARGS > OUTFILE, failing loudly
    out=$1
    shift
    go tool pprof "$@" >"$out" 2>"$tmp/err" || { cat "$tmp/err" "$out"; fail "go tool pprof $*"; }
}

for rt in node20 deno workerd; do
    case $rt in workerd) file=worker.js ;; *) file=workload.js ;; esac

    "$tool" cpu "$fx/$rt-cpu.json" "$tmp/$rt-cpu.pb.gz" 1000000 || fail "$rt: cpu conversion"
    pp "$tmp/raw" -raw "$tmp/$rt-cpu.pb.gz"
    grep -q "samples/count cpu/nanoseconds" "$tmp/raw" || fail "$rt cpu: sample types"
    grep -Eq "hotLoop .*$file:3 s=3" "$tmp/raw" || { cat "$tmp/raw"; fail "$rt cpu: hotLoop at $file:3"; }
    pp "$tmp/top" -top -nodecount=500 "$tmp/$rt-cpu.pb.gz"
    grep -q "hotLoop" "$tmp/top" || { cat "$tmp/top"; fail "$rt cpu: hotLoop missing from -top"; }
    grep -q "(root)" "$tmp/top" && fail "$rt cpu: (root) is a frame"
    pp "$tmp/top0" -top -sample_index=samples "$tmp/$rt-cpu.pb.gz"

    "$tool" heap "$fx/$rt-heap.json" "$tmp/$rt-heap.pb.gz" 65536 || fail "$rt: heap conversion"
    pp "$tmp/raw" -raw "$tmp/$rt-heap.pb.gz"
    grep -q "inuse_objects/count inuse_space/bytes" "$tmp/raw" || fail "$rt heap: sample types"
    grep -Eq "allocRetained .*$file:10 s=10" "$tmp/raw" || { cat "$tmp/raw"; fail "$rt heap: allocRetained at $file:10"; }
    pp "$tmp/top" -top -sample_index=inuse_space "$tmp/$rt-heap.pb.gz"
    grep -q "allocRetained" "$tmp/top" || { cat "$tmp/top"; fail "$rt heap: allocRetained missing from -top"; }
    echo "ok   $rt"
done

"$tool" merge "$tmp/all-cpu.pb.gz" "$tmp/node20-cpu.pb.gz" "$tmp/deno-cpu.pb.gz" "$tmp/workerd-cpu.pb.gz" ||
    fail "merge"
pp "$tmp/top" -top -nodecount=500 "$tmp/all-cpu.pb.gz"
grep -q "hotLoop" "$tmp/top" || fail "merged: hotLoop missing"
grep -q "fetch" "$tmp/top" || fail "merged: fetch (workerd) missing"
pp "$tmp/traces" -traces "$tmp/all-cpu.pb.gz"
grep -q "hotLoop" "$tmp/traces" || fail "merged: -traces"
echo "ok   merge"
