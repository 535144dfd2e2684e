# predict.sh - `paddle predict`: a trained fit-a-line model's predictions
# against NumPy over the saved .npy files, the test cost against the pass
# line of the same model, csv input without labels, and the errors.
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3

"$ROOT/recipes/prepare.sh" || { fail prepare "recipes/prepare.sh failed"; exit 0; }
data="$ROOT/recipes/data/uci_housing/housing.data"
mkdir -p data/uci_housing && cp "$data" data/uci_housing/

cat >fit.lua <<'R'
data { train = "data/uci_housing/housing.data", test = "data/uci_housing/housing.data", format = "uci_housing" }
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local p = nn.fc(x, 1)
  return { cost = nn.square_error_cost(p, y), predict = p }
end
optimizer = nn.sgd { learning_rate = 0.01 }
settings { batch_size = 20, passes = 3 }
R
run_capture "$PADDLE" train fit.lua
if [ "$rc" -ne 0 ]; then fail train "paddle train failed: $out"; exit 0; fi
pass_cost=$(printf '%s\n' "$out" | sed -n 's/.*pass 2 done:.*test cost \([^,]*\),.*/\1/p')

# every row of the file, in file order: one line each, as NumPy computes them
"$PADDLE" predict fit.lua --model output/pass-00002 --input data/uci_housing/housing.data >all.csv 2>all.err
rc=$?
rows=$(wc -l <all.csv)
if [ "$rc" -eq 0 ] && [ "$rows" -eq 506 ]; then pass predict-rows; else fail predict-rows "exit $rc, $rows rows: $(cat all.err)"; fi
if $PY - "$data" output/pass-00002 all.csv <<'P'; then pass predict-matches-numpy; else fail predict-matches-numpy "predictions differ from x @ w + b"; fi
import sys
import numpy as np
rows = np.loadtxt(sys.argv[1], dtype=np.float64)
x = rows[:, :13]
x = (x - x.mean(0)) / (x.max(0) - x.min(0))
w = np.load(sys.argv[2] + "/fc_0.w_0.npy").astype(np.float64)
b = np.load(sys.argv[2] + "/fc_0.b_0.npy").astype(np.float64).reshape(-1)
want = (x @ w).reshape(-1) + b[0]
got = np.loadtxt(sys.argv[3], dtype=np.float64, ndmin=1)
sys.exit(0 if got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-4) else 1)
P

# --input as the shell names it from another directory (the recipe's data
# paths are beside the recipe; a command-line path is from here)
mkdir -p elsewhere
(cd elsewhere && "$PADDLE" predict ../fit.lua --model ../output/pass-00002 --input ../data/uci_housing/housing.data \
    >../away.csv 2>../away.err)
rc=$?
if [ "$rc" -eq 0 ] && cmp -s all.csv away.csv; then pass predict-input-from-cwd
else fail predict-input-from-cwd "exit $rc: $(cat away.err)"; fi

# the recipe's test part: the cost the pass line reported for this model
run_capture "$PADDLE" predict fit.lua --model output/pass-00002 --input data/uci_housing/housing.data --part test \
    --output test.csv
cost=$(printf '%s\n' "$out" | sed -n 's/.*test cost \([^,]*\),.*/\1/p')
if [ "$rc" -eq 0 ] && [ -n "$pass_cost" ] && [ "$cost" = "$pass_cost" ] && [ "$(wc -l <test.csv)" -eq 102 ] &&
    [[ "$out" == *"test rmse "* ]]; then
    pass predict-test-cost
else
    fail predict-test-cost "exit $rc, cost '$cost' vs the pass line's '$pass_cost': $out"
fi

# csv: the label column may be absent; then no test cost
cat >csv.lua <<'R'
data { train = "train.csv", format = "csv", columns = { "x=1-13", "y=14" } }
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local p = nn.fc(x, 1)
  return { cost = nn.square_error_cost(p, y), predict = p }
end
optimizer = nn.sgd { learning_rate = 0.000001 }
settings { batch_size = 7, passes = 1 }
R
$PY -c "
import numpy as np
r = np.loadtxt('$data')
np.savetxt('train.csv', r[:50], delimiter=',', fmt='%.6g')
np.savetxt('nolabel.csv', r[:50, :13], delimiter=',', fmt='%.6g')"
"$PADDLE" train csv.lua --save_dir=csv_out >csv_train.log 2>&1 || fail csv-train "$(tail -1 csv_train.log)"
run_capture "$PADDLE" predict csv.lua --model csv_out/pass-00000 --input nolabel.csv --output nl.csv
"$PADDLE" predict csv.lua --model csv_out/pass-00000 --input train.csv --output wl.csv 2>/dev/null
if [ "$rc" -eq 0 ] && [ "$(wc -l <nl.csv)" -eq 50 ] && cmp -s nl.csv wl.csv && [[ "$out" == *"without labels"* ]] &&
    [[ "$out" != *"test cost "*","* ]]; then
    pass predict-csv-without-labels
else
    fail predict-csv-without-labels "exit $rc: $out"
fi
# --part train or test where the test part is no part of the same file
# (csv: data.test) is refused, rather than predict every row
expect_error predict-part-csv 2 "paddle predict: --part test applies to uci_housing and movielens data, which hold a test part out of one file; csv data is predicted whole (its test part is a file of its own, data.test: give that as --input)" \
    "$PADDLE" predict csv.lua --model csv_out/pass-00000 --input train.csv --part test
run_capture "$PADDLE" predict csv.lua --model csv_out/pass-00000 --input train.csv --part all --output pa.csv
if [ "$rc" -eq 0 ] && cmp -s pa.csv wl.csv; then pass predict-part-all-csv
else fail predict-part-all-csv "exit $rc: $out"; fi

run_capture "$PADDLE" help predict
if [ "$rc" -eq 0 ] && [[ "$out" == *"usage: paddle predict RECIPE --model DIR --input FILE"* ]]; then pass predict-help
else fail predict-help "exit $rc: $out"; fi

# errors: one line each; a model that is not there is a fault (1), one
# that is not this recipe's a mistake in what predict was given (2)
expect_error predict-no-model-dir 1 "model nope: no such directory" \
    "$PADDLE" predict fit.lua --model nope --input data/uci_housing/housing.data
mkdir -p empty
expect_error predict-not-a-model 2 "no manifest.json" \
    "$PADDLE" predict fit.lua --model empty --input data/uci_housing/housing.data
sed 's/nn.fc(x, 1)/nn.fc(nn.fc(x, 4), 1)/' fit.lua >deeper.lua
expect_error predict-other-recipe-names 2 "a model of another recipe?" \
    "$PADDLE" predict deeper.lua --model output/pass-00002 --input data/uci_housing/housing.data
sed -e 's/nn.data("x", 13)/nn.data("x", 12)/' -e 's/x=1-13/x=1-12/' -e 's/y=14/y=13/' csv.lua >narrow.lua
expect_error predict-other-recipe-shapes 2 "differs from the model's (12, 1): a model of another recipe?" \
    "$PADDLE" predict narrow.lua --model csv_out/pass-00000 --input train.csv
# a parameter's file cut short is damage, not another recipe's model
cp -r csv_out/pass-00000 cut_model
truncate -s -8 cut_model/fc_0.w_0.npy
expect_error predict-damaged-model 2 "fc_0.w_0.npy: truncated data: the file is damaged (cut short, or written over)" \
    "$PADDLE" predict csv.lua --model cut_model --input train.csv
# a parameter's file its manifest lists, deleted, is named as missing
cp -r csv_out/pass-00000 dmg
rm dmg/fc_0.b_0.npy
expect_error predict-model-file-missing 2 "paddle predict: model dmg: fc_0.b_0.npy, listed in its manifest.json, is missing: save or copy the model again" \
    "$PADDLE" predict csv.lua --model dmg --input train.csv
# one saved as float64 says so, and no hint of damage or of another recipe
cp -r csv_out/pass-00000 f64_model
$PY -c "
import numpy as np
np.save('f64_model/fc_0.w_0.npy', np.load('f64_model/fc_0.w_0.npy').astype(np.float64))"
run_capture "$PADDLE" predict csv.lua --model f64_model --input train.csv
if [ "$rc" -eq 2 ] && [[ "$out" == *"fc_0.w_0.npy: not float32 little-endian ('<f4')" ]]; then pass predict-float64-model
else fail predict-float64-model "exit $rc: $out"; fi
$PY -c "
import numpy as np
np.savetxt('short.csv', np.loadtxt('$data')[:5, :10], delimiter=',', fmt='%.6g')"
expect_error predict-missing-slot 2 "10 fields, the model reads 13" \
    "$PADDLE" predict csv.lua --model csv_out/pass-00000 --input short.csv --output short.out
# an error in the data leaves no output behind
if [ ! -e short.out ] && [ -z "$(ls short.out.partial-* 2>/dev/null)" ]; then pass predict-data-error-no-output
else fail predict-data-error-no-output "$(ls short.out*)"; fi
sed 's/return { cost = nn.square_error_cost(p, y), predict = p }/return nn.square_error_cost(p, y)/' fit.lua >nopred.lua
expect_error predict-no-predict-layer 2 "the model has no predict layer" \
    "$PADDLE" predict nopred.lua --model output/pass-00002 --input data/uci_housing/housing.data
expect_error predict-input-missing 1 "paddle predict: option --input: cannot open data file nothere.data: No such file or directory" \
    "$PADDLE" predict fit.lua --model output/pass-00002 --input nothere.data
mkdir -p sub && cp fit.lua sub/ && cp "$data" sub/only_beside.data
expect_error predict-input-missing-twice 1 "paddle predict: option --input: cannot open data file sub/nothere.data: No such file or directory (nor nothere.data here)" \
    "$PADDLE" predict sub/fit.lua --model output/pass-00002 --input nothere.data
# found beside the recipe: no word of it in another error
run_capture "$PADDLE" predict sub/fit.lua --model nope --input only_beside.data
if [ "$rc" -eq 1 ] && [[ "$out" == *"model nope: no such directory"* ]] && [[ "$out" != *"(nor "* ]]; then
    pass predict-input-beside-not-blamed
else
    fail predict-input-beside-not-blamed "exit $rc: $out"
fi
expect_error predict-needs-model 2 "--model DIR and --input FILE are required" "$PADDLE" predict fit.lua --input x
# an --output in a directory that is not there is a mistake (2); a predict
# that fails leaves an earlier output as it was, and no partial file
expect_error predict-output-dir-missing 2 "paddle predict: option --output: cannot write nodir/p.csv: No such file or directory" \
    "$PADDLE" predict fit.lua --model output/pass-00002 --input data/uci_housing/housing.data --output nodir/p.csv
cp test.csv kept.csv
run_capture "$PADDLE" predict deeper.lua --model output/pass-00002 --input data/uci_housing/housing.data --output test.csv
if [ "$rc" -eq 2 ] && cmp -s kept.csv test.csv && [ -z "$(ls test.csv.partial-* 2>/dev/null)" ]; then
    pass predict-failed-keeps-output
else
    fail predict-failed-keeps-output "exit $rc, $(wc -l <test.csv) lines (had $(wc -l <kept.csv)): $out"
fi
# replaced when predict succeeds, keeping the file's mode; a link such as
# /dev/stdout is written through
chmod 600 test.csv
run_capture "$PADDLE" predict fit.lua --model output/pass-00002 --input data/uci_housing/housing.data --output test.csv
if [ "$rc" -eq 0 ] && cmp -s all.csv test.csv && [ "$(stat -c %a test.csv)" = 600 ]; then pass predict-output-replaced
else fail predict-output-replaced "exit $rc, mode $(stat -c %a test.csv): $out"; fi
"$PADDLE" predict fit.lua --model output/pass-00002 --input data/uci_housing/housing.data --output /dev/stdout \
    >via_stdout.csv 2>via_stdout.err
rc=$?
if [ "$rc" -eq 0 ] && cmp -s all.csv via_stdout.csv && [ -L /dev/stdout ]; then pass predict-output-dev-stdout
else fail predict-output-dev-stdout "exit $rc: $(cat via_stdout.err)"; fi
expect_error predict-bad-part 2 "--part must be all, train or test" \
    "$PADDLE" predict fit.lua --model output/pass-00002 --input x --part=some
