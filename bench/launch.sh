#!/usr/bin/env bash
# launch.sh PADDLE - time from `paddle run` to every role running, on 4
# "hosts" (real sshd on 127.0.0.2-5, each with its own root), first with the
# binary copied fresh, then with it already there. Also the time of one bare
# remote command on these hosts (a shell start), the floor of any launch.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
paddle=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
T=$(mktemp -d /tmp/pd-launch.XXXXXX)
RESULTS=$T/.results
. "$root/tests/integration/lib.sh"
. "$root/tests/integration/sshd_lib.sh"
trap 'sshd_cleanup; rm -rf "$T"' EXIT
for n in 2 3 4 5; do SSHD_EXTRA="SetEnv PADDLE_NODE_ROOT=$T/node$n" sshd_start $n >/dev/null || exit 1; done
cat "${SSHD_KNOWN[2]}" "${SSHD_KNOWN[3]}" "${SSHD_KNOWN[4]}" "${SSHD_KNOWN[5]}" >"$T/known"
"$root/recipes/prepare.sh"
mkdir -p "$T/ws/data/uci_housing" && cp "$root/recipes/data/uci_housing/housing.data" "$T/ws/data/uci_housing/"
cat >"$T/ws/job.lua" <<R
cluster {
  hosts = { "$SSHD_USER@127.0.0.2:${SSHD_PORT[2]}", "$SSHD_USER@127.0.0.3:${SSHD_PORT[3]}",
            "$SSHD_USER@127.0.0.4:${SSHD_PORT[4]}", "$SSHD_USER@127.0.0.5:${SSHD_PORT[5]}" },
  root_dir = "\$PADDLE_NODE_ROOT", known_hosts = "$T/known",
  identity_files = { "$SSHD_KEYS/id_ed25519" }, use_agent = false, port = $(sshd_free_port),
}
job { pservers = 4, trainers = 4 }
data { train = "data/uci_housing/housing.data", format = "uci_housing" }
model = function(nn) return nn.square_error_cost(nn.fc(nn.data("x", 13), 1), nn.data("y", 1)) end
optimizer = nn.sgd { learning_rate = 0.001 }
settings { batch_size = 20, passes = 1 }
R
cd "$T"
# seconds until all 8 roles have said something
launch() {
    local start out=$T/launch.out
    start=$(date +%s.%N)
    "$paddle" run ws/job.lua >"$out" 2>&1 &
    local pid=$! n=0
    while [ "$n" -lt 8 ] && kill -0 $pid 2>/dev/null; do
        n=$(grep -ao '^\[127\.0\.0\.[2-5] \(pserver\|trainer\) [0-9]\]' "$out" | sort -u | wc -l)
        sleep 0.01
    done
    awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }'
    wait $pid
}
export P2=${SSHD_PORT[2]} P3=${SSHD_PORT[3]} P4=${SSHD_PORT[4]} P5=${SSHD_PORT[5]}
one=$( { /usr/bin/time -f %e ssh -o BatchMode=yes -o UserKnownHostsFile="$T/known" -i "$SSHD_KEYS/id_ed25519" \
        -p "${SSHD_PORT[2]}" "$SSHD_USER@127.0.0.2" true; } 2>&1 | tail -n 1)
par=$( { /usr/bin/time -f %e bash -c 'for n in 2 3 4 5; do ssh -o BatchMode=yes -o UserKnownHostsFile="$1" -i "$2" \
        -p "$(eval echo \${P$n})" "$3@127.0.0.$n" true & done; wait' _ "$T/known" "$SSHD_KEYS/id_ed25519" "$SSHD_USER"; } 2>&1 | tail -n 1)
fresh=$(launch)
again=$(launch)
echo "== launch on 4 hosts (sshd on loopback)"
echo "  one bare remote command with OpenSSH's ssh: ${one} s; on the 4 hosts at once: ${par} s"
echo "  (the floor: the user's shell start-up on the node; here all 4 \"hosts\" share one machine and one ~/.bashrc)"
echo "  binary copied fresh:  ${fresh} s to every role running (target <= 1 s)"
echo "  binary already there: ${again} s (target <= 0.5 s)"
