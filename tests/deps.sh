#!/usr/bin/env bash
# deps.sh - install what the tests use, when missing (Debian, as root):
# NumPy for the reference computations (Debian's python3-numpy, imported by
# /usr/bin/python3), OpenSSH's server and client for the multi-host tests,
# and the engines tests/integration/engines_*.sh run the job under: OpenMPI,
# Slurm (slurmctld, slurmd, srun), podman with runc, catatonit and
# netavark/aardvark-dns (container networks with DNS), Node.js and npm
# (offline schema validation of the Kubernetes manifests), rsvg-convert
# (librsvg2-bin: curves.sh renders curves.svg) and promtool (prometheus:
# metrics.sh checks the /metrics text), curl (metrics.sh scrapes), tmux (the
# status block on a terminal, status_tty.sh). The package lists
# are read first (apt-get update) so that a fresh machine finds them.
#
# tests/deps.sh fuzz: what make fuzz needs instead: clang and libFuzzer
# (Debian's clang, libfuzzer-14-dev and the sanitizer runtimes).
set -euo pipefail
missing=()
# npm's kubernetes-models (and a YAML parser) for engines_k8s.sh, into
# build/npm: fetched once from the npm registry, offline after that
npm_models() {
    local dir
    [ "${1:-}" = fuzz ] && return 0
    dir="$(cd "$(dirname "$0")/.." && pwd)/build/npm"
    [ -d "$dir/node_modules/kubernetes-models" ] && [ -d "$dir/node_modules/yaml" ] && return 0
    command -v npm >/dev/null || return 0
    mkdir -p "$dir"
    echo "tests/deps.sh: npm install kubernetes-models yaml (into build/npm)" >&2
    (cd "$dir" && npm install --prefix . --no-audit --no-fund kubernetes-models yaml >&2) ||
        echo "tests/deps.sh: npm install failed; engines_k8s.sh will skip its schema check" >&2
}
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
    command -v tmux >/dev/null || missing+=(tmux)  # status_tty.sh: the terminal display
    command -v strace >/dev/null || missing+=(strace)  # resume.sh: a slow disk (fsync delayed)
    command -v mpirun >/dev/null || missing+=(openmpi-bin)
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v srun >/dev/null || missing+=(slurm-client)
    command -v podman >/dev/null || missing+=(podman)
    command -v runc >/dev/null || missing+=(runc)
    [ -x /usr/lib/podman/netavark ] || command -v netavark >/dev/null || missing+=(netavark)
    [ -x /usr/lib/podman/aardvark-dns ] || command -v aardvark-dns >/dev/null || missing+=(aardvark-dns)
    command -v iptables >/dev/null || missing+=(iptables)
    # pods (podman kube play) need a pause image, built with catatonit
    [ -x /usr/libexec/podman/catatonit ] || command -v catatonit >/dev/null || missing+=(catatonit)
    command -v npm >/dev/null || missing+=(npm)
    command -v rsvg-convert >/dev/null || missing+=(librsvg2-bin)
    command -v promtool >/dev/null || missing+=(prometheus)
    command -v curl >/dev/null || missing+=(curl)
fi
if [ ${#missing[@]} -eq 0 ]; then npm_models "${1:-}"; exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
    echo "tests/deps.sh: please install: ${missing[*]}" >&2
    exit 1
fi
echo "tests/deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2 || echo "tests/deps.sh: apt-get update failed; trying the lists there are" >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
npm_models "${1:-}"
