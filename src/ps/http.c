/* http.c - the tiny non-blocking HTTP responder behind /metrics (http.h). */
#include "http.h"
#include "proto.h"
#include "../core/pd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define LISTEN_ID PD_HTTP_CONNS /* epoll id of the listener; connections are 0.. */

int pd_http_open(pd_http *h, const char *bind, int port, pd_http_body_fn fn, void *ctx)
{
    memset(h, 0, sizeof *h);
    h->listen_fd = h->epfd = -1;
    h->fn = fn;
    h->ctx = ctx;
    for (int i = 0; i < PD_HTTP_CONNS; i++) h->c[i].fd = -1;
    if (port <= 0 || port > 65535)
        return pd_err_set(PD_EINVAL, "metrics: port %d is out of range (settings.metrics_port; pserver i serves on "
                                     "metrics_port + 1 + i)", port);
    int fd = pd_tcp_listen(bind, port, 16);
    if (fd < 0) return pd_err_wrap(fd, "metrics (settings.metrics_port %d)", port);
    h->listen_fd = fd;
    h->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (h->epfd < 0) return pd_err_set(PD_EIO, "epoll_create1: %s", strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = LISTEN_ID};
    epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->listen_fd, &ev);
    return 0;
}

int pd_http_fd(const pd_http *h)
{
    return h->epfd;
}

static void conn_close(pd_http *h, pd_http_conn *c)
{
    if (c->fd < 0) return;
    epoll_ctl(h->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->out);
    c->out = NULL;
    c->fd = -1;
}

void pd_http_close(pd_http *h)
{
    if (h->epfd < 0 && h->listen_fd < 0) return; /* never opened (or closed) */
    for (int i = 0; i < PD_HTTP_CONNS; i++) conn_close(h, &h->c[i]);
    if (h->listen_fd >= 0) close(h->listen_fd);
    if (h->epfd >= 0) close(h->epfd);
    h->listen_fd = h->epfd = -1;
}

static void accept_all(pd_http *h)
{
    for (int n = 0; n < 64; n++) {
        int fd = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return;
        int slot = -1;
        for (int i = 0; i < PD_HTTP_CONNS && slot < 0; i++)
            if (h->c[i].fd < 0) slot = i;
        if (slot < 0) {
            close(fd); /* full: the scraper tries again */
            continue;
        }
        pd_http_conn *c = &h->c[slot];
        c->fd = fd;
        c->since = pd_now();
        c->got = c->out_len = c->out_off = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)slot};
        epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev);
    }
}

/* The answer to the request in c->req (its head complete, or over the limit). */
static void answer(pd_http *h, pd_http_conn *c, int too_long)
{
    const char *status = "200 OK", *type = "text/plain; version=0.0.4; charset=utf-8";
    pd_buf body = {0};
    char method[16] = "", path[256] = "";
    if (too_long || sscanf(c->req, "%15s %255s", method, path) != 2) {
        status = too_long ? "431 Request Header Fields Too Large" : "400 Bad Request";
        pd_buf_put(&body, "bad request\n");
    } else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        status = "405 Method Not Allowed";
        pd_buf_put(&body, "only GET\n");
    } else if (strncmp(path, "/metrics", 8) == 0 && (path[8] == '\0' || path[8] == '?')) {
        h->fn(h->ctx, &body);
    } else {
        status = "404 Not Found";
        type = "text/plain; charset=utf-8";
        pd_buf_put(&body, "paddle: the metrics are at /metrics\n");
    }
    if (!body.s) pd_buf_put(&body, "");
    pd_buf out = {0};
    pd_buf_printf(&out, "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                  status, type, body.len);
    if (strcmp(method, "HEAD") != 0) pd_buf_putn(&out, body.s, body.len);
    free(body.s);
    c->out = out.s;
    c->out_len = out.len;
    c->out_off = 0;
}

/* Send what the socket takes; closed when all is sent or it fails. */
static void write_out(pd_http *h, pd_http_conn *c, int slot)
{
    while (c->out_off < c->out_len) {
        ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = (uint64_t)slot};
            epoll_ctl(h->epfd, EPOLL_CTL_MOD, c->fd, &ev);
            return;
        }
        if (k <= 0) break;
        c->out_off += (size_t)k;
    }
    conn_close(h, c);
}

static void on_readable(pd_http *h, int slot)
{
    pd_http_conn *c = &h->c[slot];
    while (c->got < PD_HTTP_MAX_REQ) {
        ssize_t k = recv(c->fd, c->req + c->got, PD_HTTP_MAX_REQ - c->got, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k <= 0) {
            conn_close(h, c); /* EOF or error before a whole request */
            return;
        }
        c->got += (size_t)k;
        c->req[c->got] = '\0';
        if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) break;
    }
    answer(h, c, !(strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")));
    write_out(h, c, slot);
}

void pd_http_serve(pd_http *h)
{
    if (h->epfd < 0) return;
    struct epoll_event evs[PD_HTTP_CONNS + 1];
    int n = epoll_wait(h->epfd, evs, PD_HTTP_CONNS + 1, 0);
    for (int i = 0; i < n; i++) {
        int id = (int)evs[i].data.u64;
        if (id == LISTEN_ID) {
            accept_all(h);
            continue;
        }
        pd_http_conn *c = &h->c[id];
        if (c->fd < 0) continue;
        if (c->out) write_out(h, c, id);
        else on_readable(h, id);
    }
    double now = pd_now();
    for (int i = 0; i < PD_HTTP_CONNS; i++)
        if (h->c[i].fd >= 0 && now - h->c[i].since > PD_HTTP_TIMEOUT_S) conn_close(h, &h->c[i]);
}

void pd_prom_head(pd_buf *b, const char *name, const char *type, const char *help)
{
    pd_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void pd_prom_val(pd_buf *b, const char *name, const char *labels, double v)
{
    char num[64];
    if (isnan(v)) snprintf(num, sizeof num, "NaN");
    else if (isinf(v)) snprintf(num, sizeof num, "%s", v > 0 ? "+Inf" : "-Inf");
    else if (fabs(v) < 1e15 && v == (double)(long long)v) snprintf(num, sizeof num, "%lld", (long long)v);
    else snprintf(num, sizeof num, "%.15g", v);
    if (labels && *labels) pd_buf_printf(b, "%s{%s} %s\n", name, labels, num);
    else pd_buf_printf(b, "%s %s\n", name, num);
}

void pd_prom_escape(char *dst, size_t n, const char *src)
{
    size_t k = 0;
    for (; *src && k + 3 < n; src++) {
        if (*src == '\\' || *src == '"') dst[k++] = '\\';
        if (*src == '\n') {
            dst[k++] = '\\';
            dst[k++] = 'n';
            continue;
        }
        dst[k++] = *src;
    }
    if (n) dst[k] = '\0';
}

double pd_prom_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;
    if (!f) return 0;
    int ok = fscanf(f, "%lu %lu", &size, &res) == 2;
    fclose(f);
    return ok ? (double)res * (double)sysconf(_SC_PAGESIZE) : 0;
}
