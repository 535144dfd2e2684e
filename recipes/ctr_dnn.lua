-- ctr_dnn.lua - PaddleRec's CTR-DNN on Criteo-format click logs: the 26
-- categorical slots through one shared embedding of width 9 over a hashed
-- id space, concatenated with the 13 dense values, three fully connected
-- layers of 400 with ReLU, one logit with the logistic cost; test AUC after
-- every pass.
--
--   paddle gen criteo --out recipes/data/criteo-gen --rows 1000000   # once (~240 MB)
--   paddle train recipes/ctr_dnn.lua        # one process
--   paddle run recipes/ctr_dnn.lua          # 2 pservers + 2 trainers here, async
--
-- Real Criteo files (Kaggle's train.txt, or day_N of the terabyte logs) work
-- unchanged: point data.train / data.test at them, or at .list files naming
-- many of them (see docs/ctr.md).

-- PaddleRec's sparse_feature_number: every categorical value is hashed with
-- its column into [0, H); the embedding table has H rows
local H = 1000001

job { pservers = 2, trainers = 2 }

data {
  train = "data/criteo-gen/train.txt",
  test = "data/criteo-gen/test.txt",
  format = "criteo",
  hash_space = H,
  -- dense_transform = "log1p",   -- the default: log(1 + max(I, 0)), missing -> 0
}

model = function(nn)
  local label = nn.data("label", 1)       -- click: 0 or 1
  local dense = nn.data("dense", 13)      -- I1..I13 after dense_transform

  -- one embedding lookup per slot, all in one table (PaddleRec's
  -- SparseFeatFactors, sparse_feature_dim = 9)
  local function slots(from, to)
    local list = {}
    for k = from, to do
      list[#list + 1] = nn.embedding(nn.id("C" .. k, H), 9, { param = "SparseFeatFactors" })
    end
    return nn.concat(list)
  end
  local x = nn.concat { slots(1, 13), slots(14, 26), dense }   -- 26 * 9 + 13 = 247

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
