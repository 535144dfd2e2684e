/* err.c - error codes and the per-thread last-error message. */
#include "pd.h"
#include "log.h"
#include "relay.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char msg[1024];
static _Thread_local int msg_code;

const char *pd_strerror(int code)
{
    switch (code) {
    case PD_OK: return "ok";
    case PD_EINVAL: return "invalid input";
    case PD_ENOMEM: return "out of memory";
    case PD_EIO: return "I/O error";
    case PD_ERECIPE: return "bad recipe";
    case PD_EDATA: return "bad data";
    case PD_EPROTO: return "protocol error";
    case PD_EAUTH: return "authentication failed";
    case PD_ETIMEDOUT: return "timed out";
    case PD_ECONN: return "connection failed";
    case PD_ENOENT: return "not found";
    case PD_ENODEV: return "no such device";
    case PD_ERANGE: return "over a limit";
    case PD_ESSH: return "ssh error";
    case PD_ECHILD: return "child process failed";
    case PD_EINTR: return "interrupted";
    case PD_EINPUT: return "malformed input";
    }
    return "unknown error";
}

/* A message is one line, whatever it quotes (a data file's bytes, a peer's
 * text): its control characters become \n, \t, \r or \DDD (decimal, as
 * recipe errors write them), so none reaches a terminal raw. */
static void one_line(char *m, size_t size)
{
    char out[sizeof msg];
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)m;
    while (*p && (*p >= 0x20 && *p != 0x7f)) p++;
    if (!*p) return; /* nothing to escape: the usual case */
    for (p = (const unsigned char *)m; *p && o + 8 < sizeof out; p++) {
        const char *named = *p == '\n' ? "\\n" : *p == '\t' ? "\\t" : *p == '\r' ? "\\r" : NULL;
        if (*p >= 0x20 && *p != 0x7f) out[o++] = (char)*p;
        else if (named) o += (size_t)snprintf(out + o, sizeof out - o, "%s", named);
        else o += (size_t)snprintf(out + o, sizeof out - o, "\\%d", *p);
    }
    if (*p) o += (size_t)snprintf(out + o, sizeof out - o, "...");
    out[o] = '\0';
    snprintf(m, size, "%s", out);
}

int pd_err_set(int code, const char *fmt, ...)
{
    char buf[sizeof msg]; /* an argument may be the message itself (pd_err_msg()) */
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(buf, sizeof buf, fmt, ap) >= (int)sizeof buf) memcpy(buf + sizeof buf - 4, "...", 4);
    va_end(ap);
    memcpy(msg, buf, sizeof msg);
    one_line(msg, sizeof msg);
    msg_code = code;
    return code;
}

int pd_err_wrap(int code, const char *fmt, ...)
{
    char prefix[512], old[sizeof msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (msg_code == 0 || msg[0] == '\0')
        memcpy(old, pd_strerror(code), strlen(pd_strerror(code)) + 1);
    else
        memcpy(old, msg, sizeof msg);
    /* a message longer than the buffer ends in "..." rather than silently */
    if (snprintf(msg, sizeof msg, "%s: %s", prefix, old) >= (int)sizeof msg)
        memcpy(msg + sizeof msg - 4, "...", 4);
    one_line(msg, sizeof msg);
    msg_code = code;
    return code;
}

const char *pd_err_msg(void)
{
    if (msg_code == 0 || msg[0] == '\0') return pd_strerror(msg_code);
    return msg;
}

int pd_err_code(void) { return msg_code; }

void pd_err_clear(void)
{
    msg[0] = '\0';
    msg_code = 0;
}

/* A last message before abort(): to the real stderr, past the relay. */
static void last_words(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0 && write(pd_relay_fatal_fd(), buf, (size_t)PD_MIN(n, (int)sizeof buf - 1)) < 0) {}
}

void pd_assert_fail(const char *expr, const char *file, int line)
{
    last_words("paddle: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}

static void oom(size_t n)
{
    last_words("paddle: out of memory allocating %zu bytes\n", n);
    abort();
}

void *pd_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *pd_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *pd_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

char *pd_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(pd_xmalloc(n), s, n);
}

char *pd_xasprintf(const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = pd_xmalloc((size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return s;
}

double pd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double pd_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
