# engines_mpi.sh - `paddle start` under a real OpenMPI mpirun forms the job
# by the rendezvous (no endpoint variables), a rank that dies ends the job
# naming it, and bad set-ups (two ranks on one rank number, a rank count
# that does not match the recipe, a master that never answers, a secret that
# differs) fail within the timeout with one line naming the rank, variable
# or address, leaving nothing running.
. "$ROOT/tests/integration/engines_lib.sh"
engines_workspace || { fail engines_workspace "recipes/prepare.sh failed"; exit 0; }
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)

if ! command -v mpirun >/dev/null; then
    skip mpirun_job "mpirun is not installed (tests/deps.sh installs openmpi-bin)"
    skip mpirun_rank_dies "mpirun is not installed"
else
    run_capture timeout 90 "${MPIRUN[@]}" -np 4 "$PADDLE" start fit_a_line.lua --passes=3 --save_dir=out_mpi
    if [ $rc -eq 0 ] && [ -s out_mpi/pass-00002/fc_0.w_0.npy ] && [[ "$out" == *"pass 2 done"* ]] &&
        [ "$(grep -c 'paddle start: pserver' <<<"$out")" -eq 2 ] && [ "$(grep -c 'paddle start: trainer' <<<"$out")" -eq 2 ]; then
        pass mpirun_job
    else
        fail mpirun_job "rc $rc: $(tail -n 5 <<<"$out")"
    fi
    # rank 3 (trainer 1) is killed a second into a long job: mpirun ends the
    # job and names the rank
    cat >die.sh <<'S'
#!/bin/sh
[ "$OMPI_COMM_WORLD_RANK" = 3 ] && (sleep 1.5; kill -9 $$) &
exec "$@"
S
    chmod +x die.sh
    run_capture timeout 90 "${MPIRUN[@]}" -np 4 ./die.sh "$PADDLE" start fit_a_line.lua --passes=100000 --early_stop=0 --save_dir=out_die
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q 'rank 3' <<<"$out" && [ -z "$(left_running)" ]; then
        pass mpirun_rank_dies
    else
        fail mpirun_rank_dies "rc $rc; left: $(left_running); $(grep -i 'rank' <<<"$out" | tail -n 3)"
    fi
fi

# --- bad set-ups, with the variables mpirun sets, ranks started here ------------------
# ranks RANKS... : start one `paddle start` per rank number (SECRET_<r> picks
# a rank's own secret), each logging to r<i>.log; pids in $pids
ranks() {
    local i=0 r
    pids=()
    for r in "$@"; do
        local s=SECRET_$r
        ( export OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=4 PADDLE_JOB_SECRET=${!s:-$PADDLE_JOB_SECRET}
          exec "$PADDLE" start fit_a_line.lua --master=127.0.0.1:$port --rendezvous_timeout=4 --passes=1 \
              --save_dir=out_bad ) >r$i.log 2>&1 &
        pids+=($!)
        i=$((i + 1))
    done
}
# bad_case NAME WANT_TEXT_IN_EVERY_FAILED_RANK... : every rank ended within
# the limit, non-zero, with one line, and the master's names WANT
bad_case() {
    local name=$1 want=$2 i bad=""
    wait_all 20 "${pids[@]}" || bad+=" a rank was still running after 20 s;"
    for i in "${!statuses[@]}"; do
        [ "${statuses[$i]}" -ne 0 ] || bad+=" rank r$i exited 0;"
        [ "$(wc -l <r$i.log)" -eq 1 ] || bad+=" r$i.log is not one line: $(head -c 300 r$i.log);"
    done
    grep -q -- "$want" r0.log || bad+=" r0.log lacks '$want': $(cat r0.log);"
    [ -z "$(left_running)" ] || bad+=" left running: $(left_running)"
    if [ -z "$bad" ]; then pass "$name"; else fail "$name" "$bad"; fi
}

port=$(free_port)
ranks 0 1 1 3
bad_case rendezvous_rank_claimed_twice "two ranks claim OMPI_COMM_WORLD_RANK=1"

port=$(free_port)
SECRET_3=$(new_secret)
ranks 0 1 2 3
bad_case rendezvous_other_secret "rank 3 (OMPI_COMM_WORLD_RANK) never arrived"
grep -q "PADDLE_JOB_SECRET differs" r3.log && pass rendezvous_other_secret_refused ||
    fail rendezvous_other_secret_refused "$(cat r3.log)"
unset SECRET_3

port=$(free_port)
ranks 0 1 2
bad_case rendezvous_names_missing_rank "rank 3 (OMPI_COMM_WORLD_RANK) never arrived"

( export OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=5
  expect_error rendezvous_rank_count 2 "OMPI_COMM_WORLD_SIZE=5 processes, but the recipe makes the job 2 pservers + 2 trainers" \
      "$PADDLE" start fit_a_line.lua )
port=$(free_port)
( export OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=4
  start=$SECONDS
  expect_error rendezvous_master_silent 1 "the rendezvous master 127.0.0.1:$port (--master) never answered within 2 s" \
      "$PADDLE" start fit_a_line.lua --master=127.0.0.1:$port --rendezvous_timeout=2
  [ $((SECONDS - start)) -le 6 ] || fail rendezvous_master_silent_in_time "took $((SECONDS - start)) s" )
# --pservers=P splits the ranks when the recipe's counts do not add up
run_capture timeout 90 "${MPIRUN[@]}" -np 3 "$PADDLE" start fit_a_line.lua --pservers=1 --passes=1 --save_dir=out_p1 2>/dev/null
if ! command -v mpirun >/dev/null; then
    skip mpirun_pservers_option "mpirun is not installed"
elif [ $rc -eq 0 ] && [ "$(grep -c 'paddle start: trainer' <<<"$out")" -eq 2 ] && [ -s out_p1/pass-00000/fc_0.w_0.npy ]; then
    pass mpirun_pservers_option
else
    fail mpirun_pservers_option "rc $rc: $(tail -n 3 <<<"$out")"
fi
