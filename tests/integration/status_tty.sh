# status_tty.sh - the live status block of `paddle run` and `paddle train`,
# driven as a user sees it: the real binary in a tmux pane (send-keys,
# capture-pane). The block shows every role with its host and state and the
# pass (numbered from 0 as the logs number it, and which of N); it stays
# whole in a 60-column window (no line of it longer than the window, no copy
# of it left behind); Ctrl+C stops the job, erases the
# block, leaves the final lines and no role process; stdout into a pipe
# means no block. Over SSH (real sshd "hosts" on 127.0.0.2 and .3) the block
# names each role's host. Without a terminal: the plain lines, one summary
# line per pass, no escape sequence. The tmux server (its own -L socket) is
# killed at the end, always.
. "$ROOT/tests/integration/lib.sh"
. "$ROOT/tests/integration/sshd_lib.sh"

command -v tmux >/dev/null || { skip status_tty "tmux is not installed (Debian package tmux)"; exit 0; }
"$ROOT/recipes/prepare.sh" >/dev/null || { fail prepare "recipes/prepare.sh failed"; exit 0; }
mkdir -p data/uci_housing && cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
cp "$ROOT/recipes/fit_a_line.lua" status_job.lua

sock=paddle-status-$$
tm() { tmux -L "$sock" -f /dev/null "$@"; }
trap 'tm kill-server 2>/dev/null; sshd_cleanup' EXIT
screen() { tm capture-pane -p -t st "$@"; }
# wait_for PATTERN [SECONDS]: until the visible pane matches (grep -E)
wait_for() {
    local i
    for i in $(seq 1 $((${2:-30} * 10))); do screen | grep -qE "$1" && return 0; sleep 0.1; done
    return 1
}
job_pids() {
    local p
    for p in /proc/[0-9]*; do
        tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qE '^[^ ]*paddle[^ ]* (pserver|trainer) status_job\.lua' &&
            echo "${p#/proc/}"
    done
}
HEAD='^-- paddle run status_job\.lua'

tm new-session -d -s st -x 120 -y 40 -c "$T" "bash --norc --noprofile" || { fail tmux "cannot start tmux"; exit 0; }
tm send-keys -t st "$PADDLE run status_job.lua --passes=100000 --early_stop=0 --keep_models=1; echo EXIT=\$?" Enter

# the block: its header, the pass, every role with its host and state
if ! wait_for 'trainer 1 +localhost +training' 30; then
    fail block_roles "no status block with the trainers training: $(screen | tail -n 12)"
else
    # a capture can fall between two writes of a redraw: look a few times
    for i in $(seq 1 20); do
        shot=$(screen)
        block=$(sed -n "/$HEAD/,\$p" <<<"$shot" | sed '/^$/d')
        ok=0
        if [ "$(grep -cE "$HEAD" <<<"$shot")" -eq 1 ] && grep -qE '^pass [0-9]+ \([0-9]+ of 100000\) ' <<<"$block" &&
            grep -qE '^  pserver 0 +localhost +serving' <<<"$block" &&
            grep -qE '^  pserver 1 +localhost +serving' <<<"$block" &&
            grep -qE '^  trainer 0 +localhost +training +pass [0-9]+' <<<"$block" &&
            grep -qE '^train cost [0-9.e+-]+ +test cost [0-9.e+-]+, test rmse' <<<"$block" &&
            grep -qE 'elapsed [0-9]+s, ETA ' <<<"$block" &&
            [ "$(wc -l <<<"$block")" -eq 7 ] && grep -q '^\[trainer 0\] I' <<<"$shot"; then
            ok=1
            break
        fi
        sleep 0.1
    done
    if [ $ok -eq 1 ]; then
        pass block_roles
    else
        fail block_roles "the block is not whole at the bottom: $shot"
    fi
    # it is live: the pass moves on between captures
    p1=$(grep -oE '^pass [0-9]+' <<<"$block" | head -n 1)
    moved=0
    for i in $(seq 1 100); do
        p2=$(screen | grep -oE '^pass [0-9]+' | head -n 1)
        [ -n "$p2" ] && [ "$p2" != "$p1" ] && { moved=1; break; }
        sleep 0.1
    done
    [ $moved -eq 1 ] && pass block_live || fail block_live "the pass stayed at '$p1'"
fi

# a 60-column window: the block redrawn to fit, not wrapped, not repeated
tm resize-window -t st -x 60 -y 40
ok=0
for i in $(seq 1 50); do
    shot=$(screen -J)
    block=$(sed -n "/$HEAD/,\$p" <<<"$shot" | sed '/^$/d')
    if [ "$(grep -cE "$HEAD" <<<"$shot")" -eq 1 ] && [ "$(wc -l <<<"$block")" -eq 7 ] &&
        [ "$(awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }' <<<"$block")" -lt 60 ] &&
        grep -qE '^  trainer 1 +localhost' <<<"$block"; then
        ok=1
        break
    fi
    sleep 0.1
done
wide=$(screen | awk 'length($0) > 60' | head -n 1)
if [ $ok -eq 1 ] && [ -z "$wide" ]; then pass narrow_window
else fail narrow_window "no whole block within 60 columns: $(screen -J | tail -n 10)"; fi

# Ctrl+C: the job stops, the block is gone, the final lines read well, no role is left
pids=$(job_pids)
tm send-keys -t st C-c
if ! wait_for '^EXIT=' 30; then
    fail ctrl_c "the job did not end within 30 s after Ctrl+C"
else
    shot=$(screen -J)
    left=""
    for i in $(seq 1 50); do
        left=""
        for p in $pids; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
        [ -z "$left" ] && break
        sleep 0.1
    done
    if [ -z "$pids" ]; then
        fail ctrl_c "no role process found while the job ran"
    elif [ -n "$left" ]; then
        fail ctrl_c "role processes left after Ctrl+C:$left"
        for p in $left; do kill -9 "$p" 2>/dev/null; done
    elif grep -qE "$HEAD" <<<"$shot" || ! grep -q '^EXIT=130' <<<"$shot" ||
        ! grep -q 'interrupted (Ctrl+C): stopping every role' <<<"$shot" ||
        ! grep -qE '^paddle: stopped: [0-9]+ of 100000 passes done, train cost' <<<"$shot"; then
        fail ctrl_c "the block was not replaced by the final lines: $(tail -n 12 <<<"$shot")"
    else
        pass ctrl_c
    fi
fi

# paddle train shows the same block, and Ctrl+C erases it too
tm send-keys -t st "clear; $PADDLE train status_job.lua --passes=100000 --early_stop=0 --keep_models=1; echo EXIT=\$?" Enter
if ! wait_for '^  trainer +localhost +training' 30; then
    fail train_block "no status block for paddle train: $(screen | tail -n 8)"
else
    shot=$(screen)
    if grep -qE '^-- paddle train status_job\.lua' <<<"$shot" && grep -qE '^pass [0-9]+ \([0-9]+ of 100000\)' <<<"$shot"; then
        pass train_block
    else
        fail train_block "the block lacks its header or pass: $(tail -n 6 <<<"$shot")"
    fi
    tm send-keys -t st C-c
    if wait_for '^EXIT=' 30 && ! screen | grep -qE '^-- paddle train' &&
        screen -J | grep -qE '^paddle: stopped: [0-9]+ of 100000 passes done'; then
        pass train_ctrl_c
    else
        fail train_ctrl_c "after Ctrl+C: $(screen -J | tail -n 6)"
    fi
fi

# stdout into a pipe on a terminal: its lines would pass behind the block, so no block, the summary lines
tm send-keys -t st "clear; $PADDLE run status_job.lua --passes=3 --early_stop=0 | cat; echo EXIT=\$?" Enter
if wait_for '^EXIT=' 30 && screen -J | grep -qE '^paddle: pass 2 done \(3 of 3\): train cost' &&
    ! screen | grep -qE '^-- paddle run'; then
    pass piped_stdout
else
    fail piped_stdout "$(screen -J | tail -n 6)"
fi

# over SSH: the roles on their hosts, and Ctrl+C leaves nothing on either
if [ ! -x "$SSHD_BIN" ]; then
    skip ssh_block "no OpenSSH server ($SSHD_BIN; Debian package openssh-server)"
elif ! sshd_two_nodes; then
    fail ssh_block "cannot start the test sshd servers"
else
    mkdir -p ws && cp -r data ws/
    sshd_fit_a_line_job "$(sshd_free_port)" 'workspace = "."' 'batch_size = 20, passes = 100000, log_period = 1000' \
        >ws/ssh_job.lua
    tm send-keys -t st "clear; $PADDLE run ws/ssh_job.lua; echo EXIT=\$?" Enter
    ok=0 shot=""
    if wait_for 'trainer 1 +127\.0\.0\.[23] +training' 60; then
        # a capture can fall between two writes of a redraw: look a few times
        for i in $(seq 1 20); do
            shot=$(screen)
            grep -q 'paddle-progress' <<<"$shot" && break
            if grep -qE '^  pserver 0 +127\.0\.0\.[23] +serving' <<<"$shot" &&
                grep -qE '^-- paddle run ws/ssh_job\.lua' <<<"$shot"; then
                ok=1
                break
            fi
            sleep 0.1
        done
    fi
    if [ $ok -eq 1 ]; then
        pass ssh_block
    else
        fail ssh_block "no block with the roles on their hosts: $(tail -n 10 <<<"${shot:-$(screen)}")"
    fi
    tm send-keys -t st C-c
    left=""
    if wait_for '^EXIT=' 30; then
        for i in $(seq 1 50); do
            left=$(for p in /proc/[0-9]*; do
                tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qE "$T/node[23]/" && echo "${p#/proc/}"; done)
            [ -z "$left" ] && break
            sleep 0.1
        done
    fi
    if screen -J | grep -qE '^paddle: stopped: [0-9]+ of 100000 passes done' && [ -z "$left" ] &&
        ! screen | grep -qE '^-- paddle run'; then
        pass ssh_ctrl_c
    else
        fail ssh_ctrl_c "left: '$left'; $(screen -J | tail -n 8)"
        for p in $left; do kill -9 "$p" 2>/dev/null; done
    fi
fi
tm kill-server 2>/dev/null

# no terminal: plain lines, a summary line per pass, no escape sequence
TERM=xterm "$PADDLE" run status_job.lua --passes=3 --early_stop=0 >plain.out 2>&1
rc=$?
n=$(grep -cE '^paddle: pass [0-2] done \([1-3] of 3\): train cost [0-9.e+-]+, test cost .*samples/s, elapsed' plain.out)
if [ $rc -eq 0 ] && [ "$n" -eq 3 ] && ! grep -q $'\033' plain.out && ! grep -q '#paddle-progress' plain.out &&
    ! grep -q '#paddle-progress' log/train.log && grep -q '^\[trainer 0\] I.*pass 2 done' log/train.log; then
    pass plain_summary
else
    fail plain_summary "rc $rc, $n summary lines: $(tail -n 8 plain.out)"
fi
