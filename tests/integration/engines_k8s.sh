# engines_k8s.sh - the manifests of `paddle k8s` (default, --kubeflow, --pod)
# validate offline against the Kubernetes schema with npm's kubernetes-models
# (installed into build/npm by tests/deps.sh), and a manifest broken on
# purpose does not. (engines_podman.sh runs the --pod rendering.)
. "$ROOT/tests/integration/engines_lib.sh"
engines_workspace || { fail engines_workspace "recipes/prepare.sh failed"; exit 0; }
models=$ROOT/build/npm
if ! command -v node >/dev/null; then
    skip k8s_schema "node is not installed (tests/deps.sh installs npm)"; exit 0
elif [ ! -d "$models/node_modules/kubernetes-models" ] || [ ! -d "$models/node_modules/yaml" ]; then
    skip k8s_schema "npm's kubernetes-models is not in build/npm (tests/deps.sh installs it)"; exit 0
fi
validate() { node "$ROOT/tests/integration/k8s_validate.js" "$models" "$1"; }
for mode in default kubeflow pod; do
    flag=--$mode; [ $mode = default ] && flag=
    run_capture "$PADDLE" k8s fit_a_line.lua $flag --image registry.example/paddle:1 --name fit --namespace ml --passes=3
    if [ $rc -ne 0 ]; then fail "k8s_schema_$mode" "paddle k8s: rc $rc: $out"; continue; fi
    printf '%s\n' "$out" >"$mode.yaml"
    run_capture validate "$mode.yaml"
    want=$(case $mode in default) echo 5 ;; kubeflow) echo 3 ;; pod) echo 2 ;; esac)
    if [ $rc -eq 0 ] && [ "$(grep -c '^ok ' <<<"$out")" -eq "$want" ]; then
        pass "k8s_schema_$mode"
    else
        fail "k8s_schema_$mode" "rc $rc: $out"
    fi
done
# what the manifests say: the roles' counts, names and the secret's use
grep -q 'replicas: 2' default.yaml && grep -q 'completionMode: Indexed' default.yaml &&
    grep -q 'fit-pserver-0.fit-pserver:7164,fit-pserver-1.fit-pserver:7164' default.yaml &&
    grep -q 'secretKeyRef: {name: fit-secret' default.yaml && grep -q 'namespace: ml' default.yaml &&
    grep -q 'restartPolicy: Never' default.yaml && pass k8s_manifest_content ||
    fail k8s_manifest_content "$(head -c 600 default.yaml)"
# job.restarts = 2: the trainers restart on failure, twice at most
"$PADDLE" k8s fit_a_line.lua --restarts=2 >restarts.yaml 2>&1
grep -q 'restartPolicy: OnFailure' restarts.yaml && grep -q 'backoffLimit: 2' restarts.yaml &&
    pass k8s_restarts || fail k8s_restarts "$(grep -E 'restartPolicy|backoffLimit|paddle' restarts.yaml)"
# the validator is not a rubber stamp
sed 's/replicas: 2/replicas: two/' default.yaml >bad.yaml
run_capture validate bad.yaml
[ $rc -ne 0 ] && [[ "$out" == *replicas* ]] && pass k8s_schema_rejects_bad || fail k8s_schema_rejects_bad "rc $rc: $out"
