-- recipe.lua - the Lua half of the recipe language, compiled into paddle.
--
-- The host calls load(path, cluster_path, overrides, limits) and reads the
-- plain table it returns. The parts:
--   report.lua   errors that point at the recipe ("file:line: ...")
--   schema.lua   the keys, types and defaults of each declaration
--   nn.lua       the model builder (layers, optimizers)
--   sandbox.lua  the environment a recipe runs in, include
--   resolve.lua  overrides and derived values: the table the host reads

local R = require "report"
local N = require "nn"
local X = require "sandbox"
local V = require "resolve"

local M = {}

local function new_state(limits)
  local state = { decls = {} }
  state.nn, state.layers, state.record_of, state.optimizer_of = N.new(limits)
  state.env = X.new_env(state)
  local chain = {}
  state.run = function(p, from) X.run_file(p, state.env, from, chain) end
  return state
end

-- Load a recipe. overrides: list of { key =, value = } from the command
-- line; limits: { max_inputs = } from the host.
function M.load(path, cluster_path, overrides, limits)
  R.model_return = nil
  local state = new_state(limits)
  state.run(path, nil)
  if cluster_path then
    -- a cluster file replaces the recipe's cluster declaration
    local cstate = new_state(limits)
    cstate.run(cluster_path, "--cluster")
    if not cstate.decls.cluster then R.fail(cluster_path, "no cluster { ... } declaration in this file") end
    state.decls.cluster = cstate.decls.cluster
  end
  V.apply_overrides(state, overrides or {})
  return V.resolve(state, path, X.dirname)
end

return M
