-- schema.lua - every key a declaration may hold: its type, range and default.
--
-- This is the only table of defaults: the C side reads what resolve.lua
-- makes of it and has none of its own. `unset` is what a key without a
-- default resolves to when the recipe leaves it out (strings: nil).

local R = require "report"
local fail = R.fail

local S = {}

local function int(lo, hi, default, unset)
  return { kind = "int", lo = lo, hi = hi, default = default, unset = unset }
end
local function num(lo, hi, default) return { kind = "number", lo = lo, hi = hi, default = default } end
local function str(default) return { kind = "string", default = default } end
-- a file or directory name: "" would be the current or the root directory
local function path(default) return { kind = "string", default = default, path = true } end
-- alias: other names users know a value by (gpu: cuda), for the hint
local function enum(values, default, alias)
  return { kind = "enum", values = values, default = default, alias = alias }
end
local function bool(default) return { kind = "bool", default = default } end
local function strlist() return { kind = "strlist" } end
-- a setting of a job across processes (paddle run): paddle train, which
-- trains in one process, says it does not use one given on its command line
local function job(spec) spec.job = true return spec end

S.blocks = {
  cluster = {
    hosts = strlist(),
    root_dir = path(nil),
    nic = str(nil),
    port = int(1, 65535, 7164),
    ports_num = int(1, 64, 1),
    ports_num_for_sparse = int(0, 64, 1),
    unix_sockets = bool(true),
    shared_memory = bool(true),
    ld_library_path = str(nil),
    identity_files = strlist(),
    use_agent = bool(true),
    known_hosts = str(nil),
    connect_timeout = num(0.1, 3600, 10),
    pserver_hosts = strlist(),
    trainer_hosts = strlist(),
  },
  job = {
    name = str(nil),
    pservers = int(0, 4096, nil),   -- resolve.lua: one per host, 1 without hosts
    trainers = int(1, 4096, nil),   -- the same
    workspace = path(nil),
    deployed = path(nil),
    restarts = int(0, 100, 0),
    copy_output = enum({ "pass", "end", "never" }, "pass"),
  },
  data = {
    train = str(nil),
    test = str(nil),
    format = enum({ "uci_housing", "csv", "libsvm", "movielens", "criteo", "synthetic" }, "csv"),
    header = bool(false),
    columns = strlist(),
    label = int(0, 1000000, nil, -1),      -- -1: not given
    features = int(1, 100000000, nil, 0),  -- 0: not given
    separator = str(","),
    shuffle_buffer = int(0, 100000000, 0),
    on_error = enum({ "fail", "skip" }, "fail"),
    samples = int(1, 2000000000, 10000),
    queue = int(1, 4096, 8),
    test_fraction = num(0, 0.99, 0.1),
    hash_space = int(1, 2147483647, nil, 0),  -- criteo: 0: each slot's id range
    dense_transform = enum({ "log1p", "none" }, "log1p"),
  },
  settings = {
    batch_size = int(1, 10000000, 32),
    passes = int(1, 1000000, 1),
    mode = job(enum({ "sync", "async" }, "sync")),
    seed = int(0, 2147483647, 1),
    log_period = int(1, 100000000, 10),
    max_batches = int(0, 2000000000, 0),
    test_period = int(0, 100000000, 0),
    device = enum({ "cpu", "cuda" }, "cpu", { gpu = "cuda", nvidia = "cuda" }),
    use_gpu = bool(false),
    server_timeout = job(num(1, 86400, 120)),
    heartbeat_timeout = job(num(1, 86400, 30)),
    metrics_port = job(int(0, 65535, 0)),          -- /metrics: launcher on it, pserver i on it + 1 + i (0: off)
    save_dir = path("output"),
    checkpoint_dir = job(path(nil)),
    checkpoint_period = job(int(1, 2000000000, 200)), -- sync: global steps between checkpoints
    checkpoint_keep = job(int(1, 1000, 2)),
    early_stop = int(0, 1000000, 0),          -- 0: train every pass
    early_stop_metric = str(nil),             -- nil: the test cost
    early_stop_mode = enum({ "auto", "min", "max" }, "auto"),
    save_period = int(1, 1000000, 1),
    keep_models = int(0, 1000000, 0),         -- 0: keep every saved pass
    threads = int(0, 1024, 0),
    num_gradient_servers = job(int(1, 4096, nil)),
  },
}

for _, d in ipairs({ "cluster", "job" }) do
  for _, spec in pairs(S.blocks[d]) do spec.job = true end
end

-- The order --key=value overrides look a key up in.
S.names = { "cluster", "job", "data", "settings" }

-- Optimizers: the settings each takes and their defaults. Every optimizer
-- resolves every field of S.optimizer_fields; those it does not take are 0.
S.optimizers = {
  sgd = { learning_rate = 0.01 },
  momentum = { learning_rate = 0.01, momentum = 0.9, nesterov = false },
  adagrad = { learning_rate = 0.01, epsilon = 1e-6 },
  adam = { learning_rate = 0.001, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8 },
  rmsprop = { learning_rate = 0.01, rho = 0.95, epsilon = 1e-6, momentum = 0 },
}
S.optimizer_fields = {
  learning_rate = 0, momentum = 0, beta1 = 0, beta2 = 0, epsilon = 0, rho = 0,
  weight_decay = 0, nesterov = false,
}

-- The form of KEY's value on the command line, for an option given without
-- one ("N", "true", "sync|async"); nil where KEY names no setting.
function S.value_form(key)
  for _, d in ipairs(S.names) do
    local spec = S.blocks[d][key]
    if spec then
      if spec.kind == "int" or spec.kind == "number" then return "N" end
      if spec.kind == "bool" then return "true" end
      if spec.kind == "enum" then return table.concat(spec.values, "|") end
      if spec.kind == "strlist" then return "A,B,..." end
      return spec.path and "PATH" or "VALUE"
    end
  end
  return nil
end

-- Check one value against its spec; returns the (converted, copied) value.
function S.check_value(where, decl, key, spec, v)
  local function bad(what)
    fail(where, "%s.%s must be %s, got %s", decl, key, what, R.shown(v))
  end
  if spec.kind == "int" then
    -- 1e300 is a whole float with no integer: v stays what the recipe gave
    if math.type(v) == "float" and v == math.floor(v) then v = math.tointeger(v) or v end
    if math.type(v) ~= "integer" then bad(string.format("an integer from %d to %d", spec.lo, spec.hi)) end
    if v < spec.lo or v > spec.hi then bad(string.format("an integer from %d to %d", spec.lo, spec.hi)) end
  elseif spec.kind == "number" then
    if type(v) ~= "number" or v ~= v then bad(string.format("a number from %g to %g", spec.lo, spec.hi)) end
    if v < spec.lo or v > spec.hi then bad(string.format("a number from %g to %g", spec.lo, spec.hi)) end
  elseif spec.kind == "string" then
    if type(v) ~= "string" then bad("a string") end
    R.check_string(where, decl .. "." .. key, v)
    if spec.path and v == "" then bad("a file or directory name, not empty") end
  elseif spec.kind == "bool" then
    if type(v) ~= "boolean" then bad("true or false") end
  elseif spec.kind == "enum" then
    if type(v) ~= "string" then bad("one of " .. table.concat(spec.values, ", ")) end
    local ok = false
    for _, e in ipairs(spec.values) do if e == v then ok = true end end
    if not ok then
      local n = spec.alias and spec.alias[v:lower()] or R.nearest(v, spec.values)
      fail(where, "%s.%s must be one of %s, got '%s'%s", decl, key,
        table.concat(spec.values, ", "), v, n and string.format(" (did you mean '%s'?)", n) or "")
    end
  elseif spec.kind == "strlist" then
    if type(v) == "string" then v = { v } end
    if type(v) ~= "table" then bad("a list of strings") end
    local n = rawlen(v)
    for k in next, v do
      if math.type(k) ~= "integer" or k < 1 or k > n then
        fail(where, "%s.%s must be a list of strings, but has key '%s'", decl, key, tostring(k))
      end
    end
    local out = {}
    for i = 1, n do
      local s = rawget(v, i)
      if type(s) ~= "string" then
        fail(where, "%s.%s[%d] must be a string, got %s", decl, key, i, R.typename(s))
      end
      out[i] = R.check_string(where, string.format("%s.%s[%d]", decl, key, i), s)
    end
    v = out
  end
  return v
end

-- Validate a declaration table t (from file:line) against S.blocks[decl];
-- returns a fresh table of the checked values.
-- A key that belongs to another declaration or to the optimizer (or is a
-- near miss of one): where it goes, as a hint; nil when none.
function S.elsewhere(decl, k)
  for _, d in ipairs(S.names) do
    local m = d ~= decl and (S.blocks[d][k] and k or R.nearest(k, R.keys_of(S.blocks[d])))
    if m then return string.format(" ('%s' is a key of %s { ... })", m, d) end
  end
  local opt = { weight_decay = true }
  for _, defaults in pairs(S.optimizers) do for name in pairs(defaults) do opt[name] = true end end
  local m = opt[k] and k or R.nearest(k, R.keys_of(opt))
  if m then
    return string.format(" ('%s' is an optimizer setting: optimizer = nn.sgd { %s = ... })", m, m)
  end
end

function S.check_decl(decl, t, file, line)
  local spec = S.blocks[decl]
  if type(t) ~= "table" then
    fail(R.at(file, line), "%s expects a table, as in %s { key = value }, got %s", decl, decl, R.typename(t))
  end
  local out = {}
  for k, v in next, t do
    if type(k) ~= "string" then
      fail(R.at(file, line), "%s { ... } takes key = value pairs; found a positional value %s",
        decl, tostring(v))
    end
    local where = R.at(file, R.key_line(file, line, k))
    if not spec[k] then
      local keys = R.keys_of(spec)
      fail(where, "unknown key '%s' in %s%s", k, decl, R.nearest(k, keys) and R.suggest(k, keys) or
        S.elsewhere(decl, k) or R.suggest(k, keys))
    end
    out[k] = S.check_value(where, decl, k, spec[k], v)
  end
  return out
end

return S
