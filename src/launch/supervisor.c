/*
 * supervisor.c - THE job supervisor: members (role processes, node agents
 * over SSH), their output, their end, stopping them. See supervisor.h.
 *
 * How Ctrl+C reaches every role, on every node (all of it in this file):
 *
 *   1. on_signal() writes the signal to the self-pipe that pd_sup_new() set
 *      up: the same in the launcher, the local agent and every node's agent.
 *   2. pump() reads it and returns it; pd_sup_run() (or start_roles()) hands
 *      it to stop_job(), which says why and calls pd_sup_stop_all().
 *   3. pd_sup_stop_all() asks every member to stop (ask_stop()): a role gets
 *      SIGTERM on its process group, a node's agent EOF on its SSH channel.
 *   4. On the node, the agent's pump() sees EOF on its upstream channel
 *      (stdin) and returns -1, as for a signal; the agent's pd_sup_run() hands
 *      it to stop_job() and pd_sup_stop_all() sends SIGTERM to every role's
 *      group there.
 *   5. PD_STOP_GRACE seconds later, pd_sup_stop_all() sends SIGKILL to every
 *      role's group still running; the launcher, PD_KILL_WAIT later still,
 *      closes every channel still open.
 *
 * A launcher killed with SIGKILL skips 1-3: its SSH connections close, and
 * step 4 follows on every node. A local role dies with the process that
 * started it (PR_SET_PDEATHSIG).
 */
#include "supervisor.h"
#include "jobstats.h"
#include "secret.h"
#include "../core/log.h"
#include "../core/pd.h"
#include "../core/crypto.h"
#include "../core/fs.h"
#include "../ps/ckpt.h"
#include "../ps/http.h"
#include "../core/term.h"
#include "../nn/progress.h"
#include "../ps/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TAIL_LINES 15       /* lines of a failed role shown */
#define READY_TIMEOUT 30.0  /* seconds for a pserver to listen */
#define DONE_WAIT 10.0      /* seconds for pservers to end after the trainers */
#define POLL_PERIOD 0.2     /* seconds between looks at SSH channels */
#define BACKOFF_FIRST 1.0   /* seconds between stopping a failed job and starting it again */
#define SETTLE 1.5          /* seconds a failure waits for news of the one that caused it */
#define BACKOFF_MAX 8.0     /* ... doubling with each restart, up to this */
#define CTL "#paddle-"      /* a node agent's line for the launcher, never printed */

enum { M_ROLE, M_NODE };

typedef struct member {
    int kind;               /* M_ROLE: a child process; M_NODE: an agent over SSH */
    char name[64];          /* "pserver 0", or the node's host */
    int required;           /* the job is done when every required member ended well */
    /* M_ROLE */
    int role, id;           /* PD_ROLE_*, index among its kind */
    pid_t pid;
    int out_fd;             /* its stdout+stderr, -1 when closed */
    int ready_fd;           /* pservers: reports the port */
    int port, want_port;    /* the port it listens on; the planned one (0: free) */
    int exited;
    char *tail[TAIL_LINES];
    int ntail, tail_pos;
    /* M_NODE */
    pd_ssh *ssh;
    pd_ssh_chan *chan;      /* NULL once closed */
    int out_eof, err_eof;
    char *lost;             /* the connection broke: why */
    char *exit_signal;
    char *cause;            /* what its agent said failed ("trainer 1\twas killed ...") */
    int trainers;           /* how many trainers its agent runs */
    int trainers_done;      /* its agent said they finished */
    double last_heard;      /* when it last wrote anything */
    pd_node_line_fn on_line;
    void *ctx;
    pd_lines out, err;
    int status;             /* wait status (role) or exit status (node) */
    int killed;             /* we asked it to stop */
    int handled;            /* its end was looked at */
} member;

struct pd_sup {
    member *m;
    int n, cap;
    int nnodes;
    int nrequired, nrequired_ok;
    int sig_pipe[2];
    int held_sig;           /* one that came while pump() waited for every member to end */
    int upstream_fd;        /* the agent's channel to the launcher, or -1 */
    pd_lines upstream;      /* node agent: what the launcher wrote, by lines */
    int others_done;        /* node agent: the launcher said every trainer of the job finished */
    int told_done;          /* launcher: it said so to the nodes */
    int log_server, log_train;
    int restarts, nrestarts;  /* restarts allowed (job.restarts), done */
    int checkpoints;          /* a restart goes on from the last checkpoint (else from the start) */
    int resumed;              /* the job was started with --resume */
    int trained;              /* a trainer reported a batch done: a fresh job's earlier checkpoints are forgotten */
    const char *ckpt_dir;     /* checkpoint_dir where the launcher sees it (a local job), else NULL */
    int config_error;         /* a role ended on what it was given (exit status 2): no restart helps */
    double hb_timeout;        /* launcher: a node silent this long is dead (0: never) */
    double hb_period, next_hb; /* node agent: heartbeat every hb_period seconds (0: none) */
    pd_progress *board;       /* the job's progress (nn/progress.h), or NULL (a node's agent) */
    struct sigaction saved[5];
    pd_jobstats *stats;       /* /metrics (settings.metrics_port), or NULL */
    pd_http http;
};

/* --- lines ----------------------------------------------------------------- */

/* A message on stderr, above the status block when a terminal shows one. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char buf[PD_LINE_MAX + 256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1;
    if (n > 0) pd_term_write(2, buf, (size_t)n);
}

void pd_lines_feed(pd_lines *l, const char *buf, size_t n, pd_line_fn fn, void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == '\n' || l->len == sizeof l->buf - 1) {
            l->buf[l->len] = '\0';
            fn(ctx, l->buf);
            l->len = 0;
            if (buf[i] == '\n') continue;
        }
        l->buf[l->len++] = buf[i];
    }
}

void pd_lines_flush(pd_lines *l, pd_line_fn fn, void *ctx)
{
    if (!l->len) return;
    l->buf[l->len] = '\0';
    fn(ctx, l->buf);
    l->len = 0;
}

/* --- signals and the process ---------------------------------------------------- */

static int sig_fd = -1;
static volatile sig_atomic_t sig_seen;
static const int caught[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (sig != SIGCHLD) sig_seen = sig;
    if (sig_fd >= 0 && write(sig_fd, &b, 1) < 0) {}
    errno = saved;
}

/* The one signal set-up of the launcher and the agents: the signals that end
 * a job (and SIGCHLD) go to the self-pipe that pump() polls. */
pd_sup *pd_sup_new(void)
{
    pd_sup *s = pd_xcalloc(1, sizeof *s);
    s->upstream_fd = s->log_server = s->log_train = -1;
    s->http.listen_fd = s->http.epfd = -1;
    if (pipe2(s->sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        pd_err_set(PD_EIO, "pipe: %s", strerror(errno));
        free(s);
        return NULL;
    }
    sig_fd = s->sig_pipe[1];
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    for (size_t i = 0; i < PD_COUNT(caught); i++) sigaction(caught[i], &sa, &s->saved[i]);
    signal(SIGPIPE, SIG_IGN);
    return s;
}

int pd_sup_signalled(void)
{
    return sig_seen;
}

void pd_sup_set_restarts(pd_sup *s, int restarts, int checkpoints, int resumed)
{
    s->restarts = restarts > 0 ? restarts : 0;
    s->checkpoints = checkpoints;
    s->resumed = resumed;
}

/* A job started fresh over an earlier job's checkpoints forgets them once
 * it trains (pd_ckpt_forget_earlier); restarted before that, a --resume
 * would continue the earlier job, so it starts fresh again. */
int pd_sup_restart_resumes(const pd_sup *s)
{
    return s->resumed || s->trained;
}

void pd_sup_set_progress(pd_sup *s, pd_progress *board)
{
    s->board = board;
}

void pd_sup_set_heartbeat(pd_sup *s, double timeout)
{
    s->hb_timeout = timeout > 0 ? timeout : 0;
}

/* Forget every member (each one ended): the job starts again with new ones. */
void pd_sup_clear(pd_sup *s)
{
    for (int i = 0; i < s->n; i++) {
        member *m = &s->m[i];
        if (m->out_fd >= 0) close(m->out_fd);
        if (m->ready_fd >= 0) close(m->ready_fd);
        if (m->chan) pd_ssh_close_chan(m->chan, NULL, NULL);
        for (int k = 0; k < TAIL_LINES; k++) free(m->tail[k]);
        free(m->lost);
        free(m->exit_signal);
        free(m->cause);
    }
    s->n = s->nnodes = s->nrequired = s->nrequired_ok = s->told_done = 0;
}

void pd_sup_free(pd_sup *s)
{
    if (!s) return;
    pd_sup_clear(s);
    free(s->m);
    if (s->log_server >= 0) close(s->log_server);
    if (s->log_train >= 0) close(s->log_train);
    for (size_t i = 0; i < PD_COUNT(caught); i++) sigaction(caught[i], &s->saved[i], NULL);
    sig_fd = -1;
    pd_http_close(&s->http);
    pd_jobstats_free(s->stats);
    close(s->sig_pipe[0]);
    close(s->sig_pipe[1]);
    free(s);
}

static member *add_member(pd_sup *s, int kind, const char *name)
{
    PD_GROW(&s->m, &s->cap, s->n + 1);
    member *m = &s->m[s->n++];
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->out_fd = m->ready_fd = -1;
    snprintf(m->name, sizeof m->name, "%s", name);
    return m;
}

/* --- output -------------------------------------------------------------------- */

typedef struct line_ctx {
    pd_sup *s;
    member *m;
    int is_err;
} line_ctx;

static void add_tail(member *m, const char *line)
{
    free(m->tail[m->tail_pos]);
    m->tail[m->tail_pos] = pd_xstrdup(line);
    m->tail_pos = (m->tail_pos + 1) % TAIL_LINES;
    if (m->ntail < TAIL_LINES) m->ntail++;
}

/* A role's line: "[pserver 0] text" on stdout and in its log; kept for the
 * tail. A trainer's progress line (PD_PROGRESS) goes to the job's progress
 * (local) or to the launcher (on a node), never to the screen or the log. */
static void role_line(void *ctx, char *line)
{
    line_ctx *c = ctx;
    char buf[PD_LINE_MAX + 128];
    int progress = !strncmp(line, PD_PROGRESS, strlen(PD_PROGRESS));
    if (progress && c->s->upstream_fd < 0) {
        c->s->trained = 1;
        if (c->s->board) pd_progress_line(c->s->board, c->m->name, "localhost", line);
        return;
    }
    int n = snprintf(buf, sizeof buf, "[%s] %s\n", c->m->name, line);
    if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1;
    fflush(stdout);
    pd_term_write(1, buf, (size_t)n);
    if (progress) return;
    int fd = c->m->role == PD_ROLE_PSERVER ? c->s->log_server : c->s->log_train;
    if (fd >= 0 && write(fd, buf, (size_t)n) < 0) {}
    add_tail(c->m, line);
    if (c->s->stats) pd_jobstats_line(c->s->stats, c->m->role, c->m->id, line);
    if (c->s->board) pd_progress_line(c->s->board, c->m->name, "localhost", line);
}

/* The launcher: a node's "[trainer 0] text" line to the job's progress.
 * Returns 1 for a progress line (not to be shown). */
static int node_progress(pd_sup *s, member *m, const char *line)
{
    const char *e = line[0] == '[' ? strchr(line, ']') : NULL;
    if (!s->board || !e || e - line > 40 || e[1] != ' ') return 0;
    char name[48];
    snprintf(name, sizeof name, "%.*s", (int)(e - line - 1), line + 1);
    if (!pd_progress_line(s->board, name, m->name, e + 2)) return 0;
    s->trained = 1;
    return 1;
}

/* The launcher: once every node's agent said its trainers finished, each
 * node still running hears so on its channel (its agent waits for that
 * before it stops its pservers on a bound: see finish()). */
static void tell_trainers_done(pd_sup *s)
{
    if (s->told_done) return;
    for (int i = 0; i < s->n; i++)
        if (s->m[i].kind == M_NODE && s->m[i].trainers > 0 && !s->m[i].trainers_done) return;
    s->told_done = 1;
    for (int i = 0; i < s->n; i++) {
        member *m = &s->m[i];
        /* a node that cannot hear it fails on its channel: that is said there */
        if (m->kind == M_NODE && m->chan && !m->lost && !m->killed)
            (void)pd_ssh_write_all(m->chan, CTL "trainers-finished\n", strlen(CTL "trainers-finished\n"));
    }
}

/* A node agent's line: its heartbeat, its report of the role that failed
 * and of its trainers' end (CTL lines on stdout) are the launcher's; the
 * rest goes to on_line. */
static void node_line(void *ctx, char *line)
{
    line_ctx *c = ctx;
    if (!c->is_err && !strncmp(line, CTL, strlen(CTL))) {
        const char *what = line + strlen(CTL);
        if (!strcmp(what, "trainers-finished")) {
            c->m->trainers_done = 1;
            tell_trainers_done(c->s);
            return;
        }
        if (!strncmp(what, "failed ", 7) && !c->m->cause) c->m->cause = pd_xstrdup(what + 7);
        const char *tab = strchr(what, '\t');
        if (!strncmp(what, "failed ", 7) && tab && c->s->board && tab - what < 48) {
            char name[48];
            snprintf(name, sizeof name, "%.*s", (int)(tab - what - 7), what + 7);
            pd_progress_state(c->s->board, name, c->m->name, PD_ST_FAILED);
        }
        return;
    }
    if (c->s->stats) pd_jobstats_node_line(c->s->stats, line);
    if (!c->is_err && node_progress(c->s, c->m, line)) return;
    c->m->on_line(c->m->ctx, line, c->is_err);
}

/* Read what a role wrote; at EOF, its last line and the end of the stream. */
static void drain_role(pd_sup *s, member *m)
{
    char buf[8192];
    line_ctx c = {s, m, 0};
    ssize_t n = read(m->out_fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n > 0) {
        pd_lines_feed(&m->out, buf, (size_t)n, role_line, &c);
        return;
    }
    pd_lines_flush(&m->out, role_line, &c);
    close(m->out_fd);
    m->out_fd = -1;
}

/* Read one stream of a node's channel: a few buffers at a time, so that a
 * chatty node cannot starve the others. */
static void drain_stream(pd_sup *s, member *m, int is_err)
{
    char buf[16384];
    line_ctx c = {s, m, is_err};
    pd_lines *l = is_err ? &m->err : &m->out;
    int *eof = is_err ? &m->err_eof : &m->out_eof;
    for (int rounds = 0; rounds < 4 && !*eof; rounds++) {
        ssize_t k = is_err ? pd_ssh_read_err(m->chan, buf, sizeof buf, eof) : pd_ssh_read(m->chan, buf, sizeof buf, eof);
        if (k < 0) {
            /* the connection broke: say so, not just "the agent failed" */
            if (!m->lost) m->lost = pd_xasprintf("lost the connection to %s: %s", m->name, pd_err_msg());
            *eof = 1;
        }
        if (k <= 0) break;
        m->last_heard = pd_now();
        pd_lines_feed(l, buf, (size_t)k, node_line, &c);
    }
    if (*eof) pd_lines_flush(l, node_line, &c);
}

static void drain_node(pd_sup *s, member *m)
{
    if (!m->chan) return;
    drain_stream(s, m, 0);
    drain_stream(s, m, 1);
    if (m->out_eof && m->err_eof) {
        pd_ssh_close_chan(m->chan, &m->status, &m->exit_signal);
        m->chan = NULL;
    }
}

void pd_sup_feed(pd_sup *s, int i, const char *buf, size_t n)
{
    line_ctx c = {s, &s->m[i], 0};
    pd_lines_feed(&s->m[i].out, buf, n, node_line, &c);
}

int pd_sup_restarts_done(const pd_sup *s) { return s->nrestarts; }

int pd_sup_node_lost(const pd_sup *s, int m) { return m < 0 || m >= s->n || s->m[m].lost != NULL; }

int pd_sup_add_node(pd_sup *s, const char *host, pd_ssh *ssh, pd_ssh_chan *chan, int trainers, pd_node_line_fn fn,
                    void *ctx)
{
    member *m = add_member(s, M_NODE, host);
    m->ssh = ssh;
    m->chan = chan;
    m->trainers = trainers;
    m->on_line = fn;
    m->ctx = ctx;
    m->last_heard = pd_now();
    m->required = 1;
    s->nrequired++;
    s->nnodes++;
    return s->n - 1;
}

/* --- ends ---------------------------------------------------------------------- */

static int ended_well(const member *m);

/* Role m exited with status: its state on the board. */
static void exited(pd_sup *s, member *m, int status)
{
    m->exited = 1;
    m->status = status;
    if (s->board)
        pd_progress_state(s->board, m->name, "localhost",
                          ended_well(m) ? PD_ST_DONE : m->killed ? PD_ST_STOPPED : PD_ST_FAILED);
}

static void reap(pd_sup *s)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        for (int i = 0; i < s->n; i++)
            if (s->m[i].kind == M_ROLE && s->m[i].pid == pid) exited(s, &s->m[i], status);
}

/* Ended: the process exited and its output is read, or the channel closed. */
static int ended(const member *m)
{
    if (m->kind == M_NODE) return m->chan == NULL;
    return m->pid > 0 && m->exited && m->out_fd < 0;
}

static int ended_well(const member *m)
{
    if (m->kind == M_NODE) return !m->lost && m->status == 0 && !m->exit_signal;
    return WIFEXITED(m->status) && WEXITSTATUS(m->status) == 0;
}

/* A role that ended on what it was given (exit status 2: the recipe, its
 * options, a checkpoint of another job), which no restart changes; noted. */
static int config_error(pd_sup *s, const member *m)
{
    int yes;
    if (m->kind == M_ROLE) {
        yes = m->exited && WIFEXITED(m->status) && WEXITSTATUS(m->status) == 2;
    } else { /* a node's: what its agent said failed ("trainer 1\texited with status 2 (...)") */
        const char *how = m->cause ? strchr(m->cause, '\t') : NULL;
        yes = how && !strncmp(how + 1, "exited with status 2", 20) && (how[21] == '\0' || how[21] == ' ');
    }
    if (yes) s->config_error = 1;
    return yes;
}

static void describe(const member *m, char *buf, size_t len)
{
    if (!m->exited) snprintf(buf, len, "still running");
    else if (WIFEXITED(m->status)) snprintf(buf, len, "exited with status %d", WEXITSTATUS(m->status));
    else snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(m->status), strsignal(WTERMSIG(m->status)));
}

static void print_tail(const member *m)
{
    if (m->ntail == 0) return;
    say("paddle: last lines of %s:\n", m->name);
    for (int i = 0; i < m->ntail; i++) {
        int k = (m->tail_pos - m->ntail + i + TAIL_LINES) % TAIL_LINES;
        say("    %s\n", m->tail[k]);
    }
}

/* The message of m's last error line (a log line "E... file:line] MSG"),
 * without m's own name before it, or NULL: what a role that exited
 * non-zero said last, e.g. the trainer a pserver found hung. */
static const char *last_error(const member *m)
{
    for (int i = m->ntail - 1; i >= 0; i--) {
        const char *l = m->tail[(m->tail_pos - m->ntail + i + TAIL_LINES) % TAIL_LINES];
        const char *p = l[0] == 'E' ? strstr(l, "] ") : NULL;
        if (!p) continue;
        p += 2;
        size_t n = strlen(m->name);
        if (strncmp(p, m->name, n) == 0 && p[n] == ':' && p[n + 1] == ' ') p += n + 2;
        return *p ? p : NULL;
    }
    return NULL;
}

/* How m ended, with its last error line where it exited with a status: on
 * one line (the agent's CTL line carries it). */
static void how_ended(const member *m, char *how, size_t len)
{
    describe(m, how, len);
    const char *why = m->exited && WIFEXITED(m->status) ? last_error(m) : NULL;
    if (!why) return;
    size_t k = strlen(how);
    snprintf(how + k, len - k, " (%.300s)", why);
    for (char *c = how + k; *c; c++)
        if (*c == '\t' || *c == '\n' || *c == '\r') *c = ' ';
}

/* Say how a member ended badly, then what follows (`next`: "stopping the
 * job", or the restart). A node agent (upstream) also tells its launcher
 * which role failed and how, on a CTL line. */
static void say_failed(const pd_sup *s, const member *m, const char *next)
{
    if (m->kind == M_NODE) {
        const char *tab = m->cause ? strchr(m->cause, '\t') : NULL;
        if (m->lost) say("paddle: %s; %s\n", m->lost, next);
        else if (tab)
            say("paddle: %.*s on %s %s; %s\n", (int)(tab - m->cause), m->cause, m->name, tab + 1, next);
        else
            say("paddle: the node agent on %s %s; %s\n", m->name,
                    m->exit_signal ? "was killed" : "failed (see the lines above for the role)", next);
        return;
    }
    char how[400];
    how_ended(m, how, sizeof how);
    say("paddle: %s %s; %s\n", m->name, how, next);
    print_tail(m);
    if (s->upstream_fd >= 0) {
        printf(CTL "failed %s\t%s\n", m->name, how);
        fflush(stdout);
    }
}

/* Who ended how, after a stop: every role of this supervisor. */
static void report(const pd_sup *s)
{
    for (int i = 0; i < s->n; i++) {
        const member *m = &s->m[i];
        if (m->kind != M_ROLE || m->pid <= 0) continue;
        char how[96];
        describe(m, how, sizeof how);
        /* asked to stop and ended on its own: a role stopped on a signal
         * exits 130 (1 or 0 in earlier versions), which is no failure of its
         * own; one that had not set its handlers yet (loading the recipe)
         * ends on SIGTERM */
        int asked = m->killed && m->exited &&
                    ((WIFEXITED(m->status) && (WEXITSTATUS(m->status) <= 1 || WEXITSTATUS(m->status) == 130)) ||
                     (WIFSIGNALED(m->status) && WTERMSIG(m->status) == SIGTERM));
        if (asked) snprintf(how, sizeof how, "stopped");
        say("paddle:   %-12s %s%s\n", m->name, how, m->killed && !asked ? " (stopped by the launcher)" : "");
    }
}

/* --- the loop ------------------------------------------------------------------- */

/* UNTIL_ENDED_OR_STOP: until every member ended, a signal came or the
 * launcher went away (returned, not held) */
enum { UNTIL_EVENT, UNTIL_ALL_ENDED, UNTIL_ENDED_OR_STOP };

/* A node agent: a line from the launcher (any other is ignored). */
static void upstream_line(void *ctx, char *line)
{
    if (!strcmp(line, CTL "trainers-finished")) ((pd_sup *)ctx)->others_done = 1;
}

/* Read the self-pipe and the upstream channel after poll(); returns the
 * signal that arrived, -1 when the launcher went away, or 0. */
static int take_events(pd_sup *s, const struct pollfd *sp, const struct pollfd *up)
{
    int sig = 0;
    if (sp->revents & POLLIN) {
        unsigned char b[16];
        ssize_t k = read(s->sig_pipe[0], b, sizeof b);
        for (ssize_t i = 0; i < k; i++)
            if (b[i] != SIGCHLD) sig = b[i];
    }
    if (up && (up->revents & (POLLIN | POLLHUP | POLLERR))) {
        char b[256];
        ssize_t k = read(s->upstream_fd, b, sizeof b);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
            s->upstream_fd = -1; /* the launcher went away */
            sig = -1;
        } else if (k > 0) {
            pd_lines_feed(&s->upstream, b, (size_t)k, upstream_line, s);
        }
    }
    return sig;
}

/* Heartbeats. A node agent writes one on its channel every hb_period
 * seconds; the launcher treats a node it has heard nothing from for
 * hb_timeout seconds as dead: it cuts the connection (every later call on
 * it fails at once, so nothing waits for the node) and says why. */
static void heartbeats(pd_sup *s)
{
    double now = pd_now();
    if (s->hb_period > 0 && s->upstream_fd >= 0 && now >= s->next_hb) {
        printf(CTL "heartbeat\n");
        fflush(stdout);
        s->next_hb = now + s->hb_period;
    }
    for (int i = 0; i < s->n && s->hb_timeout > 0; i++) {
        member *m = &s->m[i];
        if (m->kind != M_NODE || !m->chan || m->lost || now - m->last_heard < s->hb_timeout) continue;
        m->lost = pd_xasprintf("%s did not answer for %.0f s (settings.heartbeat_timeout): the node or its "
                               "connection hangs", m->name, now - m->last_heard);
        pd_ssh_cut(m->ssh);
    }
}

/* Stream output and reap until every member ended (UNTIL_ALL_ENDED) or one
 * ended and was not looked at yet, a signal came or the launcher went away
 * (UNTIL_EVENT), or every member ended or a signal came or the launcher went
 * away (UNTIL_ENDED_OR_STOP), or the deadline. Returns the signal, -1 (the
 * launcher went away) or 0. Under UNTIL_ALL_ENDED a signal is held, and the
 * next pump() of another mode returns it at once: Ctrl+C while the roles
 * stop for a restart stops the job, not the restart. */
static int pump(pd_sup *s, double deadline, int until)
{
    int sig = s->held_sig;
    if (sig && until != UNTIL_ALL_ENDED) {
        s->held_sig = 0;
        return sig;
    }
    struct pollfd *p = pd_xcalloc((size_t)s->n + 3, sizeof *p);
    int *who = pd_xcalloc((size_t)s->n + 3, sizeof *who);
    sig = 0;
    for (;;) {
        reap(s);
        int running = 0, unhandled = 0;
        for (int i = 0; i < s->n; i++) {
            if (s->m[i].kind == M_NODE) drain_node(s, &s->m[i]);
            if (!ended(&s->m[i])) running += s->m[i].pid > 0 || s->m[i].kind == M_NODE;
            else unhandled += !s->m[i].handled;
        }
        if (until != UNTIL_EVENT ? running == 0 : unhandled > 0) break;
        heartbeats(s);
        if (s->board) pd_progress_show(s->board);
        double left = deadline - pd_now();
        if (left <= 0) break;
        int n = 0, up = -1, web = -1;
        p[n++] = (struct pollfd){.fd = s->sig_pipe[0], .events = POLLIN};
        if (s->stats) {
            web = n;
            p[n++] = (struct pollfd){.fd = pd_http_fd(&s->http), .events = POLLIN};
        }
        if (s->upstream_fd >= 0) {
            up = n;
            p[n++] = (struct pollfd){.fd = s->upstream_fd, .events = POLLIN};
        }
        for (int i = 0; i < s->n; i++) {
            member *m = &s->m[i];
            if (m->kind == M_ROLE && m->out_fd >= 0) p[n] = (struct pollfd){.fd = m->out_fd, .events = POLLIN};
            else if (m->kind == M_NODE && m->chan)
                p[n] = (struct pollfd){.fd = pd_ssh_fd(m->ssh), .events = (short)pd_ssh_events(m->ssh)};
            else continue;
            who[n++] = i;
        }
        double period = s->board && s->board->live ? PD_TERM_PERIOD : POLL_PERIOD;
        int r = poll(p, (nfds_t)n, (int)(PD_MIN(left, period) * 1000) + 1);
        if (r < 0 && errno != EINTR) break;
        if (s->stats) pd_http_serve(&s->http);
        if (r <= 0) continue;
        int got = take_events(s, &p[0], up >= 0 ? &p[up] : NULL);
        if (got) sig = got;
        if (sig && until != UNTIL_ALL_ENDED) break;
        for (int i = 1; i < n; i++)
            if (i != up && i != web && s->m[who[i]].kind == M_ROLE && (p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                drain_role(s, &s->m[who[i]]);
    }
    free(p);
    free(who);
    if (until != UNTIL_ALL_ENDED) return sig;
    if (sig && !s->held_sig) s->held_sig = sig;
    return 0;
}

static int is_trainer(const member *m)
{
    return m->kind == M_ROLE && m->role == PD_ROLE_TRAINER;
}

/* Step 3 of the path above: ask a member to stop. */
static void ask_stop(member *m)
{
    if (m->kind == M_ROLE && m->pid > 0 && !m->exited) {
        m->killed = 1;
        kill(-m->pid, SIGTERM);
        kill(-m->pid, SIGCONT); /* a stopped role (SIGSTOP, Ctrl+Z) takes the SIGTERM now */
    } else if (m->kind == M_NODE && m->chan) {
        m->killed = 1;
        pd_ssh_send_eof(m->chan); /* the agent there sees EOF: step 4 */
    }
}

/* End every member still running: SIGTERM to each role's group (EOF to each
 * node's channel), SIGKILL to the groups left after PD_STOP_GRACE, then close
 * the channels left after PD_KILL_WAIT (their agents had as long to SIGKILL). */
void pd_sup_stop_all(pd_sup *s)
{
    reap(s);
    /* the trainers first: each has its SIGTERM before a pserver stopped by
     * its own closes their connections, and ends as stopped, not failed */
    for (int i = 0; i < s->n; i++)
        if (is_trainer(&s->m[i])) ask_stop(&s->m[i]);
    for (int i = 0; i < s->n; i++)
        if (!is_trainer(&s->m[i])) ask_stop(&s->m[i]);
    pump(s, pd_now() + PD_STOP_GRACE, UNTIL_ALL_ENDED);
    reap(s);
    for (int i = 0; i < s->n; i++) {
        member *m = &s->m[i];
        if (m->kind == M_ROLE && m->pid > 0 && !m->exited) {
            say("paddle: %s did not stop within %.0f s: killing it\n", m->name, PD_STOP_GRACE);
            kill(-m->pid, SIGKILL);
        }
    }
    pump(s, pd_now() + PD_KILL_WAIT, UNTIL_ALL_ENDED);
    for (int i = 0; i < s->n; i++) {
        member *m = &s->m[i];
        if (m->kind == M_NODE && m->chan) {
            say("paddle: %s did not stop within %.0f s; closing its connection\n", m->name,
                    PD_STOP_GRACE + PD_KILL_WAIT);
            pd_ssh_close_chan(m->chan, &m->status, &m->exit_signal);
            m->chan = NULL;
        }
        int st;
        if (m->kind == M_ROLE && m->pid > 0 && !m->exited && waitpid(m->pid, &st, 0) == m->pid) exited(s, m, st);
    }
}

/* What stopped the job, for a line about it: the signal, or -1 (the
 * launcher went away). */
static const char *why_stopped(int sig)
{
    return sig < 0 ? "the launcher went away" : sig == SIGINT ? "interrupted (Ctrl+C)" : strsignal(sig);
}

/* A job that cannot finish: say why (sig: the signal, -1: the launcher went
 * away, 0: a failure already said), stop every member, say who ended how.
 * Returns the exit status. */
static void end_progress(pd_progress *board, int status);

static int stop_job(pd_sup *s, int sig)
{
    if (sig)
        say("paddle: %s: stopping every role%s\n", why_stopped(sig), s->nnodes ? " on every node" : "");
    if (s->board) pd_progress_all(s->board, PD_ST_STOPPING, 0);
    pd_sup_stop_all(s);
    report(s);
    /* a role ended on what it was given: the launcher's own status says so too,
     * so that what runs paddle does not retry a job that would end the same way */
    int status = sig ? 130 : s->config_error ? 2 : 1;
    end_progress(s->board, status); /* its last line before the advice */
    s->board = NULL;
    long step;
    /* the launcher's, with settings.checkpoint_dir: a job that trained or
     * resumed goes on with --resume; one started fresh that trained no
     * batch left the earlier job's checkpoints as they were */
    int ckpt = s->checkpoints && sig >= 0 && !s->config_error &&
               (!s->ckpt_dir || pd_ckpt_list(s->ckpt_dir, &step, 1, 1) == 1);
    if (ckpt && pd_sup_restart_resumes(s))
        say("paddle: the same command with --resume continues the job from its last complete checkpoint\n");
    else if (ckpt && s->ckpt_dir)
        say("paddle: this job trained no batch, and %s holds the earlier job's checkpoints: the same command "
            "with --resume continues that job\n", s->ckpt_dir);
    return status;
}

/* Member m failed and a restart is left: say so, stop every member, wait the
 * backoff. Returns PD_SUP_RESTART, or 130 when a signal came meanwhile. */
static int restart_job(pd_sup *s, member *m)
{
    char next[128];
    s->nrestarts++;
    snprintf(next, sizeof next, "restarting the job from %s (restart %d of %d)",
             !s->checkpoints                ? "its first pass (no settings.checkpoint_dir)"
             : pd_sup_restart_resumes(s) ? "its last checkpoint"
                                         : "its start (it had not trained a batch)",
             s->nrestarts, s->restarts);
    say_failed(s, m, next);
    pd_sup_stop_all(s);
    for (int i = 0; i < s->n; i++) s->m[i].handled = 1;
    if (s->board) pd_progress_all(s->board, PD_ST_RESTARTING, 1);
    double delay = BACKOFF_FIRST;
    for (int k = 1; k < s->nrestarts && delay < BACKOFF_MAX; k++) delay *= 2;
    int sig = pump(s, pd_now() + PD_MIN(delay, BACKOFF_MAX), UNTIL_EVENT);
    if (sig) {
        say("paddle: %s: not restarting the job\n", why_stopped(sig));
        if (sig > 0 && s->checkpoints && pd_sup_restart_resumes(s))
            say("paddle: the same command with --resume continues the job from its last complete checkpoint\n");
        return 130;
    }
    return PD_SUP_RESTART;
}

/* How much a failure says about its cause: a member killed by a signal or a
 * lost node is a first cause (2); a role that exited with a status often
 * only saw another fail (a trainer whose pserver died) (1); a member still
 * running with nothing reported is not a failure (0). */
static int cause_rank(const member *m)
{
    if (m->kind == M_NODE) {
        if (m->lost) return 2;
        const char *tab = m->cause ? strchr(m->cause, '\t') : NULL;
        if (tab) return strstr(tab, "killed") ? 2 : 1;
        return ended(m) && !ended_well(m) ? 1 : 0;
    }
    if (!ended(m) || ended_well(m)) return 0;
    return WIFSIGNALED(m->status) && !m->killed ? 2 : 1;
}

/* Member m ended badly. When it only exited with a status, wait up to SETTLE
 * seconds for news of a first cause elsewhere (the pserver killed on another
 * node arrives over its own connection) and return the member that names the
 * cause best. Every member ended meanwhile is taken as handled; a signal that
 * came meanwhile is left in *sig. */
static member *first_cause(pd_sup *s, member *m, int *sig)
{
    double deadline = pd_now() + SETTLE;
    while (cause_rank(m) < 2 && pd_now() < deadline) {
        if ((*sig = pump(s, deadline, UNTIL_EVENT))) break;
        for (int i = 0; i < s->n; i++) {
            member *o = &s->m[i];
            if (ended(o)) o->handled = 1;
            if (cause_rank(o) > cause_rank(m)) m = o;
        }
    }
    return m;
}

int pd_sup_run(pd_sup *s)
{
    for (;;) {
        if (s->nrequired_ok == s->nrequired) return 0;
        int sig = pump(s, pd_now() + 3600, UNTIL_EVENT);
        if (sig) return stop_job(s, sig); /* Ctrl+C, or the launcher went away */
        for (int i = 0; i < s->n; i++) {
            member *m = &s->m[i];
            if (!ended(m) || m->handled) continue;
            m->handled = 1;
            if (ended_well(m)) {
                s->nrequired_ok += m->required;
                continue;
            }
            /* A member ended badly. The policy: restart the whole job
             * (every role goes back to the last complete checkpoint) while
             * job.restarts allows, else stop it. */
            m = first_cause(s, m, &sig);
            if (sig) return stop_job(s, sig);
            if (config_error(s, m)) {
                say_failed(s, m, "stopping the job (what it was given is wrong: a restart would end the same way)");
                return stop_job(s, 0);
            }
            if (s->nrestarts < s->restarts) return restart_job(s, m);
            say_failed(s, m, "stopping the job");
            return stop_job(s, 0);
        }
    }
}

/* --- /metrics -------------------------------------------------------------------- */

/* GET /metrics on the launcher: the job as its trainers' lines tell it, and
 * its members as the supervisor sees them. */
static void write_metrics(void *ctx, pd_buf *b)
{
    pd_sup *s = ctx;
    pd_prom_head(b, "paddle_job_restarts_total", "counter", "Restarts of the job after a failure (job.restarts).");
    pd_prom_val(b, "paddle_job_restarts_total", NULL, s->nrestarts);
    pd_prom_head(b, "paddle_job_member_up", "gauge", "1 while a role (local job) or node agent (SSH job) runs.");
    for (int i = 0; i < s->n; i++) {
        char name[96], label[128];
        pd_prom_escape(name, sizeof name, s->m[i].name);
        snprintf(label, sizeof label, "member=\"%s\"", name);
        pd_prom_val(b, "paddle_job_member_up", label, !ended(&s->m[i]) && (s->m[i].pid > 0 || s->m[i].kind == M_NODE));
    }
    pd_jobstats_write(s->stats, b);
    pd_prom_head(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    pd_prom_val(b, "process_resident_memory_bytes", NULL, pd_prom_rss());
}

int pd_sup_serve_metrics(pd_sup *s, const pd_recipe *r, const char *bind)
{
    if (r->metrics_port <= 0 || s->stats) return 0;
    int rc = pd_http_open(&s->http, bind, r->metrics_port, write_metrics, s);
    if (rc < 0) return rc;
    s->stats = pd_jobstats_new(r);
    printf("paddle: metrics on http://%s:%d/metrics (pserver i: port %d + i)\n", bind ? bind : "0.0.0.0",
           r->metrics_port, r->metrics_port + 1);
    fflush(stdout);
    return 0;
}

/* --- the agent: roles as children ---------------------------------------------------- */

/* argv for a role: exe, role, recipe, options, overrides. */
static char **role_argv(const char *exe, const pd_recipe *r, const pd_agent_opts *o, const member *m,
                        const char *endpoints, int resume)
{
    int cap = 16 + r->noverrides, n = 0;
    char **a = pd_xcalloc((size_t)cap, sizeof *a);
    a[n++] = pd_xstrdup(exe);
    a[n++] = pd_xstrdup(pd_role_name(m->role));
    a[n++] = pd_xstrdup(r->path);
    if (o->cluster) a[n++] = pd_xasprintf("--cluster=%s", o->cluster);
    for (int i = 0; i < r->noverrides; i++) a[n++] = pd_xasprintf("--%s=%s", r->overrides[i].key, r->overrides[i].value);
    if (m->role == PD_ROLE_PSERVER) a[n++] = pd_xasprintf("--pservers=%d", r->pservers);
    else a[n++] = pd_xasprintf("--pservers=%s", endpoints); /* a trainer's: the endpoint list */
    a[n++] = pd_xasprintf("--trainers=%d", r->trainers);
    a[n++] = pd_xstrdup("--secret_fd=3");
    a[n++] = pd_xstrdup("--log_dir=log");
    if (resume) a[n++] = pd_xstrdup("--resume");
    if (m->role == PD_ROLE_PSERVER) {
        a[n++] = pd_xasprintf("--pserver_id=%d", m->id);
        a[n++] = pd_xasprintf("--port=%d", m->want_port);
        a[n++] = pd_xstrdup("--ready_fd=4");
        if (o->upstream_fd < 0) a[n++] = pd_xstrdup("--bind=127.0.0.1");
        else if (o->bind) a[n++] = pd_xasprintf("--bind=%s", o->bind);
    } else {
        a[n++] = pd_xasprintf("--trainer_id=%d", m->id);
        a[n++] = pd_xstrdup("--status_lines"); /* progress lines, consumed by role_line() */
        if (m->id == 0 && o->init_model) a[n++] = pd_xasprintf("--init_model=%s", o->init_model);
    }
    a[n] = NULL;
    return a;
}

/* Start a role running argv with the secret on fd 3 and (pservers) a ready
 * pipe on fd 4. */
static int spawn(member *m, char **argv, const uint8_t *secret)
{
    int out[2], sec[2], rdy[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(sec, O_CLOEXEC) < 0) return pd_err_set(PD_EIO, "pipe: %s", strerror(errno));
    if (m->role == PD_ROLE_PSERVER && pipe2(rdy, O_CLOEXEC) < 0) return pd_err_set(PD_EIO, "pipe: %s", strerror(errno));
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return pd_err_set(PD_EIO, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* the child: die with its agent, own process group */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        setpgid(0, 0);
        for (size_t i = 0; i < PD_COUNT(caught); i++) signal(caught[i], SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(out[1], 1);
        dup2(out[1], 2);
        dup2(sec[0], 3);
        if (rdy[1] >= 0) dup2(rdy[1], 4);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        execv(argv[0], argv);
        say("cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(out[1]);
    close(sec[0]);
    if (rdy[1] >= 0) close(rdy[1]);
    char hex[2 * PD_SECRET + 2];
    pd_hex(secret, PD_SECRET, hex);
    strcat(hex, "\n");
    if (write(sec[1], hex, strlen(hex)) < 0) {}
    close(sec[1]);
    m->pid = pid;
    m->out_fd = out[0];
    m->ready_fd = rdy[0];
    fcntl(m->out_fd, F_SETFL, O_NONBLOCK);
    return 0;
}

static int start_role(pd_sup *s, int i, const char *exe, const pd_recipe *r, const pd_agent_opts *o,
                      const char *endpoints, const uint8_t *secret)
{
    char **argv = role_argv(exe, r, o, &s->m[i], endpoints,
                            s->nrestarts > 0 ? pd_sup_restart_resumes(s) : o->resume);
    if (s->board) pd_progress_state(s->board, s->m[i].name, "localhost", PD_ST_STARTING);
    int rc = spawn(&s->m[i], argv, secret);
    for (int k = 0; argv[k]; k++) free(argv[k]);
    free(argv);
    if (rc < 0) say("paddle: cannot start %s: %s\n", s->m[i].name, pd_err_msg());
    return rc;
}

/* Read the port a pserver reports on its ready pipe; -1 when it cannot. */
static int read_ready(member *m)
{
    char buf[32];
    ssize_t n = read(m->ready_fd, buf, sizeof buf - 1);
    if (n <= 0) return -1;
    buf[n] = '\0';
    int port = atoi(buf);
    close(m->ready_fd);
    m->ready_fd = -1;
    return port > 0 && port < 65536 ? port : -1;
}

/* Wait until pserver m reports its port. Returns 0, or 1 when it cannot:
 * the pserver failed or timed out (said), or *sig is set (a signal came, or
 * -1: the launcher went away). */
static member *failed_early(pd_sup *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->m[i].kind == M_ROLE && s->m[i].exited && !ended_well(&s->m[i])) return &s->m[i];
    return NULL;
}

/* Pserver m closed its ready pipe, or another role ended: name the first
 * that ended badly (m, after it ended, when none did), with its last lines.
 * A signal that comes meanwhile is kept in *sig: the job stops on it. */
static int not_listening(pd_sup *s, member *m, int *sig)
{
    member *first = NULL;
    for (double until = pd_now() + 2; !*sig && !m->exited && !(first = failed_early(s)) && pd_now() < until;)
        *sig = pump(s, pd_now() + 0.05, UNTIL_EVENT);
    if (*sig) return 1;
    if (first || (first = failed_early(s))) m = first;
    config_error(s, m);
    *sig = pump(s, pd_now() + 0.2, UNTIL_ENDED_OR_STOP); /* the output it left */
    char how[96];
    describe(m, how, sizeof how);
    say("paddle: %s %s before it listened\n", m->name, how);
    print_tail(m);
    if (s->upstream_fd >= 0) { /* a node's agent: the launcher hears which role and how */
        printf(CTL "failed %s\t%s\n", m->name, how);
        fflush(stdout);
    }
    return 1;
}

static int wait_ready(pd_sup *s, member *m, double deadline, int *sig)
{
    while (m->port == 0) {
        struct pollfd p = {.fd = m->ready_fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0 && (m->port = read_ready(m)) < 0) return not_listening(s, m, sig);
        if ((*sig = pump(s, pd_now() + 0.01, UNTIL_EVENT)) != 0) return 1;
        if (failed_early(s)) return not_listening(s, m, sig);
        if (pd_now() > deadline) {
            say("paddle: %s did not start listening within %.0f s\n", m->name, READY_TIMEOUT);
            print_tail(m);
            return 1;
        }
    }
    return 0;
}

/* Start the pservers, wait for their ports, then start the trainers with the
 * endpoints (local: the ports the pservers report; node: the launcher's).
 * Returns 0, or the exit status of a job that could not start (stopped). */
static int start_roles(pd_sup *s, const pd_recipe *r, const pd_agent_opts *o, const char *exe,
                       const uint8_t *secret)
{
    int sig = 0, i;
    for (i = 0; i < s->n && s->m[i].role == PD_ROLE_PSERVER; i++)
        if (start_role(s, i, exe, r, o, NULL, secret) < 0) return stop_job(s, 0);
    int nps = i;
    double deadline = pd_now() + READY_TIMEOUT;
    for (i = 0; i < nps; i++)
        if (wait_ready(s, &s->m[i], deadline, &sig)) return stop_job(s, sig);
    char *endpoints = pd_xstrdup(o->endpoints ? o->endpoints : "");
    for (i = 0; i < nps && !o->endpoints; i++) {
        char *e = pd_xasprintf("%s%s127.0.0.1:%d", endpoints, i ? "," : "", s->m[i].port);
        free(endpoints);
        endpoints = e;
    }
    int rc = 0;
    for (i = nps; i < s->n && rc == 0; i++) rc = start_role(s, i, exe, r, o, endpoints, secret);
    free(endpoints);
    return rc < 0 ? stop_job(s, 0) : 0;
}

/* Whether a role still runs or has output not read yet. */
static int roles_running(const pd_sup *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->m[i].kind == M_ROLE && s->m[i].pid > 0 && !ended(&s->m[i])) return 1;
    return 0;
}

/* The trainers finished: the pservers exit by themselves once every trainer
 * said FINISH. Where every trainer of the job ran here, they did, and the
 * pservers get DONE_WAIT. A node's agent says to its launcher that its
 * trainers finished; where its pservers serve trainers elsewhere too, it
 * keeps them, saying so after DONE_WAIT, until the launcher says every
 * node's trainers finished (however long trainer 0's final test and save
 * take: with a growing table they read rows from the pservers), then
 * gives them DONE_WAIT + server_timeout + heartbeat_timeout more: a hung
 * pserver would keep it for ever. A trainer elsewhere that fails ends the
 * job from its own node. A signal, or the launcher going, stops them at
 * once. Returns the exit status. */
static int finish(pd_sup *s, const pd_recipe *r)
{
    int node = s->upstream_fd >= 0, here = 0, sig = 0, said = 0;
    for (int i = 0; i < s->n; i++) here += is_trainer(&s->m[i]);
    if (node && here > 0) {
        printf(CTL "trainers-finished\n");
        fflush(stdout);
    }
    int elsewhere = node && here < r->trainers;
    double t0 = pd_now(), limit = DONE_WAIT + (elsewhere ? r->server_timeout + r->heartbeat_timeout : 0);
    while (!sig && roles_running(s)) {
        if (elsewhere && s->others_done) {
            elsewhere = 0;
            t0 = pd_now();
            if (said) say("paddle: the trainers on every node finished\n");
        }
        if (!elsewhere && pd_now() >= t0 + limit) break;
        if (elsewhere && !said && pd_now() >= t0 + DONE_WAIT) {
            say("paddle: this node's trainers finished %.0f s ago; its pservers still serve the trainers on other "
                "nodes: waiting for them to finish\n", DONE_WAIT);
            said = 1;
        }
        sig = pump(s, elsewhere ? pd_now() + POLL_PERIOD : t0 + limit, UNTIL_ENDED_OR_STOP);
    }
    reap(s);
    int left = roles_running(s), status = 0;
    if (left && !sig) say("paddle: the pservers did not end %.0f s after the trainers finished: stopping them\n", limit);
    if (left) pd_sup_stop_all(s);
    if (!sig && s->held_sig) { /* a Ctrl+C while they stopped: the job ends as interrupted */
        sig = s->held_sig;
        s->held_sig = 0;
    }
    for (int i = 0; i < s->n; i++) {
        member *m = &s->m[i];
        if (m->role == PD_ROLE_PSERVER && !m->killed && !ended_well(m)) {
            char how[400];
            how_ended(m, how, sizeof how);
            say("paddle: %s %s after the trainers finished\n", m->name, how);
            print_tail(m);
            status = 1;
        }
    }
    if (left && sig) {
        char where[600] = ""; /* a node's launcher copies the model: it says where */
        if (!node) snprintf(where, sizeof where, "; the model is in %.500s/", r->save_dir);
        say("paddle: %s after the trainers finished: the pservers were stopped%s\n", why_stopped(sig), where);
        if (status == 0) status = 130;
    }
    return status;
}

static int open_log(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) say("paddle: cannot write %s: %s\n", path, strerror(errno));
    return fd;
}

/* The members: o's roles, pservers first. The job is done when the trainers
 * are (a node without trainers: when its pservers are, every trainer
 * elsewhere having said FINISH). */
static void add_roles(pd_sup *s, const pd_agent_opts *o)
{
    int ntr = 0;
    for (int i = 0; i < o->nroles; i++) ntr += o->roles[i].kind == PD_ROLE_TRAINER;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < o->nroles; i++) {
            const pd_role *ro = &o->roles[i];
            if (ro->kind != (k == 0 ? PD_ROLE_PSERVER : PD_ROLE_TRAINER)) continue;
            char name[64];
            snprintf(name, sizeof name, "%s %d", pd_role_name(ro->kind), ro->id);
            member *m = add_member(s, M_ROLE, name);
            m->role = ro->kind;
            m->id = ro->id;
            m->want_port = ro->port;
            m->required = ntr > 0 ? ro->kind == PD_ROLE_TRAINER : 1;
            s->nrequired += m->required;
        }
}

/* The end of a local job's progress: the block erased, its last state said. */
static void end_progress(pd_progress *board, int status)
{
    if (!board) return;
    pd_progress_end(board, !board->live ? NULL : status == 0 ? "job done" : status == 130 ? "stopped" : "failed");
    pd_progress_free(board);
}

/* The tail of a local job's first line: the checkpoint it resumes from.
 * 2 (said) when --resume names a checkpoint_dir that is not there: a typo
 * there would start a new job beside the one to continue. */
static int starts_from(const pd_recipe *r, const pd_agent_opts *o, char *from, size_t size)
{
    const char *dir = r->checkpoint_dir;
    long step;
    if (!o->resume) return 0;
    if (dir && access(dir, F_OK) != 0) {
        fprintf(stderr, "paddle: --resume: settings.checkpoint_dir = %s is not there (%s): check its name (every "
                "role makes it as it starts, so a job that ran has one)\n", dir, strerror(errno));
        return 2;
    }
    if (dir && pd_ckpt_list(dir, &step, 1, 1) == 1)
        snprintf(from, size, ", resuming from its last complete checkpoint (%.500s/ckpt-%ld)", dir, step);
    else
        snprintf(from, size, ", --resume: no complete checkpoint under %.500s yet, so it starts fresh",
                 dir ? dir : "settings.checkpoint_dir");
    return 0;
}

int pd_job_lock(const pd_recipe *r, const char *cmd, int which)
{
    char *job = pd_xasprintf("paddle %s %s", cmd, r->path);
    int rc = 0;
    if (which & PD_LOCK_LOG)
        rc = pd_dir_lock("log", NULL, job, "start this one from another directory (log/ is the current one's)");
    /* a path that cannot be written is said as the roles say it */
    if (rc == 0 && (which & PD_LOCK_SAVE) && (rc = pd_dir_writable(r->save_dir, "settings.save_dir")) == 0)
        rc = pd_dir_lock(r->save_dir, "settings.save_dir", job, "give this one another --save_dir");
    if (rc == 0 && (which & PD_LOCK_CKPT) && r->checkpoint_dir &&
        (rc = pd_dir_writable(r->checkpoint_dir, "settings.checkpoint_dir")) == 0)
        rc = pd_dir_lock(r->checkpoint_dir, "settings.checkpoint_dir", job, "give this one another --checkpoint_dir");
    free(job);
    if (rc == 0) return 0;
    fprintf(stderr, "paddle: %s\n", pd_err_msg());
    return 2;
}

int pd_agent_run(const pd_recipe *r, const pd_agent_opts *o)
{
    int local = o->upstream_fd < 0, status = 1;
    double t0 = pd_now();
    uint8_t secret[PD_SECRET];
    pd_progress board;
    if (r->pservers < 1) {
        fprintf(stderr, "paddle: %s: a job needs at least one pserver (job.pservers); "
                        "use 'paddle train' for training without pservers\n", r->path);
        return 2;
    }
    char *exe = pd_self_exe();
    pd_sup *s = exe ? pd_sup_new() : NULL;
    if (!s || (local ? pd_secret_new(secret) : (memcpy(secret, o->secret, PD_SECRET), 0)) < 0) {
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        goto out;
    }
    if (mkdir("log", 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "paddle: cannot create log/: %s\n", strerror(errno));
        goto out;
    }
    s->log_server = open_log("log/server.log");
    s->log_train = open_log("log/train.log");
    s->upstream_fd = o->upstream_fd;
    if (local) {
        char from[600] = "";
        if ((status = starts_from(r, o, from, sizeof from)) != 0) goto out;
        /* before anything of this job is written or removed there */
        if ((status = pd_job_lock(r, "run", PD_LOCK_LOG | PD_LOCK_SAVE | PD_LOCK_CKPT)) != 0) goto out;
        status = 1;
        printf("paddle: local job %s: %d pserver%s, %d trainer%s, %s mode%s; logs in log/\n", r->path, r->pservers,
               r->pservers > 1 ? "s" : "", r->trainers, r->trainers > 1 ? "s" : "", r->mode, from);
        long step;
        if (!o->resume && r->checkpoint_dir && pd_ckpt_list(r->checkpoint_dir, &step, 1, 1) == 1)
            printf("paddle: warning: %s holds a complete checkpoint of an earlier job (ckpt-%ld); this job starts "
                   "fresh (no --resume), and once it trains that job can no longer be resumed: to continue it "
                   "instead, stop this one now (Ctrl+C) and add --resume\n", r->checkpoint_dir, step);
        fflush(stdout);
        /* on a node, restarts are the launcher's */
        pd_sup_set_restarts(s, r->restarts, r->checkpoint_dir != NULL, o->resume);
        s->ckpt_dir = r->checkpoint_dir;
        if (pd_sup_serve_metrics(s, r, "127.0.0.1") < 0) {
            fprintf(stderr, "paddle: %s\n", pd_err_msg());
            goto out;
        }
        char title[160];
        snprintf(title, sizeof title, "paddle run %s", r->path);
        pd_progress_init(&board, title, r->passes, 1);
        s->board = &board;
    } else {
        s->hb_period = PD_MAX(0.5, PD_MIN(5.0, r->heartbeat_timeout / 4));
    }
    do {
        pd_sup_clear(s);
        add_roles(s, o);
        if ((status = start_roles(s, r, o, exe, secret)) != 0) goto out;
    } while ((status = pd_sup_run(s)) == PD_SUP_RESTART);
    if (status != 0) goto out;
    status = finish(s, r);
    end_progress(s->board, status);
    s->board = NULL;
    if (local && status != 130)
        printf("paddle: job done in %.1f s%s%.0d%s: %d trainer%s finished, %d pserver%s stopped; model in %s/\n",
               pd_now() - t0, s->nrestarts ? " after " : "", s->nrestarts,
               s->nrestarts == 0 ? "" : s->nrestarts == 1 ? " restart" : " restarts", r->trainers, r->trainers > 1 ? "s" : "", r->pservers, r->pservers > 1 ? "s" : "", r->save_dir);
out:
    if (s) end_progress(s->board, status);
    pd_sup_free(s);
    free(exe);
    return status;
}
