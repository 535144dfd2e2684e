#!/usr/bin/env bash
# ctr_auc.sh PADDLE [ROWS] [PASSES] - CTR-DNN's test AUC against PyTorch's and
# a logistic regression's on the same generated Criteo-format data.
#
# `paddle gen criteo --rows ROWS` (default 300000; 90% train, 10% test),
# then, each for PASSES passes (default 2) with early stopping off:
#   recipes/ctr_dnn.lua with paddle run (2 pservers x 2 trainers, async),
#   recipes/ctr_dnn.lua with paddle train (one process),
#   the same model in PyTorch (bench/torch_models.py: the same feature
#     folding, init, Adam, batch), if python3-torch is installed,
#   recipes/ctr_lr.lua (logistic regression) with paddle train.
# Prints the test AUC after every pass, the best pass of each, its wall time,
# and the planted model's AUC (the best any model can expect). Part of
# make bench (bench/run.sh); alone:
#
#   BENCH_THREADS=2 bench/ctr_auc.sh ./paddle 2000000 2
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
paddle=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
rows=${2:-300000}
passes=${3:-2}
threads=${BENCH_THREADS:-2}
export OPENBLAS_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE
PY=/usr/bin/python3
work=$(mktemp -d /tmp/pd-ctr-auc.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"

# the test AUC after each pass, from a paddle log
aucs() { grep -v '^paddle: ' | grep -o 'pass [0-9]* done.*auc [0-9.]*' | awk '{printf "%s ", $NF}'; }  # the roles' lines, not the launcher's summary
best() { tr ' ' '\n' | awk 'NF && $1 > b { b = $1 } END { printf "%.4f", b }'; }
# run NAME COMMAND...: the command's output into NAME.out, its wall time into secs[NAME]
declare -A secs
run() {
    local name=$1 t0
    shift
    t0=$(date +%s.%N)
    "$@" >"$name.out" 2>&1 || echo "  $name failed (exit $?): $(tail -n 3 "$name.out")"
    secs[$name]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
}

t0=$(date +%s.%N)
"$paddle" gen criteo --out data/criteo-gen --rows "$rows" >gen.out 2>&1 || { cat gen.out; exit 1; }
cp "$root/recipes/ctr_dnn.lua" "$root/recipes/ctr_lr.lua" .
echo "== CTR test AUC: $rows generated rows (90% train), $passes passes, batch 512, Adam, $threads BLAS threads"
echo "  $(grep -o 'test AUC of the planted model: [0-9.]*' gen.out), of a constant predictor 0.5"

common=(--passes="$passes" --early_stop=0 --log_period=1000000)
run dnn_run "$paddle" run ctr_dnn.lua "${common[@]}" --pservers=2 --trainers=2 --save_dir=o_run
run dnn_train "$paddle" train ctr_dnn.lua "${common[@]}" --save_dir=o_train
run lr_train "$paddle" train ctr_lr.lua "${common[@]}" --save_dir=o_lr
have_torch=0
if $PY -c 'import torch' 2>/dev/null; then
    have_torch=1
    run dnn_torch $PY "$here/torch_models.py" ctr_auc data/criteo-gen/train.txt data/criteo-gen/test.txt "$passes"
fi

line() { # LABEL NAME
    local a
    a=$(aucs <"$2.out")
    printf '  %-44s %-28s best %s  %5s s\n' "$1" "$a" "$(best <<<"$a")" "${secs[$2]}"
}
line "ctr_dnn, paddle run (2 pservers x 2 trainers)" dnn_run
line "ctr_dnn, paddle train" dnn_train
[ $have_torch = 1 ] && line "ctr_dnn, PyTorch (SparseAdam + Adam)" dnn_torch
line "ctr_lr (logistic regression), paddle train" lr_train
b_run=$(aucs <dnn_run.out | best)
b_train=$(aucs <dnn_train.out | best)
b_lr=$(aucs <lr_train.out | best)
awk -v r="$b_run" -v t="$b_train" -v l="$b_lr" 'BEGIN {
    printf "  best AUC: paddle run - paddle train = %+.4f (target: within 0.005)\n", r - t
    printf "  best AUC: paddle run - logistic regression = %+.4f (target: > 0)\n", r - l }'
if [ $have_torch = 1 ]; then
    b_torch=$(aucs <dnn_torch.out | best)
    awk -v r="$b_run" -v t="$b_train" -v p="$b_torch" 'BEGIN {
        printf "  best AUC: paddle run - PyTorch = %+.4f, paddle train - PyTorch = %+.4f (target: within 0.005)\n", r - p, t - p }'
else
    echo "  no PyTorch AUC: python3-torch is not installed"
fi
echo "  wall time of the whole comparison: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') s"
