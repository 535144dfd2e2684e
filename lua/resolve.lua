-- resolve.lua - overrides and derived values: turn the declarations into
-- the plain table the host reads.
--
-- The result is made of fresh tables only (no metatables, nothing the recipe
-- holds a reference to), and every field the host reads is present:
-- numbers and booleans always, strings where set (nil: unset).

local R = require "report"
local S = require "schema"
local fail = R.fail

local V = {}

local function with_defaults(decl, values)
  local out = {}
  for k, spec in pairs(S.blocks[decl]) do
    if values[k] ~= nil then out[k] = values[k]
    elseif spec.kind == "strlist" then out[k] = {}
    elseif spec.default ~= nil then out[k] = spec.default
    else out[k] = spec.unset end
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
function V.apply_overrides(state, overrides)
  for _, ov in ipairs(overrides) do
    local key, text = ov.key, ov.value
    local decl
    for _, d in ipairs({ "settings", "job", "data", "cluster" }) do
      if S.blocks[d][key] then decl = d break end
    end
    local short = not decl and key:match("^[%a_]+%.([%a_][%w_]*)$")
    for _, d in ipairs(short and { "settings", "job", "data", "cluster" } or {}) do
      if S.blocks[d][short] then
        fail(nil, "unknown option '--%s': the command line names a setting by its key alone: --%s=%s", key, short, text)
      end
    end
    if not decl then
      local all = {}
      for _, d in ipairs(S.names) do for k in pairs(S.blocks[d]) do all[#all + 1] = "--" .. k end end
      local hint = not R.nearest("--" .. key, all) and S.elsewhere(nil, key)
      if hint then fail(nil, "unknown option '--%s'%s: the command line sets declarations' keys only", key, hint) end
      R.unknown(nil, "unknown option", "--" .. key, all)
    end
    local spec = S.blocks[decl][key]
    local v = text
    if spec.kind == "int" or spec.kind == "number" then
      -- decimal only: Lua's tonumber also reads 0x10 and " 1e1 "
      v = text:match("^[-+]?%d*%.?%d+$") or text:match("^[-+]?%d+%.?%d*[eE][-+]?%d+$") or
          text:match("^[-+]?%d+%.?%d*$")
      v = v and (math.tointeger(tonumber(text)) or tonumber(text))
      if v == nil then fail(nil, "option --%s must be a decimal number, got '%s'", key, text) end
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
    d.values[key] = S.check_value("option --" .. key, decl, key, spec, v)
    state.overridden = state.overridden or {}
    if spec.job and not state.overridden[key] then
      -- the job settings given, once each in the order given: paddle train says it ignores them
      state.job_options = state.job_options or {}
      state.job_options[#state.job_options + 1] = key
    end
    state.overridden[key] = true
  end
end

local function resolve_cluster(out, key_where)
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
end

-- Run the model function; returns the cost, predict and metrics records.
local function run_model(state, recipe_path)
  local model, mw = state.globals.model, state.assigned.model
  if model == nil then fail(recipe_path, "missing 'model': set model = function(nn) ... return cost end") end
  if type(model) ~= "function" then
    fail(mw, "'model' must be a function(nn) returning the cost layer, got %s", R.typename(model))
  end
  local info = debug.getinfo(model, "SL")
  local rw = mw -- what is wrong with the value returned: at its `return`, where it has one
  if info.source:sub(1, 1) == "@" and R.sources[info.source:sub(2)] then
    local file, ret, nret = info.source:sub(2), info.linedefined, 0
    for i = info.linedefined, info.lastlinedefined do -- its own lines' code, not comments or strings
      local code = info.activelines[i] and R.sources[file][i] and R.code_of(R.sources[file][i])
      local r = code and code:find("%f[%w_]return%f[^%w_]")
      local f = code and code:find("%f[%w_]function%f[^%w_]")
      if r and not (f and f < r) then ret, nret = i, nret + 1 end -- not a one-line helper's return
    end
    R.model_return = { file = file, line = ret }
    if nret == 1 then rw = R.at(file, ret) end
  end
  local result = model(state.nn)
  R.model_return = nil
  if result == nil then rw = mw end -- it returned nothing, from wherever it ended
  local rec = state.record_of
  local cost, metrics, predict
  if rec(result) then
    cost = rec(result)
  elseif type(result) == "table" then
    result = R.plain(result)
    cost, predict, metrics = rec(result.cost), result.predict, result.metrics
    for k in next, result do
      if k ~= "cost" and k ~= "predict" and k ~= "metrics" then
        R.unknown(R.key_at(rw, tostring(k)), "model returned an unknown field", k, { "cost", "predict", "metrics" })
      end
    end
  end
  if predict == false then predict = nil end -- `cond and layer`: none
  if predict ~= nil and not rec(predict) then
    fail(R.key_at(rw, "predict"), "model: predict must be a layer (the one `paddle predict` prints), got %s",
      R.typename(predict))
  end
  if not cost or not cost.cost then
    fail(rw, "model must return a cost layer (e.g. nn.square_error_cost) or { cost = ..., metrics = { ... } }, got %s",
      cost and string.format("layer '%s' (%s, size %d)", cost.name, cost.type, cost.size) or R.typename(result))
  end
  local out_metrics = {}
  if metrics ~= nil then
    local at = R.key_at(rw, "metrics")
    if type(metrics) ~= "table" or rec(metrics) then fail(at, "model: metrics must be a table of layers") end
    for k, m in next, metrics do
      local kw = type(k) == "string" and R.key_at(at, k) or at
      if not rec(m) then fail(kw, "model: metric '%s' is not a layer", tostring(k)) end
      if type(k) == "string" then R.check_file_name(kw, "model: metric name", k) end
      out_metrics[#out_metrics + 1] = { name = type(k) == "string" and k or rec(m).name, layer = rec(m).index }
    end
    table.sort(out_metrics, function(a, b) return a.name < b.name end)
  end
  return cost, rec(predict), out_metrics
end

-- A fresh copy of the layer records, with inputs as indices.
local function copy_layers(records)
  local layers = {}
  for i, n in ipairs(records) do
    local inputs, params = {}, {}
    for j, x in ipairs(n.inputs) do inputs[j] = x.index end
    for j, p in ipairs(n.params) do
      params[j] = { name = p.name, rows = p.rows, cols = p.cols, sparse = p.sparse or false,
                    init = { kind = p.init.kind, a = p.init.a, b = p.init.b },
                    hash = p.hash or false, min_count = p.min_count or 0, ttl = p.ttl or 0,
                    max_rows = p.max_rows or 0 }
    end
    layers[i] = {
      name = n.name, type = n.type, kind = n.kind, size = n.size, range = n.range or 0, seq = n.seq or false,
      act = n.act, pool = n.pool, scale = n.scale or 1, slot = n.slot, inputs = inputs, params = params,
      where = n.where,
    }
  end
  return layers
end

function V.resolve(state, recipe_path, dirname)
  local function decl(name) return state.decls[name] and state.decls[name].values or {} end
  local out = {
    cluster = with_defaults("cluster", decl("cluster")),
    job = with_defaults("job", decl("job")),
    data = with_defaults("data", decl("data")),
    settings = with_defaults("settings", decl("settings")),
    recipe = recipe_path,
    recipe_dir = dirname(recipe_path),
    job_options = state.job_options or {},
  }
  local function key_where(name, key)
    local d = state.decls[name]
    if not d or not d.file then return recipe_path end
    return R.at(d.file, R.key_line(d.file, d.line, key))
  end
  resolve_cluster(out, key_where)

  local cost, predict, metrics = run_model(state, recipe_path)
  out.layers = copy_layers(state.layers)
  out.cost = cost.index
  out.predict = predict and predict.index or 0
  out.metrics = metrics

  local opt = state.optimizer_of(state.globals.optimizer)
  if state.globals.optimizer == nil then
    fail(recipe_path, "missing 'optimizer': e.g. optimizer = nn.sgd { learning_rate = 0.01 }")
  end
  if not opt then
    fail(state.assigned.optimizer, "'optimizer' must be made by nn.sgd, nn.momentum, nn.adagrad, nn.adam or nn.rmsprop")
  end
  out.optimizer = { type = opt.type }
  for k in pairs(S.optimizer_fields) do out.optimizer[k] = opt[k] end

  local st = out.settings
  if st.early_stop > 0 and not out.data.test then
    fail(key_where("settings", "early_stop"), "settings.early_stop needs a test set (data.test) to watch")
  end
  if st.early_stop_metric then
    local names = {}
    for _, m in ipairs(metrics) do
      names[#names + 1] = m.name
      if m.name == st.early_stop_metric then names = nil break end
    end
    if names then
      fail(key_where("settings", "early_stop_metric"), "settings.early_stop_metric '%s' is not a metric of the model (%s)",
        st.early_stop_metric, #names > 0 and table.concat(names, ", ") or "it has none")
    end
  end

  if not out.data.train then
    fail(key_where("data", "train"), "missing data.train: data { train = \"train.list\", format = \"...\" }")
  end
  for _, part in ipairs({ "train", "test" }) do
    if out.data[part] == "" and out.data.format ~= "synthetic" then -- synthetic data reads no file
      local by_option = state.overridden and state.overridden[part]
      fail(by_option and "option --" .. part or key_where("data", part), "data.%s is empty: it names a data file", part)
    end
  end
  -- where each part was named, for an error about its files ("file:line")
  out.data.train_where = key_where("data", "train")
  out.data.test_where = out.data.test and key_where("data", "test") or nil
  out.data.columns_where = out.data.columns and key_where("data", "columns") or nil
  return out
end

return V
