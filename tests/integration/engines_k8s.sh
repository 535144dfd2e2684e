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
# job.restarts = 2: the trainers restart on failure; one fault restarts
# each of the 2 trainers up to twice, so the Job allows 2 x 2 x 2
"$PADDLE" k8s fit_a_line.lua --restarts=2 >restarts.yaml 2>&1
grep -q 'restartPolicy: OnFailure' restarts.yaml && grep -q 'backoffLimit: 8' restarts.yaml &&
    pass k8s_restarts || fail k8s_restarts "$(grep -E 'restartPolicy|backoffLimit|paddle' restarts.yaml)"
# checkpoints: refused without a volume every pod mounts (naming the key and
# the way out); with --checkpoint_claim every role mounts the claim at
# /checkpoint and runs with --resume, and the manifests still validate
run_capture "$PADDLE" k8s fit_a_line.lua --checkpoint_dir=ckpt
[ $rc -ne 0 ] && [[ "$out" == *"settings.checkpoint_dir = ckpt"*"--checkpoint_claim CLAIM"* ]] &&
    pass k8s_checkpoint_needs_claim || fail k8s_checkpoint_needs_claim "rc $rc: $out"
run_capture "$PADDLE" k8s fit_a_line.lua --checkpoint_claim ckpt-pvc
[ $rc -ne 0 ] && [[ "$out" == *"sets no settings.checkpoint_dir"* ]] &&
    pass k8s_claim_needs_checkpoint || fail k8s_claim_needs_checkpoint "rc $rc: $out"
ok=1
for mode in default kubeflow; do
    flag=--$mode; [ $mode = default ] && flag=
    "$PADDLE" k8s fit_a_line.lua $flag --name fit --checkpoint_dir=ckpt --checkpoint_claim ckpt-pvc \
        --restarts=1 >"ckpt_$mode.yaml" 2>&1 || ok=0
    run_capture validate "ckpt_$mode.yaml"
    [ $rc -eq 0 ] || ok=0
    roles=$(grep -c 'args: \[start' "ckpt_$mode.yaml")
    [ "$(grep -c '"--checkpoint_dir=/checkpoint/fit", "--resume"\]' "ckpt_$mode.yaml")" -eq "$roles" ] &&
        [ "$(grep -c 'name: checkpoint, mountPath: /checkpoint}' "ckpt_$mode.yaml")" -eq "$roles" ] &&
        [ "$(grep -c 'persistentVolumeClaim: {claimName: "ckpt-pvc"}' "ckpt_$mode.yaml")" -eq "$roles" ] || ok=0
done
[ $ok = 1 ] && pass k8s_checkpoint_claim || fail k8s_checkpoint_claim "$out $(grep -E 'args|checkpoint' ckpt_*.yaml)"
# job names are DNS labels, whatever the recipe's file name or --name says
# (a name cut to its first 40 characters keeps a hash of the whole, so two
# long names stay apart); a namespace that is not one is refused
cp fit_a_line.lua 1_Fit.lua
long=$(printf 'x%.0s' $(seq 50))
"$PADDLE" k8s 1_Fit.lua >n1.yaml 2>&1
"$PADDLE" k8s fit_a_line.lua --name '9 a"b/../..' --checkpoint_dir=ckpt --checkpoint_claim c >n2.yaml 2>&1
"$PADDLE" k8s fit_a_line.lua --name "${long}a" >n3.yaml 2>&1
"$PADDLE" k8s fit_a_line.lua --name "${long}b" >n4.yaml 2>&1
bad_names=$(grep -h '^  name: ' n1.yaml n2.yaml n3.yaml n4.yaml | awk '{print $2}' |
    grep -vE '^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$')
n3=$(grep -m1 '^  name: ' n3.yaml | awk '{print $2}'); n4=$(grep -m1 '^  name: ' n4.yaml | awk '{print $2}')
# (and JOB-pserver, a StatefulSet's name, within the 52 characters one may have)
long_names=$(grep -h '^  name: .*-pserver$' n1.yaml n2.yaml n3.yaml n4.yaml | awk 'length($2) > 52 {print $2}')
if [ -z "$bad_names" ] && [ -z "$long_names" ] && grep -q '^  name: paddle-1-fit-secret$' n1.yaml &&
    grep -q '"--checkpoint_dir=/checkpoint/paddle-9-a-b", "--resume"' n2.yaml &&
    [ "$(grep -c -- '--checkpoint_dir=' n2.yaml)" -eq "$(grep -c 'args: \[start' n2.yaml)" ] &&
    [ -n "$n3" ] && [ "$n3" != "$n4" ]; then pass k8s_names_are_dns_labels
else fail k8s_names_are_dns_labels "bad: '$bad_names' '$long_names'; $n3 $n4; $(grep -h -m2 -E '^  name: |checkpoint_dir' n1.yaml n2.yaml)"; fi
run_capture "$PADDLE" k8s fit_a_line.lua --name ___
[ $rc -ne 0 ] && [[ "$out" == *"--name '___': a job's name needs a letter or a digit"* ]] &&
    pass k8s_name_without_letters_refused || fail k8s_name_without_letters_refused "rc $rc: $out"
# a recipe not below the directory paddle k8s runs in cannot go in the
# ConfigMap by its path: refused, not an empty ConfigMap
mkdir -p sub
run_capture sh -c "cd sub && '$PADDLE' k8s ../fit_a_line.lua"
[ $rc -ne 0 ] && [[ "$out" == *"../fit_a_line.lua: the recipe goes in the ConfigMap by its path from here"* ]] &&
    pass k8s_recipe_outside_refused || fail k8s_recipe_outside_refused "rc $rc: $(head -c 300 <<<"$out")"
run_capture "$PADDLE" k8s fit_a_line.lua --namespace 'ML_team'
[ $rc -ne 0 ] && [[ "$out" == *"--namespace 'ML_team': a namespace is a DNS label"* ]] &&
    pass k8s_namespace_checked || fail k8s_namespace_checked "rc $rc: $out"
# a recipe in a directory below, its data reached with "..": the ConfigMap's
# paths are tidied (Kubernetes refuses ".." in them), and the user's
# --save_dir names the directory under the /output volume, once
mkdir -p rs && sed 's|"data/uci_housing/housing.data"|"../data/uci_housing/housing.data"|' fit_a_line.lua >rs/fit.lua
"$PADDLE" k8s rs/fit.lua --save_dir=model >rs.yaml 2>&1
run_capture validate rs.yaml
if [ $rc -eq 0 ] && grep -q 'path: "data/uci_housing/housing.data"' rs.yaml && grep -q 'path: "rs/fit.lua"' rs.yaml &&
    ! grep -q 'path: "[^"]*\.\.' rs.yaml && grep -q '"--save_dir=/output/model"' rs.yaml &&
    [ "$(grep -c -- '--save_dir=' rs.yaml)" -eq "$(grep -c 'args: \[start' rs.yaml)" ]; then pass k8s_paths_tidied
else fail k8s_paths_tidied "rc $rc: $out $(grep -E 'path:|args' rs.yaml | head -n 6)"; fi
# the validator is not a rubber stamp
sed 's/replicas: 2/replicas: two/' default.yaml >bad.yaml
run_capture validate bad.yaml
[ $rc -ne 0 ] && [[ "$out" == *replicas* ]] && pass k8s_schema_rejects_bad || fail k8s_schema_rejects_bad "rc $rc: $out"
