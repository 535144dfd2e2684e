# ps_sync.sh - distributed training gives what local training gives:
# sync with 2 trainers of batch b == paddle train with batch 2b over the same
# samples (SGD and Adam, dense and sparse parameters); async converges.
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3

$PY - <<'P'
import numpy as np
rng = np.random.default_rng(7)
n = 400
item = rng.integers(0, 50, n)
x = rng.normal(size=(n, 4))
w = rng.normal(size=4)
bias = rng.normal(size=50)
y = x @ w + bias[item] + 0.1 * rng.normal(size=n)
with open("train.csv", "w") as f:
    for i in range(n):
        f.write("%d,%s,%.6f\n" % (item[i], ",".join("%.6f" % v for v in x[i]), y[i]))
P

for opt in sgd adam; do
    if [ $opt = sgd ]; then o='nn.sgd { learning_rate = 0.05 }'; else o='nn.adam { learning_rate = 0.01 }'; fi
    cat >$opt.lua <<R
data { train = "train.csv", format = "csv" }
model = function(nn)
  local item, x, y = nn.id("item", 50), nn.data("x", 4), nn.data("y", 1)
  local e = nn.embedding(item, 4)
  local h = nn.fc(nn.concat { e, x }, 300, "tanh")
  return nn.square_error_cost(nn.fc(h, 1), y)
end
optimizer = $o
settings { passes = 2, max_batches = 6, seed = 3, threads = 1 }
R
    run_capture "$PADDLE" train $opt.lua --batch_size=20 --save_dir=local_$opt
    [ $rc -eq 0 ] || { fail "sync_equals_local_$opt" "paddle train failed: $out"; continue; }
    # 2 trainers of batch 10 (the barrier averages), and 1 trainer of batch
    # 20 (each push applied alone, straight from its frame); the roles reach
    # each other over the pservers' Unix sockets (the hidden layer's weights,
    # 9.6 KB, through the shared memory), and over TCP when the recipe says
    # unix_sockets = false; last, with every core to the trainer
    sed "s/threads = 1/threads = $(nproc --all)/" $opt.lua >${opt}_all.lua
    for shape in 2:10:unix:1 1:20:unix:1 2:10:tcp:1 1:20:unix:all; do
        IFS=: read -r t b net th <<<"$shape"
        name=sync_equals_local_$opt$([ $t = 1 ] && echo _one_trainer)$([ $net = tcp ] && echo _over_tcp)
        name=$name$([ $th = all ] && echo _all_cores)
        recipe=$([ $th = all ] && echo ${opt}_all.lua || echo $opt.lua)
        run_capture "$PADDLE" run $recipe --batch_size=$b --trainers=$t --pservers=2 \
            --unix_sockets=$([ $net = tcp ] && echo false || echo true) --save_dir=dist${t}${net}${th}_$opt
        [ $rc -eq 0 ] || { fail "$name" "paddle run failed: $out"; continue; }
        # every trainer's connection to every pserver, over the one asked for
        want=$((t * 2))
        # and at the end every trainer's FINISH counted by both pservers and
        # answered: no warning, no connection dropped
        if [ "$(grep -c 'trainer [0-9] finished ([0-9] of [0-9])' <<<"$out")" != $want ] ||
           grep -q 'FINISH not answered\|disconnected before it finished\|dropping ' <<<"$out"; then
            fail "$name" "not a clean end: $(grep -E 'finished \(|FINISH not|disconnected|dropping' <<<"$out" | head -n 4)"
            continue
        fi
        if [ $net = unix ]; then pattern='connected from process [0-9]* of this host (Unix socket)$'
        else pattern='connected from 127\.0\.0\.1:[0-9]*$'; fi
        n=$(grep -c "trainer [0-9] $pattern" <<<"$out")
        # and each trainer says so (over Unix sockets, with shared memory)
        said=$(grep -c 'trainer [0-9]: 2 of 2 pservers on this host, reached over their Unix sockets (2 with shared memory)' <<<"$out")
        if [ "$n" != $want ] || { [ $net = tcp ] && grep -q 'Unix socket' <<<"$out"; } ||
           { [ $net = unix ] && [ "$said" != $t ]; }; then
            fail "$name" "not $want connections over $net: $(grep -o 'trainer [0-9] connected from.*' <<<"$out" | head -n 4)"
            continue
        fi
        # one thread leaves the pservers a core: the gradients go to them as
        # the backward finishes them (a host of one CPU sends with the step);
        # with every core the trainer's, with the step
        if [ $th = 1 ] && [ "$(nproc --all)" -gt 1 ] &&
           ! grep -q "gradients go to 2 of 2 pservers as the backward" <<<"$out"; then
            fail "$name" "the trainers did not send early: $(grep -o 'gradients go to.*' <<<"$out" | head -n 1)"
            continue
        fi
        if [ $th = all ] && [ "$(nproc --all)" -le 16 ] && # (products use 16 threads at most)
           ! grep -q "gradients go to 0 of 2 pservers as the backward.*with the step" <<<"$out"; then
            fail "$name" "the trainer sent early: $(grep -o 'gradients go to.*' <<<"$out" | head -n 1)"
            continue
        fi
        # the step goes with the next pull, its values read as the forward goes
        if [ "$(grep -c "a step's new values are read as the next batch's forward" <<<"$out")" != $t ]; then
            fail "$name" "the trainers do not read the values in the forward"
            continue
        fi
        if msg=$($PY - local_$opt/pass-00001 dist${t}${net}${th}_$opt/pass-00001 <<'P'
import json, sys
import numpy as np
a, b = sys.argv[1], sys.argv[2]
names = [p["name"] for p in json.load(open(a + "/manifest.json"))["params"]]
assert len(names) == 5, names
worst = 0.0
for n in names:
    x, y = np.load("%s/%s.npy" % (a, n)), np.load("%s/%s.npy" % (b, n))
    assert x.shape == y.shape, (n, x.shape, y.shape)
    err = np.abs(x - y).max() / max(1e-6, np.abs(x).max())
    worst = max(worst, err)
    if err > 1e-5:
        print("%s differs: relative %.3g" % (n, err)); sys.exit(1)
print("max relative difference %.3g over %d parameters" % (worst, len(names)))
P
        ); then pass "$name"; echo "$msg"; else fail "$name" "$msg"; fi
    done
done

# async, 1 trainer: a batch's rows were asked for while the batch before
# computed (one thread leaves the pservers a core), behind the step before
# that, so every batch sees the same values whatever the timing: two runs
# give the same model, bit for bit
name=async_one_trainer_repeats_exactly
for i in 1 2; do
    run_capture "$PADDLE" run sgd.lua --mode=async --batch_size=10 --trainers=1 --pservers=2 --save_dir=async1_$i
    [ $rc -eq 0 ] || { fail $name "paddle run --mode=async failed: $out"; break; }
    if [ "$(nproc --all)" -gt 1 ] && ! grep -q "the next batch's rows are asked for while a batch computes" <<<"$out"; then
        fail $name "the trainer did not ask ahead: $(grep -o "trainer 0: a batch's rows.*" <<<"$out" | head -n 1)"
        rc=1
        break
    fi
done
if [ $rc -eq 0 ]; then
    if msg=$($PY - async1_1/pass-00001 async1_2/pass-00001 <<'P'
import json, sys
import numpy as np
a, b = sys.argv[1], sys.argv[2]
names = [p["name"] for p in json.load(open(a + "/manifest.json"))["params"]]
assert len(names) == 5, names
for n in names:
    x, y = np.load("%s/%s.npy" % (a, n)), np.load("%s/%s.npy" % (b, n))
    if x.shape != y.shape or not np.array_equal(x, y):
        print("%s differs between the runs: max %.3g" % (n, np.abs(x - y).max())); sys.exit(1)
print("the %d parameters of two async runs are equal" % len(names))
P
    ); then pass $name; echo "$msg"; else fail $name "$msg"; fi
fi

# the parameters did move: every parameter of the distributed model differs
# from its initial value (a run with a learning rate of 1e-30 saves the initial model)
sed 's/learning_rate = 0.05/learning_rate = 1e-30/' sgd.lua >sgd0.lua
run_capture "$PADDLE" train sgd0.lua --batch_size=20 --passes=1 --max_batches=1 --save_dir=init_sgd
if [ $rc -ne 0 ]; then
    fail sync_models_nontrivial "paddle train with learning_rate 1e-30 failed: $out"
elif msg=$($PY - init_sgd/pass-00000 dist2unix1_sgd/pass-00001 <<'P'
import json, sys
import numpy as np
a, b = sys.argv[1], sys.argv[2]
names = [p["name"] for p in json.load(open(a + "/manifest.json"))["params"]]
for n in names:
    x, y = np.load("%s/%s.npy" % (a, n)), np.load("%s/%s.npy" % (b, n))
    moved = np.abs(x - y).max()
    if not moved > 1e-6:
        print("%s did not move from its initial value (max change %.3g)" % (n, moved)); sys.exit(1)
print("all %d parameters moved from their initial values" % len(names))
P
); then
    pass sync_models_nontrivial; echo "$msg"
else
    fail sync_models_nontrivial "$msg"
fi

# async: fit-a-line with 2 trainers converges
"$ROOT/recipes/prepare.sh" && mkdir -p data/uci_housing && cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
cp "$ROOT/recipes/fit_a_line.lua" .
run_capture "$PADDLE" run fit_a_line.lua --mode=async --passes=60 --log_period=1000 --save_dir=async_out
last=$(grep -o 'pass 59 done.*test cost [0-9.e+-]*' <<<"$out" | awk '{print $NF}')
if [ $rc -eq 0 ] && [ -n "$last" ] && awk -v c="$last" 'BEGIN { exit !(c < 30) }'; then
    pass async_converges; echo "async test cost after 60 passes: $last"
else
    fail async_converges "rc $rc, final test cost '$last'"
fi
# the seeds' check line and the logs
if grep -q 'step 10, loss: \[' <<<"$out"; then pass step10_line; else fail step10_line "no 'step 10, loss: [...]' line"; fi
for f in server.log train.log paddle_pserver.INFO paddle_trainer.INFO; do
    [ -s log/$f ] || { fail logs "log/$f missing or empty"; continue 2; }
done
if grep -q 'Server listening on' log/paddle_pserver.INFO && grep -q '^\[trainer 1\]' log/train.log; then
    pass logs
else
    fail logs "log files lack the expected lines"
fi

# the pservers end once the last pass's model is fetched: trainer 0's test
# and save after it need them no more, so a long test keeps no pserver (nor
# another node's agent) waiting
name=pservers_end_before_the_last_test
sed 's/data { train = "train.csv", format = "csv" }/data { train = "train.csv", test = "train.csv", format = "csv" }/' \
    sgd.lua >sgd_test.lua
run_capture "$PADDLE" run sgd_test.lua --batch_size=10 --trainers=2 --pservers=2 --save_dir=end_out
# "[role N] I1128 23:55:22.909366 ..." -> seconds of the day
stamp() {
    grep -m 1 "$1" <<<"$out" | grep -o ' [0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]* ' |
        awk -F: '{ printf "%.6f\n", $1 * 3600 + $2 * 60 + $3 }'
}
saved=$(stamp 'model saved to end_out/pass-00001')
ended0=$(stamp 'pserver 0 exits') ended1=$(stamp 'pserver 1 exits')
if [ $rc -ne 0 ] || [ -z "$saved" ] || [ -z "$ended0" ] || [ -z "$ended1" ]; then
    fail $name "rc $rc; lines: $(grep -E 'exits|model saved' <<<"$out" | head -n 4)"
elif ! grep -q 'pass 1 done.*test cost' <<<"$out"; then
    fail $name "no test cost after the last pass: $(grep 'pass 1 done' <<<"$out")"
elif awk -v s="$saved" -v a="$ended0" -v b="$ended1" \
        'BEGIN { if (s < a - 43200) s += 86400; exit !(a <= s && b <= s) }'; then
    pass $name
else
    fail $name "a pserver ended after the last model was saved: $(grep -E 'exits|model saved to end_out/pass-00001' <<<"$out")"
fi

# trainer 0 tests after every pass while trainer 1 goes on and waits for it
# at the next step: a test longer than heartbeat_timeout (here 1 s: 40000
# synthetic samples of a 512-2048-2048-1 model, seconds) is no hang, the
# trainer heartbeats between its test batches
name=test_longer_than_heartbeat_timeout
cat >longtest.lua <<'R'
job { pservers = 2, trainers = 2 }
data { train = "synthetic", test = "synthetic", format = "synthetic", samples = 40000 }
model = function(nn)
  local x = nn.fc(nn.fc(nn.data("x", 512), 2048, { act = "relu" }), 2048, { act = "relu" })
  return nn.square_error_cost(nn.fc(x, 1), nn.data("y", 1))
end
optimizer = nn.sgd { learning_rate = 0.001 }
settings { batch_size = 256, passes = 2, max_batches = 2, threads = 1, log_period = 1000, heartbeat_timeout = 1 }
R
run_capture "$PADDLE" run longtest.lua --save_dir=longtest_out
took=$(grep -c 'trainer 0\] .*pass [01] done:.*test cost' <<<"$out")
if [ $rc -eq 0 ] && [ "$took" = 2 ] && ! grep -q 'sent nothing for' <<<"$out"; then
    pass $name
else
    fail $name "rc $rc, $took test lines: $(grep -v 'batch [0-9]*,' <<<"$out" | tail -n 4)"
fi

# a trainer whose reader waits for its file longer than heartbeat_timeout
# (a slow network disk: here a FIFO whose writer holds it open 15 s before
# it writes) is no hang: it heartbeats while it waits, and says after 10 s
# what it waits for
name=slow_reader_longer_than_heartbeat_timeout
head -n 200 train.csv >slow_a.txt
tail -n 200 train.csv >slow_b.csv
rm -f slow_a.csv
mkfifo slow_a.csv
printf 'slow_a.csv\nslow_b.csv\n' >slow.list
sed -e 's/data { train = "train.csv", format = "csv" }/data { train = "slow.list", format = "csv" }/' \
    -e 's/settings { passes = 2, max_batches = 6,/settings { heartbeat_timeout = 1, passes = 1,/' sgd.lua >slow.lua
# (the trainer's check of its files at start opens the FIFO once: the writer
# writes nothing until long after; timeout puts the writer's processes in a
# group of their own, which a kill of it ends whole)
timeout 60 sh -c 'sleep 15; exec cat slow_a.txt' >slow_a.csv &
writer=$!
run_capture timeout 90 "$PADDLE" run slow.lua --batch_size=10 --trainers=2 --pservers=1 --save_dir=slow_out
kill "$writer" 2>/dev/null
wait "$writer" 2>/dev/null
if [ $rc -eq 0 ] && ! grep -q 'sent nothing for' <<<"$out" &&
    grep -Eq 'trainer 0\] .*waiting [0-9]+ s for data from slow_a.csv' <<<"$out" &&
    grep -q 'trainer 0 finished: 20 steps' <<<"$out" && grep -q 'trainer 1 finished: 20 steps' <<<"$out"; then
    pass $name
else
    fail $name "rc $rc: $(grep -v 'batch [0-9]*,' <<<"$out" | tail -n 6)"
fi
