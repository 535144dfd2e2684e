# ssh_basic.sh - the SSH layer (src/launch/ssh.c) against real OpenSSH servers
# on loopback: every key type and format, ssh-agent, known_hosts (plain,
# hashed, unknown, accepted, changed), authentication failures, exec
# channels and file copies (SFTP, and SCP where the server has no SFTP).
#
# The C API has no command of its own, so each case runs one ssh_live_* unit
# test ($UNIT, tests/unit/test_ssh.c) with PD_SSH_TEST_* saying where to
# connect and what to expect.
. "$ROOT/tests/integration/lib.sh"
. "$ROOT/tests/integration/sshd_lib.sh"

if [ -z "${UNIT:-}" ] || [ ! -x "$UNIT" ]; then
    fail setup "UNIT (the unit test binary) is not set: run through tests/run.sh"
    exit 0
fi

sshd_start 2 || { fail sshd_start "no sshd on 127.0.0.2"; exit 0; }
SSHD_HOSTKEY_TYPES=rsa sshd_start 3 || { fail sshd_start "no sshd on 127.0.0.3"; exit 0; }
SSHD_NO_SFTP=1 sshd_start 4 || { fail sshd_start "no sshd on 127.0.0.4"; exit 0; }

K=$SSHD_KEYS
P2=${SSHD_PORT[2]}
H2=$SSHD_USER@127.0.0.2:$P2
KNOWN2=${SSHD_KNOWN[2]}
mkdir -p "$T/home"  # an empty HOME: no ~/.ssh keys or known_hosts of the real user

# live NAME TEST VAR=VALUE... : run the unit test TEST with PD_SSH_TEST_*
# (and anything else) from the arguments; passes when the test passes.
live() {
    local name=$1 test=$2; shift 2
    echo "--- $name"
    out=$(env -u SSH_AUTH_SOCK -u PADDLE_SSH_PASSPHRASE HOME="$T/home" \
        PD_SSH_TEST_HOST="$H2" PD_SSH_TEST_KNOWN="$KNOWN2" "$@" "$UNIT" "$test" 2>&1)
    rc=$?
    echo "$out"
    if [ "$rc" -eq 0 ] && grep -q '^unit: 1 passed, 0 failed' <<<"$out"; then
        pass "$name"
    else
        fail "$name" "$(grep -E '^    |FAIL' <<<"$out" | tail -n 3 | tr '\n' ' ')"
    fi
}

# --- every key type and format (user keys) --------------------------------------
live key_id_ed25519_and_a_command ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519" PD_SSH_TEST_RUN=1
for key in id_ecdsa id_rsa id_rsa_pem id_ecdsa_pem id_rsa_pkcs8 id_ecdsa_pkcs8; do
    live "key_$key" ssh_live_connect PD_SSH_TEST_KEYS="$K/$key"
done
live key_encrypted_needs_passphrase ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519_pass" \
    PD_SSH_TEST_EXPECT_RC=-7 \
    PD_SSH_TEST_EXPECT="ssh $H2: authentication failed|$K/id_ed25519_pass (encrypted: set PADDLE_SSH_PASSPHRASE"
live key_encrypted_with_passphrase ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519_pass" \
    PADDLE_SSH_PASSPHRASE="$SSHD_PASSPHRASE"
live key_encrypted_wrong_passphrase ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519_pass" \
    PADDLE_SSH_PASSPHRASE=wrong PD_SSH_TEST_EXPECT="wrong PADDLE_SSH_PASSPHRASE"
live wrong_key_refused ssh_live_connect PD_SSH_TEST_KEYS="$K/id_wrong" PD_SSH_TEST_EXPECT_RC=-7 \
    PD_SSH_TEST_EXPECT="ssh $H2: authentication failed (server allows: publickey)|tried: $K/id_wrong (refused)|authorized_keys"
live public_key_named ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519.pub" \
    PD_SSH_TEST_EXPECT="$K/id_ed25519.pub (a public key: name the private key file)"
live keys_tried_in_order ssh_live_connect PD_SSH_TEST_KEYS="$K/id_wrong:$K/missing:$K/id_rsa"
live no_key_at_all ssh_live_connect PD_SSH_TEST_AGENT=1 PD_SSH_TEST_EXPECT_RC=-7 \
    PD_SSH_TEST_EXPECT="authentication failed: no key to try|SSH_AUTH_SOCK"

# --- ssh-agent ----------------------------------------------------------------------
if sshd_agent_start; then
    ssh-add -q "$K/id_wrong" "$K/id_rsa" 2>/dev/null
    live agent_rsa ssh_live_connect PD_SSH_TEST_AGENT=1 SSH_AUTH_SOCK="$SSH_AUTH_SOCK"
    ssh-add -q -D 2>/dev/null
    ssh-add -q "$K/id_ed25519" "$K/id_ecdsa" 2>/dev/null
    live agent_ed25519_ecdsa ssh_live_connect PD_SSH_TEST_AGENT=1 SSH_AUTH_SOCK="$SSH_AUTH_SOCK"
    live agent_unused_when_off ssh_live_connect PD_SSH_TEST_AGENT=0 SSH_AUTH_SOCK="$SSH_AUTH_SOCK" \
        PD_SSH_TEST_EXPECT="no key to try (ssh-agent not used"
    ssh-add -q -D 2>/dev/null
    ssh-add -q "$K/id_wrong" 2>/dev/null
    live agent_wrong_key_then_file ssh_live_connect PD_SSH_TEST_AGENT=1 \
        SSH_AUTH_SOCK="$SSH_AUTH_SOCK" PD_SSH_TEST_KEYS="$K/id_ecdsa"
    live agent_wrong_key_named ssh_live_connect PD_SSH_TEST_AGENT=1 SSH_AUTH_SOCK="$SSH_AUTH_SOCK" \
        PD_SSH_TEST_EXPECT="tried: ssh-agent keys ssh-ed25519 paddle-test-wrong (refused)"
    sshd_agent_stop
else
    fail agent "ssh-agent did not start"
fi

# --- host keys ----------------------------------------------------------------------
ed_fp=$(sshd_fingerprint "$SSHD_DIR/host2/etc/ssh_host_ed25519_key.pub")
ssh-keygen -q -t ed25519 -N '' -C '' -f "$T/impostor"
old_fp=$(sshd_fingerprint "$T/impostor.pub")

cp "$KNOWN2" "$T/hashed" && ssh-keygen -q -H -f "$T/hashed" >/dev/null 2>&1
if grep -q '^|1|' "$T/hashed"; then
    live known_hosts_hashed ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519" PD_SSH_TEST_KNOWN="$T/hashed"
else
    fail known_hosts_hashed "ssh-keygen -H wrote no hashed entry"
fi
# known_hosts with one type only: the handshake must ask for that type
grep ' ssh-ed25519 ' "$KNOWN2" >"$T/only_ed25519"
live known_hosts_only_ed25519 ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519" PD_SSH_TEST_KNOWN="$T/only_ed25519"
grep ' ecdsa-sha2-nistp256 ' "$KNOWN2" >"$T/only_ecdsa"
live known_hosts_only_ecdsa ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519" PD_SSH_TEST_KNOWN="$T/only_ecdsa"
live host_key_rsa ssh_live_connect PD_SSH_TEST_HOST="$SSHD_USER@127.0.0.3:${SSHD_PORT[3]}" \
    PD_SSH_TEST_KEYS="$K/id_ed25519" PD_SSH_TEST_KNOWN="${SSHD_KNOWN[3]}"

: >"$T/empty_known"
live host_key_unknown_refused ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519" \
    PD_SSH_TEST_KNOWN="$T/empty_known" PD_SSH_TEST_EXPECT_RC=-7 \
    PD_SSH_TEST_EXPECT="ssh $H2: host key unknown: ssh-ed25519 $ed_fp is not in $T/empty_known|--accept-new-host-keys|ssh-keyscan -p $P2 -t ssh-ed25519 127.0.0.2"
live host_key_accepted_when_asked ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519" \
    PD_SSH_TEST_KNOWN="$T/new/known_hosts" PD_SSH_TEST_ACCEPT_NEW=1
if grep -q "^\[127.0.0.2\]:$P2 ssh-ed25519 " "$T/new/known_hosts" 2>/dev/null &&
    [ "$(wc -l <"$T/new/known_hosts")" -eq 1 ]; then
    pass host_key_recorded
else
    fail host_key_recorded "known_hosts: $(cat "$T/new/known_hosts" 2>&1)"
fi
live host_key_known_after_accept ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519" \
    PD_SSH_TEST_KNOWN="$T/new/known_hosts"

# the defaults: ~/.ssh/id_ed25519 and ~/.ssh/known_hosts (created)
mkdir -p "$T/home2/.ssh" && cp "$K/id_ed25519" "$T/home2/.ssh/"
live default_key_and_known_hosts ssh_live_connect HOME="$T/home2" PD_SSH_TEST_KNOWN= \
    PD_SSH_TEST_ACCEPT_NEW=1
if grep -q "^\[127.0.0.2\]:$P2 ssh-ed25519 " "$T/home2/.ssh/known_hosts" 2>/dev/null; then
    pass default_known_hosts_recorded
else
    fail default_known_hosts_recorded "no entry in $T/home2/.ssh/known_hosts"
fi
live default_known_hosts_used ssh_live_connect HOME="$T/home2" PD_SSH_TEST_KNOWN=
live tilde_paths ssh_live_connect HOME="$T/home2" PD_SSH_TEST_KNOWN="~/.ssh/known_hosts" \
    PD_SSH_TEST_KEYS="~/.ssh/id_ed25519"

echo "[127.0.0.2]:$P2 $(cut -d' ' -f1,2 "$T/impostor.pub")" >"$T/changed"
for accept in 0 1; do
    live "host_key_changed_refused_accept_$accept" ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519" \
        PD_SSH_TEST_KNOWN="$T/changed" PD_SSH_TEST_ACCEPT_NEW=$accept PD_SSH_TEST_EXPECT_RC=-7 \
        PD_SSH_TEST_EXPECT="ssh $H2: HOST KEY CHANGED: the host shows ssh-ed25519 $ed_fp but $T/changed:1 has $old_fp|ssh-keygen -f $T/changed -R '[127.0.0.2]:$P2'"
done
echo "[127.0.0.2]:$P2 $(cut -d' ' -f1,2 "$SSHD_DIR/ssh_host_rsa_key.pub")" >"$T/other_type"
live host_key_other_type_refused ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519" \
    PD_SSH_TEST_KNOWN="$T/other_type" PD_SSH_TEST_ACCEPT_NEW=1 \
    PD_SSH_TEST_EXPECT="HOST KEY CHANGED|has only ssh-rsa keys for it"

# --- channels and files -----------------------------------------------------------
live exec_channels ssh_live_exec PD_SSH_TEST_KEYS="$K/id_ed25519"
live parallel_sessions ssh_live_parallel PD_SSH_TEST_KEYS="$K/id_ed25519"
live bulk_write ssh_live_bulk_write PD_SSH_TEST_KEYS="$K/id_ed25519" PD_SSH_TEST_DIR="${SSHD_ROOT[2]}"
live transfer_sftp ssh_live_transfer PD_SSH_TEST_KEYS="$K/id_ed25519" PD_SSH_TEST_DIR="${SSHD_ROOT[2]}"
live transfer_scp_without_sftp ssh_live_transfer PD_SSH_TEST_KEYS="$K/id_ed25519" \
    PD_SSH_TEST_HOST="$SSHD_USER@127.0.0.4:${SSHD_PORT[4]}" PD_SSH_TEST_KNOWN="${SSHD_KNOWN[4]}" \
    PD_SSH_TEST_DIR="${SSHD_ROOT[4]}"

# --- a server that went away --------------------------------------------------------
P4=${SSHD_PORT[4]}
sshd_stop 4
live stopped_server_named ssh_live_connect PD_SSH_TEST_KEYS="$K/id_ed25519" \
    PD_SSH_TEST_HOST="$SSHD_USER@127.0.0.4:$P4" PD_SSH_TEST_EXPECT_RC=-9 \
    PD_SSH_TEST_EXPECT="ssh $SSHD_USER@127.0.0.4:$P4: cannot connect: connection refused"

sshd_stop_all
if pgrep -f "$SSHD_DIR/" >/dev/null; then
    fail sshd_stopped "left running: $(pgrep -af "$SSHD_DIR/")"
else
    pass sshd_stopped
fi
