# restart_exact.sh - the whole of a restart, as a user runs it: `paddle run`
# with restarts = 1 and checkpoints, sync mode, 2 pservers x 2 trainers; a
# pserver (then a trainer) SIGKILLed in the middle of the job -> the job
# restarts from its last complete checkpoint, completes, and its final
# parameters equal those of an uninterrupted run (max relative difference
# <= 1e-5). No process is left behind.
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3

"$ROOT/recipes/prepare.sh" >/dev/null && mkdir -p data/uci_housing &&
    cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
recipe="$T/exactjob.lua"
cp "$ROOT/recipes/fit_a_line.lua" "$recipe"
opts=(--passes=300 --checkpoint_period=100 --log_period=1000000 --keep_models=0 --early_stop=0 --mode=sync)

job_pids() {
    local p
    for p in /proc/[0-9]*; do
        tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF "$recipe" && echo "${p#/proc/}"
    done
}
role_pid() {
    local p
    for p in $(job_pids); do
        tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -q -- "$1 " && { echo "$p"; return; }
    done
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
last=ref/pass-00299

# killed ROLE-OPTION NAME: kill that role once a checkpoint is complete
killed() {
    local role=$1 name=$2 i launcher victim
    "$PADDLE" run "$recipe" "${opts[@]}" --restarts=1 --checkpoint_dir=ck_$name --save_dir=out_$name \
        >$name.out 2>&1 &
    launcher=$!
    for i in $(seq 1 300); do ls ck_$name/ckpt-*/complete >/dev/null 2>&1 && break; sleep 0.1; done
    victim=$(role_pid "$role")
    if [ -z "$victim" ] || ! ls ck_$name/ckpt-*/complete >/dev/null 2>&1; then
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
        fail $name "rc $rc: $(grep '^paddle' $name.out | tail -n 4)"; return
    fi
    if msg=$(same_model $last out_$name/pass-00299); then pass $name; echo "$name: $msg"
    else fail $name "$msg"; fi
}
killed --pserver_id=1 pserver_killed_same_result
check pserver_killed_no_leftovers no_leftovers
killed --trainer_id=0 trainer_killed_same_result
check trainer_killed_no_leftovers no_leftovers
