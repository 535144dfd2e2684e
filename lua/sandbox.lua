-- sandbox.lua - the environment a recipe runs in, and include.
--
-- A recipe sees an allow-list of the standard library plus the declarations
-- cluster{}, job{}, data{}, settings{}, include "file" and the model builder
-- nn; reading an undefined name or assigning an undeclared global is an
-- error. What the host adds (src/lua/sandbox.c): a memory limit and an
-- instruction limit. Here: pcall and xpcall cannot swallow the instruction
-- limit, and no metatable with __gc can be set (finalizers run with the
-- limit off), so a recipe cannot hang the tool.

local R = require "report"
local S = require "schema"
local fail, at = R.fail, R.at

local X = {}

local safe_base = {
  "assert", "error", "ipairs", "next", "pairs", "print", "rawequal",
  "rawget", "rawlen", "select", "tonumber", "tostring", "type",
}
local safe_libs = { "math", "string", "table", "utf8" }

-- set by the host: returns the instruction-limit message once it was hit
local limit_hit = pd_sandbox_limit_hit
-- set by the host: io_fault(errno, message) tells it the error about to be
-- raised is the machine's (true), unless errno is the recipe's (no such
-- file, a directory, ...); if that error ends the load, it exits 1, not 2
local io_fault = pd_sandbox_io_fault
-- set by the host: file_id(path) names the file path leads to ("dev:inode"),
-- or nil where it is not there
local file_id = pd_sandbox_file_id

-- fail(from, ...) for a file the machine may have failed to give (errno)
local function fail_io(from, errno, fmt, ...)
  local msg = string.format(fmt, ...)
  if from then msg = from .. ": " .. msg end
  io_fault(errno, msg)
  error(msg, 0)
end

-- io.open's message less the path it starts with
local function reason(msg, path)
  msg = tostring(msg)
  if msg:sub(1, #path + 2) == path .. ": " then return msg:sub(#path + 3) end
  return msg
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

function X.dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

local function join(dir, path)
  if path:sub(1, 1) == "/" then return path end
  if dir == "." then return path end
  return dir .. "/" .. path
end

-- pcall/xpcall for recipes: an error of the instruction limit goes on up.
local function pass_limit(ok, ...)
  if not ok then
    local msg = limit_hit()
    if msg then error(msg, 0) end
  end
  return ok, ...
end

local function safe_pcall(f, ...) return pass_limit(pcall(f, ...)) end
-- An error of the limit is raised inside a hook, where hooks are off: the
-- recipe's handler must not run then (it could loop for ever).
local function safe_xpcall(f, h, ...)
  local function handler(e)
    if limit_hit() then return e end
    return h(e)
  end
  return pass_limit(xpcall(f, handler, ...))
end

local function safe_setmetatable(t, mt)
  if type(mt) == "table" and (rawget(mt, "__gc") ~= nil) then
    fail(at(R.caller(1)), "setmetatable: __gc is not available in a recipe (finalizers escape its limits)")
  end
  local ok, r = pcall(setmetatable, t, mt)  -- C only: no recipe code runs
  if not ok then fail(at(R.caller(1)), "setmetatable: %s", tostring(r)) end
  return r
end

local function safe_getmetatable(v)
  if type(v) == "string" then return nil end
  return getmetatable(v)
end

-- Suggest among the globals and the locals in scope where name was read.
local function names_near(env, file)
  local names = { "model", "optimizer" }
  for name in next, env do names[#names + 1] = name end
  for l = 3, 16 do
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
  return names
end

-- Build the environment a recipe runs in and the state its declarations fill.
function X.new_env(state)
  local env = {}
  for _, k in ipairs(safe_base) do env[k] = _G[k] end
  for _, k in ipairs(safe_libs) do env[k] = copy(_G[k]) end
  env.pcall, env.xpcall = safe_pcall, safe_xpcall
  env.setmetatable, env.getmetatable = safe_setmetatable, safe_getmetatable
  env.os = setmetatable({ time = os.time, clock = os.clock, date = os.date, getenv = os.getenv }, {
    __metatable = false,
    __index = function(_, k)
      fail(at(R.caller(1)), "os.%s is not available in a recipe (os has only time, clock, date and getenv)",
        tostring(k))
    end,
  })
  env._VERSION = _VERSION

  for _, decl in ipairs(S.names) do
    env[decl] = function(t)
      local file, line = R.caller(1)
      if state.decls[decl] and state.decls[decl].file == file then
        fail(at(file, line), "%s declared twice (first at %s)", decl, at(state.decls[decl].file, state.decls[decl].line))
      end
      state.decls[decl] = { values = S.check_decl(decl, t, file, line), file = file, line = line }
    end
  end

  env.include = function(path)
    local file, line = R.caller(1)
    if type(path) ~= "string" then fail(at(file, line), "include expects a file name") end
    R.check_string(at(file, line), "include's file name", path)
    state.run(join(X.dirname(file or "."), path), at(file, line))
  end

  env.nn = state.nn

  -- model and optimizer live in state.globals, so that every assignment
  -- comes through __newindex and state.assigned knows the line of the last.
  local assignable = { model = true, optimizer = true }
  local unavailable = { io = true, require = true, dofile = true, loadfile = true, load = true,
                        package = true, debug = true, collectgarbage = true, coroutine = true,
                        rawset = true }
  state.globals, state.assigned = {}, {}
  setmetatable(env, {
    __metatable = false,
    __newindex = function(t, k, v)
      local file, line = R.caller(1)
      if assignable[k] then
        -- Lua reports a multi-line assignment at its last line: find its first
        local lines = R.sources[file] or {}
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
      local file, line = R.caller(1)
      if unavailable[k] then
        fail(at(file, line), "'%s' is not available in a recipe (no files, programs or modules; " ..
          "use include \"file.lua\" for another recipe file)", tostring(k))
      end
      local n = R.nearest(tostring(k), names_near(env, file))
      fail(at(file, line), "undefined name '%s'%s", tostring(k),
        n and string.format(" (did you mean '%s'?)", n) or "")
    end,
  })
  return env
end

-- Run the recipe file at path in env. from: "file:line" of the include (or
-- "--cluster"); chain: the files being run, outermost first.
function X.run_file(path, env, from, chain)
  -- the same file, however its path is written ("conf/../a.lua", a link)
  local id = file_id(path)
  for i, p in ipairs(chain) do
    if p == path or (id and file_id(p) == id) then
      local cycle = {}
      for j = i, #chain do cycle[#cycle + 1] = chain[j] end
      cycle[#cycle + 1] = path
      fail(from, "include cycle: %s", table.concat(cycle, " -> "))
    end
  end
  if #chain >= 32 then fail(from, "includes nested over 32 deep") end
  -- a file the machine failed to give (a disk error) is a fault, not the
  -- recipe's mistake: fail_io says so (the load then fails with exit
  -- status 1, which a launcher restarts, not 2)
  local f, oerr, ocode = io.open(path, "rb")
  if not f then fail_io(from, ocode, "cannot open %s: %s", path, reason(oerr, path)) end
  local text, err, code = f:read("a")
  f:close()
  if not text then fail_io(from, code, "cannot read %s: %s", path, tostring(err)) end
  if text:sub(1, 1) == "\27" then
    fail(at(path, 1), "a precompiled (binary) chunk is not a recipe: give the Lua source")
  end
  R.sources[path] = R.read_lines(path)
  local chunk, lerr = load(text, "@" .. path, "t", env)
  if not chunk then
    lerr = tostring(lerr)
    if lerr:sub(1, #path + 1) ~= path .. ":" then lerr = at(path, 1) .. ": " .. lerr end
    error(lerr, 0)
  end
  chain[#chain + 1] = path
  chunk()
  chain[#chain] = nil
end

return X
