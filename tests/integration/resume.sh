# resume.sh - consistent checkpoints and --resume (docs/faults.md): a job
# killed (launcher SIGKILLed, every role dies with it) after a checkpoint
# is resumed by starting every role with --resume; in sync mode the final
# parameters equal those of an uninterrupted run, in async the test cost is
# within 5%. Checkpoints cut by kills during their writes never load; a
# corrupt one is skipped for the previous one; a stopped trainer is named
# by the pservers within heartbeat_timeout + 5 s.
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
    else
        fail ${name}_resumed "$(tail -n 3 $name/res.ps0 $name/res.tr0)"
    fi
}

sync_case fit_sync fit_a_line.lua --passes=150 --checkpoint_period=40 --log_period=100000
sync_case rec_sync recommendation.lua --passes=3 --checkpoint_period=15 --log_period=100000 --batch_size=64
