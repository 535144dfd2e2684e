-- rec.lua - benchmark: the PaddlePaddle book's recommender (as
-- recipes/recommendation.lua), batch 256, on synthetic ids.
job { pservers = 1, trainers = 1 }
data { train = "synthetic", format = "synthetic", samples = 25600 }
model = function(nn)
  local function tower(input, dim)
    return nn.fc(nn.embedding(input, dim), 32)
  end
  local user = nn.fc(nn.concat {
    tower(nn.id("user_id", 6041), 32), tower(nn.id("gender", 2), 16),
    tower(nn.id("age", 7), 16), tower(nn.id("occupation", 21), 16),
  }, 200, "tanh")
  local movie = nn.fc(nn.concat {
    tower(nn.id("movie_id", 3953), 32),
    nn.fc(nn.seq_pool(nn.embedding(nn.id_list("genres", 19), 32), "sum"), 32),
    nn.fc(nn.seq_pool(nn.embedding(nn.id_list("title", 5175), 32), "sum"), 32),
  }, 200, "tanh")
  local score = nn.cos_sim(user, movie, 5)
  return nn.square_error_cost(score, nn.data("rating", 1))
end
optimizer = nn.adam { learning_rate = 0.001 }
settings { batch_size = 256, passes = 3, log_period = 100000 }
