/*
 * term.c - the status block at the bottom of a terminal. See term.h.
 *
 * The block is drawn where the cursor is, its lines joined by newlines,
 * and the cursor is left at the start of its last line. Erasing it moves
 * the cursor up to the block's first line and clears to the end of the
 * screen. A terminal that reflows its lines when it gets narrower (tmux,
 * VTE) splits a block line into several rows: the rows to go up are
 * counted with the new width.
 *
 * Lines written while the block is up wait in a buffer and go above it at
 * the next draw: the block is never off the screen for long, and a busy
 * job redraws no more often than a quiet one.
 */
#include "term.h"
#include "pd.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int live;                /* the block is in use */
static int tty_out;             /* stdout is the same terminal as stderr */
static int cols = 80, rows = 24;
static volatile sig_atomic_t resized;
static struct sigaction saved_winch;
static char want[PD_TERM_LINES][PD_TERM_COLS];
static int nwant, changed;
static int drawn_len[PD_TERM_LINES]; /* the lines on the screen, as drawn */
static int ndrawn;                   /* 0: the block is not on the screen */
static double last_draw;
/* Lines for the terminal that arrived while the block is up: written above it
 * at the next draw, so that the block stays on the screen. */
#define PENDING_MAX 65536
static char pending[PENDING_MAX];
static size_t npending;

static void on_winch(int sig)
{
    (void)sig;
    resized = 1;
}

static void read_size(void)
{
    struct winsize ws;
    if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
        cols = ws.ws_col;
        rows = ws.ws_row;
    }
}

int pd_term_start(void)
{
    const char *term = getenv("TERM");
    if (live) return 1;
    struct stat o, e;
    if (!isatty(2) || !term || !*term || !strcmp(term, "dumb") || fstat(1, &o) < 0 || fstat(2, &e) < 0) return 0;
    /* stdout into a pipe (`paddle run ... | tee out`): its lines reach the
     * terminal behind our back, so no block */
    if (S_ISFIFO(o.st_mode) || S_ISSOCK(o.st_mode)) return 0;
    pthread_mutex_lock(&lock);
    tty_out = isatty(1) && o.st_rdev == e.st_rdev;
    read_size();
    struct sigaction sa = {.sa_handler = on_winch, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGWINCH, &sa, &saved_winch);
    live = 1;
    ndrawn = nwant = 0;
    pthread_mutex_unlock(&lock);
    return 1;
}

int pd_term_live(void) { return live; }

void pd_term_size(int *c, int *r)
{
    *c = cols;
    *r = rows;
}

void pd_term_set(const char *const *lines, int n)
{
    if (!live) return;
    pthread_mutex_lock(&lock);
    n = PD_MIN(n, PD_TERM_LINES);
    for (int i = 0; i < n; i++) {
        char line[PD_TERM_COLS];
        int k = 0;
        for (const char *p = lines[i]; *p && k < PD_TERM_COLS - 1; p++)
            line[k++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
        line[k] = '\0';
        if (i >= nwant || strcmp(line, want[i])) {
            memcpy(want[i], line, (size_t)k + 1);
            changed = 1;
        }
    }
    if (n != nwant) changed = 1;
    nwant = n;
    pthread_mutex_unlock(&lock);
}

static void put_fd(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, s, n);
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

/* Append to out what erases the block from the screen (with the lock held). */
static size_t erase_seq(char *out)
{
    if (!ndrawn) return 0;
    int up = 0;
    for (int i = 0; i < ndrawn - 1; i++) up += drawn_len[i] > cols ? (drawn_len[i] + cols - 1) / cols : 1;
    ndrawn = 0;
    return (size_t)(up ? sprintf(out, "\r\033[%dA\033[J", up) : sprintf(out, "\r\033[J"));
}

/* Erase the block and write the lines that waited (with the lock held). */
static void erase(void)
{
    char seq[32];
    size_t n = erase_seq(seq);
    put_fd(2, seq, n);
    put_fd(2, pending, npending);
    npending = 0;
}

/* Erase the block, write the lines that waited and draw the block again,
 * in one write (with the lock held): every line cut to the width less one
 * column (a line that fills the last column may wrap). */
static void draw(void)
{
    static char frame[32 + PENDING_MAX + PD_TERM_LINES * (PD_TERM_COLS + 1) + 1];
    size_t len = erase_seq(frame);
    memcpy(frame + len, pending, npending);
    len += npending;
    npending = 0;
    int n = PD_MIN(nwant, PD_MAX(1, rows - 2)); /* never taller than the window */
    int width = PD_MAX(1, cols - 1);
    for (int i = 0; i < n; i++) {
        int k = PD_MIN((int)strlen(want[i]), width);
        memcpy(frame + len, want[i], (size_t)k);
        len += (size_t)k;
        if (i < n - 1) frame[len++] = '\n';
        drawn_len[i] = k;
    }
    frame[len++] = '\r';
    put_fd(2, frame, len);
    ndrawn = n;
    changed = 0;
    last_draw = pd_now();
}

void pd_term_tick(int force)
{
    if (!live) return;
    pthread_mutex_lock(&lock);
    if (resized) {
        resized = 0;
        read_size();
        changed = 1;
    }
    if ((changed || !ndrawn || npending) && nwant > 0 && (force || pd_now() - last_draw >= PD_TERM_PERIOD)) draw();
    pthread_mutex_unlock(&lock);
}

void pd_term_write(int fd, const char *buf, size_t n)
{
    pthread_mutex_lock(&lock);
    if (live && ndrawn && (fd == 2 || tty_out)) {
        /* the block is up: the line waits for the next draw */
        if (npending + n > PENDING_MAX) {
            erase();
        } else {
            memcpy(pending + npending, buf, n);
            npending += n;
            n = 0;
        }
    }
    put_fd(fd, buf, n);
    pthread_mutex_unlock(&lock);
}

void pd_term_hide(void)
{
    if (!live) return;
    pthread_mutex_lock(&lock);
    erase();
    pthread_mutex_unlock(&lock);
}

void pd_term_stop(void)
{
    if (!live) return;
    pthread_mutex_lock(&lock);
    if (resized) read_size();
    erase();
    live = 0;
    sigaction(SIGWINCH, &saved_winch, NULL);
    pthread_mutex_unlock(&lock);
}
