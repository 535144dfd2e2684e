-- mlp.lua - benchmark: an MLP 784-512-512-10 with softmax, batch 128, on
-- synthetic data (random inputs and labels: it measures speed, not learning).
data { train = "synthetic", format = "synthetic", samples = 7680 }
model = function(nn)
  local x, label = nn.data("x", 784), nn.id("label", 10)
  local h1 = nn.fc(x, 512, "relu")
  local h2 = nn.fc(h1, 512, "relu")
  local logits = nn.fc(h2, 10)
  return nn.softmax_cross_entropy(logits, label)
end
optimizer = nn.sgd { learning_rate = 0.01 }
settings { batch_size = 128, passes = 3, log_period = 100000 }
