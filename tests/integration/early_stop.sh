# early_stop.sh - settings.early_stop, early_stop_metric/mode, save_period,
# keep_models and output/best, with `paddle train` and `paddle run`.
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3

"$ROOT/recipes/prepare.sh" || { fail prepare "recipes/prepare.sh failed"; exit 0; }
mkdir -p data/uci_housing && cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/

recipe() { # FILE SETTINGS
    cat >"$1" <<R
data { train = "data/uci_housing/housing.data", test = "data/uci_housing/housing.data", format = "uci_housing" }
job { pservers = 1, trainers = 2 }
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local p = nn.fc(x, 1)
  return { cost = nn.square_error_cost(p, y), predict = p }
end
optimizer = nn.sgd { learning_rate = 0.01 }
settings { batch_size = 20, $2 }
R
}

# stops 3 passes after the lowest test cost, well before the cap; best links
# that pass; only the last 2 saved passes and the best stay
recipe es.lua 'passes = 5000, early_stop = 3, save_period = 10, keep_models = 2'
run_capture "$PADDLE" train es.lua
last=$(grep -o 'pass [0-9]* done' <<<"$out" | tail -n 1 | awk '{print $2}')
best=$(grep -o 'pass [0-9]* done.*test cost [0-9.e+-]*' <<<"$out" |
    awk '{c = $NF; if (n == 0 || c < m) { m = c; b = $2 } n++} END {print b}')
if [ "$rc" -eq 0 ] && [ -n "$last" ] && [ "$last" -lt 4999 ] && [ "$((last - best))" -eq 3 ] &&
    [[ "$out" == *"early stop: test cost has not improved for 3 passes; the best is pass $best "* ]]; then
    pass early-stop-test-cost
else
    fail early-stop-test-cost "rc $rc, last pass '$last', lowest test cost at '$best': $(tail -n 3 <<<"$out")"
fi
if [ "$(readlink output/best)" = "$(printf 'pass-%05d' "$best")" ]; then pass best-link
else fail best-link "output/best -> '$(readlink output/best)', wanted pass $best"; fi
# saved: every 10th pass, each new best, the last; kept: the last 2 saved and the best
want=$(grep -o 'model saved to output/pass-[0-9]*' <<<"$out" | sed 's#.*/##' | tail -n 2;
    printf 'pass-%05d\n' "$best")
want=$(sort -u <<<"$want" | tr '\n' ' ')
have=$(cd output && ls -d pass-* | sort | tr '\n' ' ')
if [ "$have" = "$want" ]; then pass keep-models
else fail keep-models "output holds '$have', wanted '$want'"; fi

# paddle predict on output/best gives the best pass's test cost
bestline=$(grep "pass $best done" <<<"$out" | sed -n 's/.*test cost \([^,]*\),.*/\1/p')
run_capture "$PADDLE" predict es.lua --model output/best --input data/uci_housing/housing.data --part test --output best.csv
if [ "$rc" -eq 0 ] && [ -n "$bestline" ] && [[ "$out" == *"test cost $bestline,"* ]]; then pass predict-best
else fail predict-best "rc $rc, wanted test cost '$bestline': $out"; fi

# save_period 3 over 7 passes, the best (mode max: pass 0) and the last kept too
recipe sp.lua 'passes = 7, save_period = 3, early_stop_mode = "max", save_dir = "sp"'
run_capture "$PADDLE" train sp.lua
saved=$(grep -o 'model saved to sp/pass-[0-9]*' <<<"$out" | sed 's#.*/##' | tr '\n' ' ')
if [ "$rc" -eq 0 ] && [ "$saved" = "pass-00000 pass-00002 pass-00005 pass-00006 " ] &&
    [ "$(cd sp && ls -d pass-* | tr '\n' ' ')" = "$saved" ]; then
    pass save-period
else
    fail save-period "rc $rc, saved '$saved'"
fi

# without early_stop nothing changes: every pass saved and kept
recipe all.lua 'passes = 4, save_dir = "all"'
run_capture "$PADDLE" train all.lua
if [ "$rc" -eq 0 ] && [ "$(ls -d all/pass-* | wc -l)" -eq 4 ] && [ "$(readlink all/best)" = pass-00003 ]; then
    pass default-keeps-all
else
    fail default-keeps-all "rc $rc: $(ls all)"
fi

# mode max on the test cost: the first pass is the best, stop 2 passes later
recipe max.lua 'passes = 50, early_stop = 2, early_stop_mode = "max", save_dir = "max"'
run_capture "$PADDLE" train max.lua
if [ "$rc" -eq 0 ] && grep -q 'pass 2 done' <<<"$out" && ! grep -q 'pass 3 done' <<<"$out" &&
    [ "$(readlink max/best)" = pass-00000 ]; then
    pass early-stop-mode-max
else
    fail early-stop-mode-max "rc $rc, best -> $(readlink max/best): $(tail -n 3 <<<"$out")"
fi

# a metric by name: cost layer reused as a metric called "mse" (goes down)
sed -e 's/predict = p }/predict = p, metrics = { mse = nn.square_error_cost(p, y) } }/' \
    -e 's/early_stop = 3,/early_stop = 3, early_stop_metric = "mse",/' es.lua >metric.lua
sed -i 's/settings { batch_size = 20,/settings { batch_size = 20, save_dir = "metric",/' metric.lua
run_capture "$PADDLE" train metric.lua
if [ "$rc" -eq 0 ] && [[ "$out" == *"early stop: mse has not improved for 3 passes"* ]] && [ -L metric/best ]; then
    pass early-stop-metric
else
    fail early-stop-metric "rc $rc: $(tail -n 3 <<<"$out")"
fi

# recipe errors: one line, exit 2
sed 's/early_stop_metric = "mse"/early_stop_metric = "auc"/' metric.lua >badmetric.lua
expect_error early-stop-unknown-metric 2 "settings.early_stop_metric 'auc' is not a metric of the model (mse)" \
    "$PADDLE" check badmetric.lua
sed 's/, test = "data\/uci_housing\/housing.data"//' es.lua >notest.lua
expect_error early-stop-needs-test 2 "settings.early_stop needs a test set (data.test)" "$PADDLE" check notest.lua
expect_error early-stop-bad-mode 2 "early_stop_mode" "$PADDLE" check es.lua --early_stop_mode=up

# distributed, sync and async: trainer 0 evaluates and decides, every trainer
# stops after the same pass (the first is the best in mode max: stop after
# pass 1), the job ends well; trainer 0 keeps the models
for mode in sync async; do
    recipe dist.lua "passes = 12, early_stop = 1, early_stop_mode = \"max\", keep_models = 1, save_dir = \"dist-$mode\", mode = \"$mode\""
    run_capture "$PADDLE" run dist.lua
    if [ "$rc" -eq 0 ] && [ "$(grep -c '^\[trainer [01]\].* pass 1 done' <<<"$out")" -eq 2 ] &&
        ! grep -q 'pass 2 done' <<<"$out" &&
        grep -q '^\[trainer 1\].*early stopping: trainer 0 ended the job after pass 1$' <<<"$out" &&
        [ "$(readlink dist-$mode/best)" = pass-00000 ] &&
        [ "$(cd dist-$mode && ls -d pass-* | tr '\n' ' ')" = "pass-00000 pass-00001 " ]; then
        pass "early-stop-distributed-$mode"
    else
        fail "early-stop-distributed-$mode" "rc $rc, dist: $(ls dist-$mode 2>&1): $(tail -n 5 <<<"$out")"
    fi
done

# resumed from a checkpoint taken after the best pass and before the stop:
# the job stops after the same pass as without the stop, best links the same
# pass and the same passes are kept (the passes before the checkpoint count,
# as the last life tested them). 2 x 2, sync: every step as uninterrupted.
cp "$ROOT/recipes/fit_a_line.lua" fl.lua
es=(--checkpoint_period=11 --log_period=1000000 --keep_models=2 --early_stop=10 --mode=sync)
ended() { grep -o 'early stopping: trainer 0 ends the job after pass [0-9]*' "$1" | head -n 1 | awk '{print $NF}'; }
kept() { echo "$(readlink "$1/best") / $(cd "$1" && ls -d pass-* | tr '\n' ' ')"; }
timeout 120 "$PADDLE" run fl.lua "${es[@]}" --passes=1000 --checkpoint_dir=ck_ref --save_dir=es_ref >es_ref.out 2>&1
ref=$(ended es_ref.out)
stop=$((ref - 4)) # no stop before it: 4 < 10 passes after the best
timeout 120 "$PADDLE" run fl.lua "${es[@]}" --passes=$stop --checkpoint_dir=ck_res --save_dir=es_res >es_res1.out 2>&1
run_capture timeout 120 "$PADDLE" run fl.lua "${es[@]}" --passes=1000 --checkpoint_dir=ck_res --save_dir=es_res --resume
best=$(readlink es_ref/best); best=${best#pass-}
if [ $rc -eq 0 ] && [ -n "$ref" ] && [ "$(ended <(echo "$out"))" = "$ref" ] && [ "$(kept es_res)" = "$(kept es_ref)" ] &&
    grep -q "resumed at pass [0-9]*: the best test cost so far is pass $((10#$best))'s" <<<"$out"; then
    pass early-stop-resumed
    echo "stopped after pass $ref uninterrupted and resumed at pass $((stop - 1)); kept $(kept es_res)"
else
    fail early-stop-resumed "rc $rc, uninterrupted: after pass '$ref', $(kept es_ref); resumed: after pass \
'$(ended <(echo "$out"))', $(kept es_res): $(grep -E 'resum|early stop' <<<"$out" | tail -n 3)"
fi
