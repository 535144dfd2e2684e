-- ctr_lr.lua - logistic regression on Criteo-format click logs: one weight
-- per hashed feature (the 26 categorical values of a line, summed) plus a
-- linear function of the 13 dense values, the logistic cost, test AUC after
-- every pass. The baseline a CTR model must beat: ctr_dnn.lua and
-- wide_deep.lua add a deep part to it.
--
--   paddle gen criteo --out recipes/data/criteo-gen --rows 1000000   # once
--   paddle train recipes/ctr_lr.lua
--   paddle run recipes/ctr_lr.lua           # 2 pservers + 2 trainers, async

local H = 1000001   -- hashed feature ids fold into [0, H) (sparse_feature_number)

job { pservers = 2, trainers = 2 }

data {
  train = "data/criteo-gen/train.txt",
  test = "data/criteo-gen/test.txt",
  format = "criteo",
  hash_space = H,
}

model = function(nn)
  local label = nn.data("label", 1)
  local dense = nn.data("dense", 13)
  local sparse = nn.id_list("sparse", H)   -- the line's 26 features
  local logit = nn.add {
    nn.seq_pool(nn.embedding(sparse, 1, { param = "wide", init = "zero" }), "sum"),
    nn.fc(dense, 1),
  }
  return {
    cost = nn.sigmoid_cross_entropy(logit, label),
    predict = logit,
    metrics = { auc = nn.auc(logit, label) },
  }
end

-- a linear model takes a larger step than the deep ones
optimizer = nn.adam { learning_rate = 0.005 }

settings { batch_size = 512, passes = 20, early_stop = 2, early_stop_metric = "auc", keep_models = 2, mode = "async", log_period = 500 }
