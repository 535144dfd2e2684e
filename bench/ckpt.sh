#!/usr/bin/env bash
# ckpt.sh PADDLE WORKDIR - checkpoint cost and recovery time (recommender,
# 2 pservers x 2 trainers, sync, checkpoint_period at its default):
#   cost: a checkpoint's time as trainer 0 waits for it, as a fraction of
#         the time between two checkpoints (target <= 5%)
#   recovery: from the SIGKILL of the job to trainer 0 training again from
#         the checkpoint (every role restarted by hand with --resume, as the
#         supervisor does; target <= 5 s plus reading the checkpoint)
set -u
paddle=$1 work=$2
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$work" || exit 1
cp "$root/recipes/recommendation.lua" ck_rec.lua
[ -s data/ml-ck/ratings.dat ] || "$paddle" gen movielens --out data/ml-ck --ratings 200000 --seed 5 >/dev/null 2>&1
sed -i 's,data/ml-gen,data/ml-ck,g' ck_rec.lua
export PADDLE_JOB_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
secs() { awk '{ split($2, t, ":"); printf "%.6f\n", t[1] * 3600 + t[2] * 60 + t[3] }'; }
# two pservers, each on a pair of ports (tests/integration/lib.sh)
. "$root/tests/integration/lib.sh"
p0=$(free_port_pair)
p1=$(free_port_pair)
while [ $((p1 - p0)) -le 2 ] && [ $((p0 - p1)) -le 2 ]; do p1=$(free_port_pair); done
pids=()
start() { # LOG ARGS...
    local log=$1; shift
    pids=()
    "$paddle" pserver ck_rec.lua --pserver_id=0 --port=$p0 --bind=127.0.0.1 "$@" >$log.ps0 2>&1 & pids+=($!)
    "$paddle" pserver ck_rec.lua --pserver_id=1 --port=$p1 --bind=127.0.0.1 "$@" >$log.ps1 2>&1 & pids+=($!)
    for t in 0 1; do
        "$paddle" trainer ck_rec.lua --pservers=127.0.0.1:$p0,127.0.0.1:$p1 --trainer_id=$t "$@" >$log.tr$t 2>&1 &
        pids+=($!)
    done
}
# kill and reap with stderr closed (bash reports each job killed,
# "Killed"); the time of the kill in $stopped_at; once per start
stop() {
    {
        for p in "${pids[@]}"; do kill -9 $p; done
        stopped_at=$(date +%H:%M:%S.%N | awk '{ split($1, t, ":"); printf "%.6f\n", t[1] * 3600 + t[2] * 60 + t[3] }')
        for p in "${pids[@]}"; do wait $p; done
    } 2>/dev/null
    pids=()
}
trap stop EXIT
args=(--checkpoint_dir=ck --passes=3 --log_period=1000000)
rm -rf ck
start ck1 "${args[@]}"
for _ in $(seq 1200); do [ "$(grep -c 'checkpoint of step .* complete' ck1.tr0)" -ge 4 ] && break; sleep 0.05; done
stop
killed=$stopped_at
grep 'checkpoint of step .* complete' ck1.tr0 | awk '{ print $0 }' >ck1.lines
cost=$(paste <(secs <ck1.lines) <(awk '{ print $NF == "s" ? $(NF-1) : $NF }' ck1.lines) |
    awk 'NR > 1 { gap += $1 - prev; n++ } { prev = $1; c += $2; m++ }
         END { if (n > 0 && gap > 0) printf "%.4f s per checkpoint, %.2f s between two: fraction %.3f", c / m, gap / n, (c / m) / (gap / n); else print "n/a" }')
echo "  checkpoint cost (period $(grep -o 'checkpoint_period = int([^)]*)' "$root/lua/schema.lua" | awk -F, '{print $3}' | tr -d ' )') steps): $cost (target <= 0.05)"
start ck2 "${args[@]}" --resume
for _ in $(seq 600); do grep -q 'resuming from the checkpoint' ck2.tr0 2>/dev/null && break; sleep 0.05; done
resumed=$(grep 'resuming from the checkpoint' ck2.tr0 | head -n 1 | secs)
read_s=$(grep -o 'read in [0-9.]* s' ck2.ps0 | awk '{ print $3 }')
stop
awk -v k="$killed" -v r="$resumed" -v c="${read_s:-0}" 'BEGIN {
    if (r == "") { print "  recovery: n/a (no resume)"; exit }
    printf "  recovery: %.2f s from the kill to trainer 0 training again (checkpoint read in %s s; target <= 5 s + read)\n", r - k, c }'
