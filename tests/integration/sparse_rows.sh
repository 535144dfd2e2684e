# sparse_rows.sh - only the embedding rows a batch uses travel: counted at
# the pservers, against a table of 100000 rows.
. "$ROOT/tests/integration/lib.sh"
cat >sparse.lua <<'R'
job { pservers = 2, trainers = 2 }
data { train = "synthetic", format = "synthetic", samples = 160 }
model = function(nn)
  local e = nn.embedding(nn.id("item", 100000), 8)
  return nn.square_error_cost(nn.fc(e, 1), nn.data("y", 1))
end
optimizer = nn.adam { learning_rate = 0.01 }
settings { batch_size = 8, passes = 1 }
R
run_capture "$PADDLE" run sparse.lua
# 2 trainers x 10 steps x at most 8 ids: at most 160 rows pushed and pulled in
# all, split over the 2 pservers; a dense exchange would move 100000 per step
pushed=$(grep -o 'sparse rows: [0-9]* pulled, [0-9]* pushed' <<<"$out" | awk '{s += $5} END {print s + 0}')
pulled=$(grep -o 'sparse rows: [0-9]* pulled, [0-9]* pushed' <<<"$out" | awk '{s += $3} END {print s + 0}')
servers=$(grep -c 'sparse rows:' <<<"$out")
if [ $rc -eq 0 ] && [ "$servers" -eq 2 ] && [ "$pushed" -gt 0 ] && [ "$pushed" -le 160 ] && [ "$pulled" -gt 0 ] &&
   [ "$pulled" -le 160 ]; then
    pass only_touched_rows_move; echo "rows pulled $pulled, pushed $pushed (table: 100000 rows, 20 steps)"
else
    fail only_touched_rows_move "rc $rc, servers $servers, pulled $pulled, pushed $pushed"
fi
