# recommendation.sh - the recommendation demo on generated MovieLens-1M-shaped
# data: paddle gen, then the recipe trained with paddle train and with paddle
# run (2 pservers, 2 trainers), each beating the mean baseline by far.
. "$ROOT/tests/integration/lib.sh"

# the demo's own steps, on a small set: 50,000 ratings (302 users, 868 movies)
cp "$ROOT/recipes/recommendation.lua" .
run_capture "$PADDLE" gen movielens --out data/ml-gen --ratings 50000 --seed 3
mean=$(sed -n 's/^test RMSE predicting the training mean: //p' <<<"$out")
truth=$(sed -n 's/^test RMSE predicting the planted truth: //p' <<<"$out")
if [ $rc -eq 0 ] && [ -s data/ml-gen/ratings.dat ] && [ -n "$mean" ] && [ -n "$truth" ]; then
    pass gen
    echo "baselines: mean $mean, planted truth $truth"
else
    fail gen "rc $rc: $out"
    exit 0
fi

# the same seed writes the same bytes; options are checked
"$PADDLE" gen movielens --out again --ratings 50000 --seed 3 >/dev/null
if cmp -s data/ml-gen/ratings.dat again/ratings.dat && cmp -s data/ml-gen/movies.dat again/movies.dat &&
    cmp -s data/ml-gen/users.dat again/users.dat; then pass gen_deterministic
else fail gen_deterministic "two runs with seed 3 differ"; fi
expect_error gen_needs_out 2 "--out DIR is required" "$PADDLE" gen movielens
expect_error gen_unknown_set 2 "unknown data set 'imdb'" "$PADDLE" gen imdb --out x
expect_error gen_bad_count 2 "--ratings must be an integer" "$PADDLE" gen movielens --out x --ratings 5

# the test RMSE of the last pass: below 80% of the mean baseline's
# (a model that learned nothing sits at the mean)
rmse_ok() { # NAME LOG
    local rmse
    rmse=$(grep -o 'pass [0-9]* done.*test rmse [0-9.]*' <<<"$2" | tail -n 1 | awk '{print $NF}')
    if [ -z "$rmse" ]; then
        fail "$1" "no 'test rmse' in the pass log: $(tail -n 5 <<<"$2")"
    elif awk -v r="$rmse" -v m="$mean" 'BEGIN { exit !(r < 0.8 * m) }'; then
        pass "$1"
        echo "$1: test rmse $rmse (mean $mean, truth $truth)"
    else
        fail "$1" "test rmse $rmse is not below 0.8 x the mean baseline $mean"
    fi
}

run_capture "$PADDLE" train recommendation.lua --passes=4 --log_period=100000
if [ $rc -ne 0 ]; then fail train "paddle train failed: $out"
else rmse_ok train "$out"; fi
if [ -f output/pass-00003/manifest.json ] && [ -f output/pass-00003/embedding_0.w_0.npy ]; then pass train_model_saved
else fail train_model_saved "no output/pass-00003 with the user embedding"; fi

# paddle predict over the held-out ratings: user id, movie id, rating a line,
# and the test cost of pass 3's line
want=$(grep -o 'pass 3 done.*test cost [0-9.e+-]*' <<<"$out" | awk '{print $NF}')
run_capture "$PADDLE" predict recommendation.lua --model output/pass-00003 --input data/ml-gen --part test --output pred.csv
got=$(sed -n 's/.*test cost \([^,]*\),.*/\1/p' <<<"$out")
if [ "$rc" -eq 0 ] && [ -n "$want" ] && [ "$got" = "$want" ] && [ "$(wc -l <pred.csv)" -gt 1000 ] &&
    awk -F, 'NF != 3 || $1 < 1 || $1 > 6040 || $2 < 1 || $2 > 3952 || $3 < -5 || $3 > 5 { bad = 1 } END { exit bad }' pred.csv; then
    pass predict
else
    fail predict "rc $rc, test cost '$got' vs pass 3's '$want': $out $(head -n 2 pred.csv)"
fi

run_capture "$PADDLE" run recommendation.lua --passes=5 --log_period=100000 --save_dir=run_out
if [ $rc -ne 0 ]; then fail run "paddle run failed (rc $rc): $(tail -n 20 <<<"$out")"
else rmse_ok run "$out"; fi

# a malformed line stops the job (exit 2: no restart would mend it), naming
# the file and line, and the option that named the data
printf '1::F::1::10::48067\n2::M::60::16::70072\n' >bad_users.dat
mkdir -p data/bad && cp bad_users.dat data/bad/users.dat && cp data/ml-gen/movies.dat data/ml-gen/ratings.dat data/bad/
expect_error malformed_line 2 "option --train: data/bad/users.dat:2: Age must be one of 1, 18, 25, 35, 45, 50, 56, got '60'" \
    "$PADDLE" train recommendation.lua --train=data/bad --test=data/bad --passes=1
