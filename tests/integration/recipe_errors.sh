# recipe_errors.sh - `paddle check` on broken recipes: each mistake is one
# line "paddle: file:line: what is wrong" and exit status 2. Each case writes
# a small recipe into the scratch directory; the broken part comes first, so
# the line numbers in the expected messages can be read off the here-document.
. "$ROOT/tests/integration/lib.sh"

# The parts of a valid recipe, to break one at a time: MODEL is lines 1-4,
# OPT line 5, DATA line 6 (BASE adds settings on line 7).
MODEL='model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(x, 1), y)
end'
OPT='optimizer = nn.sgd { learning_rate = 0.001 }'
DATA='data { train = "train.list" }'
BASE="$MODEL
$OPT
$DATA
settings { batch_size = 20 }"

# write FILE: the here-document on stdin becomes FILE
write() { mkdir -p "$(dirname "$1")"; cat >"$1"; }

# bad NAME 'expected text' FILE [ARGS...]: paddle check FILE exits 2 with one line
bad() {
    local name=$1 want=$2 file=$3; shift 3
    expect_error "$name" 2 "$want" "$PADDLE" check "$file" "$@"
}

# --- Lua itself ---------------------------------------------------------------

write syntax.lua <<EOF
settings {
  passes = 3
  batch_size = 20,
}
EOF
bad syntax-error "syntax.lua:3: '}' expected (to close '{' at line 1) near 'batch_size'" syntax.lua

write runtime.lua <<EOF
local n = nil
local m = n + 1
$BASE
EOF
bad runtime-error "runtime.lua:2: attempt to perform arithmetic on a nil value (local 'n')" runtime.lua

# --- the schema of cluster, job, data, settings -------------------------------

write unknown_cluster.lua <<EOF
cluster {
  hosts = {},
  prot = 7164,
}
$BASE
EOF
bad unknown-key-cluster "unknown_cluster.lua:3: unknown key 'prot' in cluster (did you mean 'port'?)" \
    unknown_cluster.lua

write unknown_job.lua <<EOF
job { pserver = 2, trainers = 2 }
$BASE
EOF
bad unknown-key-job "unknown_job.lua:1: unknown key 'pserver' in job (did you mean 'pservers'?)" unknown_job.lua

write unknown_data.lua <<EOF
$MODEL
$OPT
data {
  train = "train.list",

  fromat = "csv",
}
EOF
bad unknown-key-data "unknown_data.lua:9: unknown key 'fromat' in data (did you mean 'format'?)" unknown_data.lua

write unknown_settings.lua <<EOF
settings {
  passes = 3,
  -- batchsize = 1 in a comment is not the key
  batchsize = 20,
}
$MODEL
$OPT
$DATA
EOF
bad unknown-key-settings "unknown_settings.lua:4: unknown key 'batchsize' in settings (did you mean 'batch_size'?)" \
    unknown_settings.lua

# a table built elsewhere: the line of the declaration, not a later 'batchsize ='
write unknown_indirect.lua <<EOF
local s = { batchsize = 3 }
settings(s)
cluster { port = 7164, batchsize = 2 }
$MODEL
$OPT
$DATA
EOF
bad unknown-key-indirect "unknown_indirect.lua:2: unknown key 'batchsize' in settings" unknown_indirect.lua

# a key of another declaration, or of the optimizer: where it goes
write elsewhere_job.lua <<EOF
settings { pservers = 2 }
$MODEL
$OPT
$DATA
EOF
bad unknown-key-of-job "elsewhere_job.lua:1: unknown key 'pservers' in settings ('pservers' is a key of job { ... })" \
    elsewhere_job.lua
write elsewhere_opt.lua <<EOF
settings { lerning_rate = 3 }
$MODEL
$OPT
$DATA
EOF
bad unknown-key-of-optimizer "elsewhere_opt.lua:1: unknown key 'lerning_rate' in settings ('learning_rate' is an optimizer setting: optimizer = nn.sgd { learning_rate = ... })" \
    elsewhere_opt.lua

write port_type.lua <<EOF
cluster { port = "abc" }
$BASE
EOF
bad wrong-type "port_type.lua:1: cluster.port must be an integer from 1 to 65535, got 'abc'" port_type.lua

write hosts_type.lua <<EOF
cluster {
  hosts = {
    "paddle@10.0.0.1",
    2,
  },
}
$BASE
EOF
bad wrong-type-list "hosts_type.lua:2: cluster.hosts[2] must be a string, got integer" hosts_type.lua

write port_range.lua <<EOF
cluster {
  hosts = { "paddle@10.0.0.1" },
  port = 70000,
}
$BASE
EOF
bad port-out-of-range "port_range.lua:3: cluster.port must be an integer from 1 to 65535, got 70000" port_range.lua

write passes0.lua <<EOF
$MODEL
$OPT
$DATA
settings { batch_size = 20,
           passes = 0 }
EOF
bad passes-zero "passes0.lua:8: settings.passes must be an integer from 1 to 1000000, got 0" passes0.lua

write batch_neg.lua <<EOF
settings { batch_size = -1 }
$MODEL
$OPT
$DATA
EOF
bad batch-size-negative "batch_neg.lua:1: settings.batch_size must be an integer from 1 to 10000000, got -1" \
    batch_neg.lua

write batch_frac.lua <<EOF
settings { batch_size = 2.5 }
$MODEL
$OPT
$DATA
EOF
bad batch-size-fraction "batch_frac.lua:1: settings.batch_size must be an integer" batch_frac.lua

write mode.lua <<EOF
settings {
  mode = "synch",
}
$MODEL
$OPT
$DATA
EOF
bad bad-enum "mode.lua:2: settings.mode must be one of sync, async, got 'synch' (did you mean 'sync'?)" mode.lua

# a misspelt nn.* name: its line and the nearest real one, not "attempt to
# call a nil value"; one that is near nothing is named alone
write nn_typo.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.dta("y", 1)
  return nn.square_error_cost(nn.fc(x, 1), y)
end
$OPT
$DATA
EOF
bad nn-name-typo "nn_typo.lua:2: unknown nn.dta (did you mean nn.data?)" nn_typo.lua
write nn_typo_opt.lua <<EOF
$MODEL
optimizer = nn.sgdd { learning_rate = 0.001 }
$DATA
EOF
bad nn-name-typo-optimizer "nn_typo_opt.lua:5: unknown nn.sgdd (did you mean nn.sgd?)" nn_typo_opt.lua
write nn_unknown.lua <<EOF
$MODEL
optimizer = nn.zzzzzz { learning_rate = 0.001 }
$DATA
EOF
bad nn-name-unknown "nn_unknown.lua:5: unknown nn.zzzzzz" nn_unknown.lua
case "$out" in *"did you mean"*) fail nn-name-unknown-no-guess "$out" ;; *) pass nn-name-unknown-no-guess ;; esac

# nn.fc's options are checked for type, not only for name: bias = "no" is
# not silently a bias, an extra argument is not silently dropped, and an
# init's bounds must make sense
fc_recipe() { # FILE 'fc call': a recipe whose one layer is that call
    write "$1" <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  return nn.square_error_cost($2, y)
end
$OPT
$DATA
EOF
}
fc_recipe fc_bias.lua 'nn.fc(x, 1, { bias = "no" })'
bad fc-bias-not-boolean "fc_bias.lua:3: nn.fc: bias must be true or false, got 'no'" fc_bias.lua
fc_recipe fc_extra.lua 'nn.fc(x, 1, { act = "linear" }, 7)'
bad fc-extra-argument "fc_extra.lua:3: nn.fc takes (input, size, options), got 4 arguments" fc_extra.lua
fc_recipe fc_uniform.lua 'nn.fc(x, 1, { init = { "uniform", 1 } })'
bad fc-uniform-one-bound "fc_uniform.lua:3: nn.fc: init { 'uniform', lo, hi } needs both bounds, lo below hi; got 1, nil" fc_uniform.lua
fc_recipe fc_uniform_rev.lua 'nn.fc(x, 1, { init = { "uniform", 0.1, -0.1 } })'
bad fc-uniform-reversed "fc_uniform_rev.lua:3: nn.fc: init { 'uniform', lo, hi } needs both bounds, lo below hi; got 0.1, -0.1" fc_uniform_rev.lua
fc_recipe fc_normal.lua 'nn.fc(x, 1, { init = { "normal", 0, 0 } })'
bad fc-normal-std-zero "fc_normal.lua:3: nn.fc: init { 'normal', mean, std } needs std above 0, got 0" fc_normal.lua
fc_recipe fc_init_nan.lua 'nn.fc(x, 1, { init = { "constant", 0/0 } })'
bad fc-init-not-finite "fc_init_nan.lua:3: nn.fc: init parameter 1 must be a finite number" fc_init_nan.lua

write format.lua <<EOF
data { train = "a.txt", format = "libsvn" }
$MODEL
$OPT
EOF
bad bad-format "format.lua:1: data.format must be one of uci_housing, csv, libsvm" \
    format.lua

# data.columns is checked against the model as the data opens: its line is named
seq -s, 1 14 >columns.csv
write columns.lua <<EOF
$MODEL
$OPT
data {
  train = "columns.csv",
  columns = { "x=1-12", "y=14" },
}
EOF
bad columns-width "columns.lua:8: data.columns 'x=1-12' gives 12 columns, but slot 'x' takes 13" columns.lua

write positional.lua <<EOF
settings { 20, passes = 3 }
$MODEL
$OPT
$DATA
EOF
bad positional-value "positional.lua:1: settings { ... } takes key = value pairs" positional.lua

write not_table.lua <<EOF
settings "fast"
$MODEL
$OPT
$DATA
EOF
bad declaration-not-table "not_table.lua:1: settings expects a table, as in settings { key = value }, got string" \
    not_table.lua

write twice.lua <<EOF
settings { passes = 1 }
$MODEL
$OPT
$DATA
settings { passes = 2 }
EOF
bad declared-twice "twice.lua:8: settings declared twice (first at twice.lua:1)" twice.lua

write host.lua <<EOF
cluster {
  root_dir = "/home/paddle",
  hosts = { "paddle@10.0.0.1", "paddle@bad host" },
}
$BASE
EOF
bad bad-host "host.lua:3: bad host 'paddle@bad host': expected user@host[:port]" host.lua

write host_port.lua <<EOF
cluster { hosts = { "paddle@10.0.0.1:99999" } }
$BASE
EOF
bad bad-host-port "host_port.lua:1: bad port in host 'paddle@10.0.0.1:99999': must be 1 to 65535" host_port.lua

write placement.lua <<EOF
cluster {
  hosts = { "paddle@10.0.0.1", "paddle@10.0.0.2" },
  pserver_hosts = { "10.0.0.3" },
}
$BASE
EOF
bad placement-unknown-host "placement.lua:3: cluster.pserver_hosts names '10.0.0.3', which is not in cluster.hosts" \
    placement.lua

write ws_dep.lua <<EOF
job {
  workspace = "./demo",
  deployed = "/home/paddle/JOB20260101",
}
$BASE
EOF
bad workspace-and-deployed "ws_dep.lua:3: job: give either workspace (dispatched to every node) or deployed (already there), not both" \
    ws_dep.lua

write no_pserver.lua <<EOF
job { pservers = 0, trainers = 2 }
$BASE
EOF
bad sync-without-pserver "no_pserver.lua:1: job: 2 trainers need at least one pserver in sync mode" no_pserver.lua

# --- model, optimizer, data ---------------------------------------------------

write no_model.lua <<EOF
$OPT
$DATA
EOF
bad missing-model "no_model.lua: missing 'model': set model = function(nn) ... return cost end" no_model.lua

write model_num.lua <<EOF
$OPT
$DATA
model = 42
EOF
bad model-not-function "model_num.lua:3: 'model' must be a function(nn) returning the cost layer, got integer" \
    model_num.lua

write model_fc.lua <<EOF
$OPT
$DATA
model = function(nn)
  local x = nn.data("x", 13)
  return nn.fc(x, 1)
end
EOF
bad model-not-cost "model_fc.lua:5: model must return a cost layer (e.g. nn.square_error_cost) or { cost = ..., metrics = { ... } }, got layer 'fc_0' (fc, size 1)" \
    model_fc.lua

write model_field.lua <<EOF
$OPT
$DATA
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local p = nn.fc(x, 1)
  return { cost = nn.square_error_cost(p, y), predcit = p }
end
EOF
bad model-unknown-field "model_field.lua:6: model returned an unknown field 'predcit' (did you mean 'predict'?)" \
    model_field.lua
# a table returned over several lines: the line of the key itself
write model_fields.lua <<EOF
$OPT
$DATA
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local p = nn.fc(x, 1)
  return {
    cst = nn.square_error_cost(p, y),
    predict = p,
  }
end
EOF
bad model-unknown-field-its-line "model_fields.lua:7: model returned an unknown field 'cst' (did you mean 'cost'?)" \
    model_fields.lua
write model_metric.lua <<EOF
$OPT
$DATA
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local p = nn.fc(x, 1)
  return {
    cost = nn.square_error_cost(p, y),
    metrics = {
      rmse = "p",
    },
  }
end
EOF
bad model-metric-not-a-layer "model_metric.lua:9: model: metric 'rmse' is not a layer" model_metric.lua
write model_predict.lua <<EOF
$OPT
$DATA
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local p = nn.fc(x, 1)
  return {
    cost = nn.square_error_cost(p, y),
    predict = "p",
  }
end
EOF
bad model-predict-not-a-layer "model_predict.lua:8: model: predict must be a layer (the one \`paddle predict\` prints), got string" model_predict.lua
# where the model has several returns, which one ran is not known: the
# model's line; a comment or a string that says return is no return; a
# model that returned nothing is told so at its line
write model_returns.lua <<EOF
$OPT
$DATA
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  if x then return { cost = nn.square_error_cost(nn.fc(x, 1), y), predcit = x } end
  return nn.square_error_cost(nn.fc(x, 1), y)
end
EOF
bad model-two-returns-its-line "model_returns.lua:3: model returned an unknown field 'predcit'" model_returns.lua
write model_helper.lua <<EOF
$OPT
$DATA
model = function(nn)
  local function fc1(a) return nn.fc(a, 1) end
  local x, y = nn.data("x", 13), nn.data("y", 1)
  return { cost = nn.square_error_cost(fc1(x), y), predcit = x }
end
EOF
bad model-helper-return-not-the-models "model_helper.lua:6: model returned an unknown field 'predcit'" model_helper.lua
write model_comment.lua <<EOF
$OPT
$DATA
model = function(nn)
  local x = nn.data("x", 13)
  return nn.fc(x, 1)
  -- note: "return" the cost layer
end
EOF
bad model-return-not-in-a-comment "model_comment.lua:5: model must return a cost layer" model_comment.lua
write model_nothing.lua <<EOF
$OPT
$DATA
model = function(nn)
  local function helper(a) return a end
  local x = helper(nn.data("x", 13))
end
EOF
bad model-returned-nothing "model_nothing.lua:3: model must return a cost layer (e.g. nn.square_error_cost) or { cost = ..., metrics = { ... } }, got nil" model_nothing.lua

write no_opt.lua <<EOF
$MODEL
$DATA
EOF
bad missing-optimizer "no_opt.lua: missing 'optimizer': e.g. optimizer = nn.sgd { learning_rate = 0.01 }" no_opt.lua

write opt_table.lua <<EOF
$MODEL
$DATA
optimizer = {
  type = "sgd",
  learning_rate = 0.01,
}
EOF
bad optimizer-not-nn "opt_table.lua:6: 'optimizer' must be made by nn.sgd, nn.momentum, nn.adagrad, nn.adam or nn.rmsprop" \
    opt_table.lua

write opt_key.lua <<EOF
$MODEL
$DATA
optimizer = nn.sgd {
  weight_decay = 0,
  learning_rat = 0.01,
}
EOF
bad optimizer-unknown-setting "opt_key.lua:8: nn.sgd: unknown setting 'learning_rat' (did you mean 'learning_rate'?)" \
    opt_key.lua

write lr_zero.lua <<EOF
optimizer = nn.adam { learning_rate = 0 }
$MODEL
$DATA
EOF
bad learning-rate-zero "lr_zero.lua:1: nn.adam: learning_rate must be a number above 0, got 0" lr_zero.lua

write lr_neg.lua <<EOF
optimizer = nn.sgd { learning_rate = -0.1 }
$MODEL
$DATA
EOF
bad learning-rate-negative "lr_neg.lua:1: nn.sgd: learning_rate must be a number above 0, got -0.1" lr_neg.lua

# a number given as a string is shown quoted (not as if it were the number
# it spells), and a whole float too large for an integer is shown as given
write lr_string.lua <<EOF
optimizer = nn.sgd { learning_rate = "0.001" }
$MODEL
$DATA
EOF
bad learning-rate-string "lr_string.lua:1: nn.sgd: learning_rate must be a number above 0, got '0.001'" lr_string.lua
write passes_huge.lua <<EOF
$MODEL
$OPT
$DATA
settings { passes = 1e300 }
EOF
bad passes-huge-float "passes_huge.lua:7: settings.passes must be an integer from 1 to 1000000, got 1e+300" passes_huge.lua
write size_string.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", "13"), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(x, 1), y)
end
$OPT
$DATA
EOF
bad size-string "size_string.lua:2: nn.data: size must be an integer from 1 to 100000000, got '13'" size_string.lua

write momentum.lua <<EOF
optimizer = nn.momentum { learning_rate = 0.1, momentum = 1.5 }
$MODEL
$DATA
EOF
bad momentum-range "momentum.lua:1: nn.momentum: momentum must be below 1, got 1.5" momentum.lua

write no_train.lua <<EOF
data {
  test = "test.list",
}
$MODEL
$OPT
EOF
bad missing-train "no_train.lua:1: missing data.train" no_train.lua

write no_data.lua <<EOF
$MODEL
$OPT
EOF
bad missing-data "no_data.lua: missing data.train" no_data.lua

# --- the sandbox ----------------------------------------------------------------

write undef.lua <<EOF
setings { passes = 3 }
$BASE
EOF
bad undefined-global "undef.lua:1: undefined name 'setings' (did you mean 'settings'?)" undef.lua

write undef_local.lua <<EOF
local passes = 3
settings {
  passes = pases,
}
$MODEL
$OPT
$DATA
EOF
bad undefined-global-local "undef_local.lua:3: undefined name 'pases' (did you mean 'passes'?)" undef_local.lua

write assign.lua <<EOF
$BASE
batch = 20
EOF
bad undeclared-assignment "assign.lua:8: assignment to undeclared global 'batch' (declare it 'local batch', or set model/optimizer)" \
    assign.lua

write os_execute.lua <<EOF
os.execute("touch $T/pwned")
$BASE
EOF
bad no-os-execute "os_execute.lua:1: os.execute is not available in a recipe" os_execute.lua
if [ -e "$T/pwned" ]; then fail no-os-execute-ran "os.execute ran"; else pass no-os-execute-ran; fi

write io_popen.lua <<EOF
local f = io.popen("touch $T/pwned")
$BASE
EOF
bad no-io-popen "io_popen.lua:1: 'io' is not available in a recipe" io_popen.lua

write require.lua <<EOF
local lfs = require("lfs")
$BASE
EOF
bad no-require "require.lua:1: 'require' is not available in a recipe" require.lua

write dofile.lua <<EOF
dofile("conf.lua")
$BASE
EOF
bad no-dofile "dofile.lua:1: 'dofile' is not available in a recipe" dofile.lua

write loop.lua <<EOF
$BASE
local n = 0
while true do n = n + 1 end
EOF
# timeout: a recipe that hangs fails this case (exit 124), it does not stall the suite
expect_error endless-loop 2 "recipe ran over 500 million instructions: an endless loop?" \
    timeout 30 "$PADDLE" check loop.lua

write loop_model.lua <<EOF
$OPT
$DATA
model = function(nn)
  while true do end
end
EOF
expect_error endless-loop-in-model 2 "recipe ran over 500 million instructions" \
    timeout 30 "$PADDLE" check loop_model.lua

write memory.lua <<EOF
local t = {}
for i = 1, 1e9 do t[i] = i end
$BASE
EOF
expect_error memory-limit 2 "memory.lua:2: recipe used over 1 GiB of memory" timeout 60 "$PADDLE" check memory.lua

# one allocation past the limit, made by a library function: named at the
# recipe's line that called it
write bigstring.lua <<EOF
local n = 2^30
local s = string.rep("x", n)
$BASE
EOF
expect_error memory-limit-in-call 2 "bigstring.lua:2: recipe used over 1 GiB of memory" \
    timeout 60 "$PADDLE" check bigstring.lua

# strings allocated again and again: the count says what it was mostly
write strings.lua <<EOF
local t = {} for i = 1, 100 do t[i] = string.rep("x", 10 * 1024 * 1024) end
$BASE
EOF
expect_error allocating-over-the-count 2 \
    "strings.lua:1: recipe ran over 500 million instructions: most of them allocating memory (huge strings or tables?)" \
    timeout 60 "$PADDLE" check strings.lua

# --- layers -----------------------------------------------------------------------

write fc_id.lua <<EOF
model = function(nn)
  local user, y = nn.id("user", 100), nn.data("y", 1)
  local h = nn.fc(user, 1)
  return nn.square_error_cost(h, y)
end
$OPT
$DATA
EOF
bad fc-on-id-slot "fc_id.lua:3: nn.fc: input 'user' holds ids; use nn.embedding on it first" fc_id.lua

# a tail call (return nn.x(...)) leaves no recipe frame: the line of the return
write size.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local h = nn.fc(x, 2)
  return nn.square_error_cost(h,
    y)
end
$OPT
$DATA
EOF
bad size-mismatch "size.lua:4: nn.square_error_cost: inputs differ in size: 'fc_0' has 2, 'y' has 1" size.lua

write act.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local h = nn.fc(x, 1, {
    name = "out",
    act = "sigmod",
  })
  return nn.square_error_cost(h, y)
end
$OPT
$DATA
EOF
bad unknown-activation "act.lua:5: nn.fc: unknown activation 'sigmod' (did you mean 'sigmoid'?)" act.lua

write fc_opt.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(x, 1, { actt = "relu" }), y)
end
$OPT
$DATA
EOF
bad unknown-layer-option "fc_opt.lua:3: nn.fc: unknown option 'actt' (did you mean 'act'?)" fc_opt.lua

# a field a layer has not: named at its line (in a table constructor, a nil
# at the end would vanish: { x, y, x.hidden } has two entries)
write field.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(nn.concat { x, y, x.hidden }, 1), y)
end
$OPT
$DATA
EOF
bad layer-no-field "field.lua:3: layer 'x' has no field 'hidden' (valid: act, kind, name, pool, range, scale, seq, size, slot, type)" field.lua
sed 's/x.hidden/x.nmae/' field.lua >field2.lua
bad layer-field-typo "field2.lua:3: layer 'x' has no field 'nmae' (did you mean 'name'?)" field2.lua
# two letters swapped are one typo; a name users know another value by
write swapped.lua <<EOF
$MODEL
optimizer = nn.sdg { learning_rate = 0.001 }
$DATA
EOF
bad nn-name-swapped "swapped.lua:5: unknown nn.sdg (did you mean nn.sgd?)" swapped.lua
write gpu.lua <<EOF
$MODEL
$OPT
$DATA
settings { device = "gpu" }
EOF
bad device-gpu "gpu.lua:7: settings.device must be one of cpu, cuda, got 'gpu' (did you mean 'cuda'?)" gpu.lua

write init.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local h = nn.fc(x, 1, { init = "gausian" })
  return nn.square_error_cost(h, y)
end
$OPT
$DATA
EOF
bad unknown-init "init.lua:3: nn.fc: unknown init 'gausian'" init.lua

write seq_pool.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local p = nn.seq_pool(x, "sum")
  return nn.square_error_cost(nn.fc(p, 1), y)
end
$OPT
$DATA
EOF
bad seq-pool-not-sequence "seq_pool.lua:3: nn.seq_pool: input 'x' is not a sequence" seq_pool.lua

write pool.lua <<EOF
model = function(nn)
  local words, y = nn.id_list("words", 1000), nn.data("y", 1)
  local p = nn.seq_pool(nn.embedding(words, 8), "avg")
  return nn.square_error_cost(nn.fc(p, 1), y)
end
$OPT
$DATA
EOF
bad unknown-pooling "pool.lua:3: nn.seq_pool: unknown pooling 'avg'" pool.lua

write pool_ids.lua <<EOF
model = function(nn)
  local words, y = nn.id_list("words", 1000), nn.data("y", 1)
  local p = nn.seq_pool(words)
  return nn.square_error_cost(nn.fc(p, 1), y)
end
$OPT
$DATA
EOF
bad seq-pool-on-ids "pool_ids.lua:3: nn.seq_pool: input 'words' holds ids; use nn.embedding on it first" pool_ids.lua

write dup.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local h = nn.fc(x, 4, { name = "hidden" })
  local o = nn.fc(h, 1, { name = "hidden" })
  return nn.square_error_cost(o, y)
end
$OPT
$DATA
EOF
bad duplicate-layer-name "dup.lua:4: nn.fc: a layer named 'hidden' already exists (dup.lua:3)" dup.lua

write classes.lua <<EOF
model = function(nn)
  local x, label = nn.data("x", 13), nn.id("label", 10)
  local p = nn.fc(x, 5, "softmax")
  return nn.cross_entropy(p, label)
end
$OPT
$DATA
EOF
bad class-count-mismatch "classes.lua:4: nn.cross_entropy: label 'label' has 10 classes but prediction 'fc_0' has size 5" \
    classes.lua

write label.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  return nn.softmax_cross_entropy(nn.fc(x, 1), y)
end
$OPT
$DATA
EOF
bad label-not-id "label.lua:3: nn.softmax_cross_entropy: label 'y' must be an nn.id slot" label.lua

write embed.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local e = nn.embedding(x, 8)
  return nn.square_error_cost(nn.fc(e, 1), y)
end
$OPT
$DATA
EOF
bad embedding-on-dense "embed.lua:3: nn.embedding: input 'x' must hold ids (nn.id or nn.id_list), it is dense" embed.lua

write shared.lua <<EOF
model = function(nn)
  local a, b, y = nn.id("a", 100), nn.id("b", 50), nn.data("y", 1)
  local ea = nn.embedding(a, 8, { param = "ids" })
  local eb = nn.embedding(b, 8, { param = "ids" })
  return nn.square_error_cost(nn.cos_sim(ea, eb), y)
end
$OPT
$DATA
EOF
bad shared-table-shape "shared.lua:4: nn.embedding: table 'ids' is 50x8 here but 100x8 at shared.lua:3" shared.lua

write param_name.lua <<EOF
model = function(nn)
  local a, y = nn.id("a", 100), nn.data("y", 1)
  local e = nn.embedding(a, 8, {
    param = 3,
  })
  return nn.square_error_cost(nn.fc(e, 1), y)
end
$OPT
$DATA
EOF
bad table-name-not-string "param_name.lua:4: nn.embedding: param must be a string" param_name.lua

write slot.lua <<EOF
model = function(nn)
  local x = nn.data("the_thirteen_housing_features_xx", 13)
  local y = nn.data("y", 1)
  return nn.square_error_cost(nn.fc(x, 1), y)
end
$OPT
$DATA
EOF
bad slot-name-too-long "slot.lua:2: nn.data: slot name 'the_thirteen_housing_features_xx' is too long (31 characters at most)" \
    slot.lua

write concat.lua <<EOF
model = function(nn)
  local xs = {}
  for i = 1, 17 do xs[i] = nn.data("x" .. i, 1) end
  local c = nn.concat(xs)
  return nn.square_error_cost(nn.fc(c, 1), nn.data("y", 1))
end
$OPT
$DATA
EOF
bad concat-too-many "concat.lua:4: layer 'concat_0' has 17 inputs, at most 16 are allowed" concat.lua

# --- include --------------------------------------------------------------------

write include_missing.lua <<EOF
include "conf/nothere.lua"
$BASE
EOF
bad include-missing "include_missing.lua:1: cannot open conf/nothere.lua: No such file or directory" include_missing.lua

write sub/conf/bad_cluster.lua <<EOF
cluster {
  hosts = { "paddle@10.0.0.1" },
  ports_num = 0,
}
EOF
write sub/include_bad.lua <<EOF
include "conf/bad_cluster.lua"
$BASE
EOF
bad include-error-in-included "sub/conf/bad_cluster.lua:3: cluster.ports_num must be an integer from 1 to 64, got 0" \
    sub/include_bad.lua

# --- command-line overrides --------------------------------------------------------

write ok.lua <<EOF
$BASE
EOF
bad override-unknown "unknown option '--pases' (did you mean '--passes'?)" ok.lua --pases=3
bad override-not-number "option --passes must be a decimal number, got 'abc'" ok.lua --passes=abc
bad override-dotted-key "unknown option '--data.train': the command line names a setting by its key alone: --train=other.csv" \
    ok.lua --data.train=other.csv
bad override-optimizer-setting "unknown option '--learning_rate' ('learning_rate' is an optimizer setting: optimizer = nn.sgd { learning_rate = ... }): the command line sets declarations' keys only" \
    ok.lua --learning_rate=0.5
bad override-hex-number "option --passes must be a decimal number, got '0x10'" ok.lua --passes=0x10
bad override-out-of-range "option --passes: settings.passes must be an integer from 1 to 1000000, got 0" ok.lua --passes=0
bad override-bad-enum "option --mode: settings.mode must be one of sync, async, got 'asnyc' (did you mean 'async'?)" \
    ok.lua --mode=asnyc
bad cluster-file-missing "--cluster: cannot open nothere.lua" ok.lua --cluster nothere.lua

write no_cluster.lua <<EOF
settings { passes = 2 }
EOF
bad cluster-file-without-cluster "no_cluster.lua: no cluster { ... } declaration in this file" ok.lua --cluster no_cluster.lua

# --- what works ---------------------------------------------------------------------

# an include is relative to the including file, not to the working directory
write proj/conf/cluster.lua <<EOF
cluster {
  hosts = { "paddle@127.0.0.2", "paddle@127.0.0.3:2222" },
  root_dir = "/home/paddle",
}
EOF
write proj/recipe.lua <<EOF
include "conf/cluster.lua"
$BASE
EOF
run_capture "$PADDLE" check proj/recipe.lua
if [ "$rc" -eq 0 ] && [[ "$out" == *"node 1  127.0.0.3 (user paddle, ssh port 2222)"* ]] &&
    [[ "$out" == *"root_dir /home/paddle"* ]]; then
    pass include-relative
else
    fail include-relative "exit $rc: $out"
fi

# --cluster FILE replaces the recipe's cluster
write other_cluster.lua <<EOF
cluster {
  hosts = { "u@10.1.1.1", "u@10.1.1.2", "u@10.1.1.3" },
  port = 8000,
}
EOF
run_capture "$PADDLE" check proj/recipe.lua --cluster other_cluster.lua
if [ "$rc" -eq 0 ] && [[ "$out" == *"cluster  3 hosts"* ]] && [[ "$out" == *"node 2  10.1.1.3 (user u"* ]] &&
    [[ "$out" == *"on u@10.1.1.3, ports 8000-8001"* ]] && [[ "$out" != *"127.0.0.2"* ]]; then
    pass cluster-file-replaces
else
    fail cluster-file-replaces "exit $rc: $out"
fi

# --key=value overrides the recipe's settings, job, data and cluster
run_capture "$PADDLE" check ok.lua --passes=7 --batch_size=5 --mode=async --trainers=3 --train=other.list
if [ "$rc" -eq 0 ] && [[ "$out" == *"batch_size 5 per trainer, passes 7,"* ]] &&
    [[ "$out" == *"3 trainers, mode async"* ]] && [[ "$out" == *"train other.list"* ]]; then
    pass overrides-apply
else
    fail overrides-apply "exit $rc: $out"
fi

# --- a recipe cannot hang the tool, crash it, or change what was validated ------

# pcall cannot swallow the instruction limit, nor xpcall's handler loop with it
write pcall_loop.lua <<EOF
$BASE
while true do pcall(function() while true do end end) end
EOF
expect_error limit-through-pcall 2 "pcall_loop.lua:8: recipe ran over 500 million instructions" \
    timeout 60 "$PADDLE" check pcall_loop.lua

write xpcall_loop.lua <<EOF
$BASE
while true do xpcall(function() while true do end end, function() while true do end end) end
EOF
expect_error limit-through-xpcall 2 "xpcall_loop.lua:8: recipe ran over 500 million instructions" \
    timeout 60 "$PADDLE" check xpcall_loop.lua

# finalizers run with the limit off: no __gc
write gc.lua <<EOF
$BASE
setmetatable({}, { __gc = function() while true do end end })
EOF
expect_error no-gc-finalizer 2 "gc.lua:8: setmetatable: __gc is not available in a recipe" \
    timeout 60 "$PADDLE" check gc.lua

# work inside one call of Lua's C library counts as instructions (our Lua
# patch): a pattern that backtracks for hours, a plain search for a long
# needle; and so do bytes allocated (a concatenation in a loop)
write pattern_loop.lua <<EOF
local x = string.rep("a", 30000):find(".-.-.-.-b")
$BASE
EOF
expect_error pattern-backtracks 2 "pattern_loop.lua:1: recipe ran over 500 million instructions: an endless loop?" \
    timeout 60 "$PADDLE" check pattern_loop.lua
write needle.lua <<EOF
local x = string.rep("a", 3e7):find(string.rep("a", 3000) .. "b", 1, true)
$BASE
EOF
expect_error plain-find-long-needle 2 "needle.lua:1: recipe ran over 500 million instructions" \
    timeout 60 "$PADDLE" check needle.lua
# Lua 5.4.4 crashed (C stack overflow) when a gmatch iterator was called
# again after "pattern too complex": our patch resets its depth
write gmatch_again.lua <<EOF
$BASE
local it = ("a"):rep(1e6):gmatch(("a?"):rep(1e6))
local ok = pcall(it)
local x = it()
EOF
expect_error gmatch-after-error 2 "gmatch_again.lua:10: pattern too complex" \
    timeout 60 "$PADDLE" check gmatch_again.lua

# ...a call that loops without doing anything: an empty string repeated
# 2^63 times, 2^63 absent elements moved
write rep_empty.lua <<EOF
$BASE
local s = string.rep("", math.maxinteger)
EOF
expect_error rep-empty-string 2 "rep_empty.lua:8: recipe ran over 500 million instructions" \
    timeout 60 "$PADDLE" check rep_empty.lua
write move_all.lua <<EOF
$BASE
local t = table.move({}, 1, math.maxinteger - 1, 2)
EOF
expect_error table-move-endless 2 "move_all.lua:8: recipe ran over 500 million instructions" \
    timeout 60 "$PADDLE" check move_all.lua
write concat_loop.lua <<EOF
local s = string.rep("a", 2^24)
while true do local c = s .. "x" end
$BASE
EOF
expect_error concat-loop 2 "concat_loop.lua:2: recipe ran over 500 million instructions" \
    timeout 60 "$PADDLE" check concat_loop.lua

# one comparison of two long strings is one instruction: 10,000 of them
# (minutes) run between two counts. The CPU-time limit (20 s; lowered
# here) has a timer of its own that makes the next instruction count...
write compare_long.lua <<EOF
local s = string.rep("a", 4096) -- 16 MB from 4096 copies, not 2^24 of one byte (a second of CPU on a slow machine)
local a, b = string.rep(s, 4096), string.rep(s, 4096)
while a == b do end
$BASE
EOF
PADDLE_RECIPE_CPU_SECONDS=1 expect_error cpu-time-limit 2 "compare_long.lua:3: recipe ran for over 1 s of CPU time: an endless loop?" \
    timeout 60 "$PADDLE" check compare_long.lua
# ...and the wall-clock deadline of the command line is the last resort,
# for one instruction that runs long (here: the CPU limit raised)
PADDLE_RECIPE_CPU_SECONDS=600 PADDLE_RECIPE_TIMEOUT=4 expect_error recipe-deadline 2 "compare_long.lua: still loading after 4 s: an endless loop in the recipe?" \
    timeout 60 "$PADDLE" check compare_long.lua
# A recipe that waited the time away (here: for a named pipe nobody writes,
# as for a network filesystem that does not answer) is the machine's fault:
# exit status 1, which a launcher restarts, not the recipe's 2
mkfifo waits.fifo
write waits.lua <<EOF
include "waits.fifo"
$BASE
EOF
PADDLE_RECIPE_TIMEOUT=2 expect_error recipe-deadline-waiting 1 "waits.lua: still loading after 2 s, having run under a quarter of it: this machine is too busy or a file the recipe reads does not answer" \
    timeout 60 "$PADDLE" check waits.lua
# so is a file the disk fails to give (reading /proc/self/mem at its start
# fails with EIO); a file that is not there stays the recipe's mistake
write reads_eio.lua <<EOF
include "/proc/self/mem"
$BASE
EOF
# (the C library names EIO: musl "I/O error", glibc "Input/output error")
expect_error recipe-io-error-is-a-fault 1 "reads_eio.lua:1: cannot read /proc/self/mem: I" "$PADDLE" check reads_eio.lua
# an I/O error the recipe caught is not what ended its load: a mistake
# after it is still the recipe's (exit 2)
write caught_eio.lua <<EOF
local ok = pcall(include, "/proc/self/mem")
settings { batch_sise = 20 }
$BASE
EOF
expect_error recipe-io-error-caught-then-mistake 2 "caught_eio.lua:2: unknown key 'batch_sise'" "$PADDLE" check caught_eio.lua

write mut_layer.lua <<EOF
local keep
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  keep = nn.fc(x, 1)
  keep.size = 1000
  return nn.square_error_cost(keep, y)
end
$OPT
$DATA
EOF
bad layer-read-only "mut_layer.lua:5: layer 'fc_0' is read-only (cannot set 'size')" mut_layer.lua

write mt_layer.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local h = nn.fc(x, 1)
  setmetatable(h, { __index = function() error("boom") end })
  return nn.square_error_cost(h, y)
end
$OPT
$DATA
EOF
bad layer-metatable-protected "mt_layer.lua:4: setmetatable: cannot change a protected metatable" mt_layer.lua

write mut_opt.lua <<EOF
$MODEL
optimizer = nn.sgd { learning_rate = 0.001 }
optimizer.learning_rate = -5
$DATA
EOF
bad optimizer-read-only "mut_opt.lua:6: an optimizer is read-only (cannot set 'learning_rate')" mut_opt.lua

# tables with raising metamethods handed to the builder: read raw, the
# validated values are used (the check shows them)
write raising_mt.lua <<EOF
local evil = { __index = function() error("index") end, __newindex = function() error("newindex") end,
               __pairs = function() error("pairs") end, __len = function() error("len") end }
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local h = nn.fc(x, 3, setmetatable({ act = "relu" }, evil))
  local c = nn.concat(setmetatable({ h }, evil))
  return setmetatable({ cost = nn.square_error_cost(nn.fc(c, 1), y) }, evil)
end
optimizer = nn.adam(setmetatable({ learning_rate = 0.5 }, evil))
$DATA
EOF
run_capture timeout 60 "$PADDLE" check raising_mt.lua
if [ "$rc" -eq 0 ] && [[ "$out" == *"fc_0                   fc                     size 3"* ]] &&
    [[ "$out" == *"optimizer adam, learning_rate 0.5, beta1 0.9, beta2 0.999, epsilon 1e-08"* ]]; then
    pass raising-metatables-read-raw
else
    fail raising-metatables-read-raw "exit $rc: $out"
fi

write pname.lua <<EOF
model = function(nn)
  local a, y = nn.id("a", 100), nn.data("y", 1)
  local e = nn.embedding(a, 8, { param = ".hidden" })
  return nn.square_error_cost(nn.fc(e, 1), y)
end
$OPT
$DATA
EOF
bad param-name-leading-dot "pname.lua:3: nn.embedding: param '.hidden' names a file" pname.lua

write lname.lua <<EOF
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  local h = nn.fc(x, 1, { name = string.rep("n", 130) })
  return nn.square_error_cost(h, y)
end
$OPT
$DATA
EOF
bad param-name-too-long "lname.lua:3: nn.fc: name 'nnnn" lname.lua

# --- errors that are one line naming the file and line ---------------------------

printf '\033Lua\124\000not a recipe' > binary.lua
bad binary-chunk "binary.lua:1: a precompiled (binary) chunk is not a recipe" binary.lua

write inc_binary.lua <<EOF
include "binary.lua"
$BASE
EOF
bad binary-chunk-included "binary.lua:1: a precompiled (binary) chunk is not a recipe" inc_binary.lua

{ printf 'local x = '; for i in $(seq 300); do printf '('; done; printf 1
  for i in $(seq 300); do printf ')'; done; printf '\n%s\n' "$BASE"; } > parens.lua
expect_error nested-parentheses 2 "parens.lua:1: " timeout 60 "$PADDLE" check parens.lua

write self.lua <<EOF
include "self.lua"
$BASE
EOF
bad include-self "self.lua:1: include cycle: self.lua -> self.lua" self.lua

write cyc_a.lua <<EOF
include "cyc_b.lua"
$BASE
EOF
write cyc_b.lua <<EOF
settings { passes = 2 }
include "cyc_a.lua"
EOF
bad include-cycle "cyc_b.lua:2: include cycle: cyc_a.lua -> cyc_b.lua -> cyc_a.lua" cyc_a.lua
# the same cycle written through "..": found as a cycle, not as 32 levels
mkdir -p cycd
write cyc_up.lua <<EOF
include "cycd/down.lua"
$BASE
EOF
write cycd/down.lua <<EOF
include "../cyc_up.lua"
EOF
bad include-cycle-through-dotdot "cycd/down.lua:1: include cycle: cyc_up.lua -> cycd/down.lua -> cycd/../cyc_up.lua" cyc_up.lua
# ...and a ".." through a symbolic link that leads elsewhere is no cycle
mkdir -p linked/top linked/other/jobs
ln -s ../other/jobs linked/top/jobs
write linked/top/main.lua <<EOF
include "jobs/a.lua"
$BASE
EOF
write linked/other/jobs/a.lua <<EOF
include "../main.lua"
EOF
write linked/other/main.lua <<EOF
job { pservers = 3 }
EOF
run_capture "$PADDLE" check linked/top/main.lua
if [ "$rc" -eq 0 ] && [[ "$out" == *"job      3 pservers"* ]]; then pass include-through-a-link-no-cycle
else fail include-through-a-link-no-cycle "exit $rc: $(tail -n 2 <<<"$out")"; fi
# an empty directory name would be the current (or the root) directory
write save_empty.lua <<EOF
settings { save_dir = "" }
$BASE
EOF
bad save-dir-empty "save_empty.lua:1: settings.save_dir must be a file or directory name, not empty, got ''" save_empty.lua

mkdir -p adir
write inc_dir.lua <<EOF
include "adir"
$BASE
EOF
bad include-directory "inc_dir.lua:1: cannot read adir" inc_dir.lua

write err_table.lua <<EOF
$BASE
error({})
EOF
bad error-table "err_table.lua:8: error with a table value instead of a message" err_table.lua

write err_none.lua <<EOF
$BASE
error()
EOF
bad error-no-value "err_none.lua:8: error with a nil value instead of a message" err_none.lua

write err_nil.lua <<EOF
$BASE
error(nil)
EOF
bad error-nil "err_nil.lua:8: error with a nil value instead of a message" err_nil.lua

write err_ctl.lua <<EOF
$BASE
error("bad\n\27[31mred\0!")
EOF
bad error-control-chars 'err_ctl.lua:8: bad\n\27[31mred\0!' err_ctl.lua

write err_tostring.lua <<EOF
$BASE
error(setmetatable({}, { __tostring = function() return "two\nlines\r" end }))
EOF
bad error-tostring-control-chars 'err_tostring.lua:8: error: two\nlines\r' err_tostring.lua

write err_tostring_loop.lua <<EOF
$BASE
error(setmetatable({}, { __tostring = function() while true do end end }))
EOF
expect_error error-tostring-endless 2 "recipe ran over 500 million instructions" \
    timeout 60 "$PADDLE" check err_tostring_loop.lua

write nul.lua <<EOF
$BASE
job { name = "job\0name" }
EOF
bad nul-in-string "nul.lua:8: job.name contains a NUL byte" nul.lua

write nul_list.lua <<EOF
cluster {
  hosts = { "a@h1", "b@h\0x" },
}
$BASE
EOF
bad nul-in-list "nul_list.lua:2: cluster.hosts[2] contains a NUL byte" nul_list.lua

write nul_include.lua <<EOF
include "conf\0.lua"
$BASE
EOF
bad nul-in-include "nul_include.lua:1: include's file name contains a NUL byte" nul_include.lua
