# sshd_lib.sh - real OpenSSH servers on loopback for the multi-host tests.
# Sourced (after lib.sh) by the tests that need SSH; not a test itself.
#
#   . "$ROOT/tests/integration/sshd_lib.sh"
#   sshd_start 2                  # sshd on 127.0.0.2, a free port
#   ssh_host=$SSHD_USER@127.0.0.2:${SSHD_PORT[2]}
#   ... use ${SSHD_KNOWN[2]} (known_hosts), $SSHD_KEYS/id_ed25519, ${SSHD_ROOT[2]} ...
#   sshd_stop_all                 # also done by the EXIT trap
#
# Each server runs as the current user (root in CI) with its own throwaway
# host keys, config, PidFile, log and root dir, accepting the user keys in
# $SSHD_KEYS (one authorized_keys for all). Only the processes started here
# are stopped: by the pid in their PidFile, checked against their command
# line. A script with its own EXIT trap must call sshd_cleanup in it.
#
# Variables:
#   SSHD_DIR            everything lives here ($T/sshd)
#   SSHD_USER           the user to log in as
#   SSHD_KEYS           user keys (made by sshd_keys, called by sshd_start):
#     id_ed25519 id_ecdsa id_rsa  OpenSSH format, in authorized_keys
#     id_rsa_pem id_ecdsa_pem     the same keys in PEM format
#     id_rsa_pkcs8 id_ecdsa_pkcs8 and in PKCS#8 format
#     id_ed25519_pass             encrypted with $SSHD_PASSPHRASE, authorized
#     id_wrong                    an ed25519 key that is NOT authorized
#   SSHD_PORT[N] SSHD_KNOWN[N] SSHD_ROOT[N] SSHD_LOG[N] SSHD_CONF[N]
#   SSHD_HOSTKEYS[N]    host public key files, one per type
#
# Options to sshd_start, as variables set for the call:
#   SSHD_HOSTKEY_TYPES  host key types (default "ed25519 ecdsa"; rsa possible)
#   SSHD_NO_SFTP=1      no SFTP subsystem (clients must use scp)
#   SSHD_EXTRA          more sshd_config lines

SSHD_BIN=${SSHD_BIN:-/usr/sbin/sshd}
SSHD_DIR=${SSHD_DIR:-${T:-$(mktemp -d)}/sshd}
SSHD_USER=$(id -un)
SSHD_KEYS=$SSHD_DIR/keys
SSHD_PASSPHRASE='correct horse'
SSHD_SFTP_SERVER=${SSHD_SFTP_SERVER:-/usr/lib/openssh/sftp-server}
declare -A SSHD_PORT SSHD_KNOWN SSHD_ROOT SSHD_LOG SSHD_CONF SSHD_PIDFILE SSHD_HOSTKEYS
SSHD_AGENT_PID=

# The user keys and authorized_keys, once.
sshd_keys() {
    [ -f "$SSHD_KEYS/authorized_keys" ] && return 0
    mkdir -p "$SSHD_KEYS" && chmod 700 "$SSHD_DIR" "$SSHD_KEYS" || return 1
    local k=$SSHD_KEYS
    ssh-keygen -q -t ed25519 -N '' -C paddle-test-ed25519 -f "$k/id_ed25519" &&
    ssh-keygen -q -t ecdsa -b 256 -N '' -C paddle-test-ecdsa -f "$k/id_ecdsa" &&
    ssh-keygen -q -t rsa -b 3072 -N '' -C paddle-test-rsa -f "$k/id_rsa" &&
    ssh-keygen -q -t ed25519 -N "$SSHD_PASSPHRASE" -C paddle-test-pass -f "$k/id_ed25519_pass" &&
    ssh-keygen -q -t ed25519 -N '' -C paddle-test-wrong -f "$k/id_wrong" || return 1
    # the same RSA and ECDSA keys, rewritten in the PEM and PKCS#8 formats
    local t f
    for t in rsa ecdsa; do
        for f in pem pkcs8; do
            cp "$k/id_$t" "$k/id_${t}_$f" && cp "$k/id_$t.pub" "$k/id_${t}_$f.pub" &&
            ssh-keygen -q -p -m "${f^^}" -N '' -P '' -f "$k/id_${t}_$f" >/dev/null || return 1
            ! grep -q 'OPENSSH PRIVATE KEY' "$k/id_${t}_$f" || return 1
        done
    done
    cat "$k/id_ed25519.pub" "$k/id_ecdsa.pub" "$k/id_rsa.pub" "$k/id_ed25519_pass.pub" \
        >"$k/authorized_keys"
}

# A port nobody listens on now (sshd_start retries if it was taken since).
sshd_free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        ss -Htln "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return; }
    done
}

# sshd_start N: sshd on 127.0.0.N, a free port; sets SSHD_PORT[N] etc.
sshd_start() {
    local n=$1 addr=127.0.0.$1
    local dir=$SSHD_DIR/host$n
    [ -n "${SSHD_PIDFILE[$n]:-}" ] && sshd_stop "$n"
    sshd_keys || { echo "sshd_start: cannot make user keys" >&2; return 1; }
    if [ "$(id -u)" -eq 0 ]; then
        # privilege separation needs it (root-owned, not group/world-writable)
        [ -d /run/sshd ] || mkdir -p -m 0755 /run/sshd
    fi
    rm -rf "$dir/etc" && mkdir -p "$dir/etc" "$dir/root" && chmod 700 "$dir" || return 1
    local types=${SSHD_HOSTKEY_TYPES:-ed25519 ecdsa} t hostkeys="" known=""
    for t in $types; do
        local f=$dir/etc/ssh_host_${t}_key
        if [ "$t" = rsa ]; then
            # RSA keys are slow to make: one for all hosts
            [ -f "$SSHD_DIR/ssh_host_rsa_key" ] ||
                ssh-keygen -q -t rsa -b 3072 -N '' -C '' -f "$SSHD_DIR/ssh_host_rsa_key" || return 1
            cp "$SSHD_DIR/ssh_host_rsa_key" "$f" && cp "$SSHD_DIR/ssh_host_rsa_key.pub" "$f.pub"
        else
            ssh-keygen -q -t "$t" -N '' -C '' -f "$f" || return 1
        fi
        hostkeys+="HostKey $f"$'\n'
        SSHD_HOSTKEYS[$n]+="$f.pub "
    done
    local try port
    for try in 1 2 3 4 5; do
        port=$(sshd_free_port)
        cat >"$dir/etc/sshd_config" <<EOF
ListenAddress $addr:$port
${hostkeys}PidFile $dir/sshd.pid
AuthorizedKeysFile $SSHD_KEYS/authorized_keys
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
UseDNS no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 64
LogLevel VERBOSE
$([ "${SSHD_NO_SFTP:-0}" = 1 ] || echo "Subsystem sftp $SSHD_SFTP_SERVER")
${SSHD_EXTRA:-}
EOF
        rm -f "$dir/sshd.pid"
        # -D: stays in our process group, so a killed test takes it along
        "$SSHD_BIN" -D -f "$dir/etc/sshd_config" -E "$dir/sshd.log" &
        local pid=$! i
        for i in $(seq 100); do
            [ -s "$dir/sshd.pid" ] && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        if [ -s "$dir/sshd.pid" ]; then
            SSHD_PORT[$n]=$port
            SSHD_PIDFILE[$n]=$dir/sshd.pid
            SSHD_CONF[$n]=$dir/etc/sshd_config
            SSHD_LOG[$n]=$dir/sshd.log
            SSHD_ROOT[$n]=$dir/root
            SSHD_KNOWN[$n]=$dir/known_hosts
            : >"$dir/known_hosts"
            for t in $types; do
                echo "[$addr]:$port $(cut -d' ' -f1,2 "$dir/etc/ssh_host_${t}_key.pub")" \
                    >>"$dir/known_hosts"
            done
            return 0
        fi
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        grep -q 'Address already in use' "$dir/sshd.log" 2>/dev/null || break
    done
    echo "sshd_start $n: sshd did not start; its log:" >&2
    cat "$dir/sshd.log" >&2
    return 1
}

# sshd_stop N: stop the sshd started for 127.0.0.N (its sessions end with it).
sshd_stop() {
    local n=$1 pidfile=${SSHD_PIDFILE[$1]:-} pid i
    [ -n "$pidfile" ] || return 0
    unset "SSHD_PIDFILE[$n]"
    pid=$(cat "$pidfile" 2>/dev/null) || return 0
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    # only if that pid is still our sshd, with our config
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "${SSHD_CONF[$n]}" || return 0
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 40); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}

sshd_stop_all() {
    local n
    for n in "${!SSHD_PIDFILE[@]}"; do sshd_stop "$n"; done
}

# An ssh-agent for this test: sets SSH_AUTH_SOCK and SSHD_AGENT_PID.
sshd_agent_start() {
    local out
    out=$(ssh-agent -s -a "$SSHD_DIR/agent.sock") || return 1
    SSHD_AGENT_PID=$(sed -n 's/^SSH_AGENT_PID=\([0-9]*\);.*/\1/p' <<<"$out")
    export SSH_AUTH_SOCK=$SSHD_DIR/agent.sock
    [ -n "$SSHD_AGENT_PID" ]
}

sshd_agent_stop() {
    [ -n "$SSHD_AGENT_PID" ] && kill "$SSHD_AGENT_PID" 2>/dev/null
    SSHD_AGENT_PID=
    rm -f "$SSHD_DIR/agent.sock"
    unset SSH_AUTH_SOCK
}

sshd_cleanup() {
    sshd_agent_stop
    sshd_stop_all
}

# The SHA256 fingerprint of a public key file, as ssh-keygen -l shows it.
sshd_fingerprint() {
    ssh-keygen -lf "$1" | awk '{print $2}'
}

trap sshd_cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# Two "nodes" for job tests: sshd on 127.0.0.2 and 127.0.0.3, each giving
# its sessions PADDLE_NODE_ROOT=$T/nodeN, and ./known_hosts for both.
sshd_two_nodes() {
    SSHD_EXTRA="SetEnv PADDLE_NODE_ROOT=$T/node2" sshd_start 2 >/dev/null &&
        SSHD_EXTRA="SetEnv PADDLE_NODE_ROOT=$T/node3" sshd_start 3 >/dev/null &&
        cat "${SSHD_KNOWN[2]}" "${SSHD_KNOWN[3]}" >known_hosts
}

# sshd_fit_a_line_job PORT JOB-KEYS SETTINGS : a fit-a-line recipe of 2
# pservers and 2 trainers on the two nodes (their paddle port PORT), on
# stdout; the data is data/uci_housing/housing.data of the workspace.
sshd_fit_a_line_job() {
    cat <<R
cluster {
  hosts = { "$SSHD_USER@127.0.0.2:${SSHD_PORT[2]}", "$SSHD_USER@127.0.0.3:${SSHD_PORT[3]}" },
  root_dir = "\$PADDLE_NODE_ROOT",
  known_hosts = "$T/known_hosts",
  identity_files = { "$SSHD_KEYS/id_ed25519" },
  use_agent = false,
  port = $1,
}
job { pservers = 2, trainers = 2, $2 }
data { train = "data/uci_housing/housing.data", test = "data/uci_housing/housing.data", format = "uci_housing" }
model = function(nn)
  local x, y = nn.data("x", 13), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(x, 1), y)
end
optimizer = nn.sgd { learning_rate = 0.001 }
settings { $3 }
R
}
