# ctr.sh - CTR on generated Criteo-format data: paddle gen criteo, then
# recipes/ctr_dnn.lua trained with paddle train and with paddle run (2
# pservers, 2 trainers), each reaching a test AUC well above a constant's
# and near the planted model's; wide_deep.lua and ctr_lr.lua train too; malformed Criteo
# lines are named by file:line. paddle gen criteo stopped midway leaves the
# files it would replace as they were, and so does a full disk.
. "$ROOT/tests/integration/lib.sh"

mkdir -p recipes && cp "$ROOT/recipes/ctr_dnn.lua" "$ROOT/recipes/wide_deep.lua" "$ROOT/recipes/ctr_lr.lua" recipes/
run_capture "$PADDLE" gen criteo --out recipes/data/criteo-gen --rows 20000 --seed 5
planted=$(sed -n 's/^test AUC of the planted model: //p' <<<"$out")
const=$(sed -n 's/^test AUC of a constant predictor: //p' <<<"$out")
if [ $rc -eq 0 ] && [ -s recipes/data/criteo-gen/train.txt ] && [ -s recipes/data/criteo-gen/test.txt ] &&
    [ "$const" = "0.5000" ] && awk -v p="$planted" 'BEGIN { exit !(p > 0.7 && p < 0.95) }'; then
    pass gen
    echo "planted model's test AUC $planted"
else
    fail gen "rc $rc: $out"
    exit 0
fi
fields=$(head -n 1 recipes/data/criteo-gen/train.txt | awk -F'\t' '{print NF}')
rate=$(awk -F'\t' '{ c += $1 } END { printf "%.3f", c / NR }' recipes/data/criteo-gen/train.txt)
if [ "$fields" = 40 ] && awk -v r="$rate" 'BEGIN { exit !(r > 0.2 && r < 0.3) }'; then pass gen_shape
else fail gen_shape "first line has $fields fields, click rate $rate"; fi

"$PADDLE" gen criteo --out again --rows 20000 --seed 5 >/dev/null
if cmp -s recipes/data/criteo-gen/train.txt again/train.txt && cmp -s recipes/data/criteo-gen/test.txt again/test.txt
then pass gen_deterministic; else fail gen_deterministic "two runs with seed 5 differ"; fi
expect_error gen_rows 2 "--rows must be" "$PADDLE" gen criteo --out x --rows 5
echo text >notadir.txt
expect_error gen_out_not_a_directory 2 "paddle gen: --out = notadir.txt: not a directory" \
    "$PADDLE" gen criteo --out notadir.txt --rows 1000
# interrupted (Ctrl-C) while it writes: the files of the run before stay
# whole, no partial file is left, and that is said
"$PADDLE" gen criteo --out again --rows 3000000 --seed 6 >gen.out 2>&1 &
gen=$!
for i in $(seq 1 100); do ls again/*.partial-* >/dev/null 2>&1 && break; sleep 0.1; done
kill -INT $gen; wait $gen; rc=$?
if [ $rc -ne 0 ] && ! ls again/*.partial-* >/dev/null 2>&1 && cmp -s recipes/data/criteo-gen/train.txt again/train.txt &&
   cmp -s recipes/data/criteo-gen/test.txt again/test.txt &&
   grep -qx 'paddle: stopped by a signal: again/train.txt left as it was' gen.out; then pass gen_interrupted_keeps_earlier
else fail gen_interrupted_keeps_earlier "rc $rc: $(ls -l again; cat gen.out)"; fi
# out of disk (a 300 KiB tmpfs): said, and the earlier files stay whole
mkdir -p small
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=300k tmpfs small 2>/dev/null; then
    "$PADDLE" gen criteo --out small/c --rows 1000 --seed 1 >/dev/null 2>&1 && cp small/c/train.txt small_train.txt
    run_capture "$PADDLE" gen criteo --out small/c --rows 20000 --seed 2
    if [ $rc -eq 1 ] && [[ "$out" == *"cannot write small/c/train.txt: No space left on device"* ]] &&
       ! ls small/c/*.partial-* >/dev/null 2>&1 && cmp -s small/c/train.txt small_train.txt &&
       [ "$(wc -l <small/c/test.txt)" -eq 100 ]; then pass gen_disk_full_keeps_earlier
    else fail gen_disk_full_keeps_earlier "rc $rc: $out $(ls -l small/c)"; fi
    umount small
else
    skip gen_disk_full_keeps_earlier "needs root to mount a small tmpfs"
fi

# the test AUC of the last pass: above 0.68 and within 0.12 of the planted
# model's (20,000 rows are few for a million-row table)
auc_ok() { # NAME LOG
    local auc
    auc=$(grep -o 'pass [0-9]* done.*auc [0-9.]*' <<<"$2" | tail -n 1 | awk '{print $NF}')
    echo "$1: AUC per pass: $(grep -o 'pass [0-9]* done.*auc [0-9.]*' <<<"$2" | awk '{printf "%s ", $NF}')"
    if [ -z "$auc" ]; then
        fail "$1" "no 'auc' in the pass log: $(tail -n 5 <<<"$2")"
    elif awk -v a="$auc" -v p="$planted" 'BEGIN { exit !(a > 0.68 && a > p - 0.12) }'; then
        pass "$1"
    else
        fail "$1" "test AUC $auc: not above 0.68 and within 0.12 of the planted $planted"
    fi
}

run_capture "$PADDLE" train recipes/ctr_dnn.lua --passes=2
if [ $rc -ne 0 ]; then fail train "paddle train failed: $out"
else auc_ok train "$out"; fi

run_capture "$PADDLE" train recipes/wide_deep.lua --passes=2 --save_dir=wd_out
if [ $rc -ne 0 ]; then fail wide_deep "paddle train failed: $out"
else auc_ok wide_deep "$out"; fi

# the logistic regression: 20,000 rows teach it little, but it learns
run_capture "$PADDLE" train recipes/ctr_lr.lua --passes=3 --early_stop=0 --save_dir=lr_out
lr_auc=$(grep -o 'pass [0-9]* done.*auc [0-9.]*' <<<"$out" | tail -n 1 | awk '{print $NF}')
if [ $rc -eq 0 ] && awk -v a="$lr_auc" 'BEGIN { exit !(a > 0.65) }'; then pass logistic_regression
else fail logistic_regression "rc $rc, test AUC '$lr_auc' (wanted > 0.65): $(tail -n 3 <<<"$out")"; fi

run_capture "$PADDLE" run recipes/ctr_dnn.lua --passes=4 --save_dir=run_out
if [ $rc -ne 0 ]; then fail run "paddle run failed (rc $rc): $(tail -n 20 <<<"$out")"
else auc_ok run "$out"; fi

# many files in a list, each trainer reading its own: the same samples
mkdir -p recipes/data/split
split -n l/4 -d recipes/data/criteo-gen/train.txt recipes/data/split/part-
(cd recipes/data/split && ls part-* >train.list)
run_capture "$PADDLE" run recipes/ctr_dnn.lua --passes=1 --train=data/split/train.list --save_dir=list_out
n=$(grep -o 'trainer [01]\].*pass 0 done: [0-9]* samples' <<<"$out" | awk '{ s += $(NF-1) } END { print s }')
if [ $rc -eq 0 ] && [ "$n" = 18000 ]; then pass train_list
else fail train_list "rc $rc, $n samples over both trainers (want 18000): $(tail -n 5 <<<"$out")"; fi

# malformed lines: file:line, exit 2 (a mistake in what train was given),
# and on_error = "skip" goes on
mkdir -p recipes/data/bad
{ head -n 3 recipes/data/criteo-gen/test.txt
  head -n 1 recipes/data/criteo-gen/test.txt | awk -F'\t' -v OFS='\t' '{ $20 = "zz12"; print }'
  head -n 1 recipes/data/criteo-gen/test.txt | cut -f 1-30
  tail -n 5 recipes/data/criteo-gen/test.txt; } >recipes/data/bad/bad.txt
run_capture "$PADDLE" train recipes/ctr_dnn.lua --train=data/bad/bad.txt --test=data/bad/bad.txt --passes=1
if [ $rc -eq 2 ] && grep -q "^paddle: option --train: recipes/data/bad/bad.txt:4: field 20 (C6) 'zz12' is not hexadecimal (data.on_error = \"skip\" would skip such lines)$" <<<"$out"
then pass malformed_hex; else fail malformed_hex "rc $rc: $(tail -n 3 <<<"$out")"; fi
run_capture "$PADDLE" train recipes/ctr_dnn.lua --train=data/bad/bad.txt --test=data/bad/bad.txt --passes=2 \
    --on_error=skip --save_dir=skip_out
# the skipped lines are said once, not again in every pass (once for the
# train part, once for the test part: both read this file)
if [ $rc -eq 0 ] && grep -q "bad.txt:5: 30 tab-separated fields, criteo lines have 40" <<<"$out" &&
    grep -q "pass 0 done: 8 samples" <<<"$out" && grep -q "pass 1 done: 8 samples" <<<"$out" &&
    [ "$(grep -c 'skipping: .*bad.txt:5: 30 tab-separated' <<<"$out")" -eq 2 ] &&
    [ "$(grep -c '2 malformed lines skipped in each pass (data.on_error = "skip")' <<<"$out")" -eq 1 ]; then pass malformed_skip
else fail malformed_skip "rc $rc: $(tail -n 8 <<<"$out")"; fi
