#!/usr/bin/env bash
# Installs what isoprof needs to build and test on Debian 12: the Debian
# packages (only the missing ones, with one apt-get update first), and with
# --runtimes the test runtimes workerd and Deno, and the bundler and
# compiler the source-map tests build TypeScript with (esbuild, tsc), from
# the npm registry into ${XDG_CACHE_HOME:-$HOME/.cache}/isoprof/npm.
# Idempotent; prints nothing when everything is present.
#
#   packaging/setup.sh [--quiet] [--runtimes] [--bench] [--browser] [--print-runtimes]
#
#   --quiet           say nothing unless something fails
#   --runtimes        also install workerd, Deno, esbuild and TypeScript
#                     (pinned versions)
#   --bench           also what tests/bench/bench.js needs: wrk and valgrind
#                     (Debian), @pyroscope/nodejs and pprof-format (npm,
#                     pinned), and the test runtimes
#   --browser         also Debian's chromium, which the flame graph tests
#                     open their pages in (headless)
#   --print-runtimes  print workerd=PATH, deno=PATH, esbuild=PATH and
#                     tsc=PATH; exit 1 if one is missing. Alone it checks nothing else; with --runtimes
#                     it installs first.
set -euo pipefail

# Pinned: the versions the integration tests were checked against.
WORKERD_VERSION=1.20261117.1
DENO_VERSION=2.9.6
ESBUILD_VERSION=0.28.2
TYPESCRIPT_VERSION=5.9.3
PYROSCOPE_VERSION=0.6.4
PPROF_FORMAT_VERSION=2.3.2
PACKAGES=(cmake gcc make pkg-config libuv1-dev liblmdb-dev libzstd-dev libprotobuf-c-dev
          protobuf-c-compiler libcurl4-openssl-dev libwslay-dev libyajl-dev libyaml-dev
          libhttp-parser-dev libsystemd-dev
          zlib1g-dev golang-go clang libclang-rt-14-dev prometheus
          dpkg-dev systemd groff-base strace faketime)
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/isoprof/npm"
WORKERD="$CACHE/node_modules/@cloudflare/workerd-linux-64/bin/workerd"
DENO="$CACHE/node_modules/@deno/linux-x64-glibc/deno"
ESBUILD="$CACHE/node_modules/.bin/esbuild"
TSC="$CACHE/node_modules/typescript/bin/tsc"
PYROSCOPE="$CACHE/node_modules/@pyroscope/nodejs/package.json"
PPROF_FORMAT="$CACHE/node_modules/pprof-format/package.json"

quiet=0 runtimes=0 print=0 bench=0 browser=0
for a in "$@"; do
  case "$a" in
    --quiet) quiet=1 ;;
    --runtimes) runtimes=1 ;;
    --bench) bench=1 runtimes=1 ;;
    --browser) browser=1 ;;
    --print-runtimes) print=1 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$a' (try --help)" >&2; exit 2 ;;
  esac
done

say() { [ "$quiet" = 1 ] || echo "setup.sh: $*" >&2; }
die() { echo "setup.sh: error: $*" >&2; exit 1; }

# Output of a failed step is kept here and shown, so a failure says why.
log=$(mktemp "${TMPDIR:-/tmp}/isoprof-setup.XXXXXX")
trap 'rm -f "$log"' EXIT
run_logged() {
  local what=$1; shift
  if ! "$@" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "$what failed"
  fi
}

print_runtimes() {
  local rc=0
  if [ -x "$WORKERD" ]; then echo "workerd=$WORKERD"; else echo "setup.sh: workerd not installed ($WORKERD); run packaging/setup.sh --runtimes" >&2; rc=1; fi
  if [ -x "$DENO" ]; then echo "deno=$DENO"; else echo "setup.sh: deno not installed ($DENO); run packaging/setup.sh --runtimes" >&2; rc=1; fi
  if [ -x "$ESBUILD" ]; then echo "esbuild=$ESBUILD"; else echo "setup.sh: esbuild not installed ($ESBUILD); run packaging/setup.sh --runtimes" >&2; rc=1; fi
  if [ -f "$TSC" ]; then echo "tsc=$TSC"; else echo "setup.sh: tsc not installed ($TSC); run packaging/setup.sh --runtimes" >&2; rc=1; fi
  return "$rc"
}

if [ "$print" = 1 ] && [ "$runtimes" = 0 ]; then
  print_runtimes
  exit $?
fi

[ "$bench" = 1 ] && PACKAGES+=(wrk valgrind)
[ "$browser" = 1 ] && PACKAGES+=(chromium)
missing=()
if command -v dpkg-query >/dev/null; then
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
else
  die "dpkg-query not found: this script installs Debian packages; install these by hand: ${PACKAGES[*]}"
fi
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "missing packages (${missing[*]}) and not root; install them or run as root"
    sudo=(sudo)
  fi
  command -v apt-get >/dev/null || die "apt-get not found; install by hand: ${missing[*]}"
  say "installing ${missing[*]}"
  run_logged "apt-get update" "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  run_logged "apt-get install ${missing[*]}" "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ "$runtimes" = 1 ]; then
  want=()
  [ -x "$WORKERD" ] || want+=("@cloudflare/workerd-linux-64@$WORKERD_VERSION")
  [ -x "$DENO" ] || want+=("@deno/linux-x64-glibc@$DENO_VERSION")
  [ -x "$ESBUILD" ] || want+=("esbuild@$ESBUILD_VERSION")
  [ -f "$TSC" ] || want+=("typescript@$TYPESCRIPT_VERSION")
  if [ "$bench" = 1 ]; then
    [ -f "$PYROSCOPE" ] || want+=("@pyroscope/nodejs@$PYROSCOPE_VERSION")
    [ -f "$PPROF_FORMAT" ] || want+=("pprof-format@$PPROF_FORMAT_VERSION")
  fi
  if [ "${#want[@]}" -gt 0 ]; then
    command -v npm >/dev/null || die "npm is needed to install the test runtimes (apt-get install npm)"
    say "installing ${want[*]} into $CACHE"
    mkdir -p "$CACHE"
    [ -f "$CACHE/package.json" ] || echo '{"private": true}' >"$CACHE/package.json"
    run_logged "npm install ${want[*]}" npm install --prefix "$CACHE" --no-audit --no-fund \
      --save-exact --loglevel=error "${want[@]}"
    [ -x "$WORKERD" ] || die "npm installed workerd but $WORKERD is missing"
    [ -x "$DENO" ] || die "npm installed deno but $DENO is missing"
    [ -x "$ESBUILD" ] || die "npm installed esbuild but $ESBUILD is missing"
    [ -f "$TSC" ] || die "npm installed typescript but $TSC is missing"
    if [ "$bench" = 1 ]; then
      [ -f "$PYROSCOPE" ] || die "npm installed @pyroscope/nodejs but $PYROSCOPE is missing"
      [ -f "$PPROF_FORMAT" ] || die "npm installed pprof-format but $PPROF_FORMAT is missing"
    fi
  fi
  # A binary that cannot run here (wrong libc, truncated download) fails now,
  # not in the middle of a test.
  run_logged "$WORKERD --version" "$WORKERD" --version
  run_logged "$DENO --version" "$DENO" --version
  run_logged "$ESBUILD --version" "$ESBUILD" --version
  run_logged "node $TSC --version" node "$TSC" --version
  [ "$print" = 1 ] && print_runtimes
fi
exit 0
