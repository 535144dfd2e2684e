/* relay.c - stdout and stderr that never hold up their writer. See relay.h. */
#include "relay.h"
#include "pd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BACKLOG_MAX (8u << 20) /* bytes kept for a slow reader, at most */
#define CHUNK 4096             /* a write that a pipe with a free page takes whole */

static int real_out = -1, real_err = -1; /* where stdout (and stderr) went before */
static int pipe_rd = -1, wake_rd = -1, wake_wr = -1;
static pthread_t relay_thread;
static pid_t relay_pid; /* a child forked before its exec has no relay thread */
/* the relay thread's own */
static char *kept;
static size_t nkept, cap_kept;
static long dropped; /* lines dropped since the last said */

/* Whether fd takes bytes now (POLLERR, POLLHUP: a write fails at once). */
static int takes_bytes(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    return poll(&p, 1, 0) == 1;
}

/* Write up to n bytes of s to fd, CHUNK at a time while it takes them
 * (wait: all of them): the bytes written, or -1 when the reader went away. */
static ssize_t write_some(int fd, const char *s, size_t n, int wait)
{
    size_t done = 0;
    while (done < n && (wait || takes_bytes(fd))) {
        ssize_t k = write(fd, s + done, PD_MIN(n - done, (size_t)CHUNK));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return (ssize_t)done;
}

static long lines_in(const char *s, size_t n)
{
    long lines = 0;
    for (size_t i = 0; i < n; i++) lines += s[i] == '\n';
    return lines;
}

/* Keep n bytes for the reader. Over BACKLOG_MAX (unless all: at exit),
 * the oldest whole lines kept go, but the first (maybe written in part):
 * the reader that catches up sees the newest, the job's last lines. */
static void keep(const char *s, size_t n, int all)
{
    if (!all && nkept + n > BACKLOG_MAX) {
        const char *nl = memchr(kept, '\n', nkept);
        size_t from = nl ? (size_t)(nl - kept) + 1 : nkept, to = from + (nkept + n - BACKLOG_MAX);
        while (to < nkept && kept[to - 1] != '\n') to++;
        if (to > nkept) {
            dropped += lines_in(s, n) + !lines_in(s, n);
            return;
        }
        dropped += lines_in(kept + from, to - from);
        memmove(kept + from, kept + to, nkept - to);
        nkept -= to - from;
    }
    PD_GROW(&kept, &cap_kept, nkept + n);
    memcpy(kept + nkept, s, n);
    nkept += n;
}

/* Write what is kept, as far as the reader takes it (wait: all of it);
 * once it is all out, a line says how many lines were dropped. */
static void flush_kept(int wait)
{
    ssize_t k = nkept ? write_some(real_out, kept, nkept, wait) : 0;
    if (k < 0) k = (ssize_t)nkept; /* the reader went away: nothing more reaches it */
    if (k > 0) memmove(kept, kept + k, nkept - (size_t)k);
    nkept -= (size_t)k;
    if (nkept || !dropped) return;
    char note[200];
    int n = snprintf(note, sizeof note,
                     "paddle: %ld lines of this output were dropped: it was not read in time (log/ has the "
                     "roles' lines)\n",
                     dropped);
    dropped = 0;
    if (write_some(real_out, note, (size_t)n, wait) != n) dropped = 1; /* said once more later */
}

/* Bytes read from the relay's pipe: out at once where the reader takes
 * them and nothing waits before them, else kept. */
static void take(const char *s, size_t n)
{
    ssize_t k = nkept ? 0 : write_some(real_out, s, n, 0);
    if (k < 0) return;
    if ((size_t)k < n) keep(s + k, n - (size_t)k, 0);
}

static void *relay(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* the process's handlers run on its own threads */
    static char in[65536];
    for (;;) {
        struct pollfd p[3] = {{.fd = pipe_rd, .events = POLLIN},
                              {.fd = wake_rd, .events = POLLIN},
                              {.fd = real_out, .events = nkept ? POLLOUT : 0}};
        if (poll(p, 3, -1) < 0 && errno != EINTR) break;
        if (p[0].revents) {
            ssize_t n = read(pipe_rd, in, sizeof in);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
            if (n > 0) take(in, (size_t)n);
        }
        if (p[2].revents && nkept) flush_kept(0);
        if (p[1].revents) break;
    }
    /* stopping: what was written before is in the pipe */
    fcntl(pipe_rd, F_SETFL, O_NONBLOCK);
    ssize_t n;
    while ((n = read(pipe_rd, in, sizeof in)) > 0) keep(in, (size_t)n, 1);
    flush_kept(1);
    return NULL;
}

void pd_relay_start(void)
{
    struct stat o, e;
    if (real_out >= 0 || fstat(1, &o) < 0 || !(S_ISFIFO(o.st_mode) || S_ISSOCK(o.st_mode))) return;
    int p[2], w[2];
    if (pipe2(p, O_CLOEXEC) < 0) return;
    if (pipe2(w, O_CLOEXEC) < 0) {
        close(p[0]);
        close(p[1]);
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pipe_rd = p[0];
    wake_rd = w[0];
    wake_wr = w[1];
    real_out = fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (real_out < 0 || pthread_create(&relay_thread, NULL, relay, NULL) != 0) {
        if (real_out >= 0) close(real_out); /* writes wait for their reader, as before */
        close(p[1]);
        close(pipe_rd);
        close(wake_rd);
        close(wake_wr);
        real_out = pipe_rd = wake_rd = wake_wr = -1;
        return;
    }
    if (fstat(2, &e) == 0 && e.st_dev == o.st_dev && e.st_ino == o.st_ino) real_err = fcntl(2, F_DUPFD_CLOEXEC, 3);
    relay_pid = getpid();
    dup2(p[1], 1); /* a descriptor dup2 makes is inherited: the process's children write here too */
    if (real_err >= 0) dup2(p[1], 2);
    close(p[1]);
    atexit(pd_relay_stop);
}

void pd_relay_stop(void)
{
    if (real_out < 0 || getpid() != relay_pid) return;
    fflush(stdout);
    fflush(stderr);
    char c = 1;
    if (write(wake_wr, &c, 1) == 1) pthread_join(relay_thread, NULL);
    dup2(real_out, 1);
    if (real_err >= 0) dup2(real_err, 2);
    close(real_out);
    if (real_err >= 0) close(real_err);
    close(pipe_rd);
    close(wake_rd);
    close(wake_wr);
    real_out = real_err = pipe_rd = wake_rd = wake_wr = -1;
}
