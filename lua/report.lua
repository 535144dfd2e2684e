-- report.lua - errors that point at the recipe: "file:line: what is wrong".
--
-- Every message a recipe mistake produces goes through fail(); every unknown
-- key, option, setting or name goes through unknown(), so that they all read
-- "... unknown key 'prot' in cluster (did you mean 'port'?)".

local R = {}

-- Source lines of every recipe file loaded (path -> lines), to find the line
-- a key sits on, and to tell recipe frames from ours on the stack.
R.sources = {}

function R.fail(where, fmt, ...)
  local msg = string.format(fmt, ...)
  if where then msg = where .. ": " .. msg end
  error(msg, 0)
end
local fail = R.fail

-- Edit distance, two neighbours swapped counting as one edit (sdg: sgd),
-- for "did you mean".
local function distance(a, b)
  local la, lb = #a, #b
  local d = {}
  for i = 0, la do d[i] = { [0] = i } end
  for j = 0, lb do d[0][j] = j end
  for i = 1, la do
    for j = 1, lb do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      d[i][j] = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        d[i][j] = math.min(d[i][j], d[i - 2][j - 2] + 1)
      end
    end
  end
  return d[la][lb]
end

-- The candidate nearest to word, if it is near enough to be a typo.
function R.nearest(word, candidates)
  local best, bestd
  for _, c in ipairs(candidates) do
    local d = distance(word:lower(), c:lower())
    if not bestd or d < bestd then best, bestd = c, d end
  end
  if best and bestd <= math.max(2, #word // 3) then return best end
  return nil
end

-- " (did you mean 'x'?)", else " (valid: a, b, c)" for a short list, else "".
function R.suggest(word, candidates)
  local n = R.nearest(word, candidates)
  if n then return string.format(" (did you mean '%s'?)", n) end
  if #candidates > 16 then return "" end
  local sorted = {}
  for _, c in ipairs(candidates) do sorted[#sorted + 1] = c end
  table.sort(sorted)
  return " (valid: " .. table.concat(sorted, ", ") .. ")"
end

-- The one way to report a word that is not among the candidates:
--   where: head 'word'tail (did you mean 'x'?)
-- e.g. unknown(w, "unknown key", "prot", keys, " in cluster").
function R.unknown(where, head, word, candidates, tail)
  word = tostring(word)
  fail(where, "%s '%s'%s%s", head, word, tail or "", R.suggest(word, candidates))
end

-- A value as an error shows it: a string quoted (so that "20" is not
-- taken for the number 20), anything else as tostring has it.
function R.shown(v)
  if type(v) == "string" then return string.format("'%s'", v) end
  return tostring(v)
end

function R.typename(v)
  local t = type(v)
  if t == "number" and math.type(v) == "integer" then return "integer" end
  return t
end

function R.keys_of(t)
  local out = {}
  for k in next, t do out[#out + 1] = tostring(k) end
  table.sort(out)
  return out
end

-- A fresh copy of t's own entries: no metatable, no metamethods run.
function R.plain(t)
  local c = {}
  for k, v in next, t do c[k] = v end
  return c
end

function R.read_lines(path)
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
R.model_return = nil

-- The recipe position of the caller of a declaration: file, line.
-- level counts from the function that wants to know its caller.
function R.caller(level)
  local tail = false
  for l = 2, level + 12 do
    local info = debug.getinfo(l, "Slt")
    if not info then break end
    if l > level and info.source:sub(1, 1) == "@" and R.sources[info.source:sub(2)] then
      return info.source:sub(2), info.currentline
    end
    tail = tail or info.istailcall
  end
  if tail and R.model_return then return R.model_return.file, R.model_return.line end
  return nil, nil
end

function R.at(file, line)
  if not file then return nil end
  return string.format("%s:%d", file, line or 0)
end

-- A source line's code: its strings emptied, its comment cut.
function R.code_of(line)
  return ((line .. " "):gsub("\\.", ""):gsub('"[^"]*"', '""'):gsub("'[^']*'", "''"):gsub("%-%-.*", ""))
end

-- Find the line of `key =` in the call that starts on line `from` of file:
-- from there to where its brackets close (strings and comments skipped).
-- A key that is not written there (a table built elsewhere) gives `from`.
function R.key_line(file, from, key)
  local lines = file and R.sources[file]
  if not lines or not from then return from end
  local pat = "%f[%w_]" .. key:gsub("%p", "%%%0") .. "%s*=[^=]"
  local depth = 0
  for i = from, math.min(#lines, from + 400) do
    local code = R.code_of(lines[i])
    if code:find(pat) then return i end
    for c in code:gmatch("[{}()]") do depth = depth + ((c == "{" or c == "(") and 1 or -1) end
    if depth <= 0 then break end
  end
  return from
end

-- The line of `key =` in the options of the call at w ("file:line").
function R.key_at(w, key)
  local file, line = (w or ""):match("^(.*):(%d+)$")
  if not file then return w end
  return R.at(file, R.key_line(file, tonumber(line), key))
end

-- A string that will reach C: no NUL byte (C would cut it there).
function R.check_string(where, what, s)
  if s:find("\0", 1, true) then fail(where, "%s contains a NUL byte (\\0)", what) end
  return s
end

-- A name that becomes a file name (parameters are saved as NAME.npy).
function R.check_file_name(where, what, name)
  R.check_string(where, what, name)
  if #name == 0 or #name > 128 then fail(where, "%s '%s' must be 1 to 128 bytes long", what, name) end
  if name:find("/", 1, true) or name:find("%c") or name:sub(1, 1) == "." then
    fail(where, "%s '%s' names a file: no '/', no control characters, not starting with '.'", what,
      (name:gsub("%c", "?")))
  end
  return name
end

return R
