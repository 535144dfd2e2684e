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

/* One relayed descriptor: what is written to fd goes into the pipe, and
 * from there to real. */
typedef struct channel {
    int fd;            /* 1 or 2 */
    int real;          /* the descriptor's file before, kept (-1: not relayed) */
    int rd;            /* the pipe's reading end */
    int gone;          /* the reader went away: what comes is read and dropped */
    int eof;           /* every writing end closed (the process closed fd) */
    char *kept;        /* the relay thread's own */
    size_t nkept, cap;
    long dropped;      /* lines dropped since the last said */
} channel;

static channel chans[2] = {{.fd = 1, .real = -1, .rd = -1}, {.fd = 2, .real = -1, .rd = -1}};
static int err_shared = -1; /* stderr went where stdout went: its kept copy, relayed with stdout */
static int wake_rd = -1, wake_wr = -1;
static pthread_t relay_thread;
static pid_t relay_pid; /* a child forked before its exec has no relay thread */

/* Write up to n bytes of s to fd, CHUNK at a time while it takes them
 * without waiting (wait: all of them, however long the reader takes): the
 * bytes written, or -1 when the reader went away. */
static ssize_t write_some(int fd, const char *s, size_t n, int wait)
{
    size_t done = 0;
    while (done < n) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int r = poll(&p, 1, wait ? -1 : 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return -1;
        ssize_t k = write(fd, s + done, PD_MIN(n - done, (size_t)CHUNK));
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue; /* a description made non-blocking elsewhere */
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
static void keep(channel *c, const char *s, size_t n, int all)
{
    if (!all && c->nkept + n > BACKLOG_MAX) {
        const char *nl = memchr(c->kept, '\n', c->nkept);
        size_t from = nl ? (size_t)(nl - c->kept) + 1 : c->nkept, to = from + (c->nkept + n - BACKLOG_MAX);
        while (to < c->nkept && c->kept[to - 1] != '\n') to++;
        if (to > c->nkept) {
            c->dropped += lines_in(s, n) + !lines_in(s, n);
            return;
        }
        c->dropped += lines_in(c->kept + from, to - from);
        memmove(c->kept + from, c->kept + to, c->nkept - to);
        c->nkept -= to - from;
    }
    PD_GROW(&c->kept, &c->cap, c->nkept + n);
    memcpy(c->kept + c->nkept, s, n);
    c->nkept += n;
}

/* The reader went away: nothing more reaches it. The process learns it as
 * it did when it wrote there itself (SIGPIPE, which ends it unless it is
 * ignored), and what comes next is read and dropped. */
static void reader_gone(channel *c)
{
    c->gone = 1;
    c->nkept = 0;
    c->dropped = 0;
    kill(getpid(), SIGPIPE);
}

/* Write what is kept, as far as the reader takes it (wait: all of it);
 * once it is all out, a line says how many lines were dropped. */
static void flush_kept(channel *c, int wait)
{
    if (c->gone) return;
    ssize_t k = c->nkept ? write_some(c->real, c->kept, c->nkept, wait) : 0;
    if (k < 0) {
        reader_gone(c);
        return;
    }
    if (k > 0) memmove(c->kept, c->kept + k, c->nkept - (size_t)k);
    c->nkept -= (size_t)k;
    if (c->nkept || !c->dropped) return;
    char note[200];
    int n = snprintf(note, sizeof note,
                     "paddle: %ld lines of this output were dropped: it was not read in time (log/ has the "
                     "roles' lines)\n",
                     c->dropped);
    c->dropped = 0;
    k = write_some(c->real, note, (size_t)n, wait);
    if (k < 0) reader_gone(c);
    else if (k < n) keep(c, note + k, (size_t)(n - k), 1);
}

/* Bytes read from a channel's pipe: out at once where the reader takes
 * them and nothing waits before them, else kept. */
static void take(channel *c, const char *s, size_t n)
{
    if (c->gone) return;
    ssize_t k = c->nkept ? 0 : write_some(c->real, s, n, 0);
    if (k < 0) reader_gone(c);
    else if ((size_t)k < n) keep(c, s + k, n - (size_t)k, 0);
}

static void *relay(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* the process's handlers run on its own threads */
    static char in[65536];
    for (;;) {
        struct pollfd p[5] = {{.fd = wake_rd, .events = POLLIN}};
        int n = 1;
        for (int i = 0; i < 2; i++) {
            channel *c = &chans[i];
            p[n++] = (struct pollfd){.fd = c->eof ? -1 : c->rd, .events = POLLIN};
            /* a reader that went away reports POLLERR for ever: not asked */
            p[n++] = (struct pollfd){.fd = c->gone || !c->nkept ? -1 : c->real, .events = POLLOUT};
        }
        if (poll(p, (nfds_t)n, -1) < 0 && errno != EINTR) break;
        for (int i = 0; i < 2; i++) {
            channel *c = &chans[i];
            if (p[1 + 2 * i].revents) {
                ssize_t k = read(c->rd, in, sizeof in);
                if (k > 0) take(c, in, (size_t)k);
                c->eof = k == 0;
            }
            if (p[2 + 2 * i].revents) flush_kept(c, 0);
        }
        if (p[0].revents) break;
    }
    /* stopping: what was written before is in the pipes */
    for (int i = 0; i < 2; i++) {
        channel *c = &chans[i];
        if (c->rd < 0) continue;
        fcntl(c->rd, F_SETFL, O_NONBLOCK);
        ssize_t k;
        while ((k = read(c->rd, in, sizeof in)) > 0)
            if (!c->gone) keep(c, in, (size_t)k, 1);
        flush_kept(c, 1);
    }
    return NULL;
}

static int relayable(int fd, struct stat *st)
{
    return fstat(fd, st) == 0 && (S_ISFIFO(st->st_mode) || S_ISSOCK(st->st_mode));
}

/* Channel c's pipe, its writing end returned (-1: none made). */
static int open_channel(channel *c)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) return -1;
    c->real = fcntl(c->fd, F_DUPFD_CLOEXEC, 3);
    if (c->real < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    c->rd = p[0];
    return p[1];
}

static void close_channel(channel *c)
{
    if (c->real >= 0) close(c->real);
    if (c->rd >= 0) close(c->rd);
    c->real = c->rd = -1;
}

void pd_relay_start(void)
{
    struct stat o, e;
    if (relay_pid) return;
    int out = relayable(1, &o), err = relayable(2, &e), same = out && err && o.st_dev == e.st_dev && o.st_ino == e.st_ino;
    if (!out && !err) return;
    int w[2];
    if (pipe2(w, O_CLOEXEC) < 0) return;
    fflush(stdout);
    fflush(stderr);
    int wr_out = out ? open_channel(&chans[0]) : -1, wr_err = err && !same ? open_channel(&chans[1]) : -1;
    wake_rd = w[0];
    wake_wr = w[1];
    if ((wr_out < 0 && wr_err < 0) || pthread_create(&relay_thread, NULL, relay, NULL) != 0) {
        close_channel(&chans[0]);
        close_channel(&chans[1]);
        if (wr_out >= 0) close(wr_out);
        if (wr_err >= 0) close(wr_err);
        close(wake_rd);
        close(wake_wr);
        wake_rd = wake_wr = -1;
        return; /* writes wait for their reader, as before */
    }
    relay_pid = getpid();
    /* descriptors dup2 makes are inherited: the process's children write
     * here too (a role's own pipes replace them before its exec) */
    if (wr_out >= 0) {
        if (same) err_shared = fcntl(2, F_DUPFD_CLOEXEC, 3);
        dup2(wr_out, 1);
        if (same) dup2(wr_out, 2);
        close(wr_out);
    }
    if (wr_err >= 0) {
        dup2(wr_err, 2);
        close(wr_err);
    }
    atexit(pd_relay_stop);
}

int pd_relay_fatal_fd(void)
{
    return err_shared >= 0 ? err_shared : chans[1].real >= 0 ? chans[1].real : 2;
}

void pd_relay_stop(void)
{
    if (!relay_pid || getpid() != relay_pid) return;
    fflush(stdout);
    fflush(stderr);
    char c = 1;
    if (write(wake_wr, &c, 1) == 1) pthread_join(relay_thread, NULL);
    if (chans[0].real >= 0) dup2(chans[0].real, 1);
    if (err_shared >= 0) dup2(err_shared, 2);
    if (chans[1].real >= 0) dup2(chans[1].real, 2);
    close_channel(&chans[0]);
    close_channel(&chans[1]);
    if (err_shared >= 0) close(err_shared);
    close(wake_rd);
    close(wake_wr);
    err_shared = wake_rd = wake_wr = -1;
    relay_pid = 0;
}
