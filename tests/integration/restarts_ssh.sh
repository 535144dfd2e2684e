# restarts_ssh.sh - faults of a job on real sshd "hosts" on loopback
# (127.0.0.2, 127.0.0.3): a remote pserver SIGKILLed with restarts = 1 (the
# job completes, in the same job directory, its roles with --resume); a
# node's SSH connection dropped (restarted there; without restarts the host
# is named); a node that hangs (its sshd stopped: named within
# heartbeat_timeout); paddle run --resume after a SIGKILLed launcher, from
# checkpoints on each host's own disk. No process is left on any node.
. "$ROOT/tests/integration/lib.sh"
. "$ROOT/tests/integration/sshd_lib.sh"

sshd_two_nodes || { fail sshd "cannot start the test sshd servers"; exit 0; }
"$ROOT/recipes/prepare.sh" >/dev/null
mkdir -p ws/data/uci_housing
cp "$ROOT/recipes/data/uci_housing/housing.data" ws/data/uci_housing/
port=$(sshd_free_port)

sshd_fit_a_line_job "$port" 'workspace = "."' 'batch_size = 20, passes = 3, log_period = 1000000, heartbeat_timeout = 3' \
    >ws/job.lua

job_pids() { # every process whose command line names a node's root dir
    pids_naming "$T/node2/"; pids_naming "$T/node3/"
}
no_leftovers() {
    local left i
    for i in $(seq 1 60); do left=$(job_pids); [ -z "$left" ] && return 0; sleep 0.1; done
    echo "left running: $left"; for p in $left; do kill -9 "$p" 2>/dev/null; done
    return 1
}
role_pid() { # OPTION: a role or agent started with it (e.g. --pserver_id=1, --node=1)
    pid_with_arg "$1" $(job_pids)
}
# session_pids N: the sshd processes that carry node N's agent (not the listener)
session_pids() {
    local p master
    p=$(role_pid "--node=$(($1 - 2))")
    master=$(cat "$T/sshd/host$1/sshd.pid")
    [ -n "$p" ] || return
    p=$(awk '{print $4}' "/proc/$p/stat")
    while [ -n "$p" ] && [ "$p" != "$master" ] && [ "$p" -gt 1 ]; do
        grep -q '^sshd' "/proc/$p/comm" 2>/dev/null && echo "$p"
        p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null)
    done
}
wait_for() { # FILE PATTERN SECONDS [COUNT]
    local i
    for i in $(seq 1 $(($3 * 10))); do [ "$(grep -c -- "$2" "$1")" -ge "${4:-1}" ] && return 0; sleep 0.1; done
    return 1
}
gone_within() { # PID SECONDS
    local i
    for i in $(seq 1 $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$1" 2>/dev/null
    return 1
}
start() { # OPTIONS...: the job in the background ($launcher), training
    "$PADDLE" run ws/job.lua "$@" >job.out 2>&1 &
    launcher=$!
    wait_for job.out '127.0.0.3 trainer 1\] .*pass 3 done' 30 || { echo "did not start:"; tail -n 20 job.out; return 1; }
}
finishes() { # the launcher ends within 90 s; sets $rc
    if gone_within "$launcher" 90; then wait "$launcher"; rc=$?; else rc=999; fi
}
jobdirs() { ls -d "$T"/node2/JOB* "$T"/node3/JOB* 2>/dev/null | wc -l; }

# 1. a remote pserver SIGKILLed, restarts = 1: the job restarts there and completes
if start --passes=2500 --restarts=1; then
    kill -9 "$(role_pid --pserver_id=1)"
    wait_for job.out 'restart 1 of 1' 15 && wait_for job.out '127.0.0.3 trainer 1\] .*pass 3 done' 30 2
    r=$(role_pid --pserver_id=1)
    resumed=$([ -n "$r" ] && tr '\0' ' ' 2>/dev/null <"/proc/$r/cmdline" | grep -c -- '--resume ')
    finishes
    if [ "$rc" -eq 0 ] && grep -q '^paddle: pserver 1 on 127.0.0.3 was killed by signal 9 (Killed); restarting the job from its first pass (no settings.checkpoint_dir) (restart 1 of 1)$' job.out &&
       grep -q '^paddle: job done in [0-9.]* s after 1 restart on 2 nodes' job.out && [ "$resumed" = 1 ] &&
       [ "$(jobdirs)" -eq 2 ]; then
        pass remote_pserver_killed_job_restarts_completes
    else
        fail remote_pserver_killed_job_restarts_completes "rc $rc, --resume '$resumed', job dirs $(jobdirs): $(grep '^paddle' job.out | tail -n 6)"
    fi
    check remote_restart_no_leftovers no_leftovers
fi

# 2. a node's SSH connection dropped (its session's sshd killed), restarts = 1:
#    named, its agent reconnected, the job completes
if start --passes=2500 --restarts=1; then
    kill -9 $(session_pids 3)
    finishes
    if [ "$rc" -eq 0 ] && grep -q '127.0.0.3.*restarting the job from its first pass (no settings.checkpoint_dir) (restart 1 of 1)' job.out &&
       grep -q 'job done' job.out; then
        pass dropped_connection_restarted_there
    else
        fail dropped_connection_restarted_there "rc $rc: $(grep '^paddle' job.out | tail -n 6)"
    fi
    check dropped_connection_no_leftovers no_leftovers
fi

# 3. a node that hangs (its session's sshd stopped): named within
#    heartbeat_timeout (3 s) + 5 s, the job ends; once the sshd is gone the
#    node's agent and roles end too
if start --passes=1000000; then
    s=$(session_pids 3)
    t0=$(date +%s)
    kill -STOP $s
    finishes
    took=$(($(date +%s) - t0))
    kill -9 $s; kill -CONT $s 2>/dev/null
    # the launcher names the node when its heartbeat stops, before any stop grace
    named=$(grep -c "^paddle: 127.0.0.3 did not answer for [0-9]* s (settings.heartbeat_timeout)" job.out)
    if [ "$rc" -eq 1 ] && [ "$named" -ge 1 ] && [ "$took" -le 20 ]; then
        pass hung_node_named_within_heartbeat_timeout
    else
        fail hung_node_named_within_heartbeat_timeout "rc $rc after $took s: $(grep '^paddle' job.out | tail -n 6)"
    fi
    check hung_node_no_leftovers no_leftovers
fi

# 4. paddle run --resume after a SIGKILLed launcher: the same job directory,
#    every agent and role with --resume. checkpoint_dir is relative: inside
#    each host's job directory, on its own disk; pserver 1's host has no
#    trainer 0 to write the complete marker, and marks it at the trainer's
#    COMMIT: both pservers resume from the same checkpoint
rm -rf ws/.paddle
expect_error resume_nothing_recorded 2 'nothing to resume' "$PADDLE" run ws/job.lua --resume
if start --passes=1000000 --checkpoint_dir=ckpt --checkpoint_period=100; then
    first=$(grep -o 'job directory JOB[^ ]*' job.out | head -n 1)
    wait_for job.out 'checkpoint of step [0-9]* complete' 30 2
    kill -9 "$launcher"; wait "$launcher" 2>/dev/null
    no_leftovers >/dev/null
    "$PADDLE" run ws/job.lua --passes=1000000 --checkpoint_dir=ckpt --checkpoint_period=100 --resume >job.out 2>&1 &
    launcher=$!
    # killed between the COMMITs of a checkpoint, the pservers resume from
    # different ones: the trainers mark the newest on every disk and stop,
    # and the next start resumes from it, as they say (docs/faults.md)
    committed='the job stopped before that pserver heard it was complete'
    if wait_for job.out "trainer 1: resuming from the checkpoint of step\\|$committed" 30 &&
       grep -q "$committed" job.out; then
        finishes
        echo "resume: killed between a checkpoint's COMMITs; started once more, as the trainers said"
        "$PADDLE" run ws/job.lua --passes=1000000 --checkpoint_dir=ckpt --checkpoint_period=100 --resume >job.out 2>&1 &
        launcher=$!
    fi
    if wait_for job.out '127.0.0.3 trainer 1\] .*trainer 1: resuming from the checkpoint of step' 30 &&
       wait_for job.out 'checkpoint of step [0-9]* complete' 30; then
        n=$(for p in $(job_pids); do tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline"; echo; done | grep -c -- '--resume ')
        kill -INT "$launcher"; finishes
        s0=$(grep -o '127.0.0.2 pserver 0\] .*resuming from checkpoint ckpt/ckpt-[0-9]* ' job.out | grep -o 'ckpt-[0-9]*')
        s1=$(grep -o '127.0.0.3 pserver 1\] .*resuming from checkpoint ckpt/ckpt-[0-9]* ' job.out | grep -o 'ckpt-[0-9]*')
        if [ -n "$first" ] && grep -q "$first (resuming from its last complete checkpoint)" job.out && [ "$n" -ge 6 ] &&
           [ -n "$s0" ] && [ "$s0" = "$s1" ]; then
            pass resume_reuses_job_dir_roles_resume
            echo "resume: both pservers from $s0, each on its host's own disk"
        else
            fail resume_reuses_job_dir_roles_resume "'$first', $n processes with --resume, pservers from '$s0' '$s1': $(grep -E '^paddle|resum' job.out | head -n 8)"
        fi
    else
        kill -INT "$launcher"; finishes
        fail resume_reuses_job_dir_roles_resume "the resumed job did not resume: $(grep -E '^paddle|resum|E1' job.out | head -n 8)"
    fi
    check resume_no_leftovers no_leftovers
fi

# 6. a role on a node that ends on what it was given (exit status 2; here a
#    checkpoint_dir that cannot be made): no restart, whatever restarts
#    allows, the role named with its reason
"$PADDLE" run ws/job.lua --checkpoint_dir=/dev/null/ckpt --restarts=2 >job.out 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q '^paddle: pserver [01] on 127.0.0.[23] exited with status 2' job.out &&
   grep -q 'settings.checkpoint_dir = /dev/null/ckpt: cannot create /dev/null/ckpt: Not a directory' job.out &&
   ! grep -q 'restarting' job.out; then
    pass remote_config_error_not_restarted
else
    fail remote_config_error_not_restarted "rc $rc: $(grep '^paddle' job.out | tail -n 6)"
fi
check remote_config_error_no_leftovers no_leftovers

# 5. a node whose sshd is killed, listener and session, restarts = 0: the
#    job ends naming the host; nothing is left on any node
if start --passes=1000000; then
    s=$(session_pids 3)
    t0=$(date +%s)
    sshd_stop 3; kill -9 $s
    finishes
    took=$(($(date +%s) - t0))
    if [ "$rc" -eq 1 ] && grep -q '^paddle: lost the connection to 127.0.0.3' job.out && [ "$took" -le 15 ]; then
        pass killed_sshd_host_named
    else
        fail killed_sshd_host_named "rc $rc after $took s: $(grep '^paddle' job.out | tail -n 6)"
    fi
    check killed_sshd_no_leftovers no_leftovers
fi
