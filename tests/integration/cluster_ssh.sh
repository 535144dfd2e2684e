# cluster_ssh.sh - paddle run on a cluster of real sshd "hosts" on loopback
# (127.0.0.2, 127.0.0.3): deploy, redeploy, deployed workspace, output copied
# back, a killed remote trainer, Ctrl+C, a SIGKILLed launcher, host keys,
# keys and unreachable hosts - with no process of the job left anywhere.
. "$ROOT/tests/integration/lib.sh"
. "$ROOT/tests/integration/sshd_lib.sh"

# each "host" has its own root: root_dir names a variable the node's sshd sets
sshd_two_nodes || { fail sshd "cannot start the test sshd servers"; exit 0; }
"$ROOT/recipes/prepare.sh"
mkdir -p ws/data/uci_housing
cp "$ROOT/recipes/data/uci_housing/housing.data" ws/data/uci_housing/
nodes="$T/node"
port=$(sshd_free_port)

write_recipe() { # FILE EXTRA-JOB-KEYS
    sshd_fit_a_line_job "$port" "$2" 'batch_size = 20, passes = 3, log_period = 1000' >"$1"
}
write_recipe ws/job.lua 'workspace = "."'

job_pids() { # every process whose command line names a node's root dir
    local p
    for p in /proc/[0-9]*; do
        tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qE "$T/node[23]/" && echo "${p#/proc/}"
    done
}
no_leftovers() {
    local left
    left=$(job_pids)
    [ -z "$left" ] && return 0
    echo "left running: $left"; for p in $left; do kill -9 "$p" 2>/dev/null; done
    return 1
}

# 1. a two-host job runs to completion and its model lands in output/
run_capture "$PADDLE" run ws/job.lua
if [ $rc -eq 0 ] && [ -s output/pass-00002/fc_0.w_0.npy ] && [ -s output/pass-00002/manifest.json ] &&
   grep -q '^\[127.0.0.3 trainer 1\]' <<<"$out" && grep -q 'binary copied to 2 of 2' <<<"$out"; then
    pass two_host_job
else
    fail two_host_job "rc $rc: $(tail -n 8 <<<"$out")"
fi
job1=$(grep -o 'node 0 [^ ]*: job directory [^ ]*' <<<"$out" | awk '{print $NF}')
job2=$(grep -o 'node 1 [^ ]*: job directory [^ ]*' <<<"$out" | awk '{print $NF}')
if [[ "$job1" == "$T/node2/JOB"* ]] && [[ "$job2" == "$T/node3/JOB"* ]] &&
   [ "$(cat "$job1/nodefile" 2>/dev/null)" = 0 ] && [ "$(cat "$job2/nodefile" 2>/dev/null)" = 1 ] &&
   [ -s "$job1/log/paddle_trainer.INFO" ] && [ -s "$job2/log/server.log" ] &&
   [ -s "$job1/output/pass-00002/fc_0.w_0.npy" ] && [ -x "$T/node3/.paddle/bin/$(ls "$T/node3/.paddle/bin" | head -n 1)" ]; then
    pass node_dirs_logs_nodefile_output
else
    fail node_dirs_logs_nodefile_output "job dirs '$job1' '$job2' lack nodefile, logs or output"
fi
check no_leftovers_after_job no_leftovers

# passes that keep_models removes on the node while one is being copied
# back (fast passes): skipped without a word, no half copy left (an error
# and an empty output/pass-N.part stayed before), the last pass copied
rm -rf output
run_capture "$PADDLE" run ws/job.lua --passes=6 --batch_size=1 --keep_models=2
if [ $rc -eq 0 ] && [ -s output/pass-00005/manifest.json ] && [ -z "$(ls -d output/*.part 2>/dev/null)" ] &&
   ! grep -q 'could not copy' <<<"$out"; then
    pass copy_back_skips_passes_keep_models_removed
else
    fail copy_back_skips_passes_keep_models_removed "rc $rc: $(ls output) $(grep -v '\] ' <<<"$out" | tail -n 4)"
fi

# 2. a second run finds the same binary and the same files there
run_capture "$PADDLE" run ws/job.lua --passes=1
if [ $rc -eq 0 ] && grep -q 'binary copied to 0 of 2 nodes; workspace: 0 files sent' <<<"$out"; then
    pass redeploy_skips_copies; grep 'every node started' <<<"$out"
else
    fail redeploy_skips_copies "rc $rc: $(grep -E 'every node|paddle:' <<<"$out" | tail -n 3)"
fi

# 3. an already deployed workspace: nothing dispatched
if [ -n "$job1" ] && [ -n "$job2" ]; then
    # the same workspace on both nodes under one name (relative to root_dir)
    name=$(basename "$job1")
    [ -d "$T/node3/$name" ] || cp -r "$job2" "$T/node3/$name"
    write_recipe ws/deployed.lua "deployed = \"$name\""
    cp ws/deployed.lua "$job1/deployed.lua"; cp ws/deployed.lua "$T/node3/$name/deployed.lua"
    rm -rf output
    run_capture "$PADDLE" run ws/deployed.lua --passes=1
    if [ $rc -eq 0 ] && grep -q "job directory $job1" <<<"$out" && [ -s output/pass-00000/fc_0.w_0.npy ] &&
       grep -q 'workspace: 0 files sent, 0 already there' <<<"$out"; then
        pass deployed_workspace
    else
        fail deployed_workspace "rc $rc: $(tail -n 5 <<<"$out")"
    fi
fi

# trainer 0 placed on the second host: the model still comes back
rm -rf output
run_capture "$PADDLE" run ws/job.lua --passes=2 --trainer_hosts=127.0.0.3
if [ $rc -eq 0 ] && [ -s output/pass-00001/fc_0.w_0.npy ] && grep -q '^\[127.0.0.3 trainer 0\]' <<<"$out"; then
    pass model_from_trainer0_node
else
    fail model_from_trainer0_node "rc $rc: $(tail -n 3 <<<"$out")"
fi

# every role on the first host: the second is left without one, and its
# node agent (started with no --roles) ends at once instead of failing
rm -rf output
run_capture "$PADDLE" run ws/job.lua --passes=2 --pserver_hosts=127.0.0.2 --trainer_hosts=127.0.0.2
if [ $rc -eq 0 ] && [ -s output/pass-00001/fc_0.w_0.npy ] && ! grep -q '^\[127.0.0.3 ' <<<"$out"; then
    pass host_without_roles
else
    fail host_without_roles "rc $rc: $(tail -n 3 <<<"$out")"
fi

# trainer 0 alone tests after the last pass (here 40000 synthetic samples
# of a 512-2048-2048-1 model, a few seconds): it tells the pservers it
# finished once it has the final model, so the other node's pserver ends
# before that test does, and that node's agent has nothing to wait for
sed -e 's|^data {.*|data { train = "synthetic", test = "synthetic", format = "synthetic", samples = 40000 }|' \
    -e 's|nn.data("x", 13), nn.data("y", 1)|nn.fc(nn.fc(nn.data("x", 512), 2048, { act = "relu" }), 2048, { act = "relu" }), nn.data("y", 1)|' \
    -e 's|^settings {.*|settings { batch_size = 256, passes = 1, max_batches = 2, threads = 1, log_period = 1000 }|' \
    ws/job.lua >ws/longtest.lua
rm -rf output
run_capture "$PADDLE" run ws/longtest.lua
# "[host role N] I1128 23:55:22.909366 ..." -> seconds of the day
stamp() {
    grep -m 1 "$1" <<<"$out" | grep -o ' [0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]* ' |
        awk -F: '{ printf "%.6f\n", $1 * 3600 + $2 * 60 + $3 }'
}
ended=$(stamp '127.0.0.3 pserver 1.*every trainer finished; pserver 1 exits')
tested=$(stamp '127.0.0.2 trainer 0.*pass 0 done:.*test cost')
if [ $rc -eq 0 ] && [ -n "$ended" ] && [ -n "$tested" ] && [ -s output/pass-00000/manifest.json ] &&
   ! grep -q "its pservers still serve the trainers on other nodes\|FINISH not sent\|stopping on a signal" <<<"$out" &&
   awk -v e="$ended" -v t="$tested" 'BEGIN { if (t < e - 43200) t += 86400; exit !(e < t) }'; then
    pass pserver_ends_before_trainer0_test
else
    fail pserver_ends_before_trainer0_test "rc $rc: $(grep -v 'batch [0-9]*,' <<<"$out" | tail -n 8)"
fi
check no_leftovers_after_long_test no_leftovers

# with a growing table, trainer 0's test and save read rows from the
# pservers, so it says FINISH only after them; the other node's agent,
# whose trainer 1 finished, keeps its pserver until the launcher says every
# node's trainers finished, however long that takes. Trainer 0 is stopped
# (SIGSTOP) for 16 s in its final test: longer than the bound an agent had
# before (10 s + server_timeout 1 + heartbeat_timeout 2). The table's keys
# come back with the model.
sed -e 's|^data {.*|data { train = "synthetic", test = "synthetic", format = "synthetic", samples = 40000 }|' \
    -e 's|nn.data("x", 13), nn.data("y", 1)|nn.fc(nn.fc(nn.concat { nn.embedding(nn.id("c"), 8, { param = "T" }), nn.data("x", 512) }, 2048, { act = "relu" }), 2048, { act = "relu" }), nn.data("y", 1)|' \
    -e 's|^settings {.*|settings { batch_size = 256, passes = 1, max_batches = 2, threads = 1, log_period = 1000, server_timeout = 1, heartbeat_timeout = 2 }|' \
    ws/job.lua >ws/growtest.lua
rm -rf output
"$PADDLE" run ws/growtest.lua >grow.out 2>&1 &
launcher=$!
stopped=""
for _ in $(seq 1 300); do
    if grep -q '^\[127.0.0.3 trainer 1\] .*trainer 1 finished' grow.out; then
        for p in $(job_pids); do tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- '--trainer_id=0' && stopped=$p; done
        [ -n "$stopped" ] && kill -STOP "$stopped"
        break
    fi
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.05
done
if [ -n "$stopped" ]; then sleep 16; kill -CONT "$stopped"; fi
for _ in $(seq 1 600); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
kill -0 "$launcher" 2>/dev/null && kill -9 "$launcher"
wait "$launcher"; rc=$?
tested=$(grep -c '127.0.0.2 trainer 0.*pass 0 done:.*test cost' grow.out)
if [ -n "$stopped" ] && [ $rc -eq 0 ] && [ "$tested" = 1 ] && [ -s output/pass-00000/T.keys.npy ] &&
   grep -q '^\[127.0.0.3\] paddle: this node.s trainers finished 10 s ago; its pservers still serve' grow.out &&
   grep -q '^\[127.0.0.3 pserver 1\] .*trainer 0 finished (2 of 2)' grow.out &&
   ! grep -q "did not end\|stopping them\|FINISH not sent" grow.out; then
    pass growing_table_pserver_kept_for_trainer0
else
    fail growing_table_pserver_kept_for_trainer0 "stopped '$stopped', rc $rc: $(grep -v 'batch [0-9]*,' grow.out | tail -n 10)"
fi
check no_leftovers_after_growing_table no_leftovers

# a long job in the background; waits until every role trains
start_long() {
    "$PADDLE" run ws/job.lua --passes=1000000 >long.out 2>&1 &
    launcher=$!
    for _ in $(seq 1 150); do
        grep -q 'trainer 1\] .*pass 2 done' long.out && return 0
        sleep 0.1
    done
    echo "long job did not start:"; tail -n 20 long.out
    return 1
}
gone_within() { # PID SECONDS
    local i
    for i in $(seq 1 $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    return 1
}

# 4. a remote trainer killed: the job ends, naming the host and the role
if start_long; then
    victim=""
    for p in $(job_pids); do tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- '--trainer_id=1' && victim=$p; done
    kill -9 "$victim"
    if gone_within "$launcher" 10; then
        wait "$launcher"; rc=$?
        if [ $rc -ne 0 ] && grep -q '127.0.0.3\] paddle: trainer 1 was killed by signal 9' long.out &&
           [ -z "$(ls -d output/*.part 2>/dev/null)" ]; then
            pass killed_remote_trainer_named
        else
            fail killed_remote_trainer_named "rc $rc: $(tail -n 6 long.out)"
        fi
    else
        fail killed_remote_trainer_named "launcher still running 10 s after the trainer died"; kill -9 "$launcher"
    fi
    sleep 1
    check killed_remote_no_leftovers no_leftovers
fi

# 5. Ctrl+C ends every role on every host within 5 s
if start_long; then
    kill -INT "$launcher"
    if gone_within "$launcher" 8; then
        wait "$launcher"; rc=$?
        sleep 0.5
        if [ $rc -eq 130 ] && [ -z "$(job_pids)" ]; then pass ctrl_c_ends_cluster_job
        else fail ctrl_c_ends_cluster_job "rc $rc, left: $(job_pids)"; fi
    else
        fail ctrl_c_ends_cluster_job "launcher still running"; kill -9 "$launcher"
    fi
    no_leftovers >/dev/null
fi

# 6. a SIGKILLed launcher: the connections drop, the agents end their roles
if start_long; then
    kill -9 "$launcher"
    wait "$launcher" 2>/dev/null
    sleep 5
    if no_leftovers; then pass sigkill_launcher_no_orphans_on_hosts
    else fail sigkill_launcher_no_orphans_on_hosts "roles survived the launcher"; fi
fi

# 7. host keys, keys, unreachable hosts: one clear line naming the host
sed "s|known_hosts = \"$T/known_hosts\"|known_hosts = \"$T/empty_known\"|" ws/job.lua >ws/unknown.lua
: >empty_known
run_capture "$PADDLE" run ws/unknown.lua --passes=1
if [ $rc -ne 0 ] && grep -q '127.0.0.2' <<<"$out" && grep -qi 'accept-new-host-keys' <<<"$out"; then
    pass unknown_host_key_refused
else
    fail unknown_host_key_refused "rc $rc: $(tail -n 3 <<<"$out")"
fi
run_capture "$PADDLE" run ws/unknown.lua --passes=1 --accept-new-host-keys
if [ $rc -eq 0 ] && [ "$(grep -c . empty_known)" -ge 2 ]; then pass unknown_host_key_accepted
else fail unknown_host_key_accepted "rc $rc: $(tail -n 3 <<<"$out")"; fi
# a changed key: known_hosts says another key for 127.0.0.2
ssh-keygen -q -t ed25519 -N '' -f other_hostkey
sed "s|^\(\[127.0.0.2\]:${SSHD_PORT[2]}\) .*|\1 $(cut -d' ' -f1,2 other_hostkey.pub)|" known_hosts >changed_known
grep -v '^\[127.0.0.2\]' known_hosts | grep . >/dev/null
sed "s|known_hosts = \"$T/known_hosts\"|known_hosts = \"$T/changed_known\"|" ws/job.lua >ws/changed.lua
run_capture "$PADDLE" run ws/changed.lua --passes=1 --accept-new-host-keys
if [ $rc -ne 0 ] && grep -q '127.0.0.2' <<<"$out" && grep -q 'SHA256:' <<<"$out"; then pass changed_host_key_refused
else fail changed_host_key_refused "rc $rc: $(tail -n 3 <<<"$out")"; fi
sed "s|$SSHD_KEYS/id_ed25519\"|$SSHD_KEYS/id_wrong\"|" ws/job.lua >ws/wrongkey.lua
run_capture "$PADDLE" run ws/wrongkey.lua --passes=1
if [ $rc -ne 0 ] && grep -q '127.0.0.2' <<<"$out" && grep -qi 'id_wrong' <<<"$out"; then pass wrong_key_refused
else fail wrong_key_refused "rc $rc: $(tail -n 3 <<<"$out")"; fi
dead=$(sshd_free_port)
sed "s|127.0.0.3:${SSHD_PORT[3]}|127.0.0.9:$dead|" ws/job.lua >ws/unreachable.lua
run_capture "$PADDLE" run ws/unreachable.lua --passes=1
if [ $rc -ne 0 ] && grep -q '127.0.0.9' <<<"$out" && grep -q 'nothing is left running' <<<"$out"; then
    pass unreachable_host_named
else
    fail unreachable_host_named "rc $rc: $(tail -n 3 <<<"$out")"
fi
# Ctrl+C while a host that accepts but never speaks holds the SSH handshake:
# the launcher stops at once (not at connect_timeout), says so, exits 130
silent=$(sshd_free_port)
timeout 60 /usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.9", int(sys.argv[1]))); s.listen(4); print("up", flush=True)
c = s.accept(); time.sleep(60)' "$silent" >silent.out 2>&1 &
silent_pid=$!
for _ in $(seq 50); do grep -q up silent.out 2>/dev/null && break; sleep 0.1; done
sed -e "s|127.0.0.3:${SSHD_PORT[3]}|127.0.0.9:$silent|" -e 's|use_agent = false,|use_agent = false, connect_timeout = 30,|' \
    ws/job.lua >ws/silent.lua
"$PADDLE" run ws/silent.lua --passes=1 >silent_run.out 2>&1 &
run_pid=$!
sleep 1.5
start=$SECONDS
kill -INT $run_pid
for _ in $(seq 100); do kill -0 $run_pid 2>/dev/null || break; sleep 0.1; done
kill -0 $run_pid 2>/dev/null && { kill -9 $run_pid; echo "still running 10 s after SIGINT" >>silent_run.out; }
wait $run_pid; rc=$?
kill $silent_pid 2>/dev/null; wait $silent_pid 2>/dev/null
if [ $rc -eq 130 ] && [ $((SECONDS - start)) -le 3 ] &&
   grep -q 'interrupted (Ctrl+C) while deploying; nothing is left running' silent_run.out &&
   ! grep -q 'timed out' silent_run.out; then
    pass ctrl_c_during_ssh_handshake
else
    fail ctrl_c_during_ssh_handshake "rc $rc after $((SECONDS - start)) s: $(tail -n 3 silent_run.out)"
fi
check no_leftovers_after_ctrl_c_during_handshake no_leftovers
# a root_dir that cannot be written: the host is named, nothing is started
sed 's|root_dir = "\$PADDLE_NODE_ROOT"|root_dir = "/proc/paddle-cannot-write-here"|' ws/job.lua >ws/readonly.lua
run_capture "$PADDLE" run ws/readonly.lua --passes=1
if [ $rc -ne 0 ] && grep -q '127.0.0.2' <<<"$out" && grep -q 'root_dir /proc/paddle-cannot-write-here' <<<"$out" &&
   grep -q 'nothing is left running' <<<"$out"; then
    pass unwritable_root_dir_named
else
    fail unwritable_root_dir_named "rc $rc: $(tail -n 3 <<<"$out")"
fi
sleep 0.5
check no_leftovers_at_end no_leftovers
