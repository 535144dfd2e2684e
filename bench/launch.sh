#!/usr/bin/env bash
# launch.sh PADDLE [HOSTS] - time from `paddle run` to every role running on
# HOSTS "hosts" (default 16: real sshd on 127.0.0.2 and up, each with its own
# root; one pserver and one trainer on each), first with the binary copied
# fresh, then with it already there. The baseline, measured in the same run:
# one bare `ssh HOST true` (OpenSSH) to every host at once, the floor of any
# launch. Printed as ratios to that baseline.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
paddle=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
nh=${2:-16}
T=$(mktemp -d /tmp/pd-launch.XXXXXX)
RESULTS=$T/.results
. "$root/tests/integration/lib.sh"
. "$root/tests/integration/sshd_lib.sh"
trap 'sshd_cleanup; rm -rf "$T"' EXIT
hosts=$(seq 2 $((nh + 1)))
# Each "host" gets its own empty HOME, as separate machines have: they all
# share this machine's, and a start-up file there that takes a lock (pyenv's
# rehash does) would serialize the 16 logins on it, which no cluster of
# separate machines does. Both sides of the ratio log in the same way.
for n in $hosts; do
    mkdir -p "$T/home$n"
    SSHD_EXTRA="SetEnv PADDLE_NODE_ROOT=$T/node$n HOME=$T/home$n" sshd_start "$n" >/dev/null || exit 1
done
list=""
for n in $hosts; do
    cat "${SSHD_KNOWN[$n]}" >>"$T/known"
    list+="\"$SSHD_USER@127.0.0.$n:${SSHD_PORT[$n]}\", "
done
"$root/recipes/prepare.sh"
mkdir -p "$T/ws/data/uci_housing" && cp "$root/recipes/data/uci_housing/housing.data" "$T/ws/data/uci_housing/"
cat >"$T/ws/job.lua" <<R
cluster {
  hosts = { $list },
  root_dir = "\$PADDLE_NODE_ROOT", known_hosts = "$T/known",
  identity_files = { "$SSHD_KEYS/id_ed25519" }, use_agent = false, port = $(sshd_free_port),
}
job { pservers = $nh, trainers = $nh }
data { train = "data/uci_housing/housing.data", format = "uci_housing" }
model = function(nn) return nn.square_error_cost(nn.fc(nn.data("x", 13), 1), nn.data("y", 1)) end
optimizer = nn.sgd { learning_rate = 0.001 }
settings { batch_size = 20, passes = 1 }
R
cd "$T"
now() { date +%s.%N; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.2f", e - s }'; }
# seconds until all 2*nh roles have said something. The output is read line
# by line as it comes (bash builtins only): polling the log with grep every
# few ms would fork hundreds of processes a second on the cores the launch
# itself needs, and slow down only this side of the comparison.
launch() {
    local start=$EPOCHREALTIME end= out=$T/launch.out line fifo=$T/launch.fifo
    local -A seen=()
    rm -f "$fifo" && mkfifo "$fifo"
    "$paddle" run ws/job.lua >"$fifo" 2>&1 &
    local pid=$!
    exec 3>"$out"
    while IFS= read -r line; do
        printf '%s\n' "$line" >&3
        if [ -z "$end" ] && [[ $line =~ ^\[127\.0\.0\.[0-9]+\ (pserver|trainer)\ [0-9]+\] ]]; then
            seen[${BASH_REMATCH[0]}]=1
            [ ${#seen[@]} -ge $((2 * nh)) ] && end=$EPOCHREALTIME
        fi
    done <"$fifo"
    exec 3>&-
    wait $pid || { echo "bench: the job failed:" >&2; tail -n 5 "$out" >&2; }
    [ -n "$end" ] && awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }'
}
bare() { # every host's `ssh true` at once, OpenSSH
    local start n
    start=$(now)
    for n in $hosts; do
        ssh -o BatchMode=yes -o UserKnownHostsFile="$T/known" -i "$SSHD_KEYS/id_ed25519" -p "${SSHD_PORT[$n]}" \
            "$SSHD_USER@127.0.0.$n" true &
    done
    wait
    since "$start"
}
# The floor of a fresh launch: OpenSSH sends the binary, gzip-compressed as
# paddle sends it, to every host at once, and the host unpacks it.
gzip -6 -c "$paddle" >"$T/paddle.gz"
gzsize=$(wc -c <"$T/paddle.gz")
copy() {
    local start n pids=()
    start=$(now)
    for n in $hosts; do
        ssh -o BatchMode=yes -o UserKnownHostsFile="$T/known" -i "$SSHD_KEYS/id_ed25519" -p "${SSHD_PORT[$n]}" \
            "$SSHD_USER@127.0.0.$n" "head -c $gzsize | gzip -dc >'$T/home$n/paddle.copy'" <"$T/paddle.gz" &
        pids+=($!)
    done
    wait "${pids[@]}"
    since "$start"
}
best() { grep . | sort -n | head -n 1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
par=$(for i in 1 2 3; do bare; echo; done | best)
# fresh: every node's paddle cache (binary and workspace files) removed
# before each of the 3 runs, as on a machine paddle never ran on
fresh=$(for i in 1 2 3; do rm -rf "$T"/node*/.paddle; launch; echo; done | best)
again=$(for i in 1 2 3; do launch; echo; done | best)
par2=$(for i in 1 2 3; do bare; echo; done | best)
par=$(printf '%s\n%s\n' "$par" "$par2" | best)
floor=$(for i in 1 2 3; do copy; echo; done | best)
echo "== launch on $nh hosts (sshd on loopback; one pserver and one trainer each; best of 3)"
echo "  bare 'ssh HOST true' to the $nh hosts at once (OpenSSH): ${par} s"
echo "  OpenSSH copying the compressed binary ($gzsize bytes) to the $nh hosts at once: ${floor} s"
echo "  binary copied fresh:  ${fresh} s to every role running; ratio $(ratio "$fresh" "$par") (target <= 2);" \
    "$(ratio "$fresh" "$floor") of the OpenSSH copy"
echo "  binary already there: ${again} s; ratio $(ratio "$again" "$par") (target <= 1.2)"
