#!/usr/bin/env bash
# Builds isoprof as Debian builds its packages, then the .deb from it.
#
#   packaging/deb/build.sh [DIR [CMAKE-ARGS...]]
#
# DIR (default build-deb) is configured for the prefix /usr (the paths
# built into the binaries and the unit: /usr/bin/isoprofd,
# /etc/isoprof/isoprof.yaml) with CMAKE_BUILD_TYPE=None and the
# flags of `dpkg-buildflags` (package dpkg-dev) with hardening=+all: -O2
# -g, stack protector, _FORTIFY_SOURCE=2, format checks, RELRO and
# BIND_NOW, as debhelper would pass them. DEB_BUILD_MAINT_OPTIONS and
# DEB_CFLAGS_APPEND and the like, when set, are honoured the way
# dpkg-buildflags documents. Warnings never fail this build unless
# CMAKE-ARGS says -DISOPROF_WERROR=ON (the test command does). Then
# `cpack -G DEB` in DIR; the path of the .deb is the last line printed.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build-deb}
shift || true

command -v dpkg-buildflags >/dev/null ||
  { echo "build.sh: dpkg-buildflags not found (apt-get install dpkg-dev, or packaging/setup.sh)" >&2; exit 1; }
export DEB_BUILD_MAINT_OPTIONS=${DEB_BUILD_MAINT_OPTIONS:-hardening=+all}
cflags="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
ldflags=$(dpkg-buildflags --get LDFLAGS)

run() { echo "+ $*" >&2; "$@"; }
# The flags go on the command line, not through the environment: CMake
# reads CFLAGS and LDFLAGS only when a build directory is first configured.
run cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=None -DCMAKE_INSTALL_PREFIX=/usr \
  "-DCMAKE_C_FLAGS=$cflags" "-DCMAKE_EXE_LINKER_FLAGS=$ldflags" \
  "-DCMAKE_SHARED_LINKER_FLAGS=$ldflags" "-DCMAKE_MODULE_LINKER_FLAGS=$ldflags" "$@"
run cmake --build "$dir" -j"${ISOPROF_JOBS:-2}"
(cd "$dir" && run cpack -G DEB >&2)
ls -1 "$dir"/isoprof_*.deb | tail -n 1
