# restarts.sh - job.restarts on the local cluster: a SIGKILLed trainer or
# pserver restarts the whole job (roles with --resume) and the job completes;
# restarts = 0 and exhausted restarts end the job naming the role; paddle run
# --resume starts every role with --resume. No process is left behind.
. "$ROOT/tests/integration/lib.sh"

"$ROOT/recipes/prepare.sh" >/dev/null && mkdir -p data/uci_housing &&
    cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
recipe="$T/restartjob.lua"
cp "$ROOT/recipes/fit_a_line.lua" "$recipe"

job_pids() { # every process whose command line names our recipe
    pids_naming "$recipe"
}
role_pid() { # ROLE-OPTION: the pid of the role started with it (e.g. --trainer_id=1)
    pid_with_arg "$1" $(job_pids)
}
no_leftovers() {
    local left
    left=$(job_pids)
    [ -z "$left" ] && return 0
    echo "processes left: $left"
    for p in $left; do kill -9 "$p" 2>/dev/null; done
    return 1
}
wait_for() { # FILE PATTERN SECONDS [COUNT]: until PATTERN is on COUNT (1) lines
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

# start JOB-OPTIONS...: the job in the background, $launcher; waits for training
start() {
    "$PADDLE" run "$recipe" --log_period=1000000 --early_stop=0 "$@" >job.out 2>&1 &
    launcher=$!
    wait_for job.out 'trainer 1\] .*pass 3 done' 20 || { echo "job did not start:"; tail -n 20 job.out; return 1; }
}
# kill_role ROLE-OPTION: SIGKILL that role; its restarted self has a new pid
kill_role() {
    local v
    v=$(role_pid "$1")
    [ -n "$v" ] && kill -9 "$v"
}
# finishes CASE: the launcher ends within 90 s; sets $rc
finishes() {
    if gone_within "$launcher" 90; then wait "$launcher"; rc=$?; else rc=999; echo "$1: launcher still running"; fi
}

long=--passes=1500   # a few seconds of training, run twice at most

# 1. a trainer SIGKILLed with restarts = 1: restarted, the job completes
if start $long --restarts=1; then
    kill_role --trainer_id=1
    wait_for job.out 'restart 1 of 1' 10 && wait_for job.out 'trainer 1\] .*pass 3 done' 20 2
    resumed=$(role_pid --trainer_id=0)
    resumed=$([ -n "$resumed" ] && tr '\0' ' ' 2>/dev/null <"/proc/$resumed/cmdline" | grep -c -- '--resume ')
    finishes trainer_restart
    if [ "$rc" -eq 0 ] && grep -q '^paddle: trainer 1 was killed by signal 9 (Killed); restarting the job from its first pass (no settings.checkpoint_dir) (restart 1 of 1)$' job.out &&
       grep -q '^paddle: job done in [0-9.]* s after 1 restart: ' job.out && [ "$resumed" = 1 ]; then
        pass killed_trainer_restarted_job_completes
    else
        fail killed_trainer_restarted_job_completes "rc $rc, roles with --resume: '$resumed': $(grep '^paddle' job.out | tail -n 8)"
    fi
    check trainer_restart_no_leftovers no_leftovers
fi

# 2. a pserver SIGKILLed with restarts = 1: the same
if start $long --restarts=1; then
    kill_role --pserver_id=1
    finishes pserver_restart
    if [ "$rc" -eq 0 ] && grep -q '^paddle: pserver 1 was killed by signal 9 (Killed); restarting the job from its first pass (no settings.checkpoint_dir) (restart 1 of 1)$' job.out &&
       grep -q 'job done' job.out; then
        pass killed_pserver_restarted_job_completes
    else
        fail killed_pserver_restarted_job_completes "rc $rc: $(grep '^paddle' job.out | tail -n 8)"
    fi
    check pserver_restart_no_leftovers no_leftovers
fi

# 3. restarts = 0: today's behaviour, the job ends naming the role
if start --passes=1000000; then
    kill_role --trainer_id=1
    finishes no_restarts
    if [ "$rc" -eq 1 ] && grep -q '^paddle: trainer 1 was killed by signal 9 (Killed); stopping the job$' job.out &&
       ! grep -q 'restarting' job.out; then
        pass restarts_0_ends_naming_role
    else
        fail restarts_0_ends_naming_role "rc $rc: $(grep '^paddle' job.out | tail -n 5)"
    fi
    check no_restarts_no_leftovers no_leftovers
fi

# 4. restarts exhausted: the second death ends the job, naming the role
if start --passes=1000000 --restarts=1; then
    kill_role --pserver_id=0
    if wait_for job.out 'restart 1 of 1' 10 && wait_for job.out 'trainer 1\] .*pass 3 done' 20 2 &&
       sleep 0.5 && kill_role --trainer_id=0; then
        finishes exhausted
    else
        rc=998; kill -INT "$launcher"; gone_within "$launcher" 10
    fi
    if [ "$rc" -eq 1 ] && grep -q '^paddle: trainer 0 was killed by signal 9 (Killed); stopping the job$' job.out &&
       [ "$(grep -c 'restarting the job' job.out)" -eq 1 ]; then
        pass restarts_exhausted_ends_naming_role
    else
        fail restarts_exhausted_ends_naming_role "rc $rc: $(grep '^paddle' job.out | tail -n 6)"
    fi
    check exhausted_no_leftovers no_leftovers
fi

# 5. --resume: nothing to resume without a checkpoint_dir; one that is not
#    there (a typo) is refused; with one, every role starts with --resume
expect_error resume_without_checkpoint_dir 2 'nothing to resume' "$PADDLE" run "$recipe" --resume
expect_error resume_of_a_checkpoint_dir_not_there 2 \
    '--resume: settings.checkpoint_dir = ckpt_typo is not there (No such file or directory): check its name' \
    "$PADDLE" run "$recipe" --checkpoint_dir=ckpt_typo --resume
mkdir -p ckpt # as a job stopped before its first checkpoint leaves it
# the first line says which checkpoint, or that there is none yet
if ls ckpt/ckpt-*/complete >/dev/null 2>&1; then said='resuming from its last complete checkpoint (ckpt/ckpt-[0-9]*)'
else said='--resume: no complete checkpoint under ckpt yet, so it starts fresh'; fi
if start --passes=1000000 --checkpoint_dir=ckpt --resume; then
    n=0
    for p in $(job_pids); do
        c=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")
        [[ "$c" == *" pserver "* || "$c" == *" trainer "* ]] && [[ "$c" == *"--resume "* ]] && n=$((n + 1))
    done
    wait_for job.out 'checkpoint of step [0-9]* complete' 30
    kill -INT "$launcher"; gone_within "$launcher" 10
    # and the stop says how to go on, with a checkpoint to go on from
    if [ "$n" -eq 4 ] && head -n 1 job.out | grep -q -- "$said" && ls ckpt/ckpt-*/complete >/dev/null 2>&1 &&
       grep -q '^paddle: the same command with --resume continues the job from its last complete checkpoint$' job.out; then
        pass resume_starts_roles_with_resume
    else
        fail resume_starts_roles_with_resume "$n of 4 roles with --resume: $(head -n 1 job.out)"
    fi
    check resume_no_leftovers no_leftovers
fi
# Ctrl+C while a failed job waits to restart, or while its roles stop for
# the restart (where a slow build is then): it is not restarted, and the
# stop says how to go on from its checkpoint
if start --passes=1000000 --checkpoint_dir=ckpt_int --restarts=2; then
    wait_for job.out 'checkpoint of step [0-9]* complete' 30
    kill_role --trainer_id=1
    wait_for job.out 'restarting the job' 20 && kill -INT "$launcher"
    gone_within "$launcher" 30
    wait "$launcher"; rc=$?
    if [ $rc -eq 130 ] && grep -q 'restarting the job' job.out &&
       grep -q '^paddle: interrupted (Ctrl+C): not restarting the job$' job.out &&
       grep -q '^paddle: the same command with --resume continues the job from its last complete checkpoint$' job.out; then
        pass interrupted_restart_says_resume
    else
        fail interrupted_restart_says_resume "rc $rc: $(grep '^paddle' job.out | grep -v '^paddle: pass' | tail -n 6)"
    fi
    check interrupted_restart_no_leftovers no_leftovers
fi
# Ctrl+C while the roles stop for a restart: trainers whose batches take a
# while to compute (about 0.5 s here) stop at the end of the batch, and a
# Ctrl+C meanwhile stops the job, not the restart (it was lost, and the job
# restarted and trained on)
cat >slowstop.lua <<'R'
job { pservers = 1, trainers = 2 }
data { train = "synthetic", format = "synthetic", samples = 1000000 }
model = function(nn)
  local h = nn.fc(nn.data("x", 512), 2048, { act = "relu" })
  h = nn.fc(h, 2048, { act = "relu" })
  return nn.square_error_cost(nn.fc(h, 1), nn.data("y", 1))
end
optimizer = nn.sgd { learning_rate = 1e-7 }
settings { batch_size = 1024, passes = 1000, mode = "async", threads = 1, log_period = 1 }
R
"$PADDLE" run "$T/slowstop.lua" --restarts=2 >job.out 2>&1 &
launcher=$!
if wait_for job.out 'trainer 1\] .*pass 0, batch 2,' 60; then
    kill -9 "$(pid_with_arg --trainer_id=1 $(pids_naming "$T/slowstop.lua"))"
    for i in $(seq 1 1000); do grep -q 'restarting the job' job.out && break; sleep 0.01; done
    kill -INT "$launcher"
    gone_within "$launcher" 15
    wait "$launcher"; rc=$?
    if [ $rc -eq 130 ] && grep -q 'restarting the job' job.out &&
       grep -q '^paddle: interrupted (Ctrl+C): not restarting the job$' job.out; then
        pass interrupted_while_roles_stop_for_restart
    else
        fail interrupted_while_roles_stop_for_restart "rc $rc: $(grep '^paddle' job.out | tail -n 6)"
    fi
else
    gone_within "$launcher" 0
    fail interrupted_while_roles_stop_for_restart "no batch 2 of trainer 1: $(tail -n 6 job.out)"
fi
slowstop_gone() { [ -z "$(pids_naming "$T/slowstop.lua")" ]; }
check interrupted_while_roles_stop_no_leftovers slowstop_gone

# a new job over that checkpoint (no --resume) says, before it trains, that
# the earlier job will no longer be resumed and how to continue it instead
if start --passes=1000000 --checkpoint_dir=ckpt; then
    kill -INT "$launcher"; gone_within "$launcher" 10
    if grep -q '^paddle: warning: ckpt holds a complete checkpoint of an earlier job (ckpt-[0-9]*); this job starts fresh (no --resume)' job.out &&
       [ "$(grep -n 'paddle: warning: ckpt holds' job.out | cut -d: -f1)" -le 2 ]; then
        pass fresh_job_over_checkpoints_warns_first
    else
        fail fresh_job_over_checkpoints_warns_first "$(head -n 3 job.out)"
    fi
    check fresh_no_leftovers no_leftovers
fi
# a new job over an earlier job's checkpoints whose trainers fail before a
# batch (their data is not there): the restart starts it fresh again, not
# from the earlier job's checkpoint, whose markers stay, and the stop says so
"$PADDLE" run "$recipe" --passes=30 --early_stop=0 --checkpoint_dir=ckpt_own --checkpoint_period=20 >earlier.out 2>&1
markers=$(ls ckpt_own/ckpt-*/complete 2>/dev/null | wc -l)
mv data/uci_housing/housing.data housing.away
"$PADDLE" run "$recipe" --passes=1000000 --checkpoint_dir=ckpt_own --restarts=1 >job.out 2>&1
rc=$?
mv housing.away data/uci_housing/housing.data
if [ "$rc" -eq 1 ] && [ "$markers" -ge 1 ] && [ "$(ls ckpt_own/ckpt-*/complete | wc -l)" -eq "$markers" ] &&
   grep -q '^paddle: trainer [01] exited with status 1 (.*restartjob.lua:[0-9]*: data.train: cannot open .*data/uci_housing/housing.data: .*); restarting the job from its start (it had not trained a batch) (restart 1 of 1)$' job.out &&
   ! grep -q '^\[.*resum' job.out &&
   grep -q "^paddle: this job trained no batch, and ckpt_own holds the earlier job's checkpoints: the same command with --resume continues that job$" job.out; then
    pass fresh_job_restarted_before_a_batch_starts_fresh
else
    fail fresh_job_restarted_before_a_batch_starts_fresh "rc $rc, markers $markers: $(grep -v '^\[' job.out | tail -n 8; grep '^\[.*resum' job.out | head -n 3)"
fi
check fresh_failed_no_leftovers no_leftovers

# 6. what a role was given is wrong (exit status 2, the launcher's too): no restart, whatever
#    job.restarts allows, the reason named, and no --resume advice; a
#    checkpoint_dir that cannot be made is found before any role starts
#    (the launcher locks it against a second job)
touch afile
"$PADDLE" run "$recipe" --checkpoint_dir=afile/ckpt --restarts=2 >job.out 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q '^paddle: settings.checkpoint_dir = afile/ckpt: Not a directory' job.out &&
   ! grep -q 'restarting\|--resume\|\[pserver' job.out; then
    pass config_error_not_restarted
else
    fail config_error_not_restarted "rc $rc: $(grep -v '^\[' job.out | tail -n 6)"
fi
check config_error_no_leftovers no_leftovers
# so is a save_dir that is a file: found before any role starts, not
# after the first pass, and no restart is made
"$PADDLE" run "$recipe" --save_dir=afile/out --restarts=2 >job.out 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q '^paddle: settings.save_dir = afile/out: Not a directory' job.out &&
   ! grep -q 'restarting\|pass 0 done\|\[trainer' job.out; then
    pass save_dir_a_file_not_restarted
else
    fail save_dir_a_file_not_restarted "rc $rc: $(grep -v '^\[' job.out | tail -n 6)"
fi
check save_dir_no_leftovers no_leftovers
# so is a data line that does not parse: the trainers read the same line
# again after any restart
cp data/uci_housing/housing.data housing.good
echo "1 2 x" >>data/uci_housing/housing.data
"$PADDLE" run "$recipe" --restarts=2 >job.out 2>&1
rc=$?
mv housing.good data/uci_housing/housing.data
if [ "$rc" -eq 2 ] &&
   grep -q "^paddle: trainer [01] exited with status 2 (.*restartjob.lua:[0-9]*: data.train: .*data/uci_housing/housing.data:507: field 3 is not a decimal number: 'x' (data.on_error = \"skip\" would skip such lines)); stopping the job (what it was given is wrong: a restart would end the same way)$" job.out &&
   ! grep -q 'restarting' job.out; then
    pass malformed_data_not_restarted
else
    fail malformed_data_not_restarted "rc $rc: $(grep -v '^\[' job.out | tail -n 6)"
fi
check malformed_data_no_leftovers no_leftovers
# and an --init_model that is not this recipe's model, found by trainer 0
mkdir -p notmodel && echo '{}' >notmodel/manifest.json
"$PADDLE" run "$recipe" --init_model=notmodel --restarts=2 >job.out 2>&1
rc=$?
if [ "$rc" -eq 2 ] &&
   grep -q "^paddle: trainer 0 exited with status 2 (option --init_model: model notmodel has no parameter 'fc_0.w_0' \[13, 1\] of .*restartjob.lua: a model of another recipe?); stopping the job (what it was given is wrong: a restart would end the same way)$" job.out &&
   ! grep -q 'restarting' job.out; then
    pass init_model_mistake_not_restarted
else
    fail init_model_mistake_not_restarted "rc $rc: $(grep -v '^\[' job.out | tail -n 6)"
fi
check init_model_mistake_no_leftovers no_leftovers
