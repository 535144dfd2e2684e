# restart_exact.sh - the whole of a restart, as a user runs it: `paddle run`
# with restarts = 1 and checkpoints, sync mode, 2 pservers x 2 trainers; a
# pserver (then a trainer) SIGKILLed in the middle of the job -> the job
# restarts from its last complete checkpoint, completes, and its final
# parameters equal those of an uninterrupted run (max relative difference
# <= 1e-5). The same for a trainer stopped with SIGSTOP and for a network
# cut (a firewall rule in a network namespace the test makes): each is named
# within heartbeat_timeout + 5 s. paddle run --resume after a SIGKILLed
# launcher trains only what follows the checkpoint. The recommender with a
# pserver killed gives the same parameters too; async with a trainer killed,
# a final test cost within 5%. No process is left behind.
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3

"$ROOT/recipes/prepare.sh" >/dev/null && mkdir -p data/uci_housing &&
    cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
recipe="$T/exactjob.lua"
cp "$ROOT/recipes/fit_a_line.lua" "$recipe"
opts=(--passes=1000 --checkpoint_period=100 --log_period=1000000 --keep_models=0 --early_stop=0 --mode=sync)

# a complete checkpoint exists (old ones vanish while we look: no ls)
have_ckpt() { local f; for f in "$1"/ckpt-*/complete; do [ -e "$f" ] && return 0; done; return 1; }
job_pids() {
    pids_naming "$recipe"
}
role_pid() {
    pid_with_arg "$1" $(job_pids)
}
no_leftovers() {
    local left; left=$(job_pids)
    [ -z "$left" ] && return 0
    echo "processes left: $left"; for p in $left; do kill -9 "$p" 2>/dev/null; done
    return 1
}
same_model() { # DIR_A DIR_B
    $PY - "$1" "$2" <<'P'
import json, sys
import numpy as np
a, b = sys.argv[1], sys.argv[2]
names = [p["name"] for p in json.load(open(a + "/manifest.json"))["params"]]
worst = 0.0
for n in names:
    x, y = np.load("%s/%s.npy" % (a, n)), np.load("%s/%s.npy" % (b, n))
    worst = max(worst, float(np.abs(x - y).max() / max(1e-6, np.abs(x).max())))
print("max relative difference %.3g over %d parameters" % (worst, len(names)))
sys.exit(0 if worst <= 1e-5 else 1)
P
}

run_capture timeout 120 "$PADDLE" run "$recipe" "${opts[@]}" --checkpoint_dir=ck_ref --save_dir=ref
[ $rc -eq 0 ] || { fail uninterrupted "rc $rc: $(tail -n 3 <<<"$out")"; exit 0; }
last=ref/pass-00999
ref_steps=$(grep -o 'trainer 0 finished: [0-9]* steps' <<<"$out" | awk '{print $4}')

# killed ROLE-OPTION NAME: kill that role once a checkpoint is complete
killed() {
    local role=$1 name=$2 i launcher victim
    "$PADDLE" run "$recipe" "${opts[@]}" --restarts=1 --checkpoint_dir=ck_$name --save_dir=out_$name \
        >$name.out 2>&1 &
    launcher=$!
    for i in $(seq 1 300); do have_ckpt ck_$name && break; sleep 0.1; done
    victim=$(role_pid "$role")
    if [ -z "$victim" ] || ! have_ckpt ck_$name; then
        fail $name "no checkpoint or no $role to kill: $(tail -n 3 $name.out)"
        kill "$launcher"; wait "$launcher"; return
    fi
    kill -9 "$victim"
    for i in $(seq 1 1200); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$launcher" 2>/dev/null; then
        kill -9 "$launcher"; fail $name "the job did not end within 120 s"; return
    fi
    wait "$launcher"; rc=$?
    if [ $rc -ne 0 ] || ! grep -q 'restarting the job from its last checkpoint (restart 1 of 1)' $name.out ||
       ! grep -q 'resuming from checkpoint' $name.out; then
        fail $name "rc $rc: $(grep -E '^paddle|^    ' $name.out | tail -n 8)"; return
    fi
    if msg=$(same_model $last out_$name/pass-00999); then pass $name; echo "$name: $msg"
    else fail $name "$msg"; fi
}
killed --pserver_id=1 pserver_killed_same_result
check pserver_killed_no_leftovers no_leftovers
killed --trainer_id=0 trainer_killed_same_result
check trainer_killed_no_leftovers no_leftovers

# A hang: trainer 1 stopped with SIGSTOP. The pservers name it within
# heartbeat_timeout (3 s here) + 5 s, the job restarts from its checkpoint
# and ends with the same parameters.
hung_opts=()
hung() { # NAME WRAP...: run the job (through WRAP), then call hang_$NAME once a checkpoint is complete
    local name=$1 i launcher t0 named; shift
    "$@" "$PADDLE" run "$recipe" "${opts[@]}" "${hung_opts[@]}" --restarts=2 --heartbeat_timeout=3 \
        --checkpoint_dir=ck_$name --save_dir=out_$name >$name.out 2>&1 &
    launcher=$!
    for i in $(seq 1 300); do have_ckpt ck_$name && break; sleep 0.1; done
    if ! have_ckpt ck_$name || ! hang_$name; then
        fail $name "no checkpoint, or nothing to hang: $(tail -n 3 $name.out)"
        kill "$launcher"; wait "$launcher"; return
    fi
    t0=$(date +%s.%N)
    for i in $(seq 1 150); do grep -q "$hang_pattern" $name.out && break; sleep 0.1; done
    named=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
    for i in $(seq 1 1200); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$launcher" 2>/dev/null; then
        kill -9 "$launcher"; fail $name "the job did not end within 120 s"; return
    fi
    wait "$launcher"; rc=$?
    if [ $rc -ne 0 ] || ! grep -q "$hang_pattern" $name.out || ! awk -v n="$named" 'BEGIN { exit !(n <= 8) }' ||
       ! grep -q 'restarting the job from its last checkpoint' $name.out; then
        fail $name "rc $rc, named after $named s: $(grep -E "^paddle|^    |$hang_pattern" $name.out | tail -n 8)"; return
    fi
    if msg=$(same_model $last out_$name/pass-00999); then pass $name; echo "$name: named after $named s; $msg"
    else fail $name "$msg"; fi
}
hang_trainer_stopped() { local v; v=$(role_pid --trainer_id=1); [ -n "$v" ] && kill -STOP "$v"; }
hang_pattern='trainer 1 sent nothing for'
hung trainer_stopped env
# the launcher's line on the role that ended names the hung trainer too
if grep -q '^paddle: [a-z]* [01] exited with status 1 (.*trainer 1 sent nothing for [0-9]* s' trainer_stopped.out; then
    pass trainer_stopped_named_by_the_launcher
else
    fail trainer_stopped_named_by_the_launcher "$(grep '^paddle: .* exited' trainer_stopped.out | head -n 2)"
fi
check trainer_stopped_no_leftovers no_leftovers

# A network cut: the job runs in a network namespace of its own; a firewall
# rule there drops every packet to pserver 1's ports. Named within the
# heartbeat timeout, restarted (on new ports), same parameters. Over TCP
# (unix_sockets = false): the rule cuts TCP only.
ns=pdcut$$
if [ "$(id -u)" -eq 0 ] && ip netns add $ns 2>/dev/null && ip netns exec $ns ip link set lo up &&
   ip netns exec $ns iptables -L INPUT >/dev/null 2>&1; then
    hang_network_cut() {
        local ports
        ports=$(grep -o '\[pserver 1\] .*Server listening on 127.0.0.1:[0-9]* (ports [0-9]*-[0-9]*)' network_cut.out |
                tail -n 1 | sed -E 's/.*ports ([0-9]+)-([0-9]+)\)/\1:\2/')
        [ -n "$ports" ] && ip netns exec $ns iptables -A INPUT -p tcp --dport "$ports" -j DROP
    }
    hang_pattern='sent nothing for\|pserver 1 .*hung\|did not answer'
    hung_opts=(--unix_sockets=false)
    hung network_cut ip netns exec $ns
    hung_opts=()
    check network_cut_no_leftovers no_leftovers
    ip netns del $ns
else
    ip netns del $ns 2>/dev/null
    skip network_cut "needs root, network namespaces and iptables"
fi

# paddle run --resume after the launcher was SIGKILLed: the job continues
# from its last complete checkpoint (the steps before it are not trained
# again) and ends with the uninterrupted result
"$PADDLE" run "$recipe" "${opts[@]}" --checkpoint_dir=ck_resume --save_dir=out_resume >resume1.out 2>&1 &
launcher=$!
for i in $(seq 1 300); do have_ckpt ck_resume && break; sleep 0.1; done
kill -9 "$launcher"; wait "$launcher" 2>/dev/null
sleep 0.5 # the roles die with their launcher
check launcher_killed_no_leftovers no_leftovers
run_capture timeout 120 "$PADDLE" run "$recipe" "${opts[@]}" --checkpoint_dir=ck_resume --save_dir=out_resume --resume
from=$(grep -o 'trainer 0: resuming from the checkpoint of step [0-9]*' <<<"$out" | awk '{print $NF}')
steps=$(grep -o 'trainer 0 finished: [0-9]* steps' <<<"$out" | awk '{print $4}')
if [ $rc -eq 0 ] && [ -n "$from" ] && [ "$from" -gt 0 ] && [ -n "$steps" ] && [ $((steps + from)) -eq "$ref_steps" ] &&
   msg=$(same_model $last out_resume/pass-00999); then
    pass resume_after_launcher_killed
    echo "resumed from step $from; trainer 0 trained $steps steps more ($ref_steps uninterrupted); $msg"
else
    fail resume_after_launcher_killed "rc $rc, from '$from', steps '$steps': $(grep '^paddle' <<<"$out" | tail -n 3) $msg"
fi
check resume_no_leftovers no_leftovers

# The recommender (embeddings, sparse rows, Adam), sync: a pserver SIGKILLed
# mid-pass, restarts = 1 -> the same parameters as without the kill.
"$PADDLE" gen movielens --out data/ml-gen --ratings 20000 --seed 3 >/dev/null 2>&1
rec="$T/exactrec.lua"
cp "$ROOT/recipes/recommendation.lua" "$rec"
recopts=(--passes=3 --batch_size=64 --checkpoint_period=15 --log_period=1000000 --keep_models=0 --early_stop=0)
run_capture timeout 200 "$PADDLE" run "$rec" "${recopts[@]}" --checkpoint_dir=ck_recref --save_dir=recref
if [ $rc -ne 0 ]; then
    fail recommender_pserver_killed_same_result "uninterrupted run: rc $rc: $(tail -n 3 <<<"$out")"
else
    "$PADDLE" run "$rec" "${recopts[@]}" --restarts=1 --checkpoint_dir=ck_rec --save_dir=recout >rec.out 2>&1 &
    launcher=$!
    for i in $(seq 1 600); do have_ckpt ck_rec && break; sleep 0.1; done
    victim=$(pid_with_arg --pserver_id=0 $(pids_naming "$rec"))
    [ -n "$victim" ] && kill -9 "$victim"
    for i in $(seq 1 2000); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$launcher" 2>/dev/null && kill -9 "$launcher"
    wait "$launcher"; rc=$?
    if [ -n "$victim" ] && [ $rc -eq 0 ] && grep -q 'restart 1 of 1' rec.out &&
       msg=$(same_model recref/pass-00002 recout/pass-00002); then
        pass recommender_pserver_killed_same_result; echo "recommender: $msg"
    else
        fail recommender_pserver_killed_same_result "victim '$victim', rc $rc: $(grep '^paddle' rec.out | tail -n 3) $msg"
    fi
fi
rec_left=$(pids_naming "$rec")
if [ -z "$rec_left" ]; then pass recommender_no_leftovers; else kill -9 $rec_left; fail recommender_no_leftovers "left: $rec_left"; fi

# async fit-a-line: a trainer SIGKILLed, restarts = 1 -> the final test cost
# within 5% of an uninterrupted async run
pass_cost() { grep 'pass 999 done' "$1" | grep -o 'test cost [0-9.e+-]*' | tail -n 1 | awk '{print $3}'; }
aopts=("${opts[@]/--mode=sync/--mode=async}")
"$PADDLE" run "$recipe" "${aopts[@]}" --checkpoint_dir=ck_aref --save_dir=aref >aref.out 2>&1
"$PADDLE" run "$recipe" "${aopts[@]}" --restarts=1 --checkpoint_dir=ck_async --save_dir=aout >async.out 2>&1 &
launcher=$!
for i in $(seq 1 300); do have_ckpt ck_async && break; sleep 0.1; done
victim=$(role_pid --trainer_id=1)
[ -n "$victim" ] && kill -9 "$victim"
for i in $(seq 1 1200); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
kill -0 "$launcher" 2>/dev/null && kill -9 "$launcher"
wait "$launcher"; rc=$?
a=$(pass_cost aref.out); b=$(pass_cost async.out)
if [ -n "$victim" ] && [ $rc -eq 0 ] && grep -q 'restart 1 of 1' async.out && [ -n "$a" ] && [ -n "$b" ] &&
   awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.05 * a) }'; then
    pass async_trainer_killed_within_5pct; echo "async: test cost $a uninterrupted, $b after the kill"
else
    fail async_trainer_killed_within_5pct "victim '$victim', rc $rc, costs '$a' '$b': $(grep '^paddle' async.out | tail -n 3)"
fi
check async_no_leftovers no_leftovers
