#!/usr/bin/env bash
# deps.sh - install what the tests use, when missing (Debian, as root):
# NumPy for the reference computations (Debian's python3-numpy, imported by
# /usr/bin/python3), OpenSSH's server and client for the multi-host tests.
#
# tests/deps.sh fuzz: what make fuzz needs instead: clang and libFuzzer
# (Debian's clang, libfuzzer-14-dev and the sanitizer runtimes).
set -euo pipefail
missing=()
if [ "${1:-}" = fuzz ]; then
    command -v clang >/dev/null || missing+=(clang)
    [ -f /usr/lib/llvm-14/lib/libFuzzer.a ] || missing+=(libfuzzer-14-dev)
    # -fsanitize=fuzzer links compiler-rt's libclang_rt.fuzzer
    probe=$(mktemp -d)
    echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }' > "$probe/p.c"
    clang -fsanitize=fuzzer,address,undefined -o "$probe/p" "$probe/p.c" 2>/dev/null ||
        missing+=(libclang-rt-14-dev)
    rm -rf "$probe"
else
    /usr/bin/python3 -c 'import numpy' 2>/dev/null || missing+=(python3-numpy)
    [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
    command -v ssh-keygen >/dev/null || missing+=(openssh-client)
    command -v file >/dev/null || missing+=(file)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "tests/deps.sh: please install: ${missing[*]}" >&2
    exit 1
fi
echo "tests/deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
    { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }
