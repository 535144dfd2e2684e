/*
 * buf.h - a growing text buffer.
 *
 *     pd_buf b = {0};
 *     pd_buf_printf(&b, "--node=%d", 3);
 *     pd_buf_put(&b, " --bind=x");
 *     use(b.s);          // NUL-terminated; "" never NULL after a put
 *     free(b.s);
 */
#ifndef PD_BUF_H
#define PD_BUF_H

#include <stddef.h>

typedef struct pd_buf {
    char *s;
    size_t len, cap;
} pd_buf;

void pd_buf_putn(pd_buf *b, const char *s, size_t n);
void pd_buf_put(pd_buf *b, const char *s);
void pd_buf_printf(pd_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
