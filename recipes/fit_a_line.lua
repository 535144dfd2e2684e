-- fit_a_line.lua - linear regression on the UCI housing data, as in
-- PaddlePaddle's fit_a_line demo: 13 features -> fc of size 1 -> square
-- error cost, SGD with learning rate 0.001, batch 20.
--
--   recipes/prepare.sh                     # fetch the data once
--   paddle train recipes/fit_a_line.lua    # one process
--   paddle run recipes/fit_a_line.lua      # 2 pservers + 2 trainers here

job { pservers = 2, trainers = 2 }

data {
  -- uci_housing: the first 80% of rows train, the rest test; features are
  -- normalised as (x - mean) / (max - min) over all 506 rows
  train = "data/uci_housing/housing.data",
  test = "data/uci_housing/housing.data",
  format = "uci_housing",
}

model = function(nn)
  local x = nn.data("x", 13)
  local y = nn.data("y", 1)
  local y_predict = nn.fc(x, 1, { act = "linear" })
  return { cost = nn.square_error_cost(y_predict, y), predict = y_predict }
end

optimizer = nn.sgd { learning_rate = 0.001 }

-- train until the test cost stops falling (5 passes without a better one;
-- about 650 passes here), 1000 at most; keep the last 3 models and the best
-- (output/best links it)
settings { batch_size = 20, passes = 1000, log_period = 10, early_stop = 5, keep_models = 3 }
