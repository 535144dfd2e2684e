-- recipe.lua - the Lua half of the recipe language, compiled into paddle.
--
-- A recipe is run in a sandbox built here: a fresh environment holding an
-- allow-list of the standard library plus the declarations cluster{},
-- job{}, data{}, settings{}, include "file", and the model builder nn.
-- Every declaration is checked against the schema below; mistakes raise
-- one-line errors "file:line: what is wrong (did you mean 'x'?)".
-- The host calls M.load(path, cluster_path, overrides) and reads the plain
-- table it returns (see resolve()).

local M = {}

---------------------------------------------------------------------------
-- errors that point at the recipe

local function fail(where, fmt, ...)
  local msg = string.format(fmt, ...)
  if where then msg = where .. ": " .. msg end
  error(msg, 0)
end

-- Levenshtein distance, for "did you mean".
local function distance(a, b)
  local la, lb = #a, #b
  local prev, cur = {}, {}
  for j = 0, lb do prev[j] = j end
  for i = 1, la do
    cur[0] = i
    for j = 1, lb do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev, cur = cur, prev
  end
  return prev[lb]
end

local function nearest(word, candidates)
  local best, bestd
  for _, c in ipairs(candidates) do
    local d = distance(word:lower(), c:lower())
    if not bestd or d < bestd then best, bestd = c, d end
  end
  if best and bestd <= math.max(2, #word // 3) then return best end
  return nil
end

local function suggest(word, candidates)
  local n = nearest(word, candidates)
  if n then return string.format(" (did you mean '%s'?)", n) end
  local sorted = {}
  for _, c in ipairs(candidates) do sorted[#sorted + 1] = c end
  table.sort(sorted)
  return " (valid: " .. table.concat(sorted, ", ") .. ")"
end

-- Source lines of every file loaded, to find the line a key sits on.
local sources = {}

local function read_lines(path)
  local f = io.open(path, "rb")
  if not f then return {} end
  local lines = {}
  for line in f:lines() do lines[#lines + 1] = line end
  f:close()
  return lines
end

-- While the model function runs: its file and the line of its last
-- `return`. A layer call made as a tail call (`return nn.fc(...)`) leaves
-- no recipe frame on the stack; its errors point there instead.
local model_return

-- The recipe position of the caller of a declaration: "file:line".
-- level counts from the function that wants to know its caller.
local function caller(level)
  local tail = false
  for l = 2, level + 12 do
    local info = debug.getinfo(l, "Slt")
    if not info then break end
    if l > level and info.source:sub(1, 1) == "@" and sources[info.source:sub(2)] then
      return info.source:sub(2), info.currentline
    end
    tail = tail or info.istailcall
  end
  if tail and model_return then return model_return.file, model_return.line end
  return nil, nil
end

local function at(file, line)
  if not file then return nil end
  return string.format("%s:%d", file, line or 0)
end

-- Find the line of `key =` in the call that starts on line `from` of file:
-- from there to where its brackets close (strings and comments skipped).
-- A key that is not written there (a table built elsewhere) gives `from`.
local function key_line(file, from, key)
  local lines = file and sources[file]
  if not lines or not from then return from end
  local pat = "%f[%w_]" .. key:gsub("%p", "%%%0") .. "%s*=[^=]"
  local depth = 0
  for i = from, math.min(#lines, from + 400) do
    local code = (lines[i] .. " "):gsub("\\.", ""):gsub('"[^"]*"', '""'):gsub("'[^']*'", "''"):gsub("%-%-.*", "")
    if code:find(pat) then return i end
    for c in code:gmatch("[{}()]") do depth = depth + ((c == "{" or c == "(") and 1 or -1) end
    if depth <= 0 then break end
  end
  return from
end

---------------------------------------------------------------------------
-- schema: every key a declaration may hold, its type, range and default

local function int(lo, hi, default) return { kind = "int", lo = lo, hi = hi, default = default } end
local function num(lo, hi, default) return { kind = "number", lo = lo, hi = hi, default = default } end
local function str(default) return { kind = "string", default = default } end
local function enum(values, default) return { kind = "enum", values = values, default = default } end
local function bool(default) return { kind = "bool", default = default } end
local function strlist() return { kind = "strlist" } end

local schema = {
  cluster = {
    hosts = strlist(),
    root_dir = str(nil),
    nic = str(nil),
    port = int(1, 65535, 7164),
    ports_num = int(1, 64, 1),
    ports_num_for_sparse = int(0, 64, 1),
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
    pservers = int(0, 4096, nil),
    trainers = int(1, 4096, nil),
    workspace = str(nil),
    deployed = str(nil),
    restarts = int(0, 100, 0),
    copy_output = enum({ "pass", "end", "never" }, "pass"),
  },
  data = {
    train = str(nil),
    test = str(nil),
    format = enum({ "uci_housing", "csv", "libsvm", "movielens", "synthetic" }, "csv"),
    header = bool(false),
    columns = strlist(),
    label = int(0, 1000000, nil),
    features = int(1, 100000000, nil),
    separator = str(","),
    shuffle_buffer = int(0, 100000000, 0),
    on_error = enum({ "fail", "skip" }, "fail"),
    samples = int(1, 2000000000, 10000),
    queue = int(1, 4096, 8),
    test_fraction = num(0, 0.99, 0.1),
  },
  settings = {
    batch_size = int(1, 10000000, 32),
    passes = int(1, 1000000, 1),
    mode = enum({ "sync", "async" }, "sync"),
    seed = int(0, 2147483647, 1),
    log_period = int(1, 100000000, 10),
    max_batches = int(0, 2000000000, 0),
    test_period = int(0, 100000000, 0),
    device = enum({ "cpu", "cuda" }, "cpu"),
    use_gpu = bool(false),
    server_timeout = num(1, 86400, 120),
    save_dir = str("output"),
    checkpoint_dir = str(nil),
    threads = int(0, 1024, 0),
    num_gradient_servers = int(1, 4096, nil),
  },
}

local declaration_names = { "cluster", "job", "data", "settings" }

local function typename(v)
  local t = type(v)
  if t == "number" and math.type(v) == "integer" then return "integer" end
  return t
end

-- Check one value against its spec; returns the (converted) value.
local function check_value(where, decl, key, spec, v)
  local function bad(what)
    fail(where, "%s.%s must be %s, got %s", decl, key, what,
      type(v) == "string" and string.format("'%s'", v) or tostring(v))
  end
  if spec.kind == "int" then
    if math.type(v) == "float" and v == math.floor(v) then v = math.tointeger(v) end
    if math.type(v) ~= "integer" then bad(string.format("an integer from %d to %d", spec.lo, spec.hi)) end
    if v < spec.lo or v > spec.hi then bad(string.format("an integer from %d to %d", spec.lo, spec.hi)) end
  elseif spec.kind == "number" then
    if type(v) ~= "number" or v ~= v then bad(string.format("a number from %g to %g", spec.lo, spec.hi)) end
    if v < spec.lo or v > spec.hi then bad(string.format("a number from %g to %g", spec.lo, spec.hi)) end
  elseif spec.kind == "string" then
    if type(v) ~= "string" then bad("a string") end
  elseif spec.kind == "bool" then
    if type(v) ~= "boolean" then bad("true or false") end
  elseif spec.kind == "enum" then
    if type(v) ~= "string" then bad("one of " .. table.concat(spec.values, ", ")) end
    local ok = false
    for _, e in ipairs(spec.values) do if e == v then ok = true end end
    if not ok then
      local n = nearest(v, spec.values)
      fail(where, "%s.%s must be one of %s, got '%s'%s", decl, key,
        table.concat(spec.values, ", "), v, n and string.format(" (did you mean '%s'?)", n) or "")
    end
  elseif spec.kind == "strlist" then
    if type(v) == "string" then v = { v } end
    if type(v) ~= "table" then bad("a list of strings") end
    local out = {}
    for i, s in ipairs(v) do
      if type(s) ~= "string" then
        fail(where, "%s.%s[%d] must be a string, got %s", decl, key, i, typename(s))
      end
      out[i] = s
    end
    for k in pairs(v) do
      if math.type(k) ~= "integer" or k < 1 or k > #v then
        fail(where, "%s.%s must be a list of strings, but has key '%s'", decl, key, tostring(k))
      end
    end
    v = out
  end
  return v
end

local function keys_of(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- Validate a declaration table t (from file:line) against schema[decl].
local function check_decl(decl, t, file, line)
  local spec = schema[decl]
  if type(t) ~= "table" then
    fail(at(file, line), "%s expects a table, as in %s { key = value }, got %s", decl, decl, typename(t))
  end
  local out = {}
  for k, v in pairs(t) do
    if type(k) ~= "string" then
      fail(at(file, line), "%s { ... } takes key = value pairs; found a positional value %s",
        decl, tostring(v))
    end
    local where = at(file, key_line(file, line, k))
    if not spec[k] then
      fail(where, "unknown key '%s' in %s%s", k, decl, suggest(k, keys_of(spec)))
    end
    out[k] = check_value(where, decl, k, spec[k], v)
  end
  return out
end

---------------------------------------------------------------------------
-- the model builder: nn.* records layers; shapes are checked as they are made

local function new_builder()
  local nn = {}
  local layers = {}           -- in creation order
  local counters = {}
  local names = {}
  local tables = {}           -- shared embedding tables (opts.param) by name

  local Node = {}
  Node.__index = Node
  Node.__name = "paddle.layer"
  Node.__tostring = function(n) return string.format("layer '%s' (%s, size %d)", n.name, n.type, n.size) end

  local function is_node(v) return getmetatable(v) == Node end

  local function where() return at(caller(2)) end

  -- The line of `key =` in the options of the call at w ("file:line").
  local function key_at(w, key)
    local file, line = (w or ""):match("^(.*):(%d+)$")
    if not file then return w end
    return at(file, key_line(file, tonumber(line), key))
  end

  local function opts_table(opts, fname, allowed, w)
    if opts == nil then return {} end
    if type(opts) ~= "table" or is_node(opts) then
      fail(w, "nn.%s: options must be a table, got %s", fname, typename(opts))
    end
    for k in pairs(opts) do
      if type(k) ~= "string" or not allowed[k] then
        local list = keys_of(allowed)
        fail(key_at(w, tostring(k)), "nn.%s: unknown option '%s'%s", fname, tostring(k), suggest(tostring(k), list))
      end
    end
    return opts
  end

  local init_kinds = { "xavier", "zero", "uniform", "normal", "constant" }
  local function check_init(init, fname, w)
    if init == nil then return nil end
    if type(init) == "string" then init = { init } end
    if type(init) ~= "table" or type(init[1]) ~= "string" then
      fail(w, "nn.%s: init must be a name or { name, a, b }, e.g. { 'uniform', -0.1, 0.1 }", fname)
    end
    local ok = false
    for _, k in ipairs(init_kinds) do if k == init[1] then ok = true end end
    if not ok then fail(w, "nn.%s: unknown init '%s'%s", fname, init[1], suggest(init[1], init_kinds)) end
    for i = 2, 3 do
      if init[i] ~= nil and type(init[i]) ~= "number" then
        fail(w, "nn.%s: init parameter %d must be a number", fname, i - 1)
      end
    end
    return { kind = init[1], a = init[2] or 0, b = init[3] or 0 }
  end

  local function add(node, fname, w, name)
    local n = counters[fname] or 0
    counters[fname] = n + 1
    if name ~= nil then
      if type(name) ~= "string" or not name:match("^[%w_%.%-]+$") then
        fail(w, "nn.%s: name must be a string of letters, digits, '_', '.' or '-'", fname)
      end
    else
      name = string.format("%s_%d", fname, n)
    end
    if names[name] then fail(w, "nn.%s: a layer named '%s' already exists (%s)", fname, name, names[name].where) end
    node.name, node.type, node.where = name, node.type or fname, w
    node.file, node.line = caller(3)
    node.index = #layers + 1
    node.params = node.params or {}
    layers[#layers + 1] = node
    names[name] = node
    return setmetatable(node, Node)
  end

  local function need_node(v, fname, what, w)
    if not is_node(v) then
      fail(w, "nn.%s: %s must be a layer, got %s", fname, what, typename(v))
    end
    return v
  end

  local function size_arg(v, fname, what, w)
    if math.type(v) == "float" and v == math.floor(v) then v = math.tointeger(v) end
    if math.type(v) ~= "integer" or v < 1 or v > 100000000 then
      fail(w, "nn.%s: %s must be a positive integer, got %s", fname, what, tostring(v))
    end
    return v
  end

  -- data layers: kind "dense" (float vector), "id" (one integer id),
  -- "id_list" (a variable-length list of ids)
  local function data(fname, kind)
    return function(name, size, opts)
      local w = where()
      if type(name) ~= "string" then fail(w, "nn.%s: the first argument must be the slot name", fname) end
      if #name > 31 then fail(w, "nn.%s: slot name '%s' is too long (31 characters at most)", fname, name) end
      size = size_arg(size, fname, kind == "dense" and "size" or "the id range", w)
      opts_table(opts, fname, {}, w)
      return add({ type = "data", kind = kind, size = kind == "dense" and size or 1,
                   range = kind ~= "dense" and size or nil, seq = kind == "id_list", inputs = {},
                   slot = name }, fname, w, name)
    end
  end
  nn.data = data("data", "dense")
  nn.id = data("id", "id")
  nn.id_list = data("id_list", "id_list")

  local acts = { "linear", "relu", "sigmoid", "tanh", "softmax" }
  local function check_act(act, fname, w)
    if act == nil then return "linear" end
    if type(act) ~= "string" then fail(w, "nn.%s: act must be a string", fname) end
    for _, a in ipairs(acts) do if a == act then return act end end
    fail(key_at(w, "act"), "nn.%s: unknown activation '%s'%s", fname, act, suggest(act, acts))
  end

  -- nn.fc(input, size [, act | opts])
  function nn.fc(input, size, opts)
    local w = where()
    if type(opts) == "string" then opts = { act = opts } end
    opts = opts_table(opts, "fc", { act = true, name = true, init = true, bias = true, bias_init = true }, w)
    need_node(input, "fc", "input", w)
    if input.seq then fail(w, "nn.fc: input '%s' is a sequence; pool it first with nn.seq_pool", input.name) end
    if input.kind == "id" or input.kind == "id_list" then
      fail(w, "nn.fc: input '%s' holds ids; use nn.embedding on it first", input.name)
    end
    size = size_arg(size, "fc", "size", w)
    local node = { type = "fc", inputs = { input }, size = size, act = check_act(opts.act, "fc", w) }
    node = add(node, "fc", w, opts.name)
    node.params = { { name = node.name .. ".w_0", rows = input.size, cols = size,
                      init = check_init(opts.init, "fc", w) or { kind = "xavier", a = 0, b = 0 } } }
    if opts.bias ~= false then
      node.params[2] = { name = node.name .. ".b_0", rows = 1, cols = size,
                         init = check_init(opts.bias_init, "fc", w) or { kind = "zero", a = 0, b = 0 } }
    end
    return node
  end

  -- nn.embedding(ids, dim [, opts]): ids -> rows of a (sparse) table
  function nn.embedding(input, dim, opts)
    local w = where()
    opts = opts_table(opts, "embedding", { name = true, init = true, param = true }, w)
    need_node(input, "embedding", "input", w)
    if input.kind ~= "id" and input.kind ~= "id_list" then
      fail(w, "nn.embedding: input '%s' must hold ids (nn.id or nn.id_list), it is dense", input.name)
    end
    dim = size_arg(dim, "embedding", "dim", w)
    local param = opts.param
    if param ~= nil and (type(param) ~= "string" or not param:match("^[%w_%.%-]+$")) then
      fail(key_at(w, "param"), "nn.embedding: param must be a string of letters, digits, '_', '.' or '-'")
    end
    local first = param and tables[param]
    if first and (first.rows ~= input.range or first.cols ~= dim) then
      fail(w, "nn.embedding: table '%s' is %dx%d here but %dx%d at %s; a shared table needs the same id range and dim",
        param, input.range, dim, first.rows, first.cols, first.where)
    end
    local node = add({ type = "embedding", inputs = { input }, size = dim, seq = input.seq }, "embedding", w, opts.name)
    node.params = { { name = param or (node.name .. ".w_0"), rows = input.range, cols = dim, sparse = true,
                      init = check_init(opts.init, "embedding", w) or { kind = "xavier", a = 0, b = 0 } } }
    if param and not first then tables[param] = { rows = input.range, cols = dim, where = w } end
    return node
  end

  local pools = { "sum", "average", "max" }
  function nn.seq_pool(input, pool, opts)
    local w = where()
    opts = opts_table(opts, "seq_pool", { name = true }, w)
    need_node(input, "seq_pool", "input", w)
    if not input.seq then fail(w, "nn.seq_pool: input '%s' is not a sequence", input.name) end
    if input.kind == "id_list" then fail(w, "nn.seq_pool: input '%s' holds ids; use nn.embedding on it first", input.name) end
    pool = pool or "sum"
    local ok = false
    for _, p in ipairs(pools) do if p == pool then ok = true end end
    if not ok then fail(w, "nn.seq_pool: unknown pooling '%s'%s", tostring(pool), suggest(tostring(pool), pools)) end
    return add({ type = "seq_pool", inputs = { input }, size = input.size, pool = pool }, "seq_pool", w, opts.name)
  end

  function nn.concat(inputs, opts)
    local w = where()
    opts = opts_table(opts, "concat", { name = true }, w)
    if type(inputs) ~= "table" or is_node(inputs) or #inputs < 1 then
      fail(w, "nn.concat: expects a list of layers, e.g. nn.concat { a, b }")
    end
    local size = 0
    for i, x in ipairs(inputs) do
      need_node(x, "concat", "input " .. i, w)
      if x.seq then fail(w, "nn.concat: input '%s' is a sequence; pool it first", x.name) end
      if x.kind == "id" or x.kind == "id_list" then fail(w, "nn.concat: input '%s' holds ids", x.name) end
      size = size + x.size
    end
    local list = {}
    for i, x in ipairs(inputs) do list[i] = x end
    return add({ type = "concat", inputs = list, size = size }, "concat", w, opts.name)
  end

  local function dense_pair(fname, a, b, w)
    need_node(a, fname, "first input", w)
    need_node(b, fname, "second input", w)
    for _, x in ipairs({ a, b }) do
      if x.seq or x.kind == "id" or x.kind == "id_list" then
        fail(w, "nn.%s: input '%s' must be dense", fname, x.name)
      end
    end
    if a.size ~= b.size then
      fail(w, "nn.%s: inputs differ in size: '%s' has %d, '%s' has %d", fname, a.name, a.size, b.name, b.size)
    end
  end

  function nn.cos_sim(a, b, opts)
    local w = where()
    if type(opts) == "number" then opts = { scale = opts } end
    opts = opts_table(opts, "cos_sim", { name = true, scale = true }, w)
    dense_pair("cos_sim", a, b, w)
    if opts.scale ~= nil and type(opts.scale) ~= "number" then fail(w, "nn.cos_sim: scale must be a number") end
    return add({ type = "cos_sim", inputs = { a, b }, size = 1, scale = opts.scale or 1 }, "cos_sim", w, opts.name)
  end

  function nn.square_error_cost(pred, label, opts)
    local w = where()
    opts = opts_table(opts, "square_error_cost", { name = true }, w)
    dense_pair("square_error_cost", pred, label, w)
    return add({ type = "square_error_cost", inputs = { pred, label }, size = 1, cost = true },
      "square_error_cost", w, opts.name)
  end

  local function class_pair(fname, pred, label, w)
    need_node(pred, fname, "prediction", w)
    need_node(label, fname, "label", w)
    if pred.seq or pred.kind then fail(w, "nn.%s: prediction '%s' must be a dense layer", fname, pred.name) end
    if label.kind ~= "id" then fail(w, "nn.%s: label '%s' must be an nn.id slot", fname, label.name) end
    if label.range ~= pred.size then
      fail(w, "nn.%s: label '%s' has %d classes but prediction '%s' has size %d", fname, label.name,
        label.range, pred.name, pred.size)
    end
  end

  -- cross-entropy of a probability vector (fc with act = "softmax") against an id
  function nn.cross_entropy(pred, label, opts)
    local w = where()
    opts = opts_table(opts, "cross_entropy", { name = true }, w)
    class_pair("cross_entropy", pred, label, w)
    return add({ type = "cross_entropy", inputs = { pred, label }, size = 1, cost = true },
      "cross_entropy", w, opts.name)
  end

  -- softmax followed by cross-entropy, on logits (fused, numerically stable)
  function nn.softmax_cross_entropy(logits, label, opts)
    local w = where()
    opts = opts_table(opts, "softmax_cross_entropy", { name = true }, w)
    class_pair("softmax_cross_entropy", logits, label, w)
    return add({ type = "softmax_cross_entropy", inputs = { logits, label }, size = 1, cost = true },
      "softmax_cross_entropy", w, opts.name)
  end

  function nn.classification_error(pred, label, opts)
    local w = where()
    opts = opts_table(opts, "classification_error", { name = true }, w)
    class_pair("classification_error", pred, label, w)
    return add({ type = "classification_error", inputs = { pred, label }, size = 1, metric = true },
      "classification_error", w, opts.name)
  end

  -- optimizers
  local optimizers = {
    sgd = { learning_rate = 0.01 },
    momentum = { learning_rate = 0.01, momentum = 0.9, nesterov = false },
    adagrad = { learning_rate = 0.01, epsilon = 1e-6 },
    adam = { learning_rate = 0.001, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8 },
    rmsprop = { learning_rate = 0.01, rho = 0.95, epsilon = 1e-6, momentum = 0 },
  }
  for oname, defaults in pairs(optimizers) do
    nn[oname] = function(opts)
      local w = where()
      if opts == nil then opts = {} end
      if type(opts) ~= "table" then fail(w, "nn.%s expects a table of settings", oname) end
      local allowed = { weight_decay = true }
      for k in pairs(defaults) do allowed[k] = true end
      local o = { type = oname, weight_decay = 0, where = w }
      for k, v in pairs(defaults) do o[k] = v end
      for k, v in pairs(opts) do
        if type(k) ~= "string" or not allowed[k] then
          local file, line = caller(1)
          fail(at(file, key_line(file, line, tostring(k))),
            "nn.%s: unknown setting '%s'%s", oname, tostring(k), suggest(tostring(k), keys_of(allowed)))
        end
        if k == "nesterov" then
          if type(v) ~= "boolean" then fail(w, "nn.%s: nesterov must be true or false", oname) end
        elseif type(v) ~= "number" or v ~= v or v < 0 then
          fail(w, "nn.%s: %s must be a non-negative number, got %s", oname, k, tostring(v))
        end
        o[k] = v
      end
      if o.learning_rate <= 0 then fail(w, "nn.%s: learning_rate must be above 0", oname) end
      for _, k in ipairs({ "momentum", "beta1", "beta2", "rho" }) do
        if o[k] and o[k] >= 1 then fail(w, "nn.%s: %s must be below 1, got %g", oname, k, o[k]) end
      end
      return setmetatable(o, { __name = "paddle.optimizer" })
    end
  end

  return nn, layers, is_node
end

---------------------------------------------------------------------------
-- the sandbox

local safe_base = {
  "assert", "error", "ipairs", "next", "pairs", "pcall", "print", "rawequal",
  "rawget", "rawlen", "select", "tonumber", "tostring", "type", "xpcall",
  "getmetatable", "setmetatable",
}
local safe_libs = { "math", "string", "table", "utf8" }

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

local function dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

local function join(dir, path)
  if path:sub(1, 1) == "/" then return path end
  if dir == "." then return path end
  return dir .. "/" .. path
end

-- Build the environment a recipe runs in and the state its declarations fill.
local function new_env(state)
  local env = {}
  for _, k in ipairs(safe_base) do env[k] = _G[k] end
  for _, k in ipairs(safe_libs) do env[k] = copy(_G[k]) end
  env.os = setmetatable({ time = os.time, clock = os.clock, date = os.date, getenv = os.getenv }, {
    __index = function(_, k)
      fail(at(caller(1)), "os.%s is not available in a recipe (os has only time, clock, date and getenv)",
        tostring(k))
    end,
  })
  env._VERSION = _VERSION

  for _, decl in ipairs(declaration_names) do
    env[decl] = function(t)
      local file, line = caller(1)
      if state.decls[decl] and state.decls[decl].file == file then
        fail(at(file, line), "%s declared twice (first at %s)", decl, at(state.decls[decl].file, state.decls[decl].line))
      end
      state.decls[decl] = { values = check_decl(decl, t, file, line), file = file, line = line }
    end
  end

  env.include = function(path)
    local file, line = caller(1)
    if type(path) ~= "string" then fail(at(file, line), "include expects a file name") end
    local full = join(dirname(file or "."), path)
    state.run(full, at(file, line))
  end

  env.nn = state.nn

  -- model and optimizer live in state.globals, so that every assignment
  -- comes through __newindex and state.assigned knows the line of the last.
  local assignable = { model = true, optimizer = true }
  local unavailable = { io = true, require = true, dofile = true, loadfile = true, load = true,
                        package = true, debug = true, collectgarbage = true, coroutine = true }
  state.globals, state.assigned = {}, {}
  setmetatable(env, {
    __newindex = function(t, k, v)
      local file, line = caller(1)
      if assignable[k] then
        -- Lua reports a multi-line assignment at its last line: find its first
        local lines = sources[file] or {}
        local info = type(v) == "function" and debug.getinfo(v, "S")
        if info and info.source == "@" .. tostring(file) then
          line = info.linedefined
        else
          for i = line or 1, math.max(1, (line or 1) - 200), -1 do
            if lines[i] and lines[i]:find("%f[%w_]" .. k .. "%s*=[^=]") then line = i break end
          end
        end
        state.globals[k], state.assigned[k] = v, at(file, line)
        return
      end
      fail(at(file, line), "assignment to undeclared global '%s' (declare it 'local %s', or set model/optimizer)",
        tostring(k), tostring(k))
    end,
    __index = function(t, k)
      if assignable[k] then return state.globals[k] end
      local file, line = caller(1)
      if unavailable[k] then
        fail(at(file, line), "'%s' is not available in a recipe (no files, programs or modules; " ..
          "use include \"file.lua\" for another recipe file)", tostring(k))
      end
      -- suggest among the globals and the locals in scope where the name was read
      local names = { "model", "optimizer" }
      for name in pairs(env) do names[#names + 1] = name end
      for l = 2, 14 do
        local info = debug.getinfo(l, "Sf")
        if not info then break end
        if info.source == "@" .. tostring(file) then
          for i = 1, 250 do
            local name = debug.getlocal(l, i)
            if not name then break end
            if name:sub(1, 1) ~= "(" then names[#names + 1] = name end
          end
          for i = 1, 255 do
            local name = debug.getupvalue(info.func, i)
            if not name then break end
            if name ~= "_ENV" then names[#names + 1] = name end
          end
          break
        end
      end
      local n = nearest(tostring(k), names)
      fail(at(file, line), "undefined name '%s'%s", tostring(k),
        n and string.format(" (did you mean '%s'?)", n) or "")
    end,
  })
  return env
end

local function load_file(path, env, from)
  local f = io.open(path, "rb")
  if not f then
    fail(from, "cannot open %s", path)
  end
  local text = f:read("a")
  f:close()
  sources[path] = read_lines(path)
  local chunk, err = load(text, "@" .. path, "t", env)
  if not chunk then error(err, 0) end
  chunk()
end

---------------------------------------------------------------------------
-- resolve: turn declarations into the plain table the host reads

local function defaults_for(decl, values)
  local out = {}
  for k, spec in pairs(schema[decl]) do
    if values[k] ~= nil then out[k] = values[k]
    elseif spec.kind == "strlist" then out[k] = {}
    else out[k] = spec.default end
  end
  return out
end

local function parse_host(spec, where)
  local user, rest = spec:match("^([^@]+)@(.+)$")
  if not user then rest = spec end
  local host, port = rest:match("^%[(.+)%]:(%d+)$")
  if not host then host, port = rest:match("^([^:]+):(%d+)$") end
  if not host then host = rest end
  if host == "" or host:find("[%s/]") then fail(where, "bad host '%s': expected user@host[:port]", spec) end
  local p = 22
  if port then
    p = tonumber(port)
    if p < 1 or p > 65535 then fail(where, "bad port in host '%s': must be 1 to 65535", spec) end
  end
  return { spec = spec, user = user, host = host, port = p }
end

-- Apply --key=value overrides: each key names a setting of one declaration.
local function apply_overrides(state, overrides)
  for _, ov in ipairs(overrides) do
    local key, text = ov.key, ov.value
    local decl
    for _, d in ipairs({ "settings", "job", "data", "cluster" }) do
      if schema[d][key] then decl = d break end
    end
    if not decl then
      local all = {}
      for _, d in ipairs(declaration_names) do for k in pairs(schema[d]) do all[#all + 1] = k end end
      local n = nearest(key, all)
      fail(nil, "unknown option --%s%s", key, n and string.format(" (did you mean --%s?)", n) or "")
    end
    local spec = schema[decl][key]
    local v = text
    if spec.kind == "int" or spec.kind == "number" then
      v = math.tointeger(tonumber(text)) or tonumber(text)
      if v == nil then fail(nil, "option --%s must be a number, got '%s'", key, text) end
    elseif spec.kind == "bool" then
      if text == "1" or text == "true" or text == "yes" then v = true
      elseif text == "0" or text == "false" or text == "no" then v = false
      else fail(nil, "option --%s must be true or false (1/0), got '%s'", key, text) end
    elseif spec.kind == "strlist" then
      v = {}
      for item in text:gmatch("[^,]+") do v[#v + 1] = item end
    end
    local d = state.decls[decl] or { values = {}, file = nil, line = nil }
    state.decls[decl] = d
    d.values[key] = check_value("option --" .. key, decl, key, spec, v)
  end
end

local function resolve(state, recipe_path)
  local function decl(name) return state.decls[name] and state.decls[name].values or {} end
  local out = {
    cluster = defaults_for("cluster", decl("cluster")),
    job = defaults_for("job", decl("job")),
    data = defaults_for("data", decl("data")),
    settings = defaults_for("settings", decl("settings")),
    recipe = recipe_path,
    recipe_dir = dirname(recipe_path),
  }
  local function key_where(name, key)
    local d = state.decls[name]
    if not d or not d.file then return recipe_path end
    return at(d.file, key_line(d.file, d.line, key))
  end
  local cw = key_where("cluster", "hosts")
  local hosts = {}
  for i, h in ipairs(out.cluster.hosts) do hosts[i] = parse_host(h, cw) end
  out.cluster.hosts = hosts
  for _, key in ipairs(#hosts > 0 and { "pserver_hosts", "trainer_hosts" } or {}) do
    for _, name in ipairs(out.cluster[key]) do
      local found = false
      for _, h in ipairs(hosts) do found = found or h.spec == name or h.host == name end
      if not found then fail(key_where("cluster", key), "cluster.%s names '%s', which is not in cluster.hosts", key, name) end
    end
  end
  local nhosts = math.max(1, #hosts)
  if out.job.pservers == nil then out.job.pservers = #hosts > 0 and nhosts or 1 end
  if out.job.trainers == nil then out.job.trainers = #hosts > 0 and nhosts or 1 end
  if out.settings.use_gpu then out.settings.device = "cuda" end
  if out.job.workspace and out.job.deployed then
    fail(key_where("job", "deployed"),
      "job: give either workspace (dispatched to every node) or deployed (already there), not both")
  end
  if out.settings.mode == "sync" and out.job.pservers == 0 and out.job.trainers > 1 then
    fail(key_where("job", "pservers"), "job: %d trainers need at least one pserver in sync mode", out.job.trainers)
  end

  -- model
  local model, mw = state.globals.model, state.assigned.model
  if model == nil then fail(recipe_path, "missing 'model': set model = function(nn) ... return cost end") end
  if type(model) ~= "function" then
    fail(mw, "'model' must be a function(nn) returning the cost layer, got %s", typename(model))
  end
  local info = debug.getinfo(model, "S")
  if info.source:sub(1, 1) == "@" and sources[info.source:sub(2)] then
    local file, ret = info.source:sub(2), info.linedefined
    for i = info.lastlinedefined, info.linedefined, -1 do
      if sources[file][i] and sources[file][i]:find("%f[%w_]return%f[^%w_]") then ret = i break end
    end
    model_return = { file = file, line = ret }
  end
  local result = model(state.nn)
  model_return = nil
  local cost, metrics, predict
  if state.is_node(result) then
    cost = result
  elseif type(result) == "table" then
    cost, predict = result.cost, result.predict
    metrics = result.metrics
    for k in pairs(result) do
      if k ~= "cost" and k ~= "predict" and k ~= "metrics" then
        fail(mw, "model returned an unknown field '%s'%s", tostring(k),
          suggest(tostring(k), { "cost", "predict", "metrics" }))
      end
    end
  end
  if not state.is_node(cost) or not cost.cost then
    fail(mw, "model must return a cost layer (e.g. nn.square_error_cost) or { cost = ..., metrics = { ... } }, got %s",
      state.is_node(cost) and tostring(cost) or typename(result))
  end
  local layers = {}
  for i, n in ipairs(state.layers) do
    local inputs = {}
    for j, x in ipairs(n.inputs) do inputs[j] = x.index end
    layers[i] = {
      name = n.name, type = n.type, kind = n.kind, size = n.size, range = n.range, seq = n.seq or false,
      act = n.act, pool = n.pool, scale = n.scale, slot = n.slot, inputs = inputs, params = n.params,
      where = n.where,
    }
  end
  out.layers = layers
  out.cost = cost.index
  out.predict = predict and state.is_node(predict) and predict.index or nil
  out.metrics = {}
  if metrics ~= nil then
    if type(metrics) ~= "table" then fail(mw, "model: metrics must be a table of layers") end
    for k, m in pairs(metrics) do
      if not state.is_node(m) then fail(mw, "model: metric '%s' is not a layer", tostring(k)) end
      out.metrics[#out.metrics + 1] = { name = type(k) == "string" and k or m.name, layer = m.index }
    end
    table.sort(out.metrics, function(a, b) return a.name < b.name end)
  end

  local opt = state.globals.optimizer
  if opt == nil then fail(recipe_path, "missing 'optimizer': e.g. optimizer = nn.sgd { learning_rate = 0.01 }") end
  if getmetatable(opt) == nil or getmetatable(opt).__name ~= "paddle.optimizer" then
    fail(state.assigned.optimizer, "'optimizer' must be made by nn.sgd, nn.momentum, nn.adagrad, nn.adam or nn.rmsprop")
  end
  out.optimizer = opt

  if not out.data.train then
    fail(key_where("data", "train"), "missing data.train: data { train = \"train.list\", format = \"...\" }")
  end
  return out
end

-- Load a recipe. overrides: list of { key =, value = } from the command line.
function M.load(path, cluster_path, overrides)
  local state = { decls = {} }
  model_return = nil
  state.nn, state.layers, state.is_node = new_builder()
  state.env = new_env(state)
  state.run = function(p, from) load_file(p, state.env, from) end
  state.run(path, nil)
  if cluster_path then
    -- a cluster file replaces the recipe's cluster declaration
    local cstate = { decls = {} }
    cstate.nn = state.nn
    cstate.env = new_env(cstate)
    cstate.run = function(p, from) load_file(p, cstate.env, from) end
    cstate.run(cluster_path, "--cluster")
    if not cstate.decls.cluster then fail(cluster_path, "no cluster { ... } declaration in this file") end
    state.decls.cluster = cstate.decls.cluster
  end
  apply_overrides(state, overrides or {})
  return resolve(state, path)
end

M.schema = schema
return M
