-- wide_deep.lua - Wide & Deep on Criteo-format click logs: a wide logistic
-- part (one weight per hashed feature, summed over the 26 slots, plus a
-- linear function of the 13 dense values) added to the deep part of
-- ctr_dnn.lua; one logit, the logistic cost, test AUC after every pass.
--
--   paddle gen criteo --out recipes/data/criteo-gen --rows 1000000   # once
--   paddle train recipes/wide_deep.lua
--   paddle run recipes/wide_deep.lua        # 2 pservers + 2 trainers, async

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

  -- wide: the 26 features of a line as one id list, one weight each, summed
  local sparse = nn.id_list("sparse", H)
  local wide = nn.add {
    nn.seq_pool(nn.embedding(sparse, 1, { param = "wide", init = "zero" }), "sum"),
    nn.fc(dense, 1),
  }

  -- deep: as ctr_dnn.lua
  local function slots(from, to)
    local list = {}
    for k = from, to do
      list[#list + 1] = nn.embedding(nn.id("C" .. k, H), 9, { param = "SparseFeatFactors" })
    end
    return nn.concat(list)
  end
  local x = nn.concat { slots(1, 13), slots(14, 26), dense }
  for _ = 1, 3 do x = nn.fc(x, 400, "relu") end
  local deep = nn.fc(x, 1)

  local logit = nn.add { wide, deep }
  return {
    cost = nn.sigmoid_cross_entropy(logit, label),
    predict = logit,
    metrics = { auc = nn.auc(logit, label) },
  }
end

optimizer = nn.adam { learning_rate = 0.001 }

settings { batch_size = 512, passes = 20, early_stop = 2, early_stop_metric = "auc", keep_models = 2, mode = "async", log_period = 500 }
