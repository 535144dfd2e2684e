local t = {}
for i = 1, 10 do t[#t + 1] = string.format("%d", i) end
local ok, err = pcall(function() return os.execute("true") end)
assert(not ok)
data { train = "synthetic", format = "synthetic", samples = 100 }
model = function(nn)
  local x, y = nn.data("x", #t), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(x, 1), y)
end
optimizer = nn.rmsprop { learning_rate = 0.001, rho = 0.9 }
settings { seed = math.floor(os.time() % 1), max_batches = 3 }
