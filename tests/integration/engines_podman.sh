# engines_podman.sh - `make image` builds the FROM scratch image offline;
# a 2 x 2 job runs as four containers on a network the test creates, the
# roles addressing each other by container name with the Fleet variables
# (as a paddle-operator pod sees them), and the model lands on trainer 0's
# volume. Then `paddle k8s --pod` renders the same roles as one Pod that
# runs to completion under `podman kube play`; and, with checkpoints and
# job.restarts, a trainer killed in that Pod is restarted by podman (the
# Pod's restartPolicy), every role starts again with --resume, and the job
# ends with the parameters of an uninterrupted run. The containers, pods,
# network and image tag the test made are removed.
. "$ROOT/tests/integration/engines_lib.sh"
engines_workspace || { fail engines_workspace "recipes/prepare.sh failed"; exit 0; }
if ! command -v podman >/dev/null; then
    skip container_job "podman is not installed (tests/deps.sh installs podman, runc, netavark)"
    skip kube_play_pod "podman is not installed"
    exit 0
fi
# runc and explicit ulimits: what podman needs in this kind of sandbox
cat >containers.conf <<'C'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]
[engine]
runtime = "runc"
C
export CONTAINERS_CONF=$T/containers.conf
tag=pd$$-$RANDOM
image=localhost/paddle-test:$tag
net=pdnet-$tag
names=() # every container the test made, for cleanup
cleanup() {
    podman kube down pod.yaml >/dev/null 2>&1
    podman kube down restart.yaml >/dev/null 2>&1
    podman rm -f -t 0 "${names[@]}" >/dev/null 2>&1
    podman network rm -f "$net" >/dev/null 2>&1
    podman rmi -f "$image" >/dev/null 2>&1
}
trap cleanup EXIT

run_capture timeout 120 make -s -C "$ROOT" image IMAGE="$image"
if [ $rc -ne 0 ]; then
    fail make_image "rc $rc: $out"
    exit 0
fi
run_capture podman run --rm "$image" version
[ $rc -eq 0 ] && [[ "$out" == *static-musl* ]] && pass make_image || fail make_image "rc $rc: $out"

# ATTEMPT: the 2 x 2 job as four containers named ps0-TAG-ATTEMPT ...; 0 when
# it trained, else 1 with what went wrong in $why
container_job() {
    local a=$1 i n
    local job=(ps0-$tag-$a ps1-$tag-$a tr0-$tag-$a tr1-$tag-$a)
    names+=("${job[@]}")
    local list=${job[0]}:7164,${job[1]}:7164
    : >run.err
    for i in 0 1 2 3; do
        n=${job[$i]}
        rm -rf "vol$i" && mkdir -p "vol$i" && cp -r fit_a_line.lua data "vol$i/"
        case $i in
        0|1) env=(-e TRAINING_ROLE=PSERVER -e POD_IP="$n" -e PADDLE_PORT=7164) ;;
        *) env=(-e TRAINING_ROLE=TRAINER -e PADDLE_TRAINER_ID=$((i - 2))) ;;
        esac
        podman run -d --name "$n" --network "$net" -v "$T/vol$i:/job" -e PADDLE_JOB_SECRET \
            -e PADDLE_PSERVERS_IP_PORT_LIST="$list" -e PADDLE_TRAINERS_NUM=2 "${env[@]}" \
            "$image" start fit_a_line.lua --passes=3 --save_dir=out --server_timeout=30 >/dev/null 2>>run.err
    done
    local codes
    codes=$(timeout 90 podman wait "${job[@]}" 2>&1 | tr '\n' ' ')
    if [ "$codes" = "0 0 0 0 " ] && [ -s vol2/out/pass-00002/fc_0.w_0.npy ] &&
        podman logs "${job[2]}" 2>&1 | grep -q 'pass 2 done'; then
        return 0
    fi
    why="exit codes '$codes' $(head -c 300 run.err); tr0: $(podman logs "${job[2]}" 2>&1 | tail -n 3)"
    why="$why; ps0: $(podman logs "${job[0]}" 2>&1 | tail -n 4); ps1: $(podman logs "${job[1]}" 2>&1 | tail -n 4)"
    podman rm -f -t 0 "${job[@]}" >/dev/null 2>&1
    return 1
}

if ! podman network create "$net" >/dev/null 2>net.err; then
    skip container_job "podman cannot create a network here: $(head -c 200 net.err)"
elif container_job 1; then
    pass container_job
else
    # Twice in about ten runs under .ci/run (never when run alone), a
    # trainer reached one pserver port and not the others for 30 s. Until
    # that is understood the job gets one more try, and the first failure
    # is kept in this test's log.
    echo "container_job: the first attempt failed: $why"
    echo "container_job: trying once more"
    if container_job 2; then pass container_job; else fail container_job "twice; the second: $why"; fi
fi

# the same roles as one Pod (every role a container, pservers on localhost)
run_capture "$PADDLE" k8s fit_a_line.lua --pod --image "$image" --name "pd-$tag" --passes=3
if [ $rc -ne 0 ]; then
    fail kube_play_pod "paddle k8s --pod: rc $rc: $out"
else
    printf '%s\n' "$out" >pod.yaml
    run_capture timeout 60 podman kube play pod.yaml
    done_=0
    for _ in $(seq 1 120); do
        st=$(podman pod inspect "pd-$tag" --format '{{.State}}' 2>/dev/null)
        [ "$st" = Exited ] && { done_=1; break; }
        sleep 0.5
    done
    logs=$(podman logs "pd-$tag-trainer-0" 2>&1)
    codes=$(podman ps -a --filter pod="pd-$tag" --format '{{.Names}}={{.ExitCode}}' | grep -v infra | tr '\n' ' ')
    if [ $done_ -eq 1 ] && ! grep -qv '=0$' <<<"$(tr ' ' '\n' <<<"$codes" | grep .)" && grep -q 'pass 2 done' <<<"$logs"; then
        pass kube_play_pod
    else
        fail kube_play_pod "state $st, exit codes: $codes; $(tail -n 3 <<<"$logs") $(head -c 300 <<<"$out")"
    fi
fi

# pod_exited POD: waits (60 s at most) for every container of POD to end
pod_exited() {
    local _
    for _ in $(seq 1 120); do
        [ "$(podman pod inspect "$1" --format '{{.State}}' 2>/dev/null)" = Exited ] && return 0
        sleep 0.5
    done
    return 1
}

# the Pod again with checkpoints and 2 restarts: trainer 1 killed at pass
# 600 of 2000; podman restarts it, the pservers refuse it and end, every
# role starts again with --resume from /checkpoint, and trainer 0's last
# model equals that of the same job never interrupted (sync mode)
kube_play_restart() {
    local pod=pdr-$tag i pid st codes r1
    local args=(--passes=2000 --early_stop=0 --checkpoint_dir=ckpt --checkpoint_period=500 --server_timeout=60)
    run_capture "$PADDLE" k8s fit_a_line.lua --pod --image "$image" --name "$pod" --restarts=2 "${args[@]}"
    [ $rc -eq 0 ] || { why="paddle k8s --pod: rc $rc: $out"; return 1; }
    printf '%s\n' "$out" >restart.yaml
    grep -q 'restartPolicy: OnFailure' restart.yaml && grep -q '"--resume"' restart.yaml ||
        { why="no OnFailure or --resume in: $(grep -E 'restartPolicy|args' restart.yaml)"; return 1; }
    run_capture timeout 60 podman kube play restart.yaml
    [ $rc -eq 0 ] || { why="podman kube play: rc $rc: $out"; return 1; }
    for i in $(seq 1 300); do
        podman logs "$pod-trainer-0" 2>&1 | grep -q 'pass 600 done' && break
        sleep 0.2
    done
    pid=$(podman inspect "$pod-trainer-1" --format '{{.State.Pid}}' 2>/dev/null)
    st=$(podman inspect "$pod-trainer-0" --format '{{.State.Status}}' 2>/dev/null)
    if [ "$st" != running ] || [ -z "$pid" ] || [ "$pid" = 0 ]; then
        why="trainer 1 was not there to kill at pass 600 (trainer 0 $st, pid '$pid'): $(podman logs "$pod-trainer-0" 2>&1 | tail -n 2)"
        return 1
    fi
    kill -9 "$pid"
    pod_exited "$pod" || { why="the pod did not end within 60 s of the kill"; return 1; }
    codes=$(podman ps -a --filter pod="$pod" --format '{{.Names}}={{.ExitCode}}' | grep -v infra | tr '\n' ' ')
    r1=$(podman inspect "$pod-trainer-1" --format '{{.RestartCount}}')
    rm -rf got && mkdir got && podman cp "$pod-trainer-0:/output/output/pass-01999/fc_0.w_0.npy" got/ 2>/dev/null
    "$PADDLE" run fit_a_line.lua "${args[@]}" --checkpoint_dir=ref_ckpt --save_dir=ref >ref.log 2>&1
    why="exit codes $codes, trainer 1 restarted $r1 times"
    grep -q '=[1-9]' <<<"$codes" && return 1
    [ "${r1:-0}" -ge 1 ] || return 1
    podman logs "$pod-pserver-0" 2>&1 | grep -q "pserver 0: trainer 1 started again" ||
        { why="$why; pserver 0 did not refuse the restarted trainer"; return 1; }
    podman logs "$pod-pserver-0" 2>&1 | grep -q "resuming from checkpoint /checkpoint/$pod/ckpt-" ||
        { why="$why; pserver 0 did not resume: $(podman logs "$pod-pserver-0" 2>&1 | grep -i 'checkpoint' | tail -n 2)"; return 1; }
    podman logs "$pod-trainer-1" 2>&1 | grep -q "trainer 1: resuming from the checkpoint of step" ||
        { why="$why; trainer 1 did not resume"; return 1; }
    echo "kube_play_restart: $why; $(podman logs "$pod-pserver-0" 2>&1 | grep 'resuming from checkpoint')"
    cmp -s got/fc_0.w_0.npy ref/pass-01999/fc_0.w_0.npy ||
        { why="$why; the last model differs from the uninterrupted run's ($(ls got) / $(tail -n 1 ref.log))"; return 1; }
    return 0
}
if kube_play_restart; then pass kube_play_restart; else fail kube_play_restart "$why"; fi
cleanup
trap - EXIT
left=$(podman ps -a --format '{{.Names}}' | grep -- "$tag"; podman network ls --format '{{.Name}}' | grep -- "$tag";
       podman images --format '{{.Tag}}' | grep -- "$tag")
[ -z "$left" ] && pass containers_removed || fail containers_removed "left: $left"
