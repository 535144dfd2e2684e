# node_script.sh - what reaches a node's shell is quoted, and what the node
# runs is verified (a real sshd on 127.0.0.2): root_dir, job.deployed,
# ld_library_path and options with shell syntax run nothing; a binary or a
# workspace file tampered with in the node's cache is replaced, never run;
# a cache directory that is not the user's own is refused; a fresh node
# gets the binary and the workspace over the one channel that starts it.
. "$ROOT/tests/integration/lib.sh"
. "$ROOT/tests/integration/sshd_lib.sh"

SSHD_EXTRA="SetEnv PADDLE_NODE_ROOT=$T/node" sshd_start 2 >/dev/null ||
    { fail sshd "cannot start the test sshd server"; exit 0; }
mkdir -p ws && for i in $(seq 1 40); do echo "$i,$((i % 7)),$((i * 3 % 11))"; done >ws/train.csv
port=$(sshd_free_port)

write_recipe() { # FILE ROOT_DIR EXTRA-CLUSTER-KEYS EXTRA-JOB-KEYS
    cat >"$1" <<R
cluster {
  hosts = { "$SSHD_USER@127.0.0.2:${SSHD_PORT[2]}" },
  root_dir = [[$2]],
  known_hosts = "${SSHD_KNOWN[2]}",
  identity_files = { "$SSHD_KEYS/id_ed25519" },
  use_agent = false,
  port = $port,
  $3
}
job { pservers = 1, trainers = 1, $4 }
data { train = "train.csv", format = "csv" }
model = function(nn) return nn.square_error_cost(nn.fc(nn.data("x", 2), 1), nn.data("y", 1)) end
optimizer = nn.sgd { learning_rate = 0.001 }
settings { batch_size = 10, passes = 1, log_period = 1000 }
R
}
pwned() { find "$T" -type f -name 'PWNED[0-9]' 2>/dev/null | head -n 1; }

# 1. shell syntax in root_dir is part of the directory's name; $NAME expands
write_recipe ws/semi.lua "\$PADDLE_NODE_ROOT/a;touch $T/PWNED1;\`touch $T/PWNED2\`" '' 'workspace = "."'
run_capture "$PADDLE" run ws/semi.lua
if [ $rc -eq 0 ] && [ -z "$(pwned)" ] && [ -d "$T/node/a;touch $T/PWNED1;\`touch $T/PWNED2\`/.paddle/bin" ]; then
    pass root_dir_shell_syntax_is_literal
else
    fail root_dir_shell_syntax_is_literal "rc $rc, pwned '$(pwned)': $(tail -n 4 <<<"$out")"
fi

# 2. a command substitution is refused before anything is started
write_recipe ws/subst.lua "\$(touch $T/PWNED3)" '' 'workspace = "."'
run_capture "$PADDLE" run ws/subst.lua
if [ $rc -eq 2 ] && [ -z "$(pwned)" ] && grep -q 'cluster.root_dir' <<<"$out" &&
   grep -q 'only \$NAME, \${NAME} and a leading ~' <<<"$out"; then
    pass root_dir_command_substitution_refused
else
    fail root_dir_command_substitution_refused "rc $rc, pwned '$(pwned)': $out"
fi

# 3. job.deployed with shell syntax: a directory name, nothing runs
write_recipe ws/dep.lua '$PADDLE_NODE_ROOT' '' "deployed = [[x;touch $T/PWNED4]]"
run_capture "$PADDLE" run ws/dep.lua
if [ -z "$(pwned)" ] && [ -d "$T/node/x;touch $T/PWNED4" ]; then
    pass deployed_shell_syntax_is_literal
else
    fail deployed_shell_syntax_is_literal "rc $rc, pwned '$(pwned)': $(tail -n 3 <<<"$out")"
fi

# 4. ld_library_path reaches the roles (it used to break every remote job)
write_recipe ws/ld.lua '$PADDLE_NODE_ROOT' "ld_library_path = [[/opt/lib;touch $T/PWNED5]]," 'workspace = "."'
run_capture "$PADDLE" run ws/ld.lua
if [ $rc -eq 0 ] && [ -z "$(pwned)" ]; then
    pass ld_library_path_works
else
    fail ld_library_path_works "rc $rc, pwned '$(pwned)': $(tail -n 4 <<<"$out")"
fi

# 5. overrides with shell syntax travel as one word
run_capture "$PADDLE" run ws/ld.lua '--save_dir=out;touch PWNED6'
if [ $rc -eq 0 ] && [ -z "$(pwned)" ] && [ -s 'out;touch PWNED6/pass-00000/manifest.json' ]; then
    pass override_shell_syntax_is_literal
else
    fail override_shell_syntax_is_literal "rc $rc, pwned '$(pwned)': $(tail -n 4 <<<"$out")"
fi

# 6. a binary replaced in the node's cache is not run: it is sent again
bin=$(ls "$T"/node/.paddle/bin/paddle-* | head -n 1)
printf '#!/bin/sh\ntouch %s/PWNED7\n' "$T" >"$bin" && chmod 755 "$bin"
run_capture "$PADDLE" run ws/ld.lua
if [ $rc -eq 0 ] && [ -z "$(pwned)" ] && grep -q 'binary copied to 1 of 1' <<<"$out" && cmp -s "$bin" "$PADDLE"; then
    pass tampered_binary_replaced
else
    fail tampered_binary_replaced "rc $rc, pwned '$(pwned)': $(grep -E 'every node|paddle:' <<<"$out" | tail -n 3)"
fi

# 7. a workspace file changed in the cache is sent again, and the job reads the right one
cached=$(grep -l '^1,1,3$' "$T"/node/.paddle/cache/* | head -n 1)
if [ -n "$cached" ]; then
    echo 'garbage' >"$cached"
    run_capture "$PADDLE" run ws/ld.lua
    job=$(grep -o 'node 0 [^ ]*: job directory [^ ]*' <<<"$out" | awk '{print $NF}')
    if [ $rc -eq 0 ] && grep -q 'workspace: 1 files sent' <<<"$out" && cmp -s "$job/train.csv" ws/train.csv; then
        pass tampered_cache_file_replaced
    else
        fail tampered_cache_file_replaced "rc $rc: $(grep -E 'every node|paddle:' <<<"$out" | tail -n 3)"
    fi
else
    fail tampered_cache_file_replaced "train.csv is not in the node's cache"
fi

# 8. a cache directory that is not the user's own is refused
if [ "$(id -u)" -eq 0 ] && id nobody >/dev/null 2>&1; then
    mkdir -p "$T/other/.paddle/bin" "$T/other/.paddle/cache" && chown -R nobody "$T/other/.paddle"
    write_recipe ws/other.lua "$T/other" '' 'workspace = "."'
    run_capture "$PADDLE" run ws/other.lua
    if [ $rc -ne 0 ] && grep -q "refusing to use it as the paddle cache" <<<"$out" &&
       grep -q 'nothing is left running' <<<"$out"; then
        pass foreign_cache_refused
    else
        fail foreign_cache_refused "rc $rc: $(tail -n 3 <<<"$out")"
    fi
else
    skip foreign_cache_refused "needs root and a 'nobody' user to make a directory owned by someone else"
fi
# and one writable by others is made private before use
chmod 777 "$T/node/.paddle/cache"
run_capture "$PADDLE" run ws/ld.lua
if [ $rc -eq 0 ] && [ "$(stat -c %a "$T/node/.paddle/cache")" = 755 ]; then
    pass cache_made_private
else
    fail cache_made_private "rc $rc, mode $(stat -c %a "$T/node/.paddle/cache"): $(tail -n 3 <<<"$out")"
fi

# 9. a fresh node costs one command: the binary and the workspace come over
# the channel that starts the agent (subdirectories, two files with the same
# content, an executable file), and each lands with its content and mode
mkdir -p ws2/a/b ws2/c && cp ws/train.csv ws2/ && cp ws/train.csv ws2/a/b/same.csv &&
    printf '#!/bin/sh\necho hi\n' >ws2/c/tool.sh && chmod 755 ws2/c/tool.sh
write_recipe ws2/job.lua "$T/fresh" '' 'workspace = "."'
before=$(grep -c 'Starting session' "${SSHD_LOG[2]}")
run_capture "$PADDLE" run ws2/job.lua
starts=$(($(grep -c 'Starting session' "${SSHD_LOG[2]}") - before))
execs=$(grep 'Starting session' "${SSHD_LOG[2]}" | tail -n "$starts" | grep -c 'session: command')
job=$(grep -o 'node 0 [^ ]*: job directory [^ ]*' <<<"$out" | awk '{print $NF}')
if [ $rc -eq 0 ] && [ "$execs" -eq 1 ] && grep -q 'binary copied to 1 of 1' <<<"$out" &&
   cmp -s "$job/a/b/same.csv" ws/train.csv && cmp -s "$job/train.csv" ws/train.csv &&
   [ "$(stat -c %a "$job/c/tool.sh")" = 755 ] && [ "$(stat -c %a "$job/train.csv")" = 644 ] &&
   cmp -s "$(ls "$T"/fresh/.paddle/bin/paddle-* | head -n 1)" "$PADDLE"; then
    pass fresh_node_one_command
else
    fail fresh_node_one_command "rc $rc, $execs commands started ($starts sessions): $(grep -E 'every node|paddle:' <<<"$out" | tail -n 3)"
fi

# 10. the binary travels gzip-compressed where the node has gzip (9. above),
# as it is where it has not: a node whose PATH has the tools the node script
# uses, but no gzip
mkdir -p "$T/nogz"
for tool in sh bash mkdir chmod id sha256sum rm head mv ln cat; do
    p=$(command -v "$tool") && ln -s "$p" "$T/nogz/$tool"
done
SSHD_EXTRA="SetEnv PADDLE_NODE_ROOT=$T/node3 PATH=$T/nogz" sshd_start 3 >/dev/null ||
    { fail fresh_node_without_gzip "cannot start a second sshd"; exit 0; }
sed -e "s|127.0.0.2:${SSHD_PORT[2]}|127.0.0.3:${SSHD_PORT[3]}|" -e "s|${SSHD_KNOWN[2]}|${SSHD_KNOWN[3]}|" ws2/job.lua >ws2/nogz.lua
sed -i "s|root_dir = \[\[.*\]\]|root_dir = [[$T/nogzroot]]|" ws2/nogz.lua
run_capture "$PADDLE" run ws2/nogz.lua
if [ $rc -eq 0 ] && grep -q 'binary copied to 1 of 1' <<<"$out" &&
   cmp -s "$(ls "$T"/nogzroot/.paddle/bin/paddle-* | head -n 1)" "$PADDLE"; then
    pass fresh_node_without_gzip
else
    fail fresh_node_without_gzip "rc $rc: $(grep -E 'paddle:' <<<"$out" | tail -n 3)"
fi

# 11. the node script's answers are whole lines: a root_dir that contains
# "need:" and "job=" is a name, not an answer
write_recipe ws2/words.lua "$T/words/need: binary/job=x" '' 'workspace = "."'
run_capture "$PADDLE" run ws2/words.lua
job=$(grep -o 'node 0 [^ ]*: job directory .*' <<<"$out" | sed 's/.*job directory //')
if [ $rc -eq 0 ] && [ -d "$T/words/need: binary/job=x/.paddle/bin" ] && [ -f "$job/nodefile" ] &&
   [[ "$job" = "$T/words/need: binary/job=x/"* ]]; then
    pass answers_are_whole_lines
else
    fail answers_are_whole_lines "rc $rc, job directory '$job': $(grep -E 'paddle:' <<<"$out" | tail -n 3)"
fi
