# engines_podman.sh - `make image` builds the FROM scratch image offline;
# a 2 x 2 job runs as four containers on a network the test creates, the
# roles addressing each other by container name with the Fleet variables
# (as a paddle-operator pod sees them), and the model lands on trainer 0's
# volume. Then `paddle k8s --pod` renders the same roles as one Pod that
# runs to completion under `podman kube play`. The containers, pod, network
# and image tag the test made are removed.
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
cleanup
trap - EXIT
left=$(podman ps -a --format '{{.Names}}' | grep -- "$tag"; podman network ls --format '{{.Name}}' | grep -- "$tag";
       podman images --format '{{.Tag}}' | grep -- "$tag")
[ -z "$left" ] && pass containers_removed || fail containers_removed "left: $left"
