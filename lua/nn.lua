-- nn.lua - the model builder: nn.* records layers; shapes are checked as
-- they are made.
--
-- The recipe holds handles, not the records: a handle is an empty table
-- whose protected metatable shows a few read-only fields (name, type, size,
-- ...) of a record only this file can reach. So a recipe cannot change a
-- layer, its parameters or an optimizer after they were validated.

local R = require "report"
local S = require "schema"
local fail, at, plain = R.fail, R.at, R.plain

local N = {}

-- fields a recipe may read from a layer handle
local visible = { name = true, type = true, size = true, kind = true, range = true, seq = true,
                  slot = true, act = true, pool = true, scale = true }

-- Returns nn, the list of layer records, record_of(handle) and
-- optimizer_of(handle) (each nil for what is not one).
function N.new(limits)
  local nn = {}
  local layers = {}           -- records, in creation order
  local records = {}          -- handle -> record
  local optimizers = {}       -- optimizer handle -> settings
  local counters = {}
  local names = {}
  local tables = {}           -- shared embedding tables (opts.param) by name

  local Handle = {
    __metatable = "paddle.layer",
    __index = function(h, k)
      if visible[k] then return records[h][k] end
      -- x.hidden where x is a layer: named, not a nil that a table
      -- constructor would silently drop ({ x, y, x.hidden } has 2 entries)
      R.unknown(at(R.caller(1)), "layer '" .. records[h].name .. "' has no field", k, R.keys_of(visible))
    end,
    __newindex = function(h, k)
      fail(at(R.caller(1)), "layer '%s' is read-only (cannot set '%s')", records[h].name, tostring(k))
    end,
    __tostring = function(h)
      local n = records[h]
      return string.format("layer '%s' (%s, size %d)", n.name, n.type, n.size)
    end,
  }

  local function record_of(v) return records[v] end

  local function where() return at(R.caller(2)) end

  -- opts: nil or a table of options among `allowed`; returns a plain copy.
  local function opts_table(opts, fname, allowed, w)
    if opts == nil then return {} end
    if type(opts) ~= "table" or records[opts] then
      fail(w, "nn.%s: options must be a table, got %s", fname, R.typename(opts))
    end
    opts = plain(opts)
    for k in next, opts do
      if type(k) ~= "string" or not allowed[k] then
        R.unknown(R.key_at(w, tostring(k)), "nn." .. fname .. ": unknown option", k, R.keys_of(allowed))
      end
    end
    return opts
  end

  local init_kinds = { "xavier", "zero", "uniform", "normal", "constant" }
  local function check_init(init, fname, w)
    if init == nil then return nil end
    if type(init) == "string" then init = { init } end
    if type(init) ~= "table" or records[init] then init = {} end
    init = plain(init)
    if type(init[1]) ~= "string" then
      fail(w, "nn.%s: init must be a name or { name, a, b }, e.g. { 'uniform', -0.1, 0.1 }", fname)
    end
    local ok = false
    for _, k in ipairs(init_kinds) do if k == init[1] then ok = true end end
    if not ok then R.unknown(w, "nn." .. fname .. ": unknown init", init[1], init_kinds) end
    for i = 2, 3 do
      if init[i] ~= nil and (type(init[i]) ~= "number" or init[i] ~= init[i] or math.abs(init[i]) == math.huge) then
        fail(w, "nn.%s: init parameter %d must be a finite number, got %s", fname, i - 1, R.shown(init[i]))
      end
    end
    if init[4] ~= nil then fail(w, "nn.%s: init takes at most a name and 2 numbers, got a 4th value", fname) end
    local a, b = init[2], init[3]
    -- { "uniform", 1 } would draw from [1, 0), { "normal", 0, 0 } from std 1
    if init[1] == "uniform" and (a ~= nil or b ~= nil) and not (a and b and a < b) then
      fail(w, "nn.%s: init { 'uniform', lo, hi } needs both bounds, lo below hi; got %s, %s", fname,
        R.shown(a), R.shown(b))
    end
    if init[1] == "normal" and b ~= nil and not (b > 0) then
      fail(w, "nn.%s: init { 'normal', mean, std } needs std above 0, got %s", fname, R.shown(b))
    end
    return { kind = init[1], a = a or 0, b = b or 0 }
  end

  local function check_name(name, fname, what, w)
    if type(name) ~= "string" or not name:match("^[%w_%.%-]+$") then
      fail(w, "nn.%s: %s must be a string of letters, digits, '_', '.' or '-'", fname, what)
    end
    return R.check_file_name(w, "nn." .. fname .. ": " .. what, name)
  end

  -- Record node (a fresh table) as a layer; returns its handle.
  local function add(node, fname, w, name)
    local n = counters[fname] or 0
    counters[fname] = n + 1
    if name ~= nil then
      check_name(name, fname, "name", w)
    else
      name = string.format("%s_%d", fname, n)
    end
    if names[name] then fail(w, "nn.%s: a layer named '%s' already exists (%s)", fname, name, names[name].where) end
    if #node.inputs > limits.max_inputs then
      fail(w, "layer '%s' has %d inputs, at most %d are allowed", name, #node.inputs, limits.max_inputs)
    end
    node.name, node.type, node.where = name, node.type or fname, w
    node.index = #layers + 1
    node.params = node.params or {}
    layers[#layers + 1] = node
    names[name] = node
    local h = setmetatable({}, Handle)
    records[h] = node
    return h, node
  end

  local function add_param(node, p, w)
    R.check_file_name(w, "parameter name", p.name)
    node.params[#node.params + 1] = p
  end

  local function need_node(v, fname, what, w)
    local rec = records[v]
    if not rec then fail(w, "nn.%s: %s must be a layer, got %s", fname, what, R.typename(v)) end
    return rec
  end

  local function size_arg(v, fname, what, w)
    if math.type(v) == "float" and v == math.floor(v) then v = math.tointeger(v) or v end
    if math.type(v) ~= "integer" or v < 1 or v > 100000000 then
      fail(w, "nn.%s: %s must be an integer from 1 to 100000000, got %s", fname, what, R.shown(v))
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
      -- ids without a range are 64-bit feature ids: only a growing (hash) table takes them
      if kind ~= "dense" and size == nil then
        size = 0
      else
        size = size_arg(size, fname, kind == "dense" and "size" or "the id range", w)
      end
      opts_table(opts, fname, {}, w)
      return (add({ type = "data", kind = kind, size = kind == "dense" and size or 1,
                    range = kind ~= "dense" and size or nil, seq = kind == "id_list", inputs = {},
                    slot = name }, fname, w, name))
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
    R.unknown(R.key_at(w, "act"), "nn." .. fname .. ": unknown activation", act, acts)
  end

  -- nn.fc(input, size [, act | opts])
  function nn.fc(input, size, opts, ...)
    local w = where()
    if select("#", ...) > 0 then
      fail(w, "nn.fc takes (input, size, options), got %d arguments", 3 + select("#", ...))
    end
    if type(opts) == "string" then opts = { act = opts } end
    opts = opts_table(opts, "fc", { act = true, name = true, init = true, bias = true, bias_init = true }, w)
    if opts.bias ~= nil and type(opts.bias) ~= "boolean" then
      fail(R.key_at(w, "bias"), "nn.fc: bias must be true or false, got %s", R.shown(opts.bias))
    end
    input = need_node(input, "fc", "input", w)
    if input.seq then fail(w, "nn.fc: input '%s' is a sequence; pool it first with nn.seq_pool", input.name) end
    if input.kind == "id" or input.kind == "id_list" then
      fail(w, "nn.fc: input '%s' holds ids; use nn.embedding on it first", input.name)
    end
    size = size_arg(size, "fc", "size", w)
    local act = check_act(opts.act, "fc", w)
    local init = check_init(opts.init, "fc", w) or { kind = "xavier", a = 0, b = 0 }
    local bias_init = check_init(opts.bias_init, "fc", w) or { kind = "zero", a = 0, b = 0 }
    local h, node = add({ type = "fc", inputs = { input }, size = size, act = act }, "fc", w, opts.name)
    add_param(node, { name = node.name .. ".w_0", rows = input.size, cols = size, init = init }, w)
    if opts.bias ~= false then
      add_param(node, { name = node.name .. ".b_0", rows = 1, cols = size, init = bias_init }, w)
    end
    return h
  end

  -- The limits of a growing table (an embedding over ids without a range),
  -- or nil for a fixed one; opts.table says which it must be.
  local function growing_table(input, opts, w)
    local t = opts.table
    if t ~= nil and t ~= "hash" and t ~= "fixed" then
      R.unknown(R.key_at(w, "table"), "nn.embedding: unknown table", tostring(t), { "hash", "fixed" })
    end
    local hash = input.range == 0
    if t == "hash" and not hash then
      fail(R.key_at(w, "table"), "nn.embedding: table = 'hash' takes ids without a range, but '%s' has range %d; "
        .. "declare it as nn.%s(\"%s\") without one", input.name, input.range, input.kind, input.slot or input.name)
    end
    if t == "fixed" and hash then
      fail(R.key_at(w, "table"), "nn.embedding: table = 'fixed' needs an id range, '%s' has none", input.name)
    end
    local lim = {}
    for _, k in ipairs({ "min_count", "ttl", "max_rows" }) do
      local v = opts[k]
      if v ~= nil then
        if not hash then
          fail(R.key_at(w, k), "nn.embedding: %s is for growing tables (ids without a range); '%s' has range %d",
            k, input.name, input.range)
        end
        if math.type(v) == "float" and v == math.floor(v) then v = math.tointeger(v) or v end
        if math.type(v) ~= "integer" or v < 0 or v > 2000000000 then
          fail(R.key_at(w, k), "nn.embedding: %s must be an integer in [0, 2000000000], got %s", k, R.shown(v))
        end
      end
      lim[k] = v or 0
    end
    return hash and lim or nil
  end

  -- nn.embedding(ids, dim [, opts]): ids -> rows of a (sparse) table
  function nn.embedding(input, dim, opts)
    local w = where()
    opts = opts_table(opts, "embedding", { name = true, init = true, param = true, table = true, min_count = true,
                                           ttl = true, max_rows = true }, w)
    input = need_node(input, "embedding", "input", w)
    if input.kind ~= "id" and input.kind ~= "id_list" then
      fail(w, "nn.embedding: input '%s' must hold ids (nn.id or nn.id_list), it is dense", input.name)
    end
    dim = size_arg(dim, "embedding", "dim", w)
    local param = opts.param
    if param ~= nil then check_name(param, "embedding", "param", R.key_at(w, "param")) end
    local hash = growing_table(input, opts, w)
    local first = param and tables[param]
    if first and (first.rows ~= input.range or first.cols ~= dim) then
      fail(w, "nn.embedding: table '%s' is %dx%d here but %dx%d at %s; a shared table needs the same id range and dim",
        param, input.range, dim, first.rows, first.cols, first.where)
    end
    if first and hash and (first.min_count ~= hash.min_count or first.ttl ~= hash.ttl
                           or first.max_rows ~= hash.max_rows) then
      fail(w, "nn.embedding: table '%s' has min_count, ttl and max_rows %d, %d, %d at %s; give them once or alike",
        param, first.min_count, first.ttl, first.max_rows, first.where)
    end
    local init = check_init(opts.init, "embedding", w) or { kind = "xavier", a = 0, b = 0 }
    local h, node = add({ type = "embedding", inputs = { input }, size = dim, seq = input.seq }, "embedding", w,
      opts.name)
    local p = { name = param or (node.name .. ".w_0"), rows = input.range, cols = dim, sparse = true, init = init }
    if hash then p.hash, p.min_count, p.ttl, p.max_rows = true, hash.min_count, hash.ttl, hash.max_rows end
    add_param(node, p, w)
    if param and not first then
      tables[param] = { rows = input.range, cols = dim, where = w, min_count = p.min_count, ttl = p.ttl,
                        max_rows = p.max_rows }
    end
    return h
  end

  local pools = { "sum", "average", "max" }
  function nn.seq_pool(input, pool, opts)
    local w = where()
    opts = opts_table(opts, "seq_pool", { name = true }, w)
    input = need_node(input, "seq_pool", "input", w)
    if not input.seq then fail(w, "nn.seq_pool: input '%s' is not a sequence", input.name) end
    if input.kind == "id_list" then fail(w, "nn.seq_pool: input '%s' holds ids; use nn.embedding on it first", input.name) end
    pool = pool or "sum"
    local ok = false
    for _, p in ipairs(pools) do if p == pool then ok = true end end
    if not ok then R.unknown(w, "nn.seq_pool: unknown pooling", pool, pools) end
    return (add({ type = "seq_pool", inputs = { input }, size = input.size, pool = pool }, "seq_pool", w, opts.name))
  end

  function nn.concat(inputs, opts)
    local w = where()
    opts = opts_table(opts, "concat", { name = true }, w)
    if type(inputs) ~= "table" or records[inputs] or rawlen(inputs) < 1 then
      fail(w, "nn.concat: expects a list of layers, e.g. nn.concat { a, b }")
    end
    local size, list = 0, {}
    for i = 1, rawlen(inputs) do
      local x = need_node(rawget(inputs, i), "concat", "input " .. i, w)
      if x.seq then fail(w, "nn.concat: input '%s' is a sequence; pool it first", x.name) end
      if x.kind == "id" or x.kind == "id_list" then fail(w, "nn.concat: input '%s' holds ids", x.name) end
      size = size + x.size
      list[i] = x
    end
    return (add({ type = "concat", inputs = list, size = size }, "concat", w, opts.name))
  end

  local function dense_pair(fname, a, b, w)
    a = need_node(a, fname, "first input", w)
    b = need_node(b, fname, "second input", w)
    for _, x in ipairs({ a, b }) do
      if x.seq or x.kind == "id" or x.kind == "id_list" then
        fail(w, "nn.%s: input '%s' must be dense", fname, x.name)
      end
    end
    if a.size ~= b.size then
      fail(w, "nn.%s: inputs differ in size: '%s' has %d, '%s' has %d", fname, a.name, a.size, b.name, b.size)
    end
    return a, b
  end

  function nn.cos_sim(a, b, opts)
    local w = where()
    if type(opts) == "number" then opts = { scale = opts } end
    opts = opts_table(opts, "cos_sim", { name = true, scale = true }, w)
    a, b = dense_pair("cos_sim", a, b, w)
    if opts.scale ~= nil and (type(opts.scale) ~= "number" or opts.scale ~= opts.scale) then
      fail(w, "nn.cos_sim: scale must be a number")
    end
    return (add({ type = "cos_sim", inputs = { a, b }, size = 1, scale = opts.scale or 1 }, "cos_sim", w, opts.name))
  end

  function nn.square_error_cost(pred, label, opts)
    local w = where()
    opts = opts_table(opts, "square_error_cost", { name = true }, w)
    pred, label = dense_pair("square_error_cost", pred, label, w)
    return (add({ type = "square_error_cost", inputs = { pred, label }, size = 1, cost = true },
      "square_error_cost", w, opts.name))
  end

  local function class_pair(fname, pred, label, w)
    pred = need_node(pred, fname, "prediction", w)
    label = need_node(label, fname, "label", w)
    if pred.seq or pred.kind then fail(w, "nn.%s: prediction '%s' must be a dense layer", fname, pred.name) end
    if label.kind ~= "id" then fail(w, "nn.%s: label '%s' must be an nn.id slot", fname, label.name) end
    if label.range ~= pred.size then
      fail(w, "nn.%s: label '%s' has %d classes but prediction '%s' has size %d", fname, label.name,
        label.range, pred.name, pred.size)
    end
    return pred, label
  end

  local function class_layer(fname, fields)
    return function(pred, label, opts)
      local w = where()
      opts = opts_table(opts, fname, { name = true }, w)
      pred, label = class_pair(fname, pred, label, w)
      local node = { type = fname, inputs = { pred, label }, size = 1 }
      for k, v in pairs(fields) do node[k] = v end
      return (add(node, fname, w, opts.name))
    end
  end
  -- cross-entropy of a probability vector (fc with act = "softmax") against an id
  nn.cross_entropy = class_layer("cross_entropy", { cost = true })
  -- softmax followed by cross-entropy, on logits (fused, numerically stable)
  nn.softmax_cross_entropy = class_layer("softmax_cross_entropy", { cost = true })
  nn.classification_error = class_layer("classification_error", { metric = true })

  -- nn.add { a, b, ... }: element-wise sum of dense layers of one size
  function nn.add(inputs, opts)
    local w = where()
    opts = opts_table(opts, "add", { name = true }, w)
    if type(inputs) ~= "table" or records[inputs] or rawlen(inputs) < 2 then
      fail(w, "nn.add: expects a list of at least two layers, e.g. nn.add { wide, deep }")
    end
    local list = {}
    for i = 1, rawlen(inputs) do
      local x = need_node(rawget(inputs, i), "add", "input " .. i, w)
      if x.seq or x.kind == "id" or x.kind == "id_list" then fail(w, "nn.add: input '%s' must be dense", x.name) end
      if i > 1 and x.size ~= list[1].size then
        fail(w, "nn.add: inputs differ in size: '%s' has %d, '%s' has %d", list[1].name, list[1].size, x.name, x.size)
      end
      list[i] = x
    end
    return (add({ type = "add", inputs = list, size = list[1].size }, "add", w, opts.name))
  end

  -- binary logistic cost on logits against dense 0/1 targets of the same size
  function nn.sigmoid_cross_entropy(logits, label, opts)
    local w = where()
    opts = opts_table(opts, "sigmoid_cross_entropy", { name = true }, w)
    logits, label = dense_pair("sigmoid_cross_entropy", logits, label, w)
    return (add({ type = "sigmoid_cross_entropy", inputs = { logits, label }, size = 1, cost = true },
      "sigmoid_cross_entropy", w, opts.name))
  end

  -- AUC metric: a score of size 1 (logit or probability) against a dense 0/1
  -- label; exact over the whole test set
  function nn.auc(score, label, opts)
    local w = where()
    opts = opts_table(opts, "auc", { name = true }, w)
    score, label = dense_pair("auc", score, label, w)
    if score.size ~= 1 then fail(w, "nn.auc: the score '%s' must have size 1, it has %d", score.name, score.size) end
    return (add({ type = "auc", inputs = { score, label }, size = 1, metric = true }, "auc", w, opts.name))
  end

  -- optimizers: the handle shows its settings, read-only
  local Optimizer = {
    __metatable = "paddle.optimizer",
    __index = function(h, k) return optimizers[h][k] end,
    __newindex = function(h, k)
      fail(at(R.caller(1)), "an optimizer is read-only (cannot set '%s'); make a new one with nn.%s { ... }",
        tostring(k), optimizers[h].type)
    end,
  }
  for oname, defaults in pairs(S.optimizers) do
    nn[oname] = function(opts)
      local w = where()
      if opts == nil then opts = {} end
      if type(opts) ~= "table" or records[opts] then fail(w, "nn.%s expects a table of settings", oname) end
      opts = plain(opts)
      local allowed = { weight_decay = true }
      for k in pairs(defaults) do allowed[k] = true end
      local o = { type = oname, where = w }
      for k, v in pairs(S.optimizer_fields) do o[k] = v end
      for k, v in pairs(defaults) do o[k] = v end
      for k, v in next, opts do
        if type(k) ~= "string" or not allowed[k] then
          local file, line = R.caller(1)
          R.unknown(at(file, R.key_line(file, line, tostring(k))), "nn." .. oname .. ": unknown setting", k,
            R.keys_of(allowed))
        end
        if k == "nesterov" then
          if type(v) ~= "boolean" then fail(w, "nn.%s: nesterov must be true or false", oname) end
        elseif k == "learning_rate" and (type(v) ~= "number" or not (v > 0) or v == math.huge) then
          fail(w, "nn.%s: learning_rate must be a number above 0, got %s", oname, R.shown(v))
        elseif type(v) ~= "number" or v ~= v or v < 0 or v == math.huge then
          fail(w, "nn.%s: %s must be a non-negative number, got %s", oname, k, R.shown(v))
        end
        o[k] = v
      end
      if o.learning_rate <= 0 then fail(w, "nn.%s: learning_rate must be above 0", oname) end
      for _, k in ipairs({ "momentum", "beta1", "beta2", "rho" }) do
        if o[k] >= 1 then fail(w, "nn.%s: %s must be below 1, got %g", oname, k, o[k]) end
      end
      local h = setmetatable({}, Optimizer)
      optimizers[h] = o
      return h
    end
  end

  local function optimizer_of(v) return optimizers[v] end
  -- a misspelt nn.* name is a mistake named at its line, not "attempt to
  -- call a nil value" (a recipe may still add names of its own to nn)
  setmetatable(nn, {
    __metatable = "paddle.nn",
    __index = function(_, k)
      local names = {}
      for name in next, nn do
        if type(name) == "string" then names[#names + 1] = name end
      end
      table.sort(names)
      local n = type(k) == "string" and R.nearest(k, names)
      fail(at(R.caller(1)), "unknown nn.%s%s", tostring(k), n and string.format(" (did you mean nn.%s?)", n) or "")
    end,
  })
  return nn, layers, record_of, optimizer_of
end

return N
