# resume.sh - consistent checkpoints and --resume (docs/faults.md): a job
# killed (launcher SIGKILLed, every role dies with it) after a checkpoint
# is resumed by starting every role with --resume; in sync mode the final
# parameters equal those of an uninterrupted run, in async the test cost is
# no more than 5% above it. Checkpoints cut by kills during their writes never load; a
# corrupt one is skipped for the previous one; a stopped trainer is named
# by the pservers within heartbeat_timeout + 5 s. Checkpoints on each
# host's own disk (a checkpoint_dir per role) resume as well. A pserver
# whose disk takes seconds to write its shard is waited for, not called hung.
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3
"$ROOT/recipes/prepare.sh" && mkdir -p data/uci_housing && cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
cp "$ROOT/recipes/fit_a_line.lua" "$ROOT/recipes/recommendation.lua" .
"$PADDLE" gen movielens --out data/ml-gen --ratings 20000 --seed 3 >/dev/null 2>&1
export PADDLE_JOB_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT

free_ports() { # two bases, each with base and base+1 free
    $PY - <<'P'
import random, socket
got = []
while len(got) < 2:
    p = random.randrange(20000, 32000)
    ss = []
    try:
        for q in (p, p + 1):
            s = socket.socket(); s.bind(("127.0.0.1", q)); ss.append(s)
        if all(abs(p - g) > 2 for g in got): got.append(p)
    except OSError:
        pass
    finally:
        for s in ss: s.close()
print(*got)
P
}

# roles RECIPE LOGPREFIX ARGS... : 2 pservers and 2 trainers started by
# hand (what the supervisor does), with the same ARGS; waits for all
roles() {
    local recipe=$1 log=$2; shift 2
    local ports; read -r -a ports <<<"$(free_ports)"
    local rp=()
    for i in 0 1; do
        "$PADDLE" pserver "$recipe" --pserver_id=$i --port=${ports[$i]} --bind=127.0.0.1 "$@" >$log.ps$i 2>&1 &
        rp+=($!); pids+=($!)
    done
    for i in 0 1; do
        timeout 300 "$PADDLE" trainer "$recipe" --pservers=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]} \
            --trainer_id=$i "$@" >$log.tr$i 2>&1 &
        rp+=($!); pids+=($!)
    done
    local rc=0
    for p in "${rp[@]}"; do wait "$p" || rc=1; done
    return $rc
}

# killed_run RECIPE DIR ARGS... : paddle run until a checkpoint is complete
# under DIR/ckpt and at least MIN more steps, then SIGKILL the launcher
killed_run() {
    local recipe=$1 dir=$2; shift 2
    "$PADDLE" run "$recipe" --checkpoint_dir=$dir/ckpt --save_dir=$dir/out "$@" >$dir/run.log 2>&1 &
    local p=$!; pids+=($p)
    for _ in $(seq 600); do
        ls $dir/ckpt/ckpt-*/complete >/dev/null 2>&1 && break
        sleep 0.05
    done
    sleep 0.3
    kill -9 $p 2>/dev/null
    wait $p 2>/dev/null
    sleep 0.5
}

# ckpts DIR [complete]: the checkpoint directories under DIR, oldest first
ckpts() {
    local d
    for d in "$1"/ckpt-*; do
        [ -d "$d" ] || continue
        [ -z "$2" ] || [ -f "$d/complete" ] || continue
        echo "${d##*ckpt-} $d"
    done | sort -n | awk '{print $2}'
}

final_pass() { ls -d "$1"/pass-* 2>/dev/null | sort | tail -n 1; }

# same_params NAME REF RESUMED: every .npy of the last pass, max relative difference <= 1e-5
same_params() {
    local a b
    a=$(final_pass "$2"); b=$(final_pass "$3")
    if [ -z "$a" ] || [ "$(basename "$a")" != "$(basename "$b")" ]; then
        fail "$1" "last passes differ: '$a' '$b'"; return
    fi
    if diff_out=$($PY - "$a" "$b" <<'P'
import glob, os, sys, numpy as np
worst = 0.0
files = sorted(glob.glob(os.path.join(sys.argv[1], "*.npy")))
assert files, "no parameters"
for f in files:
    x, y = np.load(f), np.load(os.path.join(sys.argv[2], os.path.basename(f)))
    worst = max(worst, float(np.abs(x - y).max() / max(np.abs(x).max(), 1e-30)))
print("max relative difference %.3g over %d parameters" % (worst, len(files)))
sys.exit(0 if worst <= 1e-5 else 1)
P
    ); then pass "$1"; echo "$1: $diff_out"; else fail "$1" "$diff_out"; fi
}

# resumed NAME DIR: the roles resumed from a checkpoint, not from scratch
resumed_from_ckpt() {
    if grep -q "resuming from checkpoint" "$2/res.ps0" && grep -q "resuming from the checkpoint of step" "$2/res.tr0"
    then return 0; fi
    fail "$1" "no resume in the logs: $(tail -n 3 "$2/res.ps0" "$2/res.tr0")"; return 1
}

# same_samples NAME REF RESUMED: each pass the resumed run saved names in its
# manifest the samples the uninterrupted run's did (a resumed pass's
# batches trained before the kill counted too)
same_samples() {
    local m n=0 bad=""
    for m in "$3"/pass-*/manifest.json; do
        [ -f "$m" ] || continue
        local ref="$2/${m#"$3"/}" a b
        a=$(grep -o '"samples": [0-9]*' "$ref" 2>/dev/null); b=$(grep -o '"samples": [0-9]*' "$m")
        [ -n "$a" ] && [ "$a" = "$b" ] || bad="$bad ${m#"$3"/}: $b, uninterrupted $a;"
        n=$((n + 1))
    done
    if [ $n -gt 0 ] && [ -z "$bad" ]; then pass "$1"; else fail "$1" "$n manifests:$bad"; fi
}

sync_case() { # NAME RECIPE ARGS...
    local name=$1 recipe=$2; shift 2
    mkdir -p $name
    roles "$recipe" $name/ref --save_dir=$name/ref_out "$@" || { fail ${name}_reference "$(tail -n 3 $name/ref.tr0)"; return; }
    killed_run "$recipe" $name "$@"
    local before; before=$(ls -d $name/ckpt/ckpt-* 2>/dev/null | wc -l)
    if roles "$recipe" $name/res --checkpoint_dir=$name/ckpt --save_dir=$name/out --resume "$@" &&
        resumed_from_ckpt ${name}_resumed $name; then
        pass ${name}_resumed
        same_params ${name}_equals_uninterrupted $name/ref_out $name/out
        same_samples ${name}_manifest_samples $name/ref_out $name/out
    else
        fail ${name}_resumed "$(tail -n 3 $name/res.ps0 $name/res.tr0)"
    fi
}

sync_case fit_sync fit_a_line.lua --passes=150 --checkpoint_period=40 --log_period=100000
sync_case rec_sync recommendation.lua --passes=3 --checkpoint_period=15 --log_period=100000 --batch_size=64

# async: the same kill; the final test cost no more than 5% above an
# uninterrupted run's. Async runs differ from one another (which trainer's
# gradient lands first): 27 uninterrupted recommender runs here spread over
# 0.454 to 0.475, and once 0.491, as much as a pass less training gives. So
# a resumed run better than the reference is no fault, and a case that
# misses is tried once more from the start, with its first numbers shown.
last_test_cost() { grep 'pass [0-9]* done' "$1" | grep -o 'test cost [0-9.e+-]*' | tail -n 1 | awk '{print $3}'; }
async_try() { # DIR RECIPE ARGS... ; sets why on a miss
    local dir=$1 recipe=$2; shift 2
    why=""
    mkdir -p $dir
    roles "$recipe" $dir/ref --save_dir=$dir/ref_out --mode=async "$@" || { why="reference: $(tail -n 3 $dir/ref.tr0)"; return 1; }
    killed_run "$recipe" $dir --mode=async "$@"
    roles "$recipe" $dir/res --checkpoint_dir=$dir/ckpt --save_dir=$dir/out --mode=async --resume "$@" ||
        { why="resumed run: $(tail -n 3 $dir/res.ps0 $dir/res.tr0)"; return 1; }
    grep -q "resuming from checkpoint" "$dir/res.ps0" && grep -q "resuming from the checkpoint of step" "$dir/res.tr0" ||
        { why="no resume in the logs: $(tail -n 3 "$dir/res.ps0" "$dir/res.tr0")"; return 1; }
    local a b; a=$(last_test_cost $dir/ref.tr0); b=$(last_test_cost $dir/res.tr0)
    costs="test cost $a uninterrupted, $b resumed"
    [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { exit !(b <= 1.05 * a) }' || { why="$costs"; return 1; }
}
async_case() { # NAME RECIPE ARGS...
    local name=$1; shift
    if async_try $name "$@"; then pass ${name}_test_cost_within_5pct; echo "$name: $costs"; return; fi
    echo "$name: first try missed ($why): once more"
    if async_try ${name}_again "$@"; then pass ${name}_test_cost_within_5pct; echo "$name: $costs"
    else fail ${name}_test_cost_within_5pct "$why"; fi
}
async_case fit_async fit_a_line.lua --passes=150 --log_period=100000
async_case rec_async recommendation.lua --passes=4 --log_period=100000 --batch_size=64

# a corrupt shard in the newest checkpoint: skipped, with a warning, for the previous one
newest=$(ckpts rec_sync/ckpt complete | tail -n 1)
older=$(ckpts rec_sync/ckpt complete | tail -n 2 | head -n 1)
f=$(ls $newest/pserver-0/*.npy | head -n 1)
printf '\x7f\x7f\x7f\x7f' | dd of="$f" bs=1 seek=200 conv=notrunc 2>/dev/null
read -r -a ports <<<"$(free_ports)"
run_capture timeout 30 "$PADDLE" pserver recommendation.lua --pserver_id=0 --port=${ports[0]} --bind=127.0.0.1 \
    --batch_size=64 --checkpoint_dir=rec_sync/ckpt --resume --idle_timeout=1
if grep -q "checksum mismatch" <<<"$out" && grep -q "resuming from checkpoint $older " <<<"$out"; then
    pass corrupt_checkpoint_skipped
else fail corrupt_checkpoint_skipped "$(grep -E 'checkpoint|resum' <<<"$out" | head -n 3)"; fi

# a shard that cannot be read (here shard.txt a directory: a read error)
# is not taken for a corrupt one: the start fails, naming it, and nothing
# is removed; one with an array file missing is skipped for the one before
cp -r rec_sync/ckpt unread && newest=$(ckpts unread complete | tail -n 1)
mv "$newest/pserver-0/shard.txt" unread/shard.txt.saved && mkdir "$newest/pserver-0/shard.txt"
read -r -a ports <<<"$(free_ports)"
run_capture timeout 30 "$PADDLE" pserver recommendation.lua --pserver_id=0 --port=${ports[0]} --bind=127.0.0.1 \
    --batch_size=64 --checkpoint_dir=unread --resume --idle_timeout=1
if [ $rc -eq 1 ] && grep -q "shard.txt: read error" <<<"$out" && [ -f "$newest/complete" ] && [ -d "$newest/pserver-0" ]
then pass unreadable_shard_fails_and_keeps_it
else fail unreadable_shard_fails_and_keeps_it "rc $rc: $(grep -E 'resum|checkpoint|error' <<<"$out" | head -n 3)"; fi
cp -r rec_sync/ckpt missing && newest=$(ckpts missing complete | tail -n 1)
want="no complete checkpoint under missing: starting fresh" # when it was the only one
[ "$(ckpts missing complete | wc -l)" -ge 2 ] && want="resuming from checkpoint $(ckpts missing complete | tail -n 2 | head -n 1) "
rm "$(ls "$newest"/pserver-0/*.npy | head -n 1)"
run_capture timeout 30 "$PADDLE" pserver recommendation.lua --pserver_id=0 --port=${ports[0]} --bind=127.0.0.1 \
    --batch_size=64 --checkpoint_dir=missing --resume --idle_timeout=1
if grep -q "checkpoint $newest skipped: cannot open .*No such file" <<<"$out" && grep -q "$want" <<<"$out"
then pass shard_missing_a_file_skipped
else fail shard_missing_a_file_skipped "want '$want': $(grep -E "resum|checkpoint|rror" <<<"$out" | head -n 4)"; fi

# --resume of a job with more pservers than the checkpoints' job: refused
# with the numbers named, and every checkpoint stays complete for a
# --resume with the job's own pservers (the new pserver has no shard of
# them; that is not a lost shard)
mkdir -p more_ps && cp -r fit_sync/ckpt more_ps/ckpt
before=$(ckpts more_ps/ckpt complete | wc -l); newest=$(ckpts more_ps/ckpt complete | tail -n 1)
run_capture timeout 120 "$PADDLE" run fit_a_line.lua --pservers=3 --checkpoint_dir=more_ps/ckpt \
    --save_dir=more_ps/out --passes=150 --log_period=100000 --resume
after=$(ckpts more_ps/ckpt complete | wc -l)
if [ "$rc" -ne 0 ] && [ "$before" -gt 0 ] && [ "$after" -eq "$before" ] &&
    grep -qE "of 2 pservers, this one has 3|pserver [0-9] of 2, this is pserver [0-9] of 3" <<<"$out"; then
    pass more_pservers_refused_checkpoints_kept
else fail more_pservers_refused_checkpoints_kept "rc $rc, complete $before then $after: $(grep -E 'pserver|checkpoint' <<<"$out" | head -n 4)"; fi
read -r -a ports <<<"$(free_ports)"
run_capture timeout 30 "$PADDLE" pserver fit_a_line.lua --pserver_id=0 --port=${ports[0]} --bind=127.0.0.1 \
    --checkpoint_dir=more_ps/ckpt --resume --idle_timeout=1
if [ -n "$newest" ] && grep -q "resuming from checkpoint $newest " <<<"$out"; then pass more_pservers_then_own_resumes
else fail more_pservers_then_own_resumes "want '$newest': $(grep -E 'resum|checkpoint' <<<"$out" | head -n 3)"; fi

# a pserver killed 20 times at random moments while it writes a checkpoint
# every step: the newest complete checkpoint is always the one that loads
ok=0; bad=""
mkdir -p kills
for i in $(seq 20); do
    read -r -a ports <<<"$(free_ports)"
    kp=()
    for j in 0 1; do
        "$PADDLE" pserver recommendation.lua --pserver_id=$j --port=${ports[$j]} --bind=127.0.0.1 --passes=50 \
            --checkpoint_dir=kills/ckpt --checkpoint_period=1 --batch_size=64 --resume >kills/ps$j.log 2>&1 &
        kp+=($!); pids+=($!)
    done
    for j in 0 1; do
        "$PADDLE" trainer recommendation.lua --pservers=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]} --trainer_id=$j \
            --passes=50 --checkpoint_dir=kills/ckpt --checkpoint_period=1 --batch_size=64 --resume \
            --log_period=100000 >kills/tr$j.log 2>&1 &
        kp+=($!); pids+=($!)
    done
    sleep "$($PY -c 'import random; print(round(random.uniform(0.8, 2.0), 2))')"
    kill -9 ${kp[0]}; sleep 0.2
    for p in "${kp[@]}"; do kill -9 $p 2>/dev/null; wait $p 2>/dev/null; done
    want=$(ckpts kills/ckpt complete | tail -n 1)
    run_capture timeout 30 "$PADDLE" pserver recommendation.lua --pserver_id=0 --port=${ports[0]} --bind=127.0.0.1 \
        --batch_size=64 --checkpoint_dir=kills/ckpt --resume --idle_timeout=1
    if [ -n "$want" ] && grep -q "resuming from checkpoint $want " <<<"$out"; then ok=$((ok + 1))
    else bad="$bad [kill $i: want '$want': $(grep -E 'resum|checkpoint' <<<"$out" | head -n 2)]"; fi
done
if [ $ok -eq 20 ]; then pass killed_during_writes_previous_loads; else fail killed_during_writes_previous_loads "$ok/20 $bad"; fi

# checkpoints on each host's own disk: every role gets a checkpoint_dir of
# its own (as on 4 hosts without shared storage). Each pserver marks a
# checkpoint complete on its disk at the trainers' COMMIT; a job killed,
# then resumed, continues from the newest one, with the parameters of a run
# never killed. A pserver that missed the last COMMIT (its marker removed
# here) resumes from an older one: the trainers say so and tell it, and
# the next start resumes from the newest.
local_roles() { # LOG ARGS...: 2 pservers + 2 trainers, each role its own LOG.ROLE dir; waits for all
    local log=$1 ports rp=() i; shift
    read -r -a ports <<<"$(free_ports)"
    for i in 0 1; do
        "$PADDLE" pserver fit_a_line.lua --pserver_id=$i --port=${ports[$i]} --bind=127.0.0.1 --checkpoint_dir=nl/ps$i \
            --save_dir=nl/out_ps$i "$@" >nl/$log.ps$i 2>&1 &
        rp+=($!); pids+=($!)
    done
    for i in 0 1; do
        timeout 120 "$PADDLE" trainer fit_a_line.lua --pservers=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]} --trainer_id=$i \
            --checkpoint_dir=nl/tr$i --save_dir=nl/out_tr$i "$@" >nl/$log.tr$i 2>&1 &
        rp+=($!); pids+=($!)
    done
    if [ -n "$KILL_AT" ]; then
        for i in $(seq 400); do grep -q "pass $KILL_AT done" nl/$log.tr0 && break; sleep 0.05; done
        kill -9 "${rp[@]}" 2>/dev/null
    fi
    local rc=0
    for i in "${rp[@]}"; do wait "$i" || rc=1; done
    return $rc
}
mkdir -p nl
nl_args=(--passes=1500 --early_stop=0 --checkpoint_period=500 --server_timeout=30 --heartbeat_timeout=5)
local_roles ref "${nl_args[@]}" && cp nl/out_tr0/pass-01499/fc_0.w_0.npy nl/ref.npy
rm -rf nl/ps* nl/tr* nl/out_*
KILL_AT=700 local_roles killed "${nl_args[@]}"
newest=$(ls nl/ps1 2>/dev/null | sort -t- -k2 -n | tail -n 1)
marks=$(ls nl/ps0/*/complete nl/ps1/*/complete nl/tr0/*/complete 2>/dev/null | wc -l)
if [ -n "$newest" ] && [ -f nl/ps0/$newest/complete ] && [ -f nl/ps1/$newest/complete ] &&
   [ -f nl/tr0/$newest/complete ] && [ ! -d nl/tr1/$newest ]; then
    pass local_disks_marked_everywhere; echo "local disks: $newest marked on both pservers' and trainer 0's ($marks markers)"
else
    fail local_disks_marked_everywhere "newest '$newest': $(ls -R nl/ps0 nl/ps1 nl/tr0 2>&1 | head -n 20)"
fi
rm -f nl/ps1/$newest/complete # pserver 1 missed the last COMMIT
local_roles again "${nl_args[@]}" --resume
want="pserver 1 resumed from checkpoint [0-9]*, pserver 0 from checkpoint ${newest#ckpt-}, which every pserver saved"
if grep -q "trainer 0: $want" nl/again.tr0 && [ -f nl/ps1/$newest/complete ]; then
    pass local_disks_missed_commit_told
else
    fail local_disks_missed_commit_told "$(grep -h 'E1' nl/again.* | head -n 3)"
fi
local_roles resumed "${nl_args[@]}" --resume
if grep -q "resuming from checkpoint nl/ps1/$newest " nl/resumed.ps1 &&
   grep -q "resuming from the checkpoint of step ${newest#ckpt-}" nl/resumed.tr1 &&
   cmp -s nl/ref.npy nl/out_tr0/pass-01499/fc_0.w_0.npy; then
    pass local_disks_resumed_same_params
else
    fail local_disks_resumed_same_params "$(grep -h 'resum\|E1' nl/resumed.* | head -n 4); $(ls nl/out_tr0 | tail -n 1)"
fi
# pserver 1's shard of the newest checkpoint lost: the others withdraw it,
# and the next start resumes from the one before, everywhere
rm -rf nl/ps* nl/tr* nl/out_*
KILL_AT=700 local_roles killed2 "${nl_args[@]}"
newest=$(ls nl/ps1 2>/dev/null | sort -t- -k2 -n | tail -n 1)
older=$(ls nl/ps1 2>/dev/null | sort -t- -k2 -n | tail -n 2 | head -n 1)
rm -rf "nl/ps1/$newest"
local_roles lost "${nl_args[@]}" --resume
local_roles after_lost "${nl_args[@]}" --resume
if [ -n "$older" ] && [ "$older" != "$newest" ] && grep -q "checkpoint ${newest#ckpt-} is withdrawn" nl/lost.tr0 &&
   grep -q "checkpoint nl/ps0/$newest withdrawn: a pserver has no shard of it" nl/lost.ps0 &&
   grep -q "resuming from checkpoint nl/ps0/$older " nl/after_lost.ps0 &&
   grep -q "resuming from checkpoint nl/ps1/$older " nl/after_lost.ps1 &&
   cmp -s nl/ref.npy nl/out_tr0/pass-01499/fc_0.w_0.npy; then
    pass local_disks_lost_shard_withdrawn
else
    fail local_disks_lost_shard_withdrawn "'$newest' '$older': $(grep -h 'resum\|E1\|withdrawn' nl/lost.* nl/after_lost.* | head -n 6)"
fi
# a new job (no --resume) in the same directories: the earlier job's
# checkpoints are no longer complete anywhere, said once per directory
local_roles fresh "${nl_args[@]}" --passes=3
if grep -q "nl/ps1 held [0-9]* complete checkpoints of an earlier job: this job started without --resume" nl/fresh.ps1 &&
   grep -q "nl/tr0 held [0-9]* complete checkpoints of an earlier job" nl/fresh.tr0 &&
   [ -z "$(ls nl/ps0/*/complete nl/ps1/*/complete nl/tr0/*/complete 2>/dev/null)" ]; then
    pass new_job_forgets_earlier_checkpoints
else
    fail new_job_forgets_earlier_checkpoints "$(grep -h 'earlier job' nl/fresh.* | head -n 3); $(ls nl/*/*/complete 2>&1 | head -n 3)"
fi

# a trainer stopped (SIGSTOP): the pservers name it within heartbeat_timeout + 5 s
read -r -a ports <<<"$(free_ports)"
hp=()
for j in 0 1; do
    "$PADDLE" pserver fit_a_line.lua --pserver_id=$j --port=${ports[$j]} --bind=127.0.0.1 --passes=1000000 --early_stop=0 \
        --heartbeat_timeout=3 >hb.ps$j 2>&1 &
    hp+=($!); pids+=($!)
done
for j in 0 1; do
    "$PADDLE" trainer fit_a_line.lua --pservers=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]} --trainer_id=$j \
        --passes=1000000 --early_stop=0 --heartbeat_timeout=3 --log_period=100000000 --save_dir=hb_out >hb.tr$j 2>&1 &
    hp+=($!); pids+=($!)
done
sleep 1.5
kill -STOP ${hp[3]}
t0=$(date +%s.%N)
named=""
while [ "$(echo "$(date +%s.%N) - $t0 < 12" | bc)" = 1 ]; do
    if grep -q "trainer 1 sent nothing" hb.ps0 hb.ps1; then named=$(date +%s.%N); break; fi
    sleep 0.1
done
kill -CONT ${hp[3]}
for p in "${hp[@]}"; do kill -9 $p 2>/dev/null; wait $p 2>/dev/null; done
if [ -n "$named" ] && [ "$(echo "$named - $t0 <= 8" | bc)" = 1 ]; then
    pass stopped_trainer_named; echo "stopped trainer named after $(echo "$named - $t0" | bc) s (heartbeat_timeout 3 s)"
else fail stopped_trainer_named "not named within 8 s: $(tail -n 2 hb.ps0)"; fi

# a pserver whose disk takes seconds to write its checkpoint shard (under
# strace, every fsync it makes is delayed 3 s) with heartbeat_timeout 1
# is not hung: it tells the trainers it is writing, and they wait for it,
# saying so after 10 s, instead of calling it silent
name=slow_checkpoint_disk_waited_for
if ! strace -f --seccomp-bpf -qq -o /dev/null -e trace=fsync -e inject=fsync:delay_enter=1 true 2>/dev/null; then
    skip $name "strace cannot inject syscall delays here"
else
    read -r -a ports <<<"$(free_ports)"
    sp=()
    for j in 0 1; do
        # (LeakSanitizer cannot run in a process strace traces: no leak check
        # there.) The pserver's own pid goes to pids: a kill of strace would
        # only let it go.
        ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 timeout 150 \
            strace -f --seccomp-bpf -qq -o /dev/null -e trace=fsync -e inject=fsync:delay_enter=3000000 \
            sh -c 'echo $$ >"$0"; exec "$@"' slow.pid$j "$PADDLE" pserver fit_a_line.lua --pserver_id=$j \
            --port=${ports[$j]} --bind=127.0.0.1 --passes=6 --checkpoint_dir=slow/ckpt --checkpoint_period=40 \
            --heartbeat_timeout=1 >slow.ps$j 2>&1 &
        sp+=($!); pids+=($!)
        for _ in $(seq 100); do [ -s slow.pid$j ] && break; sleep 0.05; done
        [ -s slow.pid$j ] && pids+=("$(cat slow.pid$j)")
    done
    for j in 0 1; do
        timeout 120 "$PADDLE" trainer fit_a_line.lua --pservers=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]} \
            --trainer_id=$j --passes=6 --checkpoint_dir=slow/ckpt --checkpoint_period=40 --heartbeat_timeout=1 \
            --log_period=100000000 --save_dir=slow_out >slow.tr$j 2>&1 &
        sp+=($!); pids+=($!)
    done
    rc=0
    for p in "${sp[@]}"; do wait "$p" || rc=1; done
    if [ $rc -eq 0 ] && ls slow/ckpt/ckpt-*/complete >/dev/null 2>&1 &&
        grep -q 'waiting for pserver [01] (127.0.0.1:[0-9]*): it has been writing its checkpoint shard for 1[0-9] s' \
            slow.tr0 && ! grep -q 'sent nothing' slow.tr0 slow.tr1 slow.ps0 slow.ps1; then
        pass $name; grep -h 'shard of step .* saved in' slow.ps0
    else
        fail $name "rc $rc: $(tail -n 2 slow.tr0 slow.ps0 | tr '\n' ' ')"
    fi
fi
