# checkpoint.sh - pservers save their shards into consistent checkpoints
# (settings.checkpoint_dir, checkpoint_period) and a pserver starts from one
# (--init_shard): the job goes on from the saved parameters, not from a
# fresh start. (resume.sh tests --resume.)
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3
"$ROOT/recipes/prepare.sh" && mkdir -p data/uci_housing && cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
cp "$ROOT/recipes/fit_a_line.lua" .
one="--pservers=1 --trainers=1"

# one trainer: 21 batches a pass, 420 steps; a checkpoint every 20 steps, the last 2 kept
run_capture "$PADDLE" run fit_a_line.lua $one --passes=20 --checkpoint_dir=ckpt --checkpoint_period=20 --save_dir=out1 --log_period=1000
last=$(ls -d ckpt/ckpt-* 2>/dev/null | sed 's/.*ckpt-//' | sort -n | tail -n 1)
if [ $rc -eq 0 ] && [ "$(ls -d ckpt/ckpt-* | wc -l)" -eq 2 ] && [ -f ckpt/ckpt-$last/complete ] &&
    [ -s ckpt/ckpt-$last/pserver-0/shard.txt ] && [ "$(ls ckpt/ckpt-$last/pserver-0)" = "arrays-0.npy
shard.txt" ] && grep -q '^array block-0.w arrays-0.npy 0 ' ckpt/ckpt-$last/pserver-0/shard.txt; then
    pass shards_saved
else
    fail shards_saved "rc $rc: $(tail -n 3 <<<"$out")"
fi
run_capture "$PADDLE" run fit_a_line.lua $one --passes=1 --max_batches=1 --save_dir=fresh

port=$(free_port_pair)
export PADDLE_JOB_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
# resumed NAME SHARD SAVED [TRAINERS]: a pserver starts from SHARD and a
# trainer (of TRAINERS, 1 by default) trains one batch from it; its fc
# weights must be near SAVED (the model the shard was saved with), far from
# a fresh start
resumed() {
    local name=$1 shard=$2 saved=$3 n=${4:-1} ps other=
    "$PADDLE" pserver fit_a_line.lua --pservers=1 --trainers=$n --pserver_id=0 --port=$port --bind=127.0.0.1 \
        --init_shard="$shard" --idle_timeout=30 >$name.ps.log 2>&1 &
    ps=$!
    if [ "$n" -eq 2 ]; then
        "$PADDLE" trainer fit_a_line.lua --pservers=127.0.0.1:$port --trainers=2 --trainer_id=1 --passes=1 \
            --max_batches=1 --save_dir=$name.1 --server_timeout=20 >$name.1.log 2>&1 &
        other=$!
    fi
    run_capture "$PADDLE" trainer fit_a_line.lua --pservers=127.0.0.1:$port --trainers=$n --trainer_id=0 --passes=1 \
        --max_batches=1 --save_dir=$name --server_timeout=20
    [ -z "$other" ] || wait $other || rc=1
    wait $ps
    if [ $rc -eq 0 ] && $PY - "$saved" "$name/pass-00000/fc_0.w_0.npy" <<'P'
import numpy as np, sys
saved, resumed = np.load(sys.argv[1]), np.load(sys.argv[2])
fresh = np.load("fresh/pass-00000/fc_0.w_0.npy")
near, far = np.abs(resumed - saved).max(), np.abs(saved - fresh).max()
print("resumed - saved %.3g, saved - fresh %.3g" % (near, far))
sys.exit(0 if near < 0.1 * far else 1)
P
    then pass $name; else fail $name "rc $rc: $(tail -n 3 <<<"$out") $(tail -n 2 $name.ps.log)"; fi
}
resumed resumed_from_shard ckpt/ckpt-$last/pserver-0 out1/pass-00019/fc_0.w_0.npy
# a shard starts a job of another number of trainers: its parameters alone
# are taken (a resume, --resume, needs the same trainers: their places)
resumed shard_starts_a_job_of_two_trainers ckpt/ckpt-$last/pserver-0 out1/pass-00019/fc_0.w_0.npy 2

# a shard saved for another model or optimizer is refused
run_capture "$PADDLE" pserver fit_a_line.lua $one --mode=async --pserver_id=0 --port=$port --bind=127.0.0.1 \
    --init_shard=ckpt/ckpt-$last/pserver-0
if [ $rc -ne 0 ] && grep -q "saved for a different model or optimizer: it has 'paddle-layout 1 block [0-9]* mode sync' where this job has 'paddle-layout 1 block [0-9]* mode async'" <<<"$out"
then pass shard_of_other_model_refused_saying_what_differs
else fail shard_of_other_model_refused_saying_what_differs "rc $rc: $out"; fi
# a resume of a checkpoint of another batch size: its places in the pass
# count other batches (its parameters alone, --init_shard, are taken)
run_capture "$PADDLE" pserver fit_a_line.lua $one --batch_size=7 --pserver_id=0 --port=$port --bind=127.0.0.1 \
    --checkpoint_dir=ckpt --resume
if [ $rc -ne 0 ] && grep -q "was saved by a job of batch_size [0-9]*, this one has 7" <<<"$out"
then pass shard_of_other_batch_size_refused
else fail shard_of_other_batch_size_refused "rc $rc: $out"; fi

# a resume with the optimizer's settings changed, not its kind (a lower
# learning rate): the shard's state fits, so the job goes on at the new
# rate, and says so; another kind of optimizer, or another mode beside the
# new rate, is still refused
sed 's/learning_rate = 0.001/learning_rate = 0.0005/' fit_a_line.lua >lower_lr.lua
sed 's/nn.sgd {/nn.adam {/' lower_lr.lua >adam.lua
if grep -q 'learning_rate = 0.0005' lower_lr.lua && grep -q 'nn.adam {' adam.lua; then
    cp -r ckpt ckpt_lr
    cp -r ckpt ckpt_same
    run_capture "$PADDLE" run fit_a_line.lua $one --passes=22 --checkpoint_dir=ckpt_same --checkpoint_period=20 \
        --save_dir=out_same --log_period=1000 --resume
    run_capture "$PADDLE" run lower_lr.lua $one --passes=22 --checkpoint_dir=ckpt_lr --checkpoint_period=20 \
        --save_dir=out_lr --log_period=1000 --resume
    # the same checkpoint, trained on at both rates: the new rate is used
    if [ $rc -eq 0 ] && grep -q "resuming from checkpoint ckpt_lr/ckpt-$last" <<<"$out" &&
        grep -q "was saved with other optimizer settings; this job goes on with the recipe's: learning_rate 0.001 -> 0.0005" <<<"$out" &&
        [ -f out_lr/pass-00020/fc_0.w_0.npy ] && [ -f out_same/pass-00021/fc_0.w_0.npy ] &&
        ! cmp -s out_lr/pass-00021/fc_0.w_0.npy out_same/pass-00021/fc_0.w_0.npy
    then pass resume_with_a_lower_learning_rate
    else fail resume_with_a_lower_learning_rate "rc $rc: $(tail -n 5 <<<"$out")"; fi
    run_capture "$PADDLE" run adam.lua $one --passes=24 --checkpoint_dir=ckpt_lr --checkpoint_period=20 --save_dir=out_adam --resume
    if [ $rc -ne 0 ] && grep -q "saved for a different model or optimizer: it has 'opt sgd 0.0005 [^']*' where this job has 'opt adam 0.0005 " <<<"$out"
    then pass resume_with_another_optimizer_refused
    else fail resume_with_another_optimizer_refused "rc $rc: $(tail -n 5 <<<"$out")"; fi
    run_capture "$PADDLE" run fit_a_line.lua $one --mode=async --passes=24 --checkpoint_dir=ckpt_lr --checkpoint_period=20 \
        --save_dir=out_async --resume
    if [ $rc -ne 0 ] && grep -q "saved for a different model or optimizer: it has 'paddle-layout 1 block [0-9]* mode sync' where this job has 'paddle-layout 1 block [0-9]* mode async'" <<<"$out" &&
        ! grep -q "other optimizer settings" <<<"$out"
    then pass resume_with_another_mode_and_rate_refused
    else fail resume_with_another_mode_and_rate_refused "rc $rc: $(tail -n 5 <<<"$out")"; fi
else
    fail resume_with_a_lower_learning_rate "the recipe's optimizer line was not found (lower_lr.lua, adam.lua)"
fi

# a shard of an earlier version (one .npy file per array, "file NAME SUM"
# lines; tests/integration/data/ckpt-v1, saved after 20 passes) still loads
cp -r "$ROOT/tests/integration/data/ckpt-v1" v1
resumed earlier_versions_shard_loads v1/pserver-0 v1/saved.fc_0.w_0.npy

# a corrupt array file of an earlier version: refused, named
printf '\x7f\x7f\x7f\x7f' | dd of=v1/pserver-0/block-0.w.npy bs=1 seek=130 conv=notrunc 2>/dev/null
run_capture "$PADDLE" pserver fit_a_line.lua $one --pserver_id=0 --port=$port --bind=127.0.0.1 \
    --init_shard=v1/pserver-0
if [ $rc -ne 0 ] && grep -q 'block-0.w.npy: checksum mismatch' <<<"$out"; then pass corrupt_earlier_versions_array_refused
else fail corrupt_earlier_versions_array_refused "rc $rc: $out"; fi
