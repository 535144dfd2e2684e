# train_signals.sh - paddle train stops on SIGINT/SIGTERM within a second
# even while it waits for data that never comes (a FIFO whose writer is
# silent), and saves nothing half-written.
. "$ROOT/tests/integration/lib.sh"

cat >r.lua <<'R'
data { train = "d.csv", format = "csv" }
model = function(nn) return nn.square_error_cost(nn.fc(nn.data("x", 2), 1), nn.data("y", 1)) end
optimizer = nn.sgd { learning_rate = 0.1 }
R

# stop_case NAME SIGNAL WRITE_A_LINE: train on a FIFO, signal it after 1 s
stop_case() {
    local name=$1 sig=$2 line=$3 writer= pid t0 rc
    rm -f d.csv && mkfifo d.csv
    if [ "$line" = 1 ]; then
        # a writer that sends one line, then holds the FIFO open in silence
        (exec 3>d.csv; echo "1,2,3" >&3; sleep 30) &
        writer=$!
    fi
    "$PADDLE" train r.lua --save_dir=out_$name >$name.log 2>&1 &
    pid=$!
    sleep 1
    t0=$(date +%s.%N)
    kill -"$sig" "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"; wait "$pid" 2>/dev/null
        fail "$name" "still running 4 s after SIG$sig: $(tail -n 2 $name.log)"
    else
        wait "$pid"; rc=$?
        secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
        if [ "$rc" -ne 0 ] && [ ! -e "out_$name" ] && awk -v s="$secs" 'BEGIN { exit !(s < 2) }'; then
            pass "$name"; echo "$name: exit $rc after $secs s"
        else
            fail "$name" "exit $rc after $secs s, out_$name $( [ -e out_$name ] && echo exists): $(tail -n 2 $name.log)"
        fi
    fi
    [ -n "$writer" ] && { kill "$writer" 2>/dev/null; wait "$writer" 2>/dev/null; }
    rm -f d.csv
}
stop_case sigint_while_opening INT 0
stop_case sigint_while_reading INT 1
stop_case sigterm_while_reading TERM 1
