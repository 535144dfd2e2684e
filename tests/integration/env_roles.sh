# env_roles.sh - `paddle start` takes its role from PaddlePaddle's
# environment variables (Fluid and Fleet names, mpirun/srun ranks), and
# names any variable that is missing or contradicts another.
. "$ROOT/tests/integration/lib.sh"

"$ROOT/recipes/prepare.sh" && mkdir -p data/uci_housing && cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
cp "$ROOT/recipes/fit_a_line.lua" .
export PADDLE_JOB_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
clean_env() {
    unset PADDLE_TRAINING_ROLE TRAINING_ROLE PADDLE_PSERVER_IPS PADDLE_PSERVER_PORT PADDLE_PSERVERS_IP_PORT_LIST \
        PADDLE_TRAINERS PADDLE_TRAINERS_NUM PADDLE_CURRENT_IP POD_IP PADDLE_PORT PADDLE_TRAINER_ID \
        OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_SIZE PMI_RANK PMI_SIZE SLURM_PROCID SLURM_NTASKS PADDLE_MASTER \
        PADDLE_NNODES PADDLE_SERVER_NUM PADDLE_TRAINER_NUM PADDLE_TRAINER_ENDPOINTS VC_PS_HOSTS VC_WORKER_HOSTS \
        VC_PS_NUM VC_WORKER_NUM VC_TASK_INDEX SLURM_STEP_NODELIST SLURM_JOB_NODELIST
}

# run a 2-pserver 2-trainer job; $1 = scheme; each role started by a function
run_job() {
    local scheme=$1 p1 p2 pids=() rc=0
    p1=$(free_port_pair 127.0.0.1 127.0.0.2); p2=$(free_port_pair 127.0.0.1 127.0.0.2)
    while [ $((p2 - p1)) -lt 3 ] && [ $((p1 - p2)) -lt 3 ]; do p2=$(free_port_pair 127.0.0.1 127.0.0.2); done
    for role in ps0 ps1 tr0 tr1; do
        (
            clean_env
            case $scheme in
            fluid)
                # two pservers on one port, on two loopback addresses
                export PADDLE_PSERVER_IPS=127.0.0.1,127.0.0.2 PADDLE_PSERVER_PORT=$p1 PADDLE_TRAINERS=2
                case $role in
                ps0) export PADDLE_TRAINING_ROLE=PSERVER PADDLE_CURRENT_IP=127.0.0.1 ;;
                ps1) export PADDLE_TRAINING_ROLE=PSERVER PADDLE_CURRENT_IP=127.0.0.2 ;;
                tr*) export PADDLE_TRAINING_ROLE=TRAINER PADDLE_TRAINER_ID=${role#tr} ;;
                esac ;;
            fleet)
                export PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:$p1,127.0.0.1:$p2 PADDLE_TRAINERS_NUM=2
                case $role in
                ps0) export TRAINING_ROLE=PSERVER POD_IP=127.0.0.1 PADDLE_PORT=$p1 ;;
                ps1) export TRAINING_ROLE=PSERVER POD_IP=127.0.0.1 PADDLE_PORT=$p2 ;;
                tr*) export TRAINING_ROLE=TRAINER PADDLE_TRAINER_ID=${role#tr} ;;
                esac ;;
            mpi)
                export PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:$p1,127.0.0.1:$p2 PADDLE_TRAINERS=2 OMPI_COMM_WORLD_SIZE=4
                case $role in ps0) r=0 ;; ps1) r=1 ;; tr0) r=2 ;; tr1) r=3 ;; esac
                export OMPI_COMM_WORLD_RANK=$r ;;
            slurm)
                export PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:$p1,127.0.0.1:$p2 PADDLE_TRAINERS=2 SLURM_NTASKS=4
                case $role in ps0) r=0 ;; ps1) r=1 ;; tr0) r=2 ;; tr1) r=3 ;; esac
                export SLURM_PROCID=$r ;;
            paddleflow)
                # the paddle-operator's pods: Fleet names plus the trainers' endpoints
                export PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:$p1,127.0.0.1:$p2 \
                    PADDLE_TRAINER_ENDPOINTS=127.0.0.1:1,127.0.0.1:2
                case $role in
                ps0) export TRAINING_ROLE=PSERVER POD_IP=127.0.0.1 PADDLE_PORT=$p1 ;;
                ps1) export TRAINING_ROLE=PSERVER POD_IP=127.0.0.1 PADDLE_PORT=$p2 ;;
                tr*) export TRAINING_ROLE=TRAINER PADDLE_TRAINER_ID=${role#tr} ;;
                esac ;;
            volcano)
                # the svc plugin's host lists; ports from PADDLE_PORT
                export VC_PS_HOSTS=127.0.0.1,127.0.0.2 VC_WORKER_HOSTS=w0,w1 VC_PS_NUM=2 VC_WORKER_NUM=2 PADDLE_PORT=$p1
                case $role in
                ps*) export TRAINING_ROLE=PSERVER VC_TASK_INDEX=${role#ps} ;;
                tr*) export TRAINING_ROLE=TRAINER VC_TASK_INDEX=${role#tr} ;;
                esac ;;
            kubeflow)
                # PaddleJob: a master address and the counts; the rendezvous does the rest
                export PADDLE_MASTER=127.0.0.1:$p2 PADDLE_NNODES=4 PADDLE_SERVER_NUM=2 PADDLE_TRAINER_NUM=2
                case $role in ps*) export TRAINING_ROLE=PSERVER ;; tr*) export TRAINING_ROLE=TRAINER ;; esac ;;
            esac
            exec "$PADDLE" start fit_a_line.lua --passes=3 --save_dir=out_$scheme --server_timeout=30 "${extra[@]}"
        ) >"$scheme.$role.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do
        if ! timeout 60 tail --pid="$p" -f /dev/null; then kill -9 "$p" 2>/dev/null; rc=1; fi
        wait "$p" || rc=1
    done
    return $rc
}

extra=()
for scheme in fluid fleet mpi slurm paddleflow volcano kubeflow; do
    if run_job $scheme && [ -s out_$scheme/pass-00002/fc_0.w_0.npy ] && grep -q 'pass 2 done' $scheme.tr0.log; then
        pass "job_from_${scheme}_variables"
    else
        fail "job_from_${scheme}_variables" "$(tail -n 3 $scheme.*.log)"
    fi
done
# a PaddleJob's roles (the rendezvous) with a checkpoint_dir, as the
# manifests start them: --resume, with nothing to resume yet
extra=(--checkpoint_dir=ck_kubeflow --resume)
rm -rf out_kubeflow
if run_job kubeflow && [ -s out_kubeflow/pass-00002/fc_0.w_0.npy ] && grep -q 'pass 2 done' kubeflow.tr0.log; then
    pass job_from_kubeflow_variables_with_resume
else
    fail job_from_kubeflow_variables_with_resume "$(tail -n 3 kubeflow.*.log)"
fi
# a model to start from (--init_model), given to every role as a scheduler
# gives one command line to all: trainer 0 loads it, the pservers take none
# (under the rendezvous trainer 0 may be either trainer process)
cp -r out_fluid/pass-00002 init_from
for scheme in fluid kubeflow; do
    extra=(--init_model=init_from)
    [ $scheme = fluid ] && extra=(--init_model init_from) # the form of two words too
    rm -rf out_$scheme
    if run_job $scheme && [ -s out_$scheme/pass-00002/fc_0.w_0.npy ] &&
       cat $scheme.tr*.log | grep -q 'trainer 0: parameters loaded from init_from (--init_model)'; then
        pass "init_model_under_${scheme}_variables"
    else
        fail "init_model_under_${scheme}_variables" "$(tail -n 3 $scheme.*.log)"
    fi
done
extra=()

# a trainer killed while the job runs ($1: sync or async), then ($2)
# restarted on its own (a pod's restartPolicy) or not at all: the pserver
# ends at once when it comes back (it cannot take it back), or
# heartbeat_timeout after it left; every role says why, nothing hangs, and
# no pass is mixed
trainer_lost() {
    local mode=$1 again=$2 port ps t0 t1 t1b="" rc_ps rc_t0 rc_t1b=1 i why name hb=3
    port=$(free_port_pair 127.0.0.1)
    [ "$again" = _restarted ] && hb=10 # the restarted one connects well within it
    role() { # ROLE_ENV... : one role of the job (run with &: its pid is the role's)
        clean_env
        export PADDLE_PSERVER_IPS=127.0.0.1 PADDLE_PSERVER_PORT=$port PADDLE_TRAINERS=2 "$@"
        exec "$PADDLE" start fit_a_line.lua --passes=100000 --early_stop=0 --mode=$mode \
            --save_dir=out_$mode$again --server_timeout=30 --heartbeat_timeout=$hb
    }
    role PADDLE_TRAINING_ROLE=PSERVER PADDLE_CURRENT_IP=127.0.0.1 >$mode$again.ps.log 2>&1 & ps=$!
    role PADDLE_TRAINING_ROLE=TRAINER PADDLE_TRAINER_ID=0 >$mode$again.t0.log 2>&1 & t0=$!
    role PADDLE_TRAINING_ROLE=TRAINER PADDLE_TRAINER_ID=1 >$mode$again.t1.log 2>&1 & t1=$!
    for i in $(seq 300); do grep -q 'pass 3 done' $mode$again.t0.log && break; sleep 0.1; done
    kill -9 $t1; wait $t1 2>/dev/null
    if [ "$again" = _restarted ]; then
        role PADDLE_TRAINING_ROLE=TRAINER PADDLE_TRAINER_ID=1 >$mode$again.t1b.log 2>&1 & t1b=$!
        why="trainer 1 started again (restarted on its own?) while the job is in pass"
    else
        why="trainer 1 left [0-9]* s ago before it finished (its connections closed) and did not come back"
    fi
    for p in $ps $t0 $t1b; do timeout 60 tail --pid=$p -f /dev/null || kill -9 $p 2>/dev/null; done
    wait $ps; rc_ps=$?
    wait $t0; rc_t0=$?
    if [ -n "$t1b" ]; then
        wait $t1b; rc_t1b=$?
        grep -q "trainer 1: pserver 0: $why" $mode$again.t1b.log && ! grep -q 'pass 0 done' $mode$again.t1b.log || rc_t1b=bad
    fi
    name=trainer_lost_$mode$again
    if [ $rc_ps = 1 ] && [ $rc_t0 = 1 ] && [ $rc_t1b = 1 ] && grep -q 'pass 3 done' $mode$again.t0.log &&
        grep -q "pserver 0: $why" $mode$again.ps.log && grep -q "trainer 0: pserver 0: $why" $mode$again.t0.log; then
        pass $name
    else
        fail $name "rc pserver $rc_ps trainer 0 $rc_t0 trainer 1 again $rc_t1b: $(for f in $mode$again.*.log; do
            echo "$f: $(tail -n 1 $f)"; done)"
    fi
}
trainer_lost sync _restarted
trainer_lost async _restarted
trainer_lost async ""

# each missing or contradictory variable is named
clean_env
base_tr() { clean_env; export PADDLE_TRAINING_ROLE=TRAINER PADDLE_PSERVER_IPS=127.0.0.1 PADDLE_PSERVER_PORT=7164 PADDLE_TRAINERS=2 PADDLE_TRAINER_ID=0; }
base_ps() { clean_env; export TRAINING_ROLE=PSERVER PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:7164 PADDLE_TRAINERS_NUM=1 POD_IP=127.0.0.1 PADDLE_PORT=7164; }
case_env() { # NAME WANT SETUP...
    local name=$1 want=$2; shift 2
    ( "$@"; expect_error "$name" 2 "$want" "$PADDLE" start fit_a_line.lua )
}
case_env no_role "PADDLE_TRAINING_ROLE" eval 'base_tr; unset PADDLE_TRAINING_ROLE'
case_env bad_role "must be PSERVER or TRAINER" eval 'base_tr; export PADDLE_TRAINING_ROLE=WORKER'
case_env no_pservers "PADDLE_PSERVER_IPS" eval 'base_tr; unset PADDLE_PSERVER_IPS'
case_env no_pserver_port "PADDLE_PSERVER_PORT is missing" eval 'base_tr; unset PADDLE_PSERVER_PORT'
case_env no_trainers "PADDLE_TRAINERS" eval 'base_tr; unset PADDLE_TRAINERS'
case_env no_trainer_id "PADDLE_TRAINER_ID is missing" eval 'base_tr; unset PADDLE_TRAINER_ID'
case_env trainer_id_range "PADDLE_TRAINER_ID=5" eval 'base_tr; export PADDLE_TRAINER_ID=5'
case_env roles_contradict "contradict" eval 'base_tr; export TRAINING_ROLE=PSERVER'
case_env trainers_contradict "contradict" eval 'base_tr; export PADDLE_TRAINERS_NUM=3'
case_env lists_contradict "contradicts" eval 'base_tr; export PADDLE_PSERVERS_IP_PORT_LIST=10.0.0.9:7164'
case_env no_pod_ip "PADDLE_CURRENT_IP" eval 'base_ps; unset POD_IP'
case_env no_paddle_port "PADDLE_PORT" eval 'base_ps; unset PADDLE_PORT'
case_env pserver_not_listed "is not in the pserver list" eval 'base_ps; export POD_IP=127.0.0.9'
case_env ips_contradict "contradict" eval 'base_ps; export PADDLE_CURRENT_IP=127.0.0.5'
case_env trainer_list_count "names 3" eval 'base_tr; export PADDLE_TRAINER_ENDPOINTS=a:1,b:1,c:1'
case_env volcano_no_index "VC_TASK_INDEX" eval 'clean_env; export VC_PS_HOSTS=127.0.0.1 VC_WORKER_NUM=1'
case_env volcano_ps_num "VC_PS_NUM=3" eval 'clean_env; export VC_PS_HOSTS=127.0.0.1 VC_PS_NUM=3 VC_WORKER_NUM=1 VC_TASK_INDEX=0'
case_env kubeflow_no_nnodes "PADDLE_NNODES" eval 'clean_env; export PADDLE_MASTER=127.0.0.1:7000'
case_env mpirun_hosts "set --master=HOST:PORT" eval 'clean_env; export OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_SIZE=2'
case_env mpi_size "OMPI_COMM_WORLD_SIZE=7" eval 'base_ps; unset TRAINING_ROLE; export OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=7'
case_env pserver_listed_twice "the pserver list 127.0.0.1:7164,127.0.0.1:7164 names 127.0.0.1:7164 twice" \
    eval 'base_ps; export PADDLE_PSERVERS_IP_PORT_LIST=127.0.0.1:7164,127.0.0.1:7164'
( base_ps; unset PADDLE_JOB_SECRET; run_capture "$PADDLE" start fit_a_line.lua
  if [ $rc -eq 2 ] && [[ "$(tail -n 1 <<<"$out")" == "paddle pserver: no job secret: set PADDLE_JOB_SECRET"* ]]; then
      pass no_secret
  else fail no_secret "rc $rc: $out"; fi )
