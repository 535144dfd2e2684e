#!/usr/bin/env bash
# selftest.sh FLAVOUR BINARY — check how BINARY is linked, then run it.
#
# musl: the binary must be fully static (no program interpreter, no dynamic
# section). glibc: it may use the system's libc, but none of the vendored
# libraries may come from the system. Called by `make vendor-selftest-F`.
set -euo pipefail

flavour=$1 bin=$2
die() { echo "selftest.sh: $*" >&2; exit 1; }

if command -v file >/dev/null; then
    echo "file:     $(file -b "$bin")"
fi
case $flavour in
    musl)
        if readelf -lW "$bin" | grep -q 'INTERP' || readelf -dW "$bin" | grep -q NEEDED; then
            die "$bin is not statically linked"
        fi
        ;;
    glibc)
        needed=$(readelf -dW "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')
        echo "needed:   $needed"
        case " $needed " in
            *libssl*|*libcrypto*|*libz.*|*libssh2*|*openblas*|*liblua*|*libblas*)
                die "$bin links a system copy of a vendored library" ;;
        esac
        ;;
    *) die "unknown flavour '$flavour'" ;;
esac
"$bin"
