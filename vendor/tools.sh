#!/usr/bin/env bash
# tools.sh [musl|glibc|all] — install the build tools vendor/ needs, if missing.
#
# Checks for each command and apt-get installs only the Debian packages that
# are missing (CI runs as root on a fresh Debian machine). Prints nothing when
# everything is there.
#
# Example: vendor/tools.sh musl
set -euo pipefail

want=${1:-all}
# command:package
tools="gcc:gcc make:make cmake:cmake perl:perl patch:patch dpkg-source:dpkg-dev
       xz:xz-utils bzip2:bzip2 file:file"
case $want in
    musl|all) tools="$tools musl-gcc:musl-tools" ;;
    glibc) ;;
    *) echo "tools.sh: unknown flavour '$want' (musl, glibc or all)" >&2; exit 1 ;;
esac

missing=()
for t in $tools; do
    command -v "${t%%:*}" >/dev/null || missing+=("${t#*:}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "tools.sh: installing ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null ||
        { echo "tools.sh: not root; please install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
install=("${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}")
# A fresh machine may have no package lists yet: update once and retry.
"${install[@]}" >&2 || { "${sudo[@]}" apt-get update -q >&2 && "${install[@]}" >&2; }
