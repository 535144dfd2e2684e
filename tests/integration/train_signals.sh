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
        # a writer that sends one line once paddle reads, then holds the
        # FIFO open in silence
        (exec 3>d.csv; sleep 0.3; echo "1,2,3" >&3; sleep 30) &
        writer=$!
    fi
    "$PADDLE" train r.lua --save_dir=out_$name >$name.log 2>&1 &
    pid=$!
    sleep 1
    t0=$(date +%s.%N)
    if ! kill -"$sig" "$pid" 2>/dev/null; then
        wait "$pid"
        fail "$name" "ended before the signal (exit $?): $(tail -n 2 $name.log)"
    else
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"; wait "$pid" 2>/dev/null
        fail "$name" "still running 4 s after SIG$sig: $(tail -n 2 $name.log)"
    else
        wait "$pid"; rc=$?
        secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
        if [ "$rc" -ne 0 ] && [ ! -e "out_$name" ] && awk -v s="$secs" 'BEGIN { exit !(s < 2) }' &&
           grep -q 'interrupted' "$name.log"; then
            pass "$name"; echo "$name: exit $rc after $secs s"
        else
            fail "$name" "exit $rc after $secs s, out_$name $( [ -e out_$name ] && echo exists): $(tail -n 2 $name.log)"
        fi
    fi
    fi
    [ -n "$writer" ] && { kill "$writer" 2>/dev/null; wait "$writer" 2>/dev/null; }
    rm -f d.csv
}
stop_case sigint_while_opening INT 0
stop_case sigint_while_reading INT 1
stop_case sigterm_while_reading TERM 1

# term_and_wait NAME PID LOG: SIGTERM to PID; true once it ended within 4 s
# (its exit status in $rc, the seconds it took in $secs), else it is
# killed and NAME fails
term_and_wait() {
    local name=$1 pid=$2 log=$3 t0
    t0=$(date +%s.%N)
    kill -TERM "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"; wait "$pid" 2>/dev/null
        fail "$name" "still running 4 s after SIGTERM: $(tail -n 2 "$log")"
        return 1
    fi
    wait "$pid"; rc=$?
    secs=$(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
}

# a trainer whose pservers never come up stops on SIGTERM at once, naming
# them (not after server_timeout, 120 s)
echo "1,2,3" >d.csv
port=$(free_port_pair)
PADDLE_JOB_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') \
    "$PADDLE" trainer r.lua --pservers=127.0.0.1:"$port" --trainer_id=0 --save_dir=out_wait >wait.log 2>&1 &
pid=$!
sleep 1
if term_and_wait sigterm_while_waiting_for_pservers "$pid" wait.log; then
    if [ "$rc" -eq 130 ] && grep -q "stopped on a signal while waiting for the pservers: not ready endpoints: \[127.0.0.1:$port" wait.log &&
       awk -v s="$secs" 'BEGIN { exit !(s < 2) }'; then
        pass sigterm_while_waiting_for_pservers
    else
        fail sigterm_while_waiting_for_pservers "exit $rc after $secs s: $(tail -n 2 wait.log)"
    fi
fi

# a pserver run by hand and stopped by SIGTERM exits 130, as every command
# stopped on a signal does (it exited 0, which a supervisor takes for a
# job that ended well)
port=$(free_port_pair)
PADDLE_JOB_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') \
    "$PADDLE" pserver r.lua --pserver_id=0 --port="$port" --bind=127.0.0.1 >ps.log 2>&1 &
pid=$!
for _ in $(seq 1 50); do grep -q "Server listening" ps.log 2>/dev/null && break; sleep 0.1; done
if term_and_wait pserver_sigterm_exits_130 "$pid" ps.log; then
    if [ "$rc" -eq 130 ] && grep -q "stopping on a signal" ps.log; then pass pserver_sigterm_exits_130
    else fail pserver_sigterm_exits_130 "exit $rc: $(tail -n 2 ps.log)"; fi
fi
