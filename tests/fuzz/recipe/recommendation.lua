-- recommendation.lua - the PaddlePaddle book's movie recommender on
-- MovieLens-1M-shaped data: predict a user's rating of a movie as the cosine
-- similarity of a user vector and a movie vector, times 5.
--
--   paddle gen movielens --out recipes/data/ml-gen   # make the data once (~25 MB)
--   paddle train recipes/recommendation.lua          # one process
--   paddle run recipes/recommendation.lua            # 2 pservers + 2 trainers here
--
-- (data paths are relative to this file: recipes/data/ml-gen is data/ml-gen
-- below). Each pass logs the test cost and the test RMSE in stars; the
-- generator prints the RMSE of predicting the mean and of the planted truth
-- to compare with.
--
-- The real MovieLens-1M (not redistributable) works unchanged: unzip
-- ml-1m.zip from grouplens.org and point data.train and data.test at its
-- ml-1m directory (see docs/recommendation.md).

job { pservers = 2, trainers = 2 }

data {
  -- movielens: a directory holding users.dat, movies.dat and ratings.dat.
  -- train and test name the same one: the reader holds out about 10% of
  -- the ratings (test_fraction) as the test part, the same every run.
  train = "data/ml-gen",
  test = "data/ml-gen",
  format = "movielens",
  shuffle_buffer = 1100000,   -- ratings.dat is sorted by user: shuffle it all
}

model = function(nn)
  -- the slots are named after the movielens fields
  local user_id = nn.id("user_id", 6041)        -- UserID, up to 6040
  local gender = nn.id("gender", 2)             -- M = 0, F = 1
  local age = nn.id("age", 7)                   -- index of 1, 18, 25, 35, 45, 50, 56
  local occupation = nn.id("occupation", 21)    -- 0..20
  local movie_id = nn.id("movie_id", 3953)      -- MovieID, up to 3952
  local genres = nn.id_list("genres", 18)       -- the 18 genres of ML-1M
  local title = nn.id_list("title", 6000)       -- title words (ML-1M: ~5,200)
  local rating = nn.data("rating", 1)           -- stars, 1..5

  local usr = nn.fc(nn.concat {
    nn.fc(nn.embedding(user_id, 32), 32),
    nn.fc(nn.embedding(gender, 16), 32),
    nn.fc(nn.embedding(age, 16), 32),
    nn.fc(nn.embedding(occupation, 16), 32),
  }, 200, "tanh")

  local mov = nn.fc(nn.concat {
    nn.fc(nn.embedding(movie_id, 32), 32),
    nn.fc(nn.seq_pool(nn.embedding(genres, 32), "sum"), 32),
    nn.fc(nn.seq_pool(nn.embedding(title, 32), "sum"), 32),
  }, 200, "tanh")

  local predict = nn.cos_sim(usr, mov, 5)
  return { cost = nn.square_error_cost(predict, rating), predict = predict }
end

optimizer = nn.adam { learning_rate = 0.001 }

-- train until the test cost has not improved for 3 passes, 30 at most;
-- keep the last 2 models and the best (output/best links it)
settings { batch_size = 256, passes = 30, log_period = 500, early_stop = 3, keep_models = 2 }
