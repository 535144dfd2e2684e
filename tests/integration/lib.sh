# lib.sh - helpers for integration tests (sourced by each tests/integration/*.sh).
#
# The runner sets PADDLE (the binary), ROOT (the repository), T (a scratch
# directory, also the working directory) and RESULTS. Each case reports
#   pass NAME            or            fail NAME WHY
#   skip NAME WHY        (what it checks cannot run here; never a pass)
# A script may hold many cases; the runner counts them.

# (a reason is kept on one line in RESULTS: a screen's "pass 3 (4 of 10)" line in
# it must not count as a case)
pass() { echo "pass $1" >>"$RESULTS"; echo "ok: $1"; }
fail() { echo "fail $1: ${2//$'\n'/ | }" >>"$RESULTS"; echo "FAILED: $1: $2"; }
skip() { echo "skip $1: ${2//$'\n'/ | }" >>"$RESULTS"; echo "SKIPPED: $1: $2"; }

# check NAME COMMAND... : pass when the command succeeds
check() {
    local name=$1; shift
    if "$@"; then pass "$name"; else fail "$name" "command failed: $*"; fi
}

# run_capture CMD... : runs, sets $out (stdout+stderr) and $rc
run_capture() {
    out=$("$@" 2>&1)
    rc=$?
}

# expect_error NAME WANT_RC WANT_TEXT CMD... : the command exits WANT_RC,
# prints WANT_TEXT, and its error is one line
expect_error() {
    local name=$1 want_rc=$2 want=$3; shift 3
    run_capture "$@"
    if [ "$rc" -ne "$want_rc" ]; then
        fail "$name" "exit $rc, wanted $want_rc; output: $out"
    elif [[ "$out" != *"$want"* ]]; then
        fail "$name" "output lacks '$want': $out"
    elif [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ]; then
        fail "$name" "error is not one line: $out"
    else
        pass "$name"
    fi
}

# pids_naming TEXT : every process one of whose arguments contains TEXT
# (one grep over /proc: a loop of tr|grep per process is slow enough under
# load that a short job ends before a test finds its victim)
pids_naming() {
    local found
    found=$(echo "$BASHPID"; exec grep -lzF -- "$1" /proc/[0-9]*/cmdline 2>/dev/null) # grep names TEXT too:
    printf '%s\n' "$found" | sed -n '2,$p' | grep -v "^/proc/${found%%$'\n'*}/" | cut -d/ -f3   # not itself
}

# pid_with_arg ARG PID... : the first of the PIDs one of whose arguments is ARG exactly
pid_with_arg() {
    local arg=$1 f; shift
    [ $# -gt 0 ] || return 0
    f=$(cd /proc && grep -lzx -- "$arg" $(printf '%s/cmdline ' "$@") 2>/dev/null | head -n 1)
    echo "${f%/cmdline}"
}

# free_port_pair [IP...] : a port p such that p and p + 1 are free on each IP
# (default 127.0.0.1): a pserver listens on port and port + 1 (dense,
# sparse). Chosen below the ephemeral range, where outgoing connections
# could take p + 1 meanwhile.
free_port_pair() {
    /usr/bin/python3 - "${@:-127.0.0.1}" <<'P'
import random, socket, sys
while True:
    p = random.randrange(20000, 32000)
    ss = []
    try:
        for q in (p, p + 1):
            for ip in sys.argv[1:]:
                s = socket.socket(); s.bind((ip, q)); ss.append(s)
        print(p); break
    except OSError:
        pass
    finally:
        for s in ss: s.close()
P
}
