# engines_lib.sh - helpers of the engines_*.sh tests (sourced): the
# fit-a-line workspace in $T, a job secret, free ports, and the check that
# no process of the test is left running.
. "$ROOT/tests/integration/lib.sh"

engines_workspace() {
    "$ROOT/recipes/prepare.sh" >/dev/null && mkdir -p data/uci_housing &&
        cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/ && cp "$ROOT/recipes/fit_a_line.lua" .
}
new_secret() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
export PADDLE_JOB_SECRET=$(new_secret)
# the variables a user's shell might carry into a test
unset PADDLE_TRAINING_ROLE TRAINING_ROLE PADDLE_PSERVER_IPS PADDLE_PSERVER_PORT PADDLE_PSERVERS_IP_PORT_LIST \
    PADDLE_TRAINERS PADDLE_TRAINERS_NUM PADDLE_CURRENT_IP POD_IP PADDLE_PORT PADDLE_TRAINER_ID PADDLE_MASTER \
    PADDLE_NNODES PADDLE_SERVER_NUM PADDLE_TRAINER_NUM PADDLE_TRAINER_ENDPOINTS VC_PS_HOSTS VC_WORKER_HOSTS \
    VC_TASK_INDEX OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS

# a free port below the ephemeral range
free_port() {
    /usr/bin/python3 - <<'P'
import random, socket
while True:
    p = random.randrange(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()
P
}

# the paddle, mpirun and slurm step processes working in $T (what the test
# started), as "pid(command)"
left_running() {
    local p cmd out=""
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/cwd" 2>/dev/null)" = "$T" ] || continue
        cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-80)
        [[ "$cmd" == *"$PADDLE"* || "$cmd" == *mpirun* || "$cmd" == *orted* || "$cmd" == *srun* ]] &&
            out+=" ${p#/proc/}($cmd)"
    done
    echo "$out"
}

# wait_all SECONDS PID... : 0 when every pid ended in time (their statuses in
# $statuses), else kills the rest (by pid) and returns 1
wait_all() {
    local limit=$1 p rc=0; shift
    statuses=()
    for p in "$@"; do
        if ! timeout "$limit" tail --pid="$p" -f /dev/null; then kill -9 "$p" 2>/dev/null; rc=1; fi
        wait "$p"; statuses+=($?)
    done
    return $rc
}
