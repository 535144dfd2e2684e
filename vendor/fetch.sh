#!/usr/bin/env bash
# fetch.sh PKG — bring the pinned Debian source package PKG into the tree.
#
# Downloads PKG=VERSION (version pinned in vendor/versions.txt) with
# `apt-get source --download-only` into vendor/cache/, checks every file's
# sha256 against its pin, and unpacks it with `dpkg-source -x` (so Debian's
# patches are applied) into build/src/PKG-VERSION (VERSION without epoch).
#
# Idempotent: an unpacked tree is left alone; cached files with the right
# hashes are not downloaded again. Adds a deb-src entry for the suites the
# pins come from (/etc/apt/sources.list.d/paddle-src.sources) and runs
# `apt-get update` only when the pinned version can't be found otherwise.
#
# Environment:
#   PADDLE_DEBIAN_MIRROR  fallback archive to fetch pool files from when apt
#                         no longer lists the pinned version, e.g.
#                         https://snapshot.debian.org/archive/debian/20250601T000000Z
#   PADDLE_SRC_DIR        where to unpack (default: build/src)
#   PADDLE_VENDOR_CACHE   download cache (default: vendor/cache)
#
# Example: vendor/fetch.sh libssh2   ->  build/src/libssh2-1.11.1-1+deb13u2
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
versions=${PADDLE_VERSIONS:-$here/versions.txt}
cache=${PADDLE_VENDOR_CACHE:-$here/cache}
srcroot=${PADDLE_SRC_DIR:-$root/build/src}
sources_file=/etc/apt/sources.list.d/paddle-src.sources
suites="bookworm trixie"        # the suites versions.txt pins come from

die() { echo "fetch.sh: $*" >&2; exit 1; }
say() { echo "fetch.sh: $*" >&2; }

[ $# -eq 1 ] || die "usage: vendor/fetch.sh PKG   (PKG as named in $versions)"
pkg=$1
[ -r "$versions" ] || die "cannot read $versions"

# --- the pins ---------------------------------------------------------------
# pins[file]=sha256 for every line of this package.
declare -A pins=()
version=
while read -r p v f h _; do
    [ "$p" = "$pkg" ] || continue
    [ -n "$h" ] || die "$versions: line for $pkg/$f has no sha256"
    if [ -n "$version" ] && [ "$v" != "$version" ]; then
        die "$versions pins two versions of $pkg ($version, $v): keep one"
    fi
    version=$v
    pins[$f]=$h
done < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$versions")
[ -n "$version" ] || die "no pin for '$pkg' in $versions (refusing to fetch unpinned sources)"

upver=${version#*:}             # file and directory names carry no epoch
dest=$srcroot/$pkg-$upver
dsc=${pkg}_$upver.dsc
[ -n "${pins[$dsc]:-}" ] || die "$versions has no line for $dsc"

[ -f "$dest/.paddle-unpacked" ] && exit 0

mkdir -p "$cache" "$srcroot"
# Two flavours may ask for the same package at once (make -j): one at a time.
exec 9>"$cache/.lock-$pkg"
flock 9
[ -f "$dest/.paddle-unpacked" ] && exit 0

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root for: $*"
    fi
}

# As root, apt would drop to _apt, who can't write the cache: say so up front.
sandbox=()
if [ "$(id -u)" -eq 0 ]; then sandbox=(-o APT::Sandbox::User=root); fi

sha() { sha256sum "$1" | cut -d' ' -f1; }

# cached_ok: every pinned file is in the cache with its pinned hash.
cached_ok() {
    local f
    for f in "${!pins[@]}"; do
        [ -f "$cache/$f" ] && [ "$(sha "$cache/$f")" = "${pins[$f]}" ] || return 1
    done
}

# --- apt sources --------------------------------------------------------------
visible() {
    local out             # not a pipe into grep -q: SIGPIPE + pipefail lies
    out=$(apt-cache showsrc "$pkg" 2>/dev/null) || return 1
    grep -qxF "Version: $version" <<<"$out"
}

write_sources() {
    local want
    want=$(printf '%s\n' \
        "# Added by paddle's vendor/fetch.sh: Debian sources for vendor/versions.txt." \
        "Types: deb-src" \
        "URIs: http://deb.debian.org/debian" \
        "Suites: $suites" \
        "Components: main" \
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg")
    if [ -f "$sources_file" ] && [ "$(cat "$sources_file")" = "$want" ]; then
        return 1                # already there
    fi
    say "adding deb-src entry $sources_file ($suites)"
    printf '%s\n' "$want" | as_root tee "$sources_file" >/dev/null
}

apt_update() {
    say "apt-get update (looking for $pkg $version)"
    # make -j fetches several packages at once: one apt-get update at a time
    # (apt refuses a second one while the first holds its lock)
    as_root flock -w 600 "$cache/.lock-apt-update" apt-get update -q >&2 ||
        die "apt-get update failed (or another one held $cache/.lock-apt-update for 10 minutes)"
}

# --- download -------------------------------------------------------------------
# apt_download: through apt, after checking that apt's file list is exactly
# the pinned one (so no unpinned file is ever fetched).
apt_download() {
    local uris f h
    uris=$(apt-get source --print-uris --download-only -qq "$pkg=$version") ||
        die "apt-get source --print-uris $pkg=$version failed"
    local -A listed=()
    while read -r _ f _ h; do
        [ -n "$f" ] || continue
        listed[$f]=1
        [ -n "${pins[$f]:-}" ] ||
            die "apt wants to download $f for $pkg $version, which has no pin in $versions"
        h=${h#SHA256:}
        if [ "${#h}" -eq 64 ] && [ "$h" != "${pins[$f]}" ]; then
            die "archive lists $f with sha256 $h but $versions pins ${pins[$f]}: refusing"
        fi
    done <<<"$uris"
    for f in "${!pins[@]}"; do
        [ -n "${listed[$f]:-}" ] ||
            die "$versions pins $f but apt does not list it for $pkg $version: fix the pins"
    done
    say "downloading $pkg $version"
    (cd "$cache" && apt-get source --download-only -qq "${sandbox[@]}" "$pkg=$version" >&2) ||
        die "apt-get source --download-only $pkg=$version failed"
}

# pool_download: straight from an archive's pool, for a version apt no longer
# lists (superseded); apt-helper checks each file's hash as it downloads.
pool_download() {
    local mirror=$1 prefix f
    case $pkg in lib*) prefix=${pkg:0:4} ;; *) prefix=${pkg:0:1} ;; esac
    for f in "${!pins[@]}"; do
        [ -f "$cache/$f" ] && [ "$(sha "$cache/$f")" = "${pins[$f]}" ] && continue
        say "downloading $mirror/pool/main/$prefix/$pkg/$f"
        /usr/lib/apt/apt-helper "${sandbox[@]}" download-file \
            "$mirror/pool/main/$prefix/$pkg/${f//+/%2b}" "$cache/$f.part" "SHA256:${pins[$f]}" >&2 ||
            return 1
        mv "$cache/$f.part" "$cache/$f"
    done
}

if ! cached_ok; then
    if ! visible; then
        write_sources || true
        apt_update
    fi
    if visible; then
        apt_download
    else
        mirror=${PADDLE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
        say "apt lists no $pkg $version any more; trying $mirror's pool"
        pool_download "$mirror" || die "$pkg $version is gone from the archive.
  Either move the pin to a version apt lists (see vendor/README.md, 'Upgrading a pin';
  \`apt-cache showsrc $pkg\` shows them), or set PADDLE_DEBIAN_MIRROR to an archive
  snapshot that still has it, e.g. https://snapshot.debian.org/archive/debian/YYYYMMDDT000000Z"
    fi
fi

# --- verify -----------------------------------------------------------------------
for f in "${!pins[@]}"; do
    [ -f "$cache/$f" ] || die "$f missing from $cache after download"
    got=$(sha "$cache/$f")
    if [ "$got" != "${pins[$f]}" ]; then
        mv -f "$cache/$f" "$cache/$f.bad"
        die "sha256 mismatch for $f:
  pinned  ${pins[$f]}
  got     $got
  (moved to $cache/$f.bad; refusing to unpack)"
    fi
done
# Every file the .dsc names must be pinned too (dpkg-source checks them
# against the .dsc, whose own hash is pinned: the chain is closed).
while read -r _ _ f; do
    [ -n "${pins[$f]:-}" ] || die "$dsc names $f, which has no pin in $versions"
done < <(sed -n '/^Checksums-Sha256:/,/^[^ ]/{/^ /p}' "$cache/$dsc")

# --- unpack ----------------------------------------------------------------------
if ! command -v dpkg-source >/dev/null; then
    say "installing dpkg-dev (for dpkg-source)"
    as_root apt-get install -y -q --no-install-recommends dpkg-dev >&2 ||
        { as_root apt-get update -q >&2 &&
          as_root apt-get install -y -q --no-install-recommends dpkg-dev >&2; } ||
        die "cannot install dpkg-dev"
fi

tmp=$srcroot/.tmp-$pkg-$upver.$$
trap 'rm -rf "$tmp"' EXIT
rm -rf "$dest"
say "unpacking $dsc -> ${dest#"$root"/}"
dpkg-source --no-copy -x "$cache/$dsc" "$tmp" >"$cache/.unpack-$pkg.log" 2>&1 || {
    tail -n 20 "$cache/.unpack-$pkg.log" >&2
    die "dpkg-source -x $dsc failed"
}
echo "${pins[$dsc]}  $dsc" >"$tmp/.paddle-unpacked"
mv "$tmp" "$dest"
trap - EXIT
