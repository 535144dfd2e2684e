# ps_faults.sh - a local job never leaves a process behind: a killed trainer
# ends the job naming it; Ctrl+C ends every role; a SIGKILLed launcher's
# roles exit by themselves.
. "$ROOT/tests/integration/lib.sh"

"$ROOT/recipes/prepare.sh" && mkdir -p data/uci_housing && cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
recipe="$T/faultjob.lua"
cp "$ROOT/recipes/fit_a_line.lua" "$recipe"

# pids of every process whose command line names our recipe
job_pids() {
    local p
    for p in /proc/[0-9]*; do
        tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF "$recipe" && echo "${p#/proc/}"
    done
}

# start a long job in the background; sets $launcher; waits until training runs
start_job() {
    "$PADDLE" run "$recipe" --passes=1000000 --log_period=1000000 --early_stop=0 >job.out 2>&1 &
    launcher=$!
    for _ in $(seq 1 100); do
        grep -q 'pass 1 done' job.out && return 0
        sleep 0.1
    done
    echo "job did not start:"; cat job.out
    return 1
}

# seconds (with decimals) until pid exits, at most $2
wait_exit() {
    local pid=$1 limit=$2 start
    start=$(date +%s.%N)
    while kill -0 "$pid" 2>/dev/null; do
        if awk -v s="$start" -v e="$(date +%s.%N)" -v l="$limit" 'BEGIN { exit !(e - s > l) }'; then
            return 1
        fi
        sleep 0.05
    done
    return 0
}

no_leftovers() {
    local left
    left=$(job_pids)
    [ -z "$left" ] && return 0
    echo "processes left: $left"
    for p in $left; do tr '\0' ' ' <"/proc/$p/cmdline"; echo; kill -9 "$p" 2>/dev/null; done
    return 1
}

# 1. a trainer killed with SIGKILL ends the job within 5 s, naming it
if start_job; then
    victim=""
    for p in $(job_pids); do
        tr '\0' ' ' <"/proc/$p/cmdline" | grep -q -- '--trainer_id=1' && victim=$p
    done
    kill -9 "$victim"
    if wait_exit "$launcher" 5; then
        wait "$launcher"; rc=$?
        if [ $rc -ne 0 ] && grep -q 'trainer 1 was killed by signal 9' job.out; then pass killed_trainer_named
        else fail killed_trainer_named "rc $rc; $(tail -n 5 job.out)"; fi
    else
        fail killed_trainer_named "the launcher still runs 5 s after trainer 1 was killed"
        kill -9 "$launcher"
    fi
    sleep 0.2
    check killed_trainer_no_leftovers no_leftovers
else
    fail killed_trainer_named "job did not start"
fi

# 2. Ctrl+C (SIGINT) ends every role within 5 s
if start_job; then
    kill -INT "$launcher"
    if wait_exit "$launcher" 5; then
        wait "$launcher"; rc=$?
        if [ $rc -eq 130 ] && grep -q 'interrupted' job.out; then pass ctrl_c_ends_job
        else fail ctrl_c_ends_job "rc $rc; $(tail -n 5 job.out)"; fi
    else
        fail ctrl_c_ends_job "the launcher still runs 5 s after SIGINT"
        kill -9 "$launcher"
    fi
    check ctrl_c_no_leftovers no_leftovers
fi

# 3. SIGTERM likewise
if start_job; then
    kill -TERM "$launcher"
    if wait_exit "$launcher" 5 && [ -z "$(job_pids)" ]; then pass sigterm_ends_job
    else fail sigterm_ends_job "job still running 5 s after SIGTERM"; kill -9 "$launcher" 2>/dev/null; fi
    wait "$launcher" 2>/dev/null
    no_leftovers >/dev/null
fi

# 4. a SIGKILLed launcher leaves nothing: its roles exit on their own
if start_job; then
    n=$(job_pids | wc -l)
    kill -9 "$launcher"
    wait "$launcher" 2>/dev/null
    sleep 5
    if [ "$n" -ge 4 ] && no_leftovers; then pass sigkill_launcher_no_orphans
    else fail sigkill_launcher_no_orphans "had $n processes; some survived the launcher"; fi
fi
