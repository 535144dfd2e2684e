data { train = "train.svm", format = "libsvm", on_error = "skip" }
model = function(nn)
  local x, label, ids = nn.data("x", 20), nn.id("label", 3), nn.id_list("words", 100)
  local e = nn.seq_pool(nn.embedding(ids, 8, { param = "emb" }), "average")
  local h = nn.fc(nn.concat { x, e }, 16, "tanh")
  local p = nn.fc(h, 3, { act = "softmax" })
  return { cost = nn.cross_entropy(p, label), metrics = { err = nn.classification_error(p, label) } }
end
optimizer = nn.adagrad { learning_rate = 0.1 }
