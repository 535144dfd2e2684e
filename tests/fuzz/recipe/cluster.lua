cluster {
  hosts = { "paddle@10.0.0.1", "paddle@10.0.0.2:2222" },
  root_dir = "/home/paddle", port = 7164, ports_num = 2, ports_num_for_sparse = 1,
}
job { pservers = 2, trainers = 2 }
data { train = "train.list", test = "test.list", format = "csv", columns = { "x=1-3", "y=4" } }
model = function(nn)
  local x, y = nn.data("x", 3), nn.data("y", 1)
  local h = nn.fc(x, 8, { act = "relu", init = { "normal", 0, 0.05 } })
  return { cost = nn.square_error_cost(nn.fc(h, 1), y), predict = h }
end
optimizer = nn.momentum { learning_rate = 0.01, momentum = 0.9, nesterov = true }
settings { batch_size = 16, passes = 2, mode = "async", log_period = 5 }
