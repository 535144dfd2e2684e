data { train = "x.csv" }
model = function(nn)
  local x, y = nn.data("x", 4), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(x, 1), y)
end
optimizer = nn.sgd { learning_rate = 0.01 }
