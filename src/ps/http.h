/*
 * http.h - a tiny HTTP responder for Prometheus scrapes (GET /metrics),
 * made to sit inside a role's event loop: every call returns at once.
 *
 *     pd_http h;
 *     if (pd_http_open(&h, "127.0.0.1", 9400, write_metrics, ctx) < 0) ...;
 *     // poll / epoll pd_http_fd(&h) for reading among the loop's fds;
 *     pd_http_serve(&h);   // after every wake, and at least every second
 *     pd_http_close(&h);
 *
 * One request per connection (the answer says Connection: close), a
 * request over PD_HTTP_MAX_REQ bytes or slower than PD_HTTP_TIMEOUT_S is
 * dropped, and at most PD_HTTP_CONNS connections are held: more are
 * accepted and closed.
 */
#ifndef PD_HTTP_H
#define PD_HTTP_H

#include "../core/buf.h"

#include <stddef.h>

#define PD_HTTP_MAX_REQ 4096
#define PD_HTTP_CONNS 16
#define PD_HTTP_TIMEOUT_S 5.0

/* Append the metrics text to out. */
typedef void (*pd_http_body_fn)(void *ctx, pd_buf *out);

typedef struct pd_http_conn {
    int fd;                 /* -1: free */
    double since;
    size_t got;
    char req[PD_HTTP_MAX_REQ + 1];
    char *out;              /* the answer, once the request is read */
    size_t out_len, out_off;
} pd_http_conn;

typedef struct pd_http {
    int listen_fd, epfd;
    pd_http_body_fn fn;
    void *ctx;
    pd_http_conn c[PD_HTTP_CONNS];
} pd_http;

/* Listen on bind:port (bind NULL or "": every interface). 0 or PD_EIO
 * (message set); h is safe to close either way, and so is one with
 * listen_fd and epfd set to -1 that was never opened. */
int pd_http_open(pd_http *h, const char *bind, int port, pd_http_body_fn fn, void *ctx);
/* A descriptor that is readable whenever pd_http_serve has work. */
int pd_http_fd(const pd_http *h);
/* Accept, read, answer and time out what is ready; never blocks. */
void pd_http_serve(pd_http *h);
void pd_http_close(pd_http *h);

/* Prometheus text helpers: "# HELP name help\n# TYPE name type\n". */
void pd_prom_head(pd_buf *b, const char *name, const char *type, const char *help);
/* "name{labels} value\n"; labels may be NULL; NaN and Inf as Prometheus spells them. */
void pd_prom_val(pd_buf *b, const char *name, const char *labels, double v);
/* A label value escaped as the text format wants (\\, \", \n), cut to fit n. */
void pd_prom_escape(char *dst, size_t n, const char *src);
/* This process's resident memory in bytes (0 when unknown). */
double pd_prom_rss(void);

#endif
