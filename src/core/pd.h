/*
 * pd.h - what every file of paddle includes: error codes, the last-error
 * message, assertions and allocation helpers.
 *
 * Functions return 0 on success or a negative PD_E* code. A function that
 * fails records a message saying what went wrong and where with pd_err_set();
 * the caller may add context with pd_err_wrap() and finally prints
 * pd_err_msg(). Example:
 *
 *     if ((rc = pd_file_read(path, &buf, &len)) < 0)
 *         return pd_err_wrap(rc, "recipe %s", path);
 */
#ifndef PD_H
#define PD_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>

enum {
    PD_OK = 0,
    PD_EINVAL = -1,     /* bad argument or bad input */
    PD_ENOMEM = -2,     /* allocation failed */
    PD_EIO = -3,        /* file or socket I/O failed */
    PD_ERECIPE = -4,    /* the recipe is wrong */
    PD_EDATA = -5,      /* a data file is malformed */
    PD_EPROTO = -6,     /* a peer broke the wire protocol */
    PD_EAUTH = -7,      /* authentication failed */
    PD_ETIMEDOUT = -8,  /* gave up waiting */
    PD_ECONN = -9,      /* could not connect / connection lost */
    PD_ENOENT = -10,    /* no such file or thing */
    PD_ENODEV = -11,    /* no such device (CUDA) */
    PD_ERANGE = -12,    /* a length or count over its limit */
    PD_ESSH = -13,      /* ssh failure */
    PD_ECHILD = -14,    /* a child process failed */
    PD_EINTR = -15,     /* interrupted by a signal */
    PD_EINPUT = -16,    /* the job's own input is malformed (a data line, a model to start from):
                           reading it again would fail the same way */
};

/* Short name of an error code ("invalid input", ...). */
const char *pd_strerror(int code);

/* Record a formatted message for code; returns code so that callers write
 * `return pd_err_set(PD_EINVAL, "...")`. The message is per thread. */
int pd_err_set(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prefix the current message with more context: "ctx: old message". */
int pd_err_wrap(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The last recorded message of this thread, or pd_strerror of nothing. */
const char *pd_err_msg(void);
/* The code of this thread's last recorded error (0: none since the last clear). */
int pd_err_code(void);
void pd_err_clear(void);

/* Programmer errors only: an impossible state, never bad input. */
#define PD_ASSERT(cond)                                                      \
    do {                                                                     \
        if (!(cond)) pd_assert_fail(#cond, __FILE__, __LINE__);              \
    } while (0)
void pd_assert_fail(const char *expr, const char *file, int line)
    __attribute__((noreturn));

/* Allocation that cannot fail: on exhaustion it logs and aborts. Used for
 * small bookkeeping; sizes that come from outside are checked before. */
void *pd_xmalloc(size_t n);
void *pd_xcalloc(size_t n, size_t size);
void *pd_xrealloc(void *p, size_t n);
char *pd_xstrdup(const char *s);
char *pd_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Grow a dynamic array *pp of *capp elements so that it holds n. */
#define PD_GROW(pp, capp, n)                                                 \
    do {                                                                     \
        if ((size_t)(n) > (size_t)*(capp)) {                                 \
            size_t c_ = *(capp) ? (size_t)*(capp) * 2 : 8;                   \
            while (c_ < (size_t)(n)) c_ *= 2;                                \
            *(pp) = pd_xrealloc(*(pp), c_ * sizeof(**(pp)));                 \
            *(capp) = c_;                                                    \
        }                                                                    \
    } while (0)

#define PD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PD_MAX(a, b) ((a) > (b) ? (a) : (b))
#define PD_COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Ask for the cache lines of row p (n floats) ahead of use: tables of
 * sparse rows are read at random, and a row waited for costs a memory
 * round trip each. Loops over rows call it PD_AHEAD rows ahead. */
#define PD_AHEAD 8
#define PD_PREFETCH_ROW(p, n, w)                                              \
    do {                                                                     \
        const float *r_ = (p);                                               \
        for (size_t o_ = 0; o_ < (size_t)(n); o_ += 16) __builtin_prefetch(r_ + o_, (w), 0); \
        __builtin_prefetch(r_ + (size_t)(n) - 1, (w), 0);                    \
    } while (0)

/* Copy one row (n bytes: tens to a few hundred) with plain vector moves.
 * musl's memcpy starts a `rep movs` for each call: rows gathered that way
 * took up to 2.7 times as long (docs/performance.md, "Rows copied with
 * plain moves"). Compiles to no call: every move is of a constant size.
 * (__restrict: CUDA's C++ includes this file too.) */
static inline void pd_copy_row(void *__restrict dst, const void *__restrict src, size_t n)
{
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) __builtin_memcpy(d + i, s + i, 32);
    if (n - i >= 16) { __builtin_memcpy(d + i, s + i, 16); i += 16; }
    if (n - i >= 8) { __builtin_memcpy(d + i, s + i, 8); i += 8; }
    if (n - i >= 4) { __builtin_memcpy(d + i, s + i, 4); i += 4; }
    if (n - i >= 2) { __builtin_memcpy(d + i, s + i, 2); i += 2; }
    if (i < n) d[i] = s[i];
}

/* Monotonic seconds. */
double pd_now(void);
/* Wall-clock seconds since the epoch. */
double pd_wall(void);

#endif
