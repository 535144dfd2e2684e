/* buf.c - a growing text buffer. */
#include "buf.h"
#include "pd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pd_buf_putn(pd_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->s = pd_xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void pd_buf_put(pd_buf *b, const char *s)
{
    pd_buf_putn(b, s, strlen(s));
}

void pd_buf_printf(pd_buf *b, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    pd_buf_putn(b, "", 0);
    if (n > 0) {
        if (b->len + (size_t)n + 1 > b->cap) {
            b->cap = (b->len + (size_t)n + 1) * 2;
            b->s = pd_xrealloc(b->s, b->cap);
        }
        vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}
