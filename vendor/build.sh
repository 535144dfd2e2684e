#!/usr/bin/env bash
# build.sh FLAVOUR PKG SRC PREFIX — build one vendored dependency, statically.
#
# FLAVOUR is musl (CC=musl-gcc, for the static release binary) or glibc
# (CC=gcc, for the ASan and CUDA builds). SRC is the tree vendor/fetch.sh
# unpacked (left untouched: the build runs in a copy, PREFIX/src/PKG), and
# PREFIX receives include/ and lib/. The build's output goes to
# PREFIX/log/PKG.log; on failure its tail is printed. vendor/vendor.mk calls
# this once per (flavour, package), in dependency order:
#   zlib, openssl (both before libssh2), libssh2, lua5.4, openblas.
#
# Example: vendor/build.sh musl zlib build/src/zlib-1.2.13.dfsg-1 build/deps/musl
set -euo pipefail

die() { echo "build.sh: $*" >&2; exit 1; }
[ $# -eq 4 ] || die "usage: vendor/build.sh musl|glibc PKG SRC PREFIX"
flavour=$1 pkg=$2 src=$3 prefix=$4
jobs=${VENDOR_JOBS:-2}          # the machines have 2 cores: never more

case $flavour in
    musl)  cc=musl-gcc ;;
    glibc) cc=gcc ;;
    *)     die "unknown flavour '$flavour' (musl or glibc)" ;;
esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
"$here/tools.sh" "$flavour"     # installs what is missing, else silent
command -v "$cc" >/dev/null || die "$cc not found: run 'make vendor-tools'"
[ -f "$src/.paddle-unpacked" ] || die "$src is not unpacked: run vendor/fetch.sh $pkg"

mkdir -p "$prefix/log" "$prefix/src" "$prefix/include" "$prefix/lib"
P=$(cd "$prefix" && pwd)
work=$P/src/$pkg
# One dependency build at a time, whatever make -j says: 2 cores, and each
# build already runs -j2.
exec 9>"$(dirname "$P")/.build.lock"
flock 9
log=$P/log/$pkg.log

# Whatever the top make or the shell exports must not leak into the
# dependencies' own builds (make CC=clang, CFLAGS for sanitizers, OpenBLAS's
# many environment knobs, a parent make's jobserver).
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES CFLAGS CPPFLAGS CXXFLAGS LDFLAGS \
      LDLIBS LIBS CC CXX AR RANLIB LD TARGET DYNAMIC_ARCH NUM_THREADS \
      PREFIX DESTDIR || true

build_zlib() {
    CC=$cc CFLAGS=-O2 ./configure --static --prefix="$P"
    make -j"$jobs" libz.a
    make install
}

build_lua5.4() {
    # Debian's lua5.4 replaces upstream's Makefiles with a libtool build and
    # points luaconf.h at Debian's module directories (plus a header its
    # debian/rules generates). Revert those two patches; keep the others
    # (extern "C", CVE-2022-28805, CVE-2022-33099). Then ours: work inside
    # the C library counts for the sandbox's instruction limit.
    patch -R -p1 -s <debian/patches/0002-lua-modules-paths.patch
    patch -R -p1 -s <debian/patches/0001-build-system.patch
    patch -p1 -s <"$here/patches/lua5.4-count-work.patch"
    make -j"$jobs" -C src posix CC="$cc -std=gnu99"
    install -m 644 src/lua.h src/luaconf.h src/lualib.h src/lauxlib.h "$P/include/"
    install -m 644 src/liblua.a "$P/lib/"
}

build_openssl() {
    # no-secure-memory: musl-gcc has no linux/mman.h. install_dev: headers,
    # static libs and .pc files, no man pages, no openssl(1).
    ./Configure linux-x86_64 CC="$cc" no-shared no-tests no-secure-memory \
        no-afalgeng --prefix="$P" --libdir=lib
    make -j"$jobs" build_libs
    make install_dev
}

build_libssh2() {
    # Pin the backend and both libraries to ours: the host may also have
    # glibc's libssl-dev and zlib1g-dev, which cmake would otherwise find.
    cmake -S . -B _build -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_COMPILER="$cc" \
        -DCMAKE_INSTALL_PREFIX="$P" -DCMAKE_INSTALL_LIBDIR=lib \
        -DBUILD_SHARED_LIBS=OFF -DBUILD_STATIC_LIBS=ON \
        -DBUILD_EXAMPLES=OFF -DBUILD_TESTING=OFF \
        -DCRYPTO_BACKEND=OpenSSL \
        -DOPENSSL_ROOT_DIR="$P" -DOPENSSL_USE_STATIC_LIBS=ON \
        -DOPENSSL_INCLUDE_DIR="$P/include" \
        -DOPENSSL_CRYPTO_LIBRARY="$P/lib/libcrypto.a" \
        -DOPENSSL_SSL_LIBRARY="$P/lib/libssl.a" \
        -DENABLE_ZLIB_COMPRESSION=ON \
        -DZLIB_LIBRARY="$P/lib/libz.a" -DZLIB_INCLUDE_DIR="$P/include"
    grep -E '^(OPENSSL_INCLUDE_DIR|OPENSSL_CRYPTO_LIBRARY|ZLIB_LIBRARY[A-Z_]*|ZLIB_INCLUDE_DIR):' \
        _build/CMakeCache.txt
    if grep -E '^(OPENSSL|ZLIB)_[A-Z_]*:(FILE)?PATH=.' _build/CMakeCache.txt |
            grep -v -e "=$P/" -e '-NOTFOUND$'; then
        echo "libssh2 picked up the host's OpenSSL or zlib" >&2
        return 1
    fi
    cmake --build _build -j "$jobs"
    cmake --install _build
}

build_openblas() {
    # Single precision CBLAS only, pthreads, kernels for three x86-64
    # generations picked at run time (PRESCOTT is always added as fallback).
    # TARGET=GENERIC keeps the build host's CPU out of the common code, as
    # Debian's own amd64 build does. NUM_THREADS defaults to the build host's
    # core count: set it.
    local opts=(CC="$cc" HOSTCC="$cc" TARGET=GENERIC
        NOFORTRAN=1 NO_LAPACK=1 ONLY_CBLAS=1 NO_SHARED=1 USE_OPENMP=0
        USE_THREAD=1 NUM_THREADS=64 BUILD_SINGLE=1
        DYNAMIC_ARCH=1 DYNAMIC_LIST="SANDYBRIDGE HASWELL SKYLAKEX")
    # Intel models 0.3.21 does not know got Prescott's kernels (the patch)
    patch -p1 -s <"$here/patches/openblas-unknown-intel-models.patch"
    make -j"$jobs" "${opts[@]}"
    make "${opts[@]}" PREFIX="$P" install
}

declare -F "build_$pkg" >/dev/null || die "don't know how to build '$pkg'"

start=$(date +%s.%N)
rm -rf "$work"
cp -a "$src" "$work"
if ! (cd "$work" && set -x && "build_$pkg") >"$log" 2>&1; then
    echo "build.sh: $pkg ($flavour) failed; last lines of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
fi
rm -rf "$work"                  # the libraries are installed; keep disk small
secs=$(awk -v a="$(date +%s.%N)" -v b="$start" 'BEGIN { printf "%.1f", a - b }')
echo "$pkg $secs" >>"$P/log/times.txt"
echo "  DEP     $pkg ($flavour) ${secs}s"
