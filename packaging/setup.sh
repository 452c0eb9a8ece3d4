#!/usr/bin/env bash
# Installs what isoprof needs to build and test on Debian 12: the Debian
# packages (only the missing ones, with one apt-get update first), and with
# --runtimes the test runtimes workerd and Deno from the npm registry into
# ${XDG_CACHE_HOME:-$HOME/.cache}/isoprof/npm. Idempotent; prints nothing
# when everything is present.
#
#   packaging/setup.sh [--quiet] [--runtimes] [--print-runtimes]
set -euo pipefail

WORKERD_VERSION=1.20261117.1
DENO_VERSION=2.9.6
PACKAGES=(cmake gcc make pkg-config libuv1-dev liblmdb-dev libzstd-dev libprotobuf-c-dev
          protobuf-c-compiler libcurl4-openssl-dev libwslay-dev libyajl-dev libyaml-dev
          zlib1g-dev golang-go clang libclang-rt-14-dev)
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/isoprof/npm"
WORKERD="$CACHE/node_modules/@cloudflare/workerd-linux-64/bin/workerd"
DENO="$CACHE/node_modules/@deno/linux-x64-glibc/deno"

quiet=0 runtimes=0 print=0
for a in "$@"; do
  case "$a" in
    --quiet) quiet=1 ;;
    --runtimes) runtimes=1 ;;
    --print-runtimes) print=1 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$a' (try --help)" >&2; exit 2 ;;
  esac
done

say() { [ "$quiet" = 1 ] || echo "setup.sh: $*" >&2; }
die() { echo "setup.sh: $*" >&2; exit 1; }

if [ "$print" = 1 ]; then
  [ -x "$WORKERD" ] && echo "workerd=$WORKERD"
  [ -x "$DENO" ] && echo "deno=$DENO"
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "missing packages (${missing[*]}) and not root; install them or run as root"
    sudo=sudo
  fi
  say "installing ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
    || die "apt-get update failed"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
fi

if [ "$runtimes" = 1 ]; then
  want=()
  [ -x "$WORKERD" ] || want+=("@cloudflare/workerd-linux-64@$WORKERD_VERSION")
  [ -x "$DENO" ] || want+=("@deno/linux-x64-glibc@$DENO_VERSION")
  if [ "${#want[@]}" -gt 0 ]; then
    command -v npm >/dev/null || die "npm is needed to install the test runtimes"
    say "installing ${want[*]} into $CACHE"
    mkdir -p "$CACHE"
    (cd "$CACHE" && npm install --no-audit --no-fund --silent --prefix "$CACHE" "${want[@]}" >/dev/null) \
      || die "npm install ${want[*]} failed"
    [ -x "$WORKERD" ] && [ -x "$DENO" ] || die "runtimes installed but binaries not found in $CACHE"
  fi
fi
exit 0
