# metrics.sh - Prometheus /metrics (settings.metrics_port): a local
# `paddle run` of fit-a-line serves the launcher's on P and pserver i's on
# P + 1 + i; curl scrapes them during the job, the counters move between
# two scrapes, promtool finds nothing wrong, the responder answers what is
# not a scrape (404, 405, an oversized request) and a silent client does
# not block it; Ctrl+C ends the job, its roles and the ports.
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3

command -v curl >/dev/null || { skip metrics "curl missing (tests/deps.sh installs it)"; exit 0; }
"$ROOT/recipes/prepare.sh" || { fail prepare "recipes/prepare.sh failed"; exit 0; }
mkdir -p data/uci_housing && cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
cp "$ROOT/recipes/fit_a_line.lua" .

# three free consecutive ports on loopback
P=$($PY - <<'P'
import random, socket
for _ in range(200):
    base, ok = random.randint(20000, 60000), True
    for p in range(base, base + 3):
        s = socket.socket()
        try: s.bind(("127.0.0.1", p))
        except OSError: ok = False
        finally: s.close()
    if ok: print(base); break
P
)

# value FILE NAME_WITH_LABELS : the sample's value ("" when absent)
value() { awk -v n="$2" '$1 == n { print $2 }' "$1"; }
# scrape PORT FILE : GET /metrics into FILE; 0 on a 200
scrape() { curl -sf --max-time 5 -o "$2" "http://127.0.0.1:$1/metrics"; }
# scrape_until PORT FILE NAME : scrape until NAME's value differs from what
# FILE held (bounded: 30 s); the new scrape in FILE
scrape_until() {
    local old
    old=$(value "$2" "$3")
    for _ in $(seq 150); do
        scrape "$1" "$2.next" && [ "$(value "$2.next" "$3")" != "$old" ] && break
        sleep 0.2
    done
    mv "$2.next" "$2" 2>/dev/null
}

"$PADDLE" run fit_a_line.lua --passes=1000000 --early_stop=0 --keep_models=1 --metrics_port="$P" >run.log 2>&1 &
job=$!
stop_job() { # Ctrl+C, then a bounded wait; SIGKILL to what is left
    kill -INT "$job" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$job" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$job" 2>/dev/null
    wait "$job" 2>/dev/null
}
trap stop_job EXIT

# the launcher answers once the trainers print; every role's port too
for _ in $(seq 150); do
    scrape "$P" l1.txt && [ -n "$(value l1.txt paddle_job_step)" ] && [ "$(value l1.txt paddle_job_step)" != 0 ] && break
    sleep 0.2
done
for i in 0 1; do
    for _ in $(seq 50); do scrape $((P + 1 + i)) "p$i.1.txt" && break; sleep 0.2; done
done
if [ ! -s l1.txt ] || [ ! -s p0.1.txt ] || [ ! -s p1.1.txt ]; then
    fail scrape "no /metrics on ports $P..$((P + 2)): $(tail -n 5 run.log)"
    exit 0
fi
pass scrape
roles=$(ps -o pid= --ppid "$job" | tr -d ' ')

# the launcher: the job's shape, and its step and samples growing
cp l1.txt l2.txt
scrape_until "$P" l2.txt paddle_job_step
s1=$(value l1.txt paddle_job_step) s2=$(value l2.txt paddle_job_step)
why=""
[ "$(value l2.txt paddle_job_trainers_training)" = 2 ] || why="trainers_training $(value l2.txt paddle_job_trainers_training)"
[ "$(value l2.txt paddle_job_passes)" = 1000000 ] || why="$why; passes $(value l2.txt paddle_job_passes)"
[ "$(grep -c '^paddle_job_member_up{.*} 1$' l2.txt)" = 4 ] || why="$why; members up: $(grep member_up l2.txt)"
$PY -c "import sys; sys.exit(0 if int(sys.argv[2]) > int(sys.argv[1]) > 0 else 1)" "$s1" "$s2" ||
    why="$why; step $s1 then $s2"
$PY -c "import math, sys; v = float(sys.argv[1]); sys.exit(0 if 0 < v < 1000 else 1)" \
    "$(value l2.txt paddle_job_test_cost)" 2>/dev/null || why="$why; test cost '$(value l2.txt paddle_job_test_cost)'"
$PY -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)" \
    "$(value l2.txt 'paddle_trainer_train_cost{trainer="1"}')" 2>/dev/null || why="$why; no train cost of trainer 1"
[ "$(value l2.txt paddle_job_samples_total)" -gt 0 ] 2>/dev/null || why="$why; samples $(value l2.txt paddle_job_samples_total)"
if [ -z "$why" ]; then pass launcher_values; echo "launcher: step $s1 then $s2"
else fail launcher_values "${why#; }"; fi

# each pserver: its id, both trainers connected, its step and bytes growing
for i in 0 1; do
    f1="p$i.1.txt" f2="p$i.2.txt"
    cp "$f1" "$f2"
    scrape_until $((P + 1 + i)) "$f2" paddle_pserver_step
    why=""
    grep -q "^paddle_pserver_info{pserver=\"$i\",pservers=\"2\",trainers=\"2\",mode=\"sync\"} 1$" "$f2" ||
        why="no info line for pserver $i"
    [ "$(value "$f2" paddle_pserver_trainers_connected)" = 2 ] || why="$why; trainers_connected $(value "$f2" paddle_pserver_trainers_connected)"
    a=$(value "$f1" paddle_pserver_step) b=$(value "$f2" paddle_pserver_step)
    [ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt "$a" ] || why="$why; step $a then $b"
    a=$(value "$f1" paddle_pserver_received_bytes_total) b=$(value "$f2" paddle_pserver_received_bytes_total)
    [ -n "$a" ] && [ -n "$b" ] && [ "$b" -gt "$a" ] || why="$why; received bytes $a then $b"
    [ "$(value "$f2" 'paddle_pserver_parameter_bytes{kind="dense"}')" -gt 0 ] 2>/dev/null || why="$why; no dense bytes"
    [ "$(value "$f2" process_resident_memory_bytes)" -gt 0 ] 2>/dev/null || why="$why; no resident memory"
    if [ -z "$why" ]; then pass "pserver${i}_values"; else fail "pserver${i}_values" "${why#; }"; fi
done

# promtool: the text format and the metric names
if command -v promtool >/dev/null; then
    for f in l2.txt p0.2.txt p1.2.txt; do
        if res=$(promtool check metrics <"$f" 2>&1); then pass "promtool_$f"; else fail "promtool_$f" "$res"; fi
    done
else
    skip promtool "promtool missing (Debian prometheus; tests/deps.sh installs it)"
fi

# what is not a scrape: 404, 405, an oversized request; a client that
# connects and says nothing does not hold the responder up
code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P/other")
code2=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$((P + 1))/metrics")
big=$($PY - "$P" <<'P'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
try:
    s.sendall(b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 8000 + b"\r\n\r\n")
except OSError:
    pass
try:
    print(s.recv(64).decode("latin-1").split("\r\n")[0] or "closed")
except OSError:
    print("closed")
P
)
$PY - "$P" >idle.txt <<'P' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"GET /met")
time.sleep(3)
print("held")
P
idle=$!
sleep 0.5
scrape "$P" l3.txt
got=$?
wait "$idle"
if [ "$code" = 404 ] && [ "$code2" = 405 ] && [[ "$big" = *431* || "$big" = closed ]] && [ "$got" -eq 0 ] &&
    [ -n "$(value l3.txt paddle_job_step)" ] && grep -q held idle.txt; then
    pass http_edges
else
    fail http_edges "404? $code, 405? $code2, oversized: $big, scrape beside an idle client: rc $got"
fi

# Ctrl+C: the job stops, its roles and its ports are gone
kill -INT "$job"
for _ in $(seq 100); do kill -0 "$job" 2>/dev/null || break; sleep 0.2; done
if kill -0 "$job" 2>/dev/null; then
    fail ctrl_c "the launcher is still running 20 s after Ctrl+C"
else
    wait "$job"
    rc=$?
    left=""
    for p in $roles; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
    open=""
    for p in "$P" $((P + 1)) $((P + 2)); do curl -s --max-time 2 -o /dev/null "http://127.0.0.1:$p/metrics" && open="$open $p"; done
    if [ "$rc" -eq 130 ] && [ -z "$left" ] && [ -z "$open" ] && [ -n "$roles" ]; then pass ctrl_c
    else fail ctrl_c "exit $rc, roles left:$left, ports still open:$open (roles: $roles)"; fi
fi
trap - EXIT

# off by default; a port the pservers cannot have is an error that says why
run_capture "$PADDLE" run fit_a_line.lua --passes=1
if [ "$rc" -eq 0 ] && ! grep -q 'metrics on' <<<"$out"; then pass off_by_default
else fail off_by_default "exit $rc: $(grep -m1 'metrics on' <<<"$out")"; fi
run_capture "$PADDLE" run fit_a_line.lua --passes=1 --metrics_port=65535
if [ "$rc" -ne 0 ] && grep -q 'metrics: port 65536 is out of range (settings.metrics_port' <<<"$out"; then
    pass port_out_of_range
else
    fail port_out_of_range "exit $rc: $(tail -n 3 <<<"$out")"
fi
