# hashtab.sh - growing tables (embeddings over 64-bit ids without a range)
# on generated Criteo-format data: paddle check prints their bytes per row;
# paddle train reaches a sane AUC and saves NAME.keys.npy + NAME.npy that
# NumPy reads; recipes/ctr_hash.lua (one table for 26 slots) runs async;
# 2 pservers x 2 sync trainers of batch b give the model of
# paddle train with batch 2b (min_count and ttl included); the pservers'
# checkpoints hold the tables, a pserver starts from one and --resume equals
# an uninterrupted run; recipe errors
# name file:line.
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3

"$PADDLE" gen criteo --out data --rows 6000 --seed 11 >gen.txt 2>&1 || { fail gen "$(cat gen.txt)"; exit 0; }
planted=$(sed -n 's/^test AUC of the planted model: //p' gen.txt)

recipe() { # NAME EMBEDDING_OPTIONS SETTINGS
    cat >"$1" <<R
data { train = "data/train.txt", test = "data/test.txt", format = "criteo" }
model = function(nn)
  local label, dense = nn.data("label", 1), nn.data("dense", 13)
  local e = nn.embedding(nn.id_list("sparse"), 8, { param = "feat", init = { "uniform", -0.05, 0.05 }, $2 })
  local x = nn.concat { nn.seq_pool(e, "sum"), dense }
  local logit = nn.fc(nn.fc(x, 16, "relu"), 1)
  return { cost = nn.sigmoid_cross_entropy(logit, label), predict = logit, metrics = { auc = nn.auc(logit, label) } }
end
optimizer = nn.adam { learning_rate = 0.005 }
settings { $3 }
R
}

# --- paddle check --------------------------------------------------------------
recipe ctr.lua "ttl = 4, max_rows = 100000" "batch_size = 64, passes = 3, seed = 2"
run_capture "$PADDLE" check ctr.lua
if [ $rc -eq 0 ] && grep -q 'growing    feat: [0-9]* to [0-9]* bytes per row (8 floats + adam state 64 B' <<<"$out"
then pass check_bytes_per_row; else fail check_bytes_per_row "rc $rc: $out"; fi

# --- paddle train: AUC, keys.npy + npy -----------------------------------------
run_capture "$PADDLE" train ctr.lua --save_dir=local
auc=$(grep -o 'pass 2 done.*auc [0-9.]*' <<<"$out" | awk '{print $NF}')
if [ $rc -ne 0 ]; then fail train_auc "paddle train failed: $(tail -n 5 <<<"$out")"
elif awk -v a="$auc" -v p="$planted" 'BEGIN { exit !(a > 0.65 && a < p + 0.02) }'; then
    pass train_auc; echo "paddle train: test AUC $auc (planted model $planted)"
else fail train_auc "test AUC '$auc' (planted $planted)"; fi
if grep -q 'table feat: pass 2: [0-9]* rows, 0 ids waiting for min_count, 0 evicted (ttl 4)' <<<"$out"
then pass train_table_log; else fail train_table_log "$(grep 'table feat' <<<"$out")"; fi

if msg=$($PY - local/pass-00002 <<'P'
import json, sys
import numpy as np
d = sys.argv[1]
keys, rows = np.load(d + "/feat.keys.npy"), np.load(d + "/feat.npy")
m = [p for p in json.load(open(d + "/manifest.json"))["params"] if p["name"] == "feat"][0]
assert keys.dtype == np.uint64 and rows.dtype == np.float32, (keys.dtype, rows.dtype)
assert rows.shape == (len(keys), 8), (rows.shape, keys.shape)
assert len(np.unique(keys)) == len(keys), "repeated ids"
assert m["table"] == "hash" and m["shape"] == [len(keys), 8] and m["keys"] == "feat.keys.npy", m
# 26 columns of categorical values, each its own feature: thousands of ids
assert 1000 < len(keys) < 6000 * 26, len(keys)
print("%d rows, ids unique, %s" % (len(keys), m))
P
); then pass npy_export; echo "$msg"; else fail npy_export "$msg"; fi

# predict reads the table back: the same test AUC
run_capture "$PADDLE" predict ctr.lua --model local/pass-00002 --input data/test.txt
if [ $rc -eq 0 ] && grep -q "auc ${auc}\$" <<<"$out"; then pass predict_loads_table
else fail predict_loads_table "rc $rc, wanted auc $auc: $(tail -n 2 <<<"$out")"; fi

# recipes/ctr_hash.lua: one table shared by the 26 slots nn.id("Ck"), async over 2 pservers
mkdir -p recipes && ln -s ../data recipes/data-gen && cp "$ROOT/recipes/ctr_hash.lua" recipes/ &&
    sed -i 's|data/criteo-gen/|data-gen/|' recipes/ctr_hash.lua
run_capture "$PADDLE" run recipes/ctr_hash.lua --passes=1 --max_batches=30 --batch_size=64 --save_dir=shared
n=$($PY -c "import numpy as np; k = np.load('shared/pass-00000/SparseFeatFactors.keys.npy'); print(len(k))" 2>&1)
if [ $rc -eq 0 ] && [ "$n" -gt 500 ] 2>/dev/null; then pass shared_table_async; echo "ctr_hash.lua: $n rows saved"
else fail shared_table_async "rc $rc, rows '$n': $(tail -n 5 <<<"$out")"; fi

# --- sync 2 x batch b == local batch 2b -----------------------------------------
recipe sync.lua "min_count = 2, ttl = 1" "passes = 2, max_batches = 8, seed = 3, mode = 'sync'"
run_capture "$PADDLE" train sync.lua --batch_size=32 --save_dir=sl
[ $rc -eq 0 ] || fail sync_equals_local "paddle train failed: $(tail -n 5 <<<"$out")"
lout=$out
run_capture "$PADDLE" run sync.lua --batch_size=16 --trainers=2 --pservers=2 --save_dir=sd
[ $rc -eq 0 ] || fail sync_equals_local "paddle run failed: $(tail -n 20 <<<"$out")"
if msg=$($PY - sl/pass-00001 sd/pass-00001 <<'P'
import json, sys
import numpy as np
a, b = sys.argv[1], sys.argv[2]
names = [p["name"] for p in json.load(open(a + "/manifest.json"))["params"]]
worst = 0.0
for n in names:
    x, y = np.load("%s/%s.npy" % (a, n)), np.load("%s/%s.npy" % (b, n))
    if n == "feat":  # rows in any order: match them by id
        ka, kb = np.load(a + "/feat.keys.npy"), np.load(b + "/feat.keys.npy")
        assert len(ka) == len(kb) and set(ka.tolist()) == set(kb.tolist()), (len(ka), len(kb))
        assert len(ka) > 100, len(ka)
        x, y = x[np.argsort(ka)], y[np.argsort(kb)]
    assert x.shape == y.shape, (n, x.shape, y.shape)
    err = np.abs(x - y).max() / max(1e-6, np.abs(x).max())
    worst = max(worst, err)
    if err > 1e-4:
        print("%s differs: relative %.3g" % (n, err)); sys.exit(1)
print("max relative difference %.3g over %d parameters, %d table rows" % (worst, len(names), len(ka)))
P
); then pass sync_equals_local; echo "$msg"; else fail sync_equals_local "$msg"; fi
# min_count keeps ids seen once waiting (each pass reads the same 8 batches,
# so ttl = 1 evicts nothing here; tests/unit covers it): both sides alike
alike=1
for pass in 0 1; do
    l=$(grep -o "table feat: pass $pass: [0-9]* rows, [0-9]* ids waiting for min_count, [0-9]* evicted" <<<"$lout" |
        awk '{print $5, $7, $12}')
    p=$(grep -o "table feat: pass $pass: [0-9]* rows, [0-9]* ids waiting for min_count, [0-9]* evicted" <<<"$out" |
        awk '{r += $5; w += $7; e += $12} END {print r, w, e}')
    echo "pass $pass: local rows, waiting, evicted: $l; the 2 pservers': $p"
    [ -n "$l" ] && [ "$l" = "$p" ] || alike=0
    [ $pass = 0 ] && { awk '{exit !($2 > 0)}' <<<"$l" || alike=0; }
done
if [ $alike = 1 ]; then pass admission_alike; else fail admission_alike "see the lines above"; fi

# --- the cap ----------------------------------------------------------------------
recipe cap.lua "max_rows = 500" "batch_size = 64, passes = 1, seed = 2"
run_capture "$PADDLE" run cap.lua --trainers=1 --pservers=2 --save_dir=cap
n=$($PY -c "import numpy as np; print(len(np.load('cap/pass-00000/feat.keys.npy')))" 2>&1)
if [ $rc -eq 0 ] && [ "$n" -le 1000 ] && [ "$(grep -c 'max_rows = 500 reached' <<<"$out")" -eq 2 ]; then
    pass max_rows_cap; echo "2 pservers capped at 500 rows each: $n rows saved"
else fail max_rows_cap "rc $rc, $n rows: $(grep -E 'max_rows|table feat' <<<"$out" | head -n 5)"; fi

# --- checkpoints hold the tables; a pserver starts from one ---------------------------
recipe ck.lua "" "batch_size = 64, passes = 2, max_batches = 5, seed = 2, mode = 'sync'"
run_capture "$PADDLE" run ck.lua --trainers=1 --pservers=1 --checkpoint_dir=ckpt --checkpoint_period=5 --save_dir=ck
if [ $rc -eq 0 ] && [ -f ckpt/ckpt-10/complete ] && [ -s ckpt/ckpt-10/pserver-0/table-0.hash ] &&
    grep -q '^file table-0.hash ' ckpt/ckpt-10/pserver-0/shard.txt; then pass checkpoint_holds_table
else fail checkpoint_holds_table "rc $rc: $(ls -R ckpt 2>&1 | head -n 20)"; fi
port=$(free_port_pair)
export PADDLE_JOB_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
one="--pservers=1 --trainers=1"
"$PADDLE" pserver ck.lua $one --pserver_id=0 --port=$port --bind=127.0.0.1 --init_shard=ckpt/ckpt-10/pserver-0 \
    >ps.log 2>&1 &
ps=$!
run_capture timeout 60 "$PADDLE" trainer ck.lua $one --pservers=127.0.0.1:$port --trainer_id=0 --passes=1 \
    --max_batches=1 --save_dir=resumed --server_timeout=20
kill "$ps" 2>/dev/null
wait "$ps"
if [ $rc -eq 0 ] && msg=$($PY - <<'P'
import sys
import numpy as np
def table(d):
    return dict(zip(np.load(d + "/feat.keys.npy").tolist(), np.load(d + "/feat.npy")))
saved, resumed = table("ck/pass-00001"), table("resumed/pass-00000")
missing = set(saved) - set(resumed)
diff = max(np.abs(saved[k] - resumed[k]).max() for k in saved)
print("%d rows saved, %d after one more batch, %d lost, largest change %.3g" % (len(saved), len(resumed), len(missing), diff))
sys.exit(0 if not missing and diff < 0.05 else 1)
P
); then pass pserver_starts_from_table; echo "$msg"
else fail pserver_starts_from_table "rc $rc: $msg $(tail -n 3 <<<"$out") $(tail -n 3 ps.log)"; fi

# paddle run --resume from the last checkpoint (end of pass 1) for a third pass
# gives the model of an uninterrupted 3-pass run: the table included
run_capture "$PADDLE" run ck.lua --trainers=1 --pservers=1 --checkpoint_dir=ckpt --checkpoint_period=5 --save_dir=ck \
    --resume --passes=3
rout=$out
run_capture "$PADDLE" run ck.lua --trainers=1 --pservers=1 --passes=3 --save_dir=ck3
if grep -q 'resuming from checkpoint ckpt/ckpt-10' <<<"$rout" && [ $rc -eq 0 ] && msg=$($PY - <<'P'
import json, sys
import numpy as np
a, b = "ck/pass-00002", "ck3/pass-00002"
worst = 0.0
for p in json.load(open(a + "/manifest.json"))["params"]:
    n = p["name"]
    x, y = np.load("%s/%s.npy" % (a, n)), np.load("%s/%s.npy" % (b, n))
    if n == "feat":
        ka, kb = np.load(a + "/feat.keys.npy"), np.load(b + "/feat.keys.npy")
        assert sorted(ka.tolist()) == sorted(kb.tolist()), (len(ka), len(kb))
        x, y = x[np.argsort(ka)], y[np.argsort(kb)]
    worst = max(worst, float(np.abs(x - y).max()))
print("resumed against uninterrupted: largest difference %.3g, %d table rows" % (worst, len(ka)))
sys.exit(0 if worst < 1e-5 else 1)
P
); then pass resume_equals_uninterrupted; echo "$msg"
else fail resume_equals_uninterrupted "rc $rc: $msg $(grep -i resum <<<"$rout" | head -n 3)"; fi

# --- recipe errors ----------------------------------------------------------------
bad() { # NAME WANT EMBEDDING_LINE
    cat >"$1.lua" <<R
data { train = "data/train.txt", format = "criteo" }
model = function(nn)
  local label = nn.data("label", 1)
  $3
  return nn.sigmoid_cross_entropy(nn.fc(nn.seq_pool(e, "sum"), 1), label)
end
R
    expect_error "$1" 2 "$2" "$PADDLE" check "$1.lua"
}
bad err_hash_on_range "err_hash_on_range.lua:4: nn.embedding: table = 'hash' takes ids without a range" \
    'local e = nn.embedding(nn.id_list("sparse", 1000), 8, { table = "hash" })'
bad err_limit_on_fixed "err_limit_on_fixed.lua:4: nn.embedding: ttl is for growing tables" \
    'local e = nn.embedding(nn.id_list("sparse", 1000), 8, { ttl = 3 })'
bad err_bad_min_count "err_bad_min_count.lua:4: nn.embedding: min_count must be an integer" \
    'local e = nn.embedding(nn.id_list("sparse"), 8, { min_count = -1 })'
bad err_fixed_without_range "err_fixed_without_range.lua:4: nn.embedding: table = 'fixed' needs an id range" \
    'local e = nn.embedding(nn.id_list("sparse"), 8, { table = "fixed" })'
