# fit_a_line.sh - local training of the fit-a-line demo: against a NumPy
# reference written here, convergence, and the saved model.
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3

"$ROOT/recipes/prepare.sh" || { fail prepare "recipes/prepare.sh failed"; exit 0; }
data="$ROOT/recipes/data/uci_housing/housing.data"
mkdir -p data/uci_housing && cp "$data" data/uci_housing/

# zero initial weights, no shuffling, SGD 0.001, batch 20, 11 updates
cat >zero.lua <<'R'
data { train = "data/uci_housing/housing.data", test = "data/uci_housing/housing.data", format = "uci_housing" }
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(x, 1, { init = "zero" }), y)
end
optimizer = nn.sgd { learning_rate = 0.001 }
settings { batch_size = 20, passes = 1, max_batches = 11, save_dir = "zero_out" }
R
run_capture "$PADDLE" train zero.lua
if [ $rc -ne 0 ]; then
    fail numpy_reference "paddle train failed: $out"
else
    ours=$($PY -c "import json; print(repr(json.load(open('zero_out/pass-00000/manifest.json'))['test_cost']))")
    ref=$($PY - "$data" <<'P'
import sys
import numpy as np
rows = np.loadtxt(sys.argv[1], dtype=np.float64)
x, y = rows[:, :13].copy(), rows[:, 13:14].copy()
mean, lo, hi = x.mean(0), x.min(0), x.max(0)
x = (x - mean) / (hi - lo)
split = int(len(rows) * 0.8)
xt, yt, xs, ys = x[:split], y[:split], x[split:], y[split:]
w, b = np.zeros((13, 1)), np.zeros((1,))
for step in range(11):
    xb, yb = xt[step * 20:(step + 1) * 20], yt[step * 20:(step + 1) * 20]
    d = xb @ w + b - yb                 # cost = mean((pred - y)^2)
    gw = 2.0 / len(xb) * xb.T @ d
    gb = 2.0 / len(xb) * d.sum(0)
    w -= 0.001 * gw
    b -= 0.001 * gb
print(repr(float(np.mean((xs @ w + b - ys) ** 2))))
P
)
    if $PY -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-4 * abs(b) else 1)" "$ours" "$ref"; then
        pass numpy_reference
    else
        fail numpy_reference "test cost after 11 updates: paddle $ours, numpy $ref"
    fi
fi

# the demo recipe converges: test cost below 30 within 100 passes
cp "$ROOT/recipes/fit_a_line.lua" .
run_capture "$PADDLE" train fit_a_line.lua --passes=100 --log_period=1000
if [ $rc -ne 0 ]; then
    fail converges "paddle train failed: $out"
else
    first=$(grep -o 'pass [0-9]* done.*test cost [0-9.e+-]*' <<<"$out" | awk '$NF < 30 {print $2; exit}')
    if [ -n "$first" ]; then pass converges; echo "test cost < 30 from pass $first"
    else fail converges "test cost never below 30: $(grep 'pass 99 done' <<<"$out")"; fi
fi

# settings.test_period: the test cost every N batches, the training itself
# unchanged (the same pass lines as without), in paddle train and paddle run
run_capture "$PADDLE" train fit_a_line.lua --passes=2 --test_period=10 --save_dir=tp_train
with=$(grep -o 'pass 1 done:.*' <<<"$out" | sed 's/.*samples.s), //')
tested=$(grep -c 'pass [01], batch [12]0, test cost [0-9.e+-]*, test rmse' <<<"$out")
run_capture "$PADDLE" train fit_a_line.lua --passes=2 --save_dir=tp_plain
without=$(grep -o 'pass 1 done:.*' <<<"$out" | sed 's/.*samples.s), //')
if [ "$tested" -eq 4 ] && [ -n "$with" ] && [ "$with" = "$without" ]; then pass test_period_train
else fail test_period_train "$tested test lines; pass 1 with: '$with', without: '$without'"; fi
run_capture "$PADDLE" run fit_a_line.lua --passes=2 --test_period=10 --save_dir=tp_run
if [ "$rc" -eq 0 ] && [ "$(grep -c '^\[trainer 0\] .*pass [01], batch 10, test cost [0-9.e+-]*, test rmse' <<<"$out")" -eq 2 ] &&
   ! grep -q '^\[trainer 1\] .*batch 10, test cost' <<<"$out"; then pass test_period_run
else fail test_period_run "rc $rc: $(grep 'test cost' <<<"$out" | head -n 4)"; fi

# the saved model loads in NumPy with the right shapes
if $PY -c "
import numpy as np, json
m = json.load(open('output/pass-00099/manifest.json'))
w = np.load('output/pass-00099/fc_0.w_0.npy'); b = np.load('output/pass-00099/fc_0.b_0.npy')
assert w.shape == (13, 1) and w.dtype == np.float32, w.shape
assert b.shape == (1, 1), b.shape
assert [p['shape'] for p in m['params']] == [[13, 1], [1, 1]]
assert np.isfinite(w).all()
"; then pass npy_loads; else fail npy_loads "NumPy could not load the model"; fi

# --init_model resumes: starting from pass 99 the first pass's cost is already low
run_capture "$PADDLE" train fit_a_line.lua --passes=1 --save_dir=resumed --init_model output/pass-00099
c=$(grep -o 'pass 0 done.*test cost [0-9.e+-]*' <<<"$out" | awk '{print $NF}')
if [ $rc -eq 0 ] && [ -n "$c" ] && awk -v c="$c" 'BEGIN { exit !(c < 30) }'; then pass init_model
else fail init_model "rc $rc, test cost '$c': $out"; fi

# a model of the wrong shape is refused with a clear message, as a mistake
# in what it was given (exit 2: a job is not restarted for it)
$PY -c "import numpy as np; np.save('output/pass-00099/fc_0.w_0.npy', np.zeros((12, 1), np.float32))"
expect_error init_model_shape 2 "option --init_model: loading model output/pass-00099: output/pass-00099/fc_0.w_0.npy: shape (12, 1) differs from the model's (13, 1): a model of another recipe?" "$PADDLE" train fit_a_line.lua --passes=1 --init_model output/pass-00099
# one that is not there is named as one (a fault, exit 1: it may be made yet)
expect_error init_model_missing 1 "paddle: option --init_model: model output/pass-99999: no such directory" "$PADDLE" train fit_a_line.lua --passes=1 --init_model output/pass-99999
# a file, or a save_dir rather than one of its models, is a mistake
expect_error init_model_a_file 2 "paddle: option --init_model: model fit_a_line.lua is a file, not a model's directory" \
    "$PADDLE" train fit_a_line.lua --passes=1 --init_model fit_a_line.lua
expect_error init_model_a_save_dir 2 "no manifest.json, not a model paddle saved (a save_dir: its models are DIR/pass-NNNNN or DIR/best)" \
    "$PADDLE" train fit_a_line.lua --passes=1 --init_model output

# the demo's data file, not made yet, says what makes it (exit 1: data
# not there may come)
mkdir -p nodata && cp fit_a_line.lua nodata/
expect_error uci_demo_data_missing 1 "nodata/data/uci_housing/housing.data: No such file or directory (recipes/prepare.sh makes the demo's copy)" \
    "$PADDLE" train nodata/fit_a_line.lua --passes=1
# uci_housing: a directory for its file is a mistake (exit 2), and a
# malformed line is skipped with data.on_error = "skip", as in other formats
expect_error uci_directory 2 "paddle: option --train: data file data/uci_housing is a directory" \
    "$PADDLE" train fit_a_line.lua --passes=1 --train=data/uci_housing
sed '5s/^ *[0-9.]*/ x/' data/uci_housing/housing.data >bad_housing.data
expect_error uci_malformed 2 "bad_housing.data:5: field 1 is not a decimal number: 'x' (data.on_error = \"skip\" would skip such lines)" \
    "$PADDLE" train fit_a_line.lua --passes=1 --train=bad_housing.data --test=bad_housing.data
run_capture "$PADDLE" train fit_a_line.lua --passes=1 --train=bad_housing.data --test=bad_housing.data --on_error=skip \
    --save_dir=skip_out
if [ "$rc" -eq 0 ] && [[ "$out" == *"skipping: bad_housing.data:5: field 1 is not a decimal number: 'x'"* ]] &&
   [[ "$out" == *"1 malformed line skipped in each pass"* ]] && [ -f skip_out/pass-00000/manifest.json ]; then
    pass uci_skip
else
    fail uci_skip "exit $rc: $(tail -n 4 <<<"$out")"
fi

# the test data's malformed lines: logged once, though the test reader is
# opened again after the check line at step 10, and counted once
mkdir -p skiptest && awk 'NR <= 400' data/uci_housing/housing.data | tr -s ' ' | sed 's/^ //; s/ /,/g' >skiptest/tr.csv
awk 'NR > 400' data/uci_housing/housing.data | tr -s ' ' | sed 's/^ //; s/ /,/g' >skiptest/te.csv
printf '1,2,oops\n1,2\n' >>skiptest/te.csv
cat >skiptest/r.lua <<'EOF'
data { train = "tr.csv", test = "te.csv", format = "csv", on_error = "skip" }
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local p = nn.fc(x, 1, { act = "linear" })
  return { cost = nn.square_error_cost(p, y), predict = p }
end
optimizer = nn.sgd { learning_rate = 1e-7 }
settings { batch_size = 20, passes = 2 }
EOF
run_capture "$PADDLE" train skiptest/r.lua --save_dir=skiptest/out
n_said=$(grep -c "skipping: skiptest/te.csv:" <<<"$out")
n_total=$(grep -c '2 malformed lines skipped in the test data each time it is read (data.on_error = "skip")' <<<"$out")
if [ "$rc" -eq 0 ] && [ "$n_said" -eq 2 ] && [ "$n_total" -eq 1 ] && [[ "$out" == *"step 10, loss"* ]] &&
   [[ "$out" != *"skipped in each pass"* ]]; then
    pass test_data_skip_said_once
else
    fail test_data_skip_said_once "exit $rc, $n_said lines said, $n_total totals: $(grep -i skip <<<"$out" | tail -n 6)"
fi

# a reader that does not keep up with `paddle run`'s output (`| less` left
# unscrolled): the job does not wait for it (its trainers, blocked on a log
# line, sent no heartbeats, and their pservers ended the job as "dead or
# hung" after heartbeat_timeout), and every line reaches the reader in
# order once it reads, the last ones included
"$PADDLE" run fit_a_line.lua --passes=40 --batch_size=1 --log_period=1 --heartbeat_timeout=2 --save_dir=slow_out \
    2>&1 | (sleep 5; cat >slow.out)
rc=${PIPESTATUS[0]}
passes_in_order=$(grep -o '^paddle: pass [0-9]* done' slow.out | awk '{ if ($3 != NR - 1) bad = 1 } END { print (NR > 0 && !bad) }')
if [ "$rc" -eq 0 ] && tail -n 1 slow.out | grep -q "^paddle: job done in .*model in slow_out/" &&
   [ "$(grep -c '^\[trainer 0\]' slow.out)" -gt 1000 ] && [ "$passes_in_order" = 1 ]; then
    pass slow_reader_does_not_stop_the_job
else
    fail slow_reader_does_not_stop_the_job "exit $rc: $(grep -v '^\[trainer' slow.out | tail -n 3)"
fi

# a second job started where one runs (the same log/, save_dir or
# checkpoint_dir) is refused, naming the one that runs (it mixed its passes
# with the first's, moved output/best, and removed the first's checkpoint
# markers as an earlier job's); once the first ended, the place is free
"$PADDLE" run fit_a_line.lua --passes=1000 --early_stop=0 --save_dir=busy_out --checkpoint_dir=busy_ck \
    --checkpoint_period=100000 >busy.log 2>&1 &
first=$!
for _ in $(seq 1 100); do grep -q "parameters ready" busy.log 2>/dev/null && break; sleep 0.1; done
holder="in use by another job (pid $first, paddle run fit_a_line.lua, since"
expect_error second_job_same_log_dir 2 "paddle: log/ is $holder" "$PADDLE" run fit_a_line.lua --passes=1
mkdir -p elsewhere/data && cp fit_a_line.lua elsewhere/ && cp -r data/uci_housing elsewhere/data/
(cd elsewhere &&
 expect_error second_job_same_save_dir 2 "paddle: settings.save_dir = ../busy_out is $holder" \
     "$PADDLE" run fit_a_line.lua --passes=1 --save_dir=../busy_out &&
 expect_error second_job_same_checkpoint_dir 2 "paddle: settings.checkpoint_dir = ../busy_ck is $holder" \
     "$PADDLE" run fit_a_line.lua --passes=1 --checkpoint_dir=../busy_ck)
expect_error train_in_a_busy_save_dir 2 "paddle: settings.save_dir = busy_out is $holder" \
    "$PADDLE" train fit_a_line.lua --passes=1 --save_dir=busy_out
kill -INT "$first"
wait "$first"
run_capture "$PADDLE" train fit_a_line.lua --passes=1 --save_dir=busy_out
if [ "$rc" -eq 0 ] && [ -f busy_out/pass-00000/manifest.json ]; then pass save_dir_free_once_its_job_ended
else fail save_dir_free_once_its_job_ended "exit $rc: $(tail -n 2 <<<"$out")"; fi
# one job given one directory for two things is no second job
run_capture "$PADDLE" run fit_a_line.lua --passes=1 --save_dir=same_dir --checkpoint_dir=same_dir
if [ "$rc" -eq 0 ] && [ -f same_dir/pass-00000/manifest.json ]; then pass one_dir_for_save_and_checkpoints
else fail one_dir_for_save_and_checkpoints "exit $rc: $(tail -n 2 <<<"$out")"; fi

# Ctrl+C on a local paddle run: every role stops, the launcher says so and
# exits 130; a trainer stopped with the job logs no error, and a pserver
# says once per trainer that it left before it finished; each role is
# listed as stopped, not as having exited with a status
mkdir -p run_int && ln -s ../data run_int/data && sed 's/passes = 1, max_batches = 11/passes = 100000/' zero.lua >run_int/zero.lua
(cd run_int && exec "$PADDLE" run zero.lua >int.out 2>&1) &
launcher=$!
for _ in $(seq 100); do grep -q 'pass 3 done' run_int/int.out 2>/dev/null && break; sleep 0.1; done
kill -INT "$launcher"
for _ in $(seq 100); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$launcher" 2>/dev/null; then kill -9 "$launcher"; fi
wait "$launcher"; rc=$?
warned=$(grep -c 'disconnected before it finished' run_int/int.out)
if [ $rc -eq 130 ] && grep -q 'interrupted (Ctrl+C): stopping every role' run_int/int.out &&
   ! grep -qE '^\[trainer [0-9]\] E' run_int/int.out && [ "$warned" -le 2 ] &&
   [ "$(grep -cE '^paddle:   (pserver|trainer) 0 +stopped$' run_int/int.out)" -eq 2 ] &&
   [ "$(grep -c '^paddle:   ' run_int/int.out)" -eq 2 ] &&
   [ -z "$(pids_naming "$T/run_int")" ]; then
    pass ctrl_c_local_run
else
    fail ctrl_c_local_run "rc $rc, $warned warnings: $(grep -v 'step\|pass' run_int/int.out | tail -n 8)"
fi

# a second run into the same save_dir: the passes it finds there are named
run_capture "$PADDLE" train zero.lua
if [ $rc -eq 0 ] && [[ "$out" == *"zero_out/ already holds 1 pass of an earlier run (pass-00000 to pass-00000): this run writes over those of its own pass numbers"* ]]; then
    pass earlier_run_passes_named
else
    fail earlier_run_passes_named "rc $rc: $(tail -n 3 <<<"$out")"
fi
