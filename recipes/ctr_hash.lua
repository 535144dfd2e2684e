-- ctr_hash.lua - CTR-DNN (recipes/ctr_dnn.lua) over a growing table: the 26
-- categorical features of a line keep their own 64-bit ids (no hash_space,
-- no collisions), rows are made on the pservers as features appear, a
-- feature needs 2 updates before it gets a row, rows idle for 3 passes are
-- evicted, and each pserver holds at most 5 million rows (docs/ctr.md, 5).
--
--   paddle gen criteo --out recipes/data/criteo-gen --rows 1000000   # once
--   paddle train recipes/ctr_hash.lua       # one process
--   paddle run recipes/ctr_hash.lua         # 2 pservers + 2 trainers here
--
-- The saved model holds the table as SparseFeatFactors.keys.npy (uint64
-- ids) and SparseFeatFactors.npy (their rows).

job { pservers = 2, trainers = 2 }

data {
  train = "data/criteo-gen/train.txt",
  test = "data/criteo-gen/test.txt",
  format = "criteo",
}

model = function(nn)
  local label = nn.data("label", 1)
  local dense = nn.data("dense", 13)
  local function slots(from, to)
    local list = {}
    for k = from, to do
      -- nn.id without a range: the column's 64-bit feature ids
      list[#list + 1] = nn.embedding(nn.id("C" .. k), 9, {
        param = "SparseFeatFactors", init = { "uniform", -0.01, 0.01 },
        min_count = 2, ttl = 3, max_rows = 5000000,
      })
    end
    return nn.concat(list)
  end
  local x = nn.concat { slots(1, 13), slots(14, 26), dense }
  for _ = 1, 3 do x = nn.fc(x, 400, "relu") end
  local logit = nn.fc(x, 1)
  return {
    cost = nn.sigmoid_cross_entropy(logit, label),
    predict = logit,
    metrics = { auc = nn.auc(logit, label) },
  }
end

optimizer = nn.adam { learning_rate = 0.001 }

settings { batch_size = 512, passes = 20, early_stop = 2, early_stop_metric = "auc", keep_models = 2, mode = "async", log_period = 500 }
