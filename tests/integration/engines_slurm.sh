# engines_slurm.sh - `srun -n 4 paddle start` on a one-node Slurm cluster
# the test starts itself (slurmctld and slurmd on loopback, own ports, state
# in $T, no munge: auth/none): the job forms by the rendezvous at the first
# node of SLURM_STEP_NODELIST and completes. Both daemons are stopped by the
# pids in their pid files.
. "$ROOT/tests/integration/engines_lib.sh"
engines_workspace || { fail engines_workspace "recipes/prepare.sh failed"; exit 0; }
for tool in slurmctld slurmd srun; do
    if ! command -v $tool >/dev/null; then
        skip srun_job "$tool is not installed (tests/deps.sh installs slurmctld, slurmd, slurm-client)"
        exit 0
    fi
done
node=$(hostname -s)
S=$T/slurm
mkdir -p "$S/state" "$S/spool"
cport=$(free_port); dport=$(free_port)
while [ "$dport" = "$cport" ]; do dport=$(free_port); done
cat >"$S/slurm.conf" <<C
ClusterName=pdtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$cport
SlurmdPort=$dport
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
MpiDefault=none
ReturnToService=2
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$node NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=pd Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
C
export SLURM_CONF=$S/slurm.conf
stop_daemons() {
    local f p
    for f in "$S/slurmd.pid" "$S/slurmctld.pid"; do
        p=$(cat "$f" 2>/dev/null) || continue
        kill "$p" 2>/dev/null
        timeout 10 tail --pid="$p" -f /dev/null 2>/dev/null || kill -9 "$p" 2>/dev/null
    done
}
trap stop_daemons EXIT
slurmctld -c >"$S/ctld.out" 2>&1
slurmd -c >"$S/d.out" 2>&1
# the node is up when sinfo says idle
up=0
for _ in $(seq 1 50); do
    [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] && { up=1; break; }
    sleep 0.2
done
if [ $up -eq 0 ]; then
    skip srun_job "the local Slurm cluster did not come up: $(tail -n 2 "$S/slurmctld.log" "$S/slurmd.log" 2>/dev/null | tr '\n' ' ')"
    exit 0
fi
run_capture timeout 120 srun -n 4 --overcommit "$PADDLE" start fit_a_line.lua --passes=3 --save_dir=out_slurm
if [ $rc -eq 0 ] && [ -s out_slurm/pass-00002/fc_0.w_0.npy ] && [[ "$out" == *"(slurm, rendezvous)"* ]] &&
    [ "$(grep -c 'paddle start: trainer' <<<"$out")" -eq 2 ]; then
    pass srun_job
else
    fail srun_job "rc $rc: $(tail -n 5 <<<"$out")"
fi
stop_daemons
trap - EXIT
left=""
for f in "$S/slurmd.pid" "$S/slurmctld.pid"; do
    p=$(cat "$f" 2>/dev/null) && kill -0 "$p" 2>/dev/null && left+=" $p"
done
[ -z "$left$(left_running)" ] && pass slurm_daemons_stopped || fail slurm_daemons_stopped "still running:$left $(left_running)"
