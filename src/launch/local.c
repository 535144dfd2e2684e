/* local.c - start the roles as children, stream their output, end the job. */
#include "local.h"
#include "plan.h"
#include "secret.h"
#include "../core/log.h"
#include "../core/pd.h"
#include "../ps/proto.h"
#include "../core/crypto.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TAIL_LINES 15
#define READY_TIMEOUT 30.0
#define STOP_GRACE 4.0

typedef struct child {
    int kind, id;
    char name[32];
    pid_t pid;
    int out_fd;             /* its stdout+stderr, -1 when closed */
    int ready_fd;           /* pservers: reports the port */
    int port;               /* the port it listens on */
    int want_port;          /* agent mode: the planned port */
    char line[4096];
    size_t line_len;
    char *tail[TAIL_LINES];
    int ntail, tail_pos;
    int exited, status;
    int killed;             /* we asked it to stop */
    int handled;            /* its end was looked at */
} child;

typedef struct job {
    child *kids;
    int nkids;
    int log_server, log_train;
    int sig_pipe[2];
    int watch_fd;           /* EOF here ends the job (agent mode), or -1 */
    double t0;
} job;

static int sig_fd = -1;

static void on_sig(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (sig_fd >= 0 && write(sig_fd, &b, 1) < 0) {}
    errno = saved;
}

static void add_tail(child *c, const char *line)
{
    free(c->tail[c->tail_pos]);
    c->tail[c->tail_pos] = pd_xstrdup(line);
    c->tail_pos = (c->tail_pos + 1) % TAIL_LINES;
    if (c->ntail < TAIL_LINES) c->ntail++;
}

static void emit_line(job *j, child *c, const char *line)
{
    char buf[4200];
    int n = snprintf(buf, sizeof buf, "[%s] %s\n", c->name, line);
    if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1;
    if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n) {}
    fflush(stdout);
    int fd = c->kind == PD_ROLE_PSERVER ? j->log_server : j->log_train;
    if (fd >= 0 && write(fd, buf, (size_t)n) < 0) {}
    add_tail(c, line);
}

/* Read what a child wrote; returns 0, or -1 at EOF. */
static int drain(job *j, child *c)
{
    char buf[8192];
    ssize_t n = read(c->out_fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    if (n <= 0) {
        if (c->line_len) {
            c->line[c->line_len] = '\0';
            emit_line(j, c, c->line);
            c->line_len = 0;
        }
        close(c->out_fd);
        c->out_fd = -1;
        return -1;
    }
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == '\n' || c->line_len == sizeof c->line - 1) {
            c->line[c->line_len] = '\0';
            emit_line(j, c, c->line);
            c->line_len = 0;
            if (buf[i] == '\n') continue;
        }
        c->line[c->line_len++] = buf[i];
    }
    return 0;
}

static char *self_exe(void)
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return NULL;
    buf[n] = '\0';
    return pd_xstrdup(buf);
}

/* Start a child running argv with the secret on fd 3 and (pservers) a ready
 * pipe on fd 4. */
static int spawn(job *j, child *c, char **argv, const uint8_t *secret)
{
    int out[2], sec[2], rdy[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(sec, O_CLOEXEC) < 0) return pd_err_set(PD_EIO, "pipe: %s", strerror(errno));
    if (c->kind == PD_ROLE_PSERVER && pipe2(rdy, O_CLOEXEC) < 0) return pd_err_set(PD_EIO, "pipe: %s", strerror(errno));
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return pd_err_set(PD_EIO, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* the child: die with the launcher, own process group */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        setpgid(0, 0);
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
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
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
    c->pid = pid;
    c->out_fd = out[0];
    c->ready_fd = rdy[0];
    fcntl(c->out_fd, F_SETFL, O_NONBLOCK);
    (void)j;
    return 0;
}

static void reap(job *j)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < j->nkids; i++)
            if (j->kids[i].pid == pid) {
                j->kids[i].exited = 1;
                j->kids[i].status = status;
            }
    }
}

static void describe(const child *c, char *buf, size_t len)
{
    if (!c->exited) snprintf(buf, len, "still running");
    else if (WIFEXITED(c->status)) snprintf(buf, len, "exited with status %d", WEXITSTATUS(c->status));
    else snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(c->status), strsignal(WTERMSIG(c->status)));
}

static void print_tail(const child *c)
{
    if (c->ntail == 0) return;
    fprintf(stderr, "paddle: last lines of %s:\n", c->name);
    for (int i = 0; i < c->ntail; i++) {
        int k = (c->tail_pos - c->ntail + i + TAIL_LINES) % TAIL_LINES;
        fprintf(stderr, "    %s\n", c->tail[k]);
    }
}

/* Pump output and reap children until every child in the set has exited or
 * the deadline passed. Returns the signal that arrived (0 if none). */
static int pump(job *j, double deadline, int want_all_exit, int stop_on_signal)
{
    struct pollfd *p = pd_xcalloc((size_t)j->nkids + 2, sizeof *p);
    int got_sig = 0;
    for (;;) {
        reap(j);
        int running = 0;
        for (int i = 0; i < j->nkids; i++)
            if (j->kids[i].pid > 0 && (!j->kids[i].exited || j->kids[i].out_fd >= 0)) running++;
        if (want_all_exit && running == 0) break;
        if (!want_all_exit) {
            /* wait for the first unexpected end */
            int ended = 0;
            for (int i = 0; i < j->nkids; i++)
                if (j->kids[i].exited && j->kids[i].out_fd < 0 && !j->kids[i].handled) ended = 1;
            if (ended) break;
        }
        double left = deadline - pd_now();
        if (left <= 0) break;
        int n = 0;
        p[n].fd = j->sig_pipe[0];
        p[n++].events = POLLIN;
        int map[1024], watch = -1;
        if (j->watch_fd >= 0) {
            watch = n;
            p[n].fd = j->watch_fd;
            p[n++].events = POLLIN;
        }
        for (int i = 0; i < j->nkids && n < 1024; i++)
            if (j->kids[i].out_fd >= 0) {
                map[n] = i;
                p[n].fd = j->kids[i].out_fd;
                p[n++].events = POLLIN;
            }
        int r = poll(p, (nfds_t)n, (int)(PD_MIN(left, 0.25) * 1000) + 1);
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue;
        if (p[0].revents & POLLIN) {
            unsigned char b[16];
            ssize_t k = read(j->sig_pipe[0], b, sizeof b);
            for (ssize_t i = 0; i < k; i++)
                if (b[i] != SIGCHLD) got_sig = b[i];
            if (got_sig && stop_on_signal) break;
        }
        if (watch >= 0 && (p[watch].revents & (POLLIN | POLLHUP | POLLERR))) {
            char b[256];
            ssize_t k = read(j->watch_fd, b, sizeof b);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
                j->watch_fd = -1; /* the launcher went away */
                got_sig = -1;
                if (stop_on_signal) break;
            }
        }
        for (int i = 1; i < n; i++)
            if (i != watch && (p[i].revents & (POLLIN | POLLHUP | POLLERR))) drain(j, &j->kids[map[i]]);
    }
    free(p);
    return got_sig;
}

/* End every child still running: SIGTERM to its group, SIGKILL after the grace. */
static void stop_all(job *j)
{
    reap(j);
    for (int i = 0; i < j->nkids; i++)
        if (j->kids[i].pid > 0 && !j->kids[i].exited) {
            j->kids[i].killed = 1;
            kill(-j->kids[i].pid, SIGTERM);
        }
    pump(j, pd_now() + STOP_GRACE, 1, 0);
    reap(j);
    for (int i = 0; i < j->nkids; i++)
        if (j->kids[i].pid > 0 && !j->kids[i].exited) {
            fprintf(stderr, "paddle: %s did not stop within %.0f s: killing it\n", j->kids[i].name, STOP_GRACE);
            kill(-j->kids[i].pid, SIGKILL);
        }
    pump(j, pd_now() + 2, 1, 0);
    for (int i = 0; i < j->nkids; i++)
        if (j->kids[i].pid > 0 && !j->kids[i].exited) {
            int st;
            if (waitpid(j->kids[i].pid, &st, 0) == j->kids[i].pid) {
                j->kids[i].exited = 1;
                j->kids[i].status = st;
            }
        }
}

static void report(job *j)
{
    for (int i = 0; i < j->nkids; i++) {
        child *c = &j->kids[i];
        if (c->pid <= 0) continue;
        char how[96];
        describe(c, how, sizeof how);
        fprintf(stderr, "paddle:   %-12s %s%s\n", c->name, how, c->killed ? " (stopped by the launcher)" : "");
    }
}

static int open_log(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) fprintf(stderr, "paddle: cannot write %s: %s\n", path, strerror(errno));
    return fd;
}

/* argv for a role: exe, role, recipe, options, overrides. */
static char **role_argv(const char *exe, const pd_recipe *r, const pd_local_opts *o, const child *c,
                        const char *endpoints)
{
    int cap = 16 + r->noverrides, n = 0;
    char **a = pd_xcalloc((size_t)cap, sizeof *a);
    a[n++] = pd_xstrdup(exe);
    a[n++] = pd_xstrdup(pd_role_name(c->kind));
    a[n++] = pd_xstrdup(r->path);
    if (o->cluster) a[n++] = pd_xasprintf("--cluster=%s", o->cluster);
    for (int i = 0; i < r->noverrides; i++) a[n++] = pd_xasprintf("--%s=%s", r->overrides[i].key, r->overrides[i].value);
    if (c->kind == PD_ROLE_PSERVER) a[n++] = pd_xasprintf("--pservers=%d", r->pservers);
    else a[n++] = pd_xasprintf("--pservers=%s", endpoints); /* a trainer's: the endpoint list */
    a[n++] = pd_xasprintf("--trainers=%d", r->trainers);
    a[n++] = pd_xstrdup("--secret_fd=3");
    a[n++] = pd_xstrdup("--log_dir=log");
    if (c->kind == PD_ROLE_PSERVER) {
        a[n++] = pd_xasprintf("--pserver_id=%d", c->id);
        a[n++] = pd_xasprintf("--port=%d", c->want_port);
        a[n++] = pd_xstrdup("--ready_fd=4");
        if (!o->agent) a[n++] = pd_xstrdup("--bind=127.0.0.1");
        else if (o->bind) a[n++] = pd_xasprintf("--bind=%s", o->bind);
    } else {
        a[n++] = pd_xasprintf("--trainer_id=%d", c->id);
        if (c->id == 0 && o->init_model) a[n++] = pd_xasprintf("--init_model=%s", o->init_model);
    }
    a[n] = NULL;
    return a;
}

static void free_argv(char **a)
{
    for (int i = 0; a && a[i]; i++) free(a[i]);
    free(a);
}

/* Read the port a pserver reports on its ready pipe; 0 until it does. */
static int read_ready(child *c)
{
    char buf[32];
    ssize_t n = read(c->ready_fd, buf, sizeof buf - 1);
    if (n <= 0) return -1;
    buf[n] = '\0';
    int port = atoi(buf);
    close(c->ready_fd);
    c->ready_fd = -1;
    return port > 0 && port < 65536 ? port : -1;
}

int pd_local_run(const pd_recipe *r, const pd_local_opts *o)
{
    job j_, *j = &j_;
    memset(j, 0, sizeof *j);
    j->t0 = pd_now();
    int status = 1, sig = 0;
    char *exe = self_exe();
    uint8_t secret[PD_SECRET];
    if (!exe) {
        fprintf(stderr, "paddle: cannot find my own executable (/proc/self/exe)\n");
        return 1;
    }
    if (r->nhosts > 0 && !o->agent) {
        fprintf(stderr, "paddle: %s names %d hosts; running on a cluster over SSH is not in this build yet "
                        "(remove cluster.hosts to run a local simulated cluster)\n", r->path, r->nhosts);
        free(exe);
        return 2;
    }
    if (r->pservers < 1) {
        fprintf(stderr, "paddle: %s: a job needs at least one pserver (job.pservers); "
                        "use 'paddle train' for training without pservers\n", r->path);
        free(exe);
        return 2;
    }
    if (o->agent) memcpy(secret, o->secret, PD_SECRET);
    else if (pd_secret_new(secret) < 0) {
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        free(exe);
        return 1;
    }
    if (mkdir("log", 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "paddle: cannot create log/: %s\n", strerror(errno));
        free(exe);
        return 1;
    }
    j->log_server = open_log("log/server.log");
    j->log_train = open_log("log/train.log");
    if (pipe2(j->sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        fprintf(stderr, "paddle: pipe: %s\n", strerror(errno));
        free(exe);
        return 1;
    }
    sig_fd = j->sig_pipe[1];
    struct sigaction sa = {.sa_handler = on_sig, .sa_flags = SA_RESTART};
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    j->watch_fd = o->agent ? o->watch_fd : -1;
    /* the roles: every one (local), or those the launcher placed here (agent);
     * pservers first */
    int nps = 0, ntr = 0;
    j->nkids = o->agent ? o->nroles : r->pservers + r->trainers;
    j->kids = pd_xcalloc((size_t)j->nkids + 1, sizeof *j->kids);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < (o->agent ? o->nroles : j->nkids); i++) {
            int kind = o->agent ? o->roles[i].kind : (i < r->pservers ? PD_ROLE_PSERVER : PD_ROLE_TRAINER);
            if (kind != (k == 0 ? PD_ROLE_PSERVER : PD_ROLE_TRAINER)) continue;
            child *c = &j->kids[nps + ntr];
            c->kind = kind;
            c->id = o->agent ? o->roles[i].id : (i < r->pservers ? i : i - r->pservers);
            c->want_port = o->agent ? o->roles[i].port : 0;
            snprintf(c->name, sizeof c->name, "%s %d", pd_role_name(c->kind), c->id);
            c->out_fd = c->ready_fd = -1;
            if (kind == PD_ROLE_PSERVER) nps++;
            else ntr++;
        }
    if (!o->agent) {
        printf("paddle: local job %s: %d pserver%s, %d trainer%s, %s mode; logs in log/\n", r->path, r->pservers,
               r->pservers > 1 ? "s" : "", r->trainers, r->trainers > 1 ? "s" : "", r->mode);
        fflush(stdout);
    }

    /* pservers first; each reports the port range it listens on */
    for (int i = 0; i < nps; i++) {
        char **argv = role_argv(exe, r, o, &j->kids[i], NULL);
        int rc = spawn(j, &j->kids[i], argv, secret);
        free_argv(argv);
        if (rc < 0) {
            fprintf(stderr, "paddle: cannot start %s: %s\n", j->kids[i].name, pd_err_msg());
            goto fail;
        }
    }
    double deadline = pd_now() + READY_TIMEOUT;
    for (int i = 0; i < nps; i++) {
        child *c = &j->kids[i];
        while (c->port == 0) {
            struct pollfd p = {.fd = c->ready_fd, .events = POLLIN};
            int pr = poll(&p, 1, 100);
            if (pr > 0) {
                c->port = read_ready(c);
                if (c->port < 0) {
                    pump(j, pd_now() + 1, 0, 0);
                    char how[96];
                    reap(j);
                    describe(c, how, sizeof how);
                    fprintf(stderr, "paddle: %s %s before it listened\n", c->name, how);
                    print_tail(c);
                    goto fail;
                }
            }
            if ((sig = pump(j, pd_now() + 0.01, 0, 1)) != 0) goto interrupted;
            if (pd_now() > deadline) {
                fprintf(stderr, "paddle: %s did not start listening within %.0f s\n", c->name, READY_TIMEOUT);
                print_tail(c);
                goto fail;
            }
        }
    }
    size_t eplen = 0;
    char *endpoints = pd_xcalloc(1, 1);
    for (int i = 0; i < (o->agent ? 0 : r->pservers); i++) {
        char ep[64];
        int n = snprintf(ep, sizeof ep, "%s127.0.0.1:%d", i ? "," : "", j->kids[i].port);
        endpoints = pd_xrealloc(endpoints, eplen + (size_t)n + 1);
        memcpy(endpoints + eplen, ep, (size_t)n + 1);
        eplen += (size_t)n;
    }
    if (o->agent) {
        free(endpoints);
        endpoints = pd_xstrdup(o->endpoints);
    }
    for (int i = nps; i < j->nkids; i++) {
        char **argv = role_argv(exe, r, o, &j->kids[i], endpoints);
        int rc = spawn(j, &j->kids[i], argv, secret);
        free_argv(argv);
        if (rc < 0) {
            fprintf(stderr, "paddle: cannot start %s: %s\n", j->kids[i].name, pd_err_msg());
            free(endpoints);
            goto fail;
        }
    }
    free(endpoints);

    /* run until every trainer finished, a role failed, or a signal */
    int trainers_done = 0, pservers_done = 0;
    /* a node without trainers is done when its pservers are (every trainer
     * elsewhere said FINISH) */
    while (ntr > 0 ? trainers_done < ntr : pservers_done < nps) {
        if ((sig = pump(j, pd_now() + 3600, 0, 1)) != 0) goto interrupted;
        reap(j);
        for (int i = 0; i < j->nkids; i++) {
            child *c = &j->kids[i];
            if (!c->exited || c->out_fd >= 0 || c->handled) continue;
            c->handled = 1;
            int ok = WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0;
            if (ok && c->kind == PD_ROLE_TRAINER) {
                trainers_done++;
                continue;
            }
            /* a pserver exits 0 only once every trainer said FINISH */
            if (ok) {
                pservers_done++;
                continue;
            }
            /* a role failed */
            char how[96];
            describe(c, how, sizeof how);
            fprintf(stderr, "paddle: %s %s; stopping the job\n", c->name, how);
            print_tail(c);
            goto fail;
        }
    }
    /* trainers done: the pservers exit by themselves once every trainer said FINISH */
    pump(j, pd_now() + 10, 1, 0);
    reap(j);
    int left = 0;
    for (int i = 0; i < j->nkids; i++) left += !j->kids[i].exited;
    if (left) stop_all(j);
    status = 0;
    for (int i = 0; i < j->nkids; i++) {
        child *c = &j->kids[i];
        if (c->kind == PD_ROLE_PSERVER && !c->killed && !(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0)) {
            char how[96];
            describe(c, how, sizeof how);
            fprintf(stderr, "paddle: %s %s after the trainers finished\n", c->name, how);
            status = 1;
        }
    }
    if (!o->agent)
        printf("paddle: job done in %.1f s: %d trainer%s finished, %d pserver%s stopped; model in %s/\n",
               pd_now() - j->t0, r->trainers, r->trainers > 1 ? "s" : "", r->pservers, r->pservers > 1 ? "s" : "",
               r->save_dir);
    goto out;

interrupted:
    fprintf(stderr, "paddle: %s: stopping every role\n",
            sig < 0 ? "the launcher went away" : sig == SIGINT ? "interrupted (Ctrl+C)" : strsignal(sig));
    stop_all(j);
    report(j);
    status = 130;
    goto out;
fail:
    stop_all(j);
    report(j);
    status = 1;
out:
    for (int i = 0; i < j->nkids; i++) {
        child *c = &j->kids[i];
        if (c->out_fd >= 0) close(c->out_fd);
        if (c->ready_fd >= 0) close(c->ready_fd);
        for (int k = 0; k < TAIL_LINES; k++) free(c->tail[k]);
    }
    free(j->kids);
    if (j->log_server >= 0) close(j->log_server);
    if (j->log_train >= 0) close(j->log_train);
    sig_fd = -1;
    close(j->sig_pipe[0]);
    close(j->sig_pipe[1]);
    free(exe);
    return status;
}
