/* client.c - a trainer's side of the pserver protocol. */
#include "client.h"
#include "ckpt.h"
#include "../core/log.h"
#include "../core/pd.h"
#include "../core/crypto.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RETRY_S 3

int pd_endpoints_parse(const char *spec, int default_port, pd_endpoint **eps, int *n)
{
    *eps = NULL;
    *n = 0;
    int cap = 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0 || len >= sizeof((*eps)->host)) {
            free(*eps);
            return pd_err_set(PD_EINVAL, "bad pserver list '%s'", spec);
        }
        PD_GROW(eps, &cap, *n + 1);
        pd_endpoint *e = &(*eps)[(*n)++];
        memcpy(e->host, p, len);
        e->host[len] = '\0';
        e->port = default_port;
        char *colon = strrchr(e->host, ':');
        if (colon) {
            char *bad;
            long v = strtol(colon + 1, &bad, 10);
            if (*bad || v < 1 || v > 65535) {
                int rc = pd_err_set(PD_EINVAL, "bad port in pserver endpoint '%s'", e->host);
                free(*eps);
                *eps = NULL;
                return rc;
            }
            e->port = (int)v;
            *colon = '\0';
        }
        if (e->host[0] && strspn(e->host, "0123456789") == strlen(e->host)) { /* "1": a count, not host 0.0.0.1 */
            int rc = pd_err_set(PD_EINVAL, "pserver endpoint '%s' is a number, not a host", e->host);
            free(*eps);
            *eps = NULL;
            return rc;
        }
        if (e->port <= 0) {
            int rc = pd_err_set(PD_EINVAL, "pserver endpoint '%s' needs a port", e->host);
            free(*eps);
            *eps = NULL;
            return rc;
        }
        p = end ? end + 1 : p + len;
    }
    if (*n == 0) return pd_err_set(PD_EINVAL, "empty pserver list");
    return 0;
}

/* A TCP connect that waits at most wait_s for the peer's answer (a host
 * that drops the connection's packets would hold a blocking connect for
 * the kernel's 2 minutes of retries): the socket, or -1. */
static int connect_within(const struct addrinfo *a, double wait_s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
    int err = errno;
    if (err == EINPROGRESS) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        socklen_t len = sizeof err;
        err = ETIMEDOUT;
        if (poll(&p, 1, (int)(wait_s * 1000) + 1) > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
    }
    if (err == 0) return fd;
    close(fd);
    return -1;
}

/* A connection to pserver `server`'s port: over its Unix socket where the
 * endpoint is an address of this host (and the job allows it), over TCP
 * otherwise or when the Unix socket is not there (a pserver in another
 * network namespace behind a forwarded port, say). */
static int try_connect(const pd_client *c, const char *host, int server, int port, const uint8_t *job,
                       double wait_s)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    if (getaddrinfo(host, ps, &hints, &res) != 0 || !res) return -1;
    int fd = -1;
    uint32_t addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
    /* a pserver listening on that address, or on every interface */
    if (c->lay->unix_sockets && pd_addr_is_here(addr) && (fd = pd_unix_connect(job, server, addr, port)) < 0)
        fd = pd_unix_connect(job, server, htonl(INADDR_ANY), port);
    if (fd < 0) {
        fd = connect_within(res, wait_s);
        int one = 1;
        if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        pd_tcp_buffers(fd);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    return fd;
}

/* Connection i failed with rc (its message set). A pserver that ends
 * first sends every trainer an ERROR frame saying why, and a write racing
 * its close can fail before that frame is read: when one waits unread, it
 * is the error to report. */
static int closed_why(pd_client *c, int i, int rc)
{
    char was[512];
    snprintf(was, sizeof was, "%s", pd_err_msg());
    for (int k = 0; k < 64; k++) {
        pd_frame f;
        int eof = 0;
        if (pd_conn_read(&c->conns[i], &f, &eof) <= 0) break;
        if (f.type == PD_MSG_ERROR)
            return pd_err_set(PD_EPROTO, "pserver %d: %.*s", i / c->nper, (int)PD_MIN(f.len, 500),
                              (char *)f.payload);
    }
    return pd_err_set(rc, "%s", was);
}

/* pd_conn_queue on connection k of c. A frame it fails to send (the
 * pserver closed the connection) is named by its pserver, with the reason
 * the pserver sent before it closed where it sent one. */
static int queue(pd_client *c, pd_conn *k, int type, uint32_t a, uint32_t b, const void *p1, size_t n1,
                 const void *p2, size_t n2)
{
    int rc = pd_conn_queue(k, type, a, b, p1, n1, p2, n2);
    if (rc >= 0) return rc;
    int i = (int)(k - c->conns);
    return closed_why(c, i, pd_err_wrap(rc, "pserver %d", i / c->nper));
}

/* Errors: what went wrong, without naming the pserver (open_conn does). */
static int handshake(pd_client *c, pd_conn *k, int server, const uint8_t *secret, const uint8_t *job, double wait_s)
{
    uint8_t hello[PD_JOB_ID + 32 + PD_NONCE], cn[PD_NONCE];
    if (pd_random(cn, PD_NONCE) < 0) return PD_EIO;
    memcpy(hello, job, PD_JOB_ID);
    memcpy(hello + PD_JOB_ID, c->lay->digest, 32);
    memcpy(hello + PD_JOB_ID + 32, cn, PD_NONCE);
    pd_conn_queue(k, PD_MSG_HELLO, 1, (uint32_t)c->trainer, hello, sizeof hello, NULL, 0);
    int rc;
    pd_frame f;
    if ((rc = pd_conn_send_all(k, wait_s)) < 0 || (rc = pd_conn_recv(k, &f, wait_s)) < 0) return rc;
    if (f.type == PD_MSG_ERROR)
        return pd_err_set(PD_EAUTH, "refused: %.*s", (int)PD_MIN(f.len, 300), (char *)f.payload);
    if (f.type != PD_MSG_CHALLENGE || f.len != PD_NONCE + PD_MAC)
        return pd_err_set(PD_EPROTO, "expected CHALLENGE, got %s (is a paddle pserver listening there?)",
                          pd_msg_name(f.type));
    uint8_t sn[PD_NONCE], want[PD_MAC];
    memcpy(sn, f.payload, PD_NONCE);
    pd_proof(secret, "pd-server", cn, sn, job, want);
    if (!pd_mac_equal(want, f.payload + PD_NONCE, PD_MAC))
        return pd_err_set(PD_EAUTH, "it does not know the job secret: refusing to train with it");
    uint8_t proof[PD_MAC];
    pd_proof(secret, "pd-client", sn, cn, job, proof);
    pd_conn_queue(k, PD_MSG_AUTH, 0, 0, proof, PD_MAC, NULL, 0);
    if ((rc = pd_conn_send_all(k, wait_s)) < 0 || (rc = pd_conn_recv(k, &f, wait_s)) < 0) return rc;
    if (f.type == PD_MSG_ERROR)
        return pd_err_set(PD_EAUTH, "refused: %.*s", (int)PD_MIN(f.len, 300), (char *)f.payload);
    if (f.type != PD_MSG_WELCOME) return pd_err_set(PD_EPROTO, "expected WELCOME, got %s", pd_msg_name(f.type));
    if ((int)f.a != server || (int)f.b != c->np)
        return pd_err_set(PD_EINVAL, "it is pserver %u of %u, not pserver %d of %d: check the pserver list", f.a,
                          f.b, server, c->np);
    return 0;
}

static int peer_family(int fd, uint32_t *addr);

/* Shared memory with a pserver reached over its Unix socket, where the job
 * allows it: < 0 only when the connection failed. */
static int offer_rings(pd_client *c, pd_conn *k, int server)
{
    uint32_t addr;
    if (!c->lay->shared_memory || peer_family(k->fd, &addr) != AF_UNIX) return 0;
    int saving = 0, rc = pd_conn_offer_rings(k, c->timeout, &saving);
    if (saving) c->saving[server] = pd_now(); /* its silence is no fault while it writes (saving_wait) */
    if (rc < 0) return pd_err_set(rc, "pserver %d: %s", server, pd_err_msg());
    if (rc == 0) PD_WARN("pserver %d: no shared memory (%s): its frames go through its Unix socket", server, pd_err_msg());
    return 0;
}

static void *place_values(void *ctx, const pd_frame *h);

/* How long one try at an endpoint waits for its connect, and for each
 * answer of its handshake (a pserver answers at once, unless a step or a
 * checkpoint holds its loop: then the next try). */
#define CONNECT_WAIT_S 1.0
#define HANDSHAKE_WAIT_S 10.0

/* Connection i opened, its handshake done and shared memory offered: 0.
 * 1: the endpoint is not ready yet (nothing answers there; or it closed
 * the connection, or stayed silent, in the handshake, as a pserver with
 * too many handshakes at once does, named in *why), to be tried again.
 * < 0: a failure a retry would not mend (a refusal), named by its pserver
 * and endpoint. */
static int open_conn(pd_client *c, int i, const uint8_t *secret, const uint8_t *job, double left, const char **why)
{
    const pd_endpoint *e = &c->eps[i / c->nper];
    int server = i / c->nper, port = e->port + i % c->nper;
    int fd = try_connect(c, e->host, server, port, job, PD_MIN(left, CONNECT_WAIT_S));
    if (fd < 0) return 1;
    pd_conn *k = &c->conns[i];
    pd_conn_init(k, fd, PD_MAX_FRAME);
    k->place = place_values;
    k->place_ctx = c;
    /* at once: a pserver drops a peer that stays silent for
     * PD_HANDSHAKE_TIMEOUT_S, and the others may start much later */
    int rc = handshake(c, k, server, secret, job, PD_MIN(left, HANDSHAKE_WAIT_S));
    if (rc == 0) return offer_rings(c, k, server);
    if (rc == PD_ECONN || rc == PD_ETIMEDOUT) {
        /* a pserver whose loop a checkpoint holds answers later: tried
         * again until server_timeout */
        *why = k->bytes_in ? "it stopped answering during the handshake"
               : rc == PD_ECONN ? "it closed the connection before the handshake"
                                : "it took the connection but did not answer the handshake";
        pd_conn_free(k);
        k->fd = -1;
        return 1;
    }
    return pd_err_wrap(rc, "pserver %d (%s:%d): handshake", server, e->host, port);
}

int pd_client_connect(pd_client *c, const pd_layout *lay, const pd_endpoint *eps, int np, int trainer,
                      const uint8_t *secret, const uint8_t *job, double timeout, volatile int *stop)
{
    memset(c, 0, sizeof *c);
    c->lay = lay;
    c->trainer = trainer;
    c->np = np;
    c->nper = lay->ports_num + lay->ports_sparse;
    c->timeout = timeout;
    c->eps = eps;
    c->hb_timeout = 30;
    c->resume_step = -1;
    c->heard = pd_xcalloc((size_t)np, sizeof *c->heard);
    c->saving = pd_xcalloc((size_t)np, sizeof *c->saving);
    int n = np * c->nper;
    c->conns = pd_xcalloc((size_t)n, sizeof *c->conns);
    for (int i = 0; i < n; i++) c->conns[i].fd = -1;
    double start = pd_now(), next_note = start + 0.5;
    int rc;
    for (;;) {
        char missing[1024] = "";
        int nmissing = 0;
        for (int i = 0; i < n; i++) {
            if (c->conns[i].fd >= 0) continue;
            const char *why = NULL;
            /* stopped: the endpoints left are not tried (each try may take seconds), only named */
            rc = stop && *stop ? 1 : open_conn(c, i, secret, job, PD_MAX(timeout - (pd_now() - start), 1.0), &why);
            if (rc < 0) goto err;
            if (rc == 0) continue;
            size_t len = strlen(missing);
            const pd_endpoint *e = &eps[i / c->nper];
            if (len < sizeof missing - 300)
                snprintf(missing + len, sizeof missing - len, "%s%s:%d%s%s%s", nmissing ? ", " : "", e->host,
                         e->port + i % c->nper, why ? " (" : "", why ? why : "", why ? ")" : "");
            nmissing++;
        }
        if (nmissing == 0) break;
        if (stop && *stop) {
            rc = pd_err_set(PD_EINTR, "stopped on a signal while waiting for the pservers: not ready endpoints: [%s]",
                            missing);
            goto err;
        }
        if (pd_now() - start > timeout) {
            rc = pd_err_set(PD_ETIMEDOUT, "pservers not reachable after %.0f s: not ready endpoints: [%s]", timeout,
                            missing);
            goto err;
        }
        /* retry soon (pservers of other nodes start at about the same time),
         * but say so only every RETRY_S seconds, as PaddlePaddle did */
        if (pd_now() >= next_note) {
            PD_INFO("server not ready, wait %d sec to retry...", RETRY_S);
            PD_INFO("not ready endpoints: [%s]", missing);
            next_note = pd_now() + RETRY_S;
        }
        usleep(100000);
    }
    for (int s = 0; s < np; s++) c->heard[s] = pd_now();
    return 0;
err:
    pd_client_free(c);
    return rc;
}

/* The family of connected socket fd's peer (-1: none), and its IPv4
 * address in *addr. */
static int peer_family(int fd, uint32_t *addr)
{
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &len) < 0) return -1;
    if (peer.ss_family == AF_INET) *addr = ((struct sockaddr_in *)&peer)->sin_addr.s_addr;
    return peer.ss_family;
}

int pd_client_unix_count(const pd_client *c)
{
    int n = 0;
    uint32_t addr;
    for (int s = 0; s < c->np; s++) n += peer_family(c->conns[s * c->nper].fd, &addr) == AF_UNIX;
    return n;
}

int pd_client_ring_count(const pd_client *c)
{
    int n = 0;
    for (int s = 0; s < c->np; s++) n += c->conns[s * c->nper].rings != NULL;
    return n;
}

void pd_client_free(pd_client *c)
{
    for (int i = 0; c->conns && i < c->np * c->nper; i++)
        if (c->conns[i].fd >= 0) pd_conn_free(&c->conns[i]);
    free(c->conns);
    if (c->seen && c->lay)
        for (int t = 0; t < c->lay->ntables; t++) free(c->seen[t]);
    free(c->seen);
    free(c->net_param);
    free(c->layout_param);
    free(c->ids);
    free(c->host);
    free(c->heard);
    free(c->saving);
    free(c->fed);
    free(c->ready);
    free(c->early);
    free(c->early_to);
    free(c->arrived);
    free(c->table_in);
    free(c->pfd);
    for (int i = 0; c->asked && i < c->np * c->lay->ntables; i++) free(c->asked[i]);
    free(c->asked);
    free(c->asked_cap);
    free(c->nasked);
    free(c->nsent);
    free(c->ndone);
    free(c->budget);
    memset(c, 0, sizeof *c);
}

static pd_conn *dense_conn(pd_client *c, int k)
{
    return &c->conns[pd_block_owner(c->lay, k) * c->nper + pd_block_conn(c->lay, k)];
}

static pd_conn *sparse_conn(pd_client *c, int server, int table)
{
    if (c->one_conn) return &c->conns[server * c->nper];
    return &c->conns[server * c->nper + c->lay->ports_num + pd_table_conn(c->lay, table)];
}

/* Handle one reply; decrements *pending for the replies it expected. */
typedef int (*reply_fn)(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx);

/* Queue a HEARTBEAT to every pserver every third of the timeout (at most
 * every 5 s). */
static int heartbeat_due(pd_client *c)
{
    double now = pd_now();
    if (now - c->hb_sent < PD_MIN(c->hb_timeout / 3, 5.0)) return 0;
    c->hb_sent = now;
    for (int s = 0; s < c->np; s++) {
        int rc = pd_conn_queue(&c->conns[s * c->nper], PD_MSG_HEARTBEAT, 0, 0, NULL, 0, NULL, 0);
        if (rc < 0) return pd_err_wrap(rc, "pserver %d", s);
    }
    return 0;
}

/* While we wait (since `since`): a pserver that sent nothing (not even a
 * HEARTBEAT) for heartbeat_timeout is dead or hung. Silence from before
 * the wait says nothing: what came then (a long test, a stopped process)
 * is still unread in the socket. */
static int silent_pserver(pd_client *c, double since)
{
    double now = pd_now();
    for (int s = 0; s < c->np; s++) {
        if (c->saving[s] > 0) continue; /* writing its shard: said by saving_wait */
        double quiet = now - PD_MAX(c->heard[s], since);
        if (quiet > c->hb_timeout)
            return pd_err_set(PD_ETIMEDOUT, "pserver %d (%s:%d) sent nothing for %.0f s (heartbeat_timeout %.0f s): "
                              "dead or hung", s, c->eps[s].host, c->eps[s].port, quiet, c->hb_timeout);
    }
    return 0;
}

int pd_client_heartbeat(pd_client *c)
{
    if (c->finished) return 0; /* the pservers may have ended */
    int rc = heartbeat_due(c);
    int i = 0;
    for (; rc == 0 && i < c->np * c->nper; i++)
        if (c->conns[i].out_len > c->conns[i].out_off && (rc = pd_conn_flush(&c->conns[i])) > 0) rc = 0;
    if (rc < 0 && i > 0) { /* the flush of conns[i - 1] failed */
        const pd_endpoint *e = &c->eps[(i - 1) / c->nper];
        pd_err_wrap(rc, "pserver %d (%s:%d)", (i - 1) / c->nper, e->host, e->port);
    }
    return rc < 0 ? pd_err_wrap(rc, "heartbeat") : 0;
}

/* The net's tick (a batch of a test): a HEARTBEAT when one is due. */
static int tick(void *ctx) { return pd_client_heartbeat(ctx); }

static int on_step_reply(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx);
static int on_rows(pd_client *c, pd_net *net, int server, pd_frame *f, void *vctx);
static int settle_prefetch(pd_client *c);
static const float *host_view(pd_client *c, pd_net *net, const float *dev, size_t off, size_t n);

/*
 * The dense gradients of a step are queued as their connection's output
 * drains (while less than FEED_AHEAD bytes wait there), not all at once:
 * the pservers apply the first blocks while the next are checksummed and
 * sent, small blocks leave together, and large ones go from the gradients
 * straight to the socket (pd_conn_queue). all: queue every block left now.
 */
#define FEED_AHEAD 65536 /* bytes a connection may hold unsent before its next block is queued */

/* PUSH_BLOCK of block k of the net being fed, queued on its connection. */
static int feed_one(pd_client *c, int k)
{
    pd_net *net = c->feeding;
    const pd_lblock *b = &c->lay->blocks[k];
    pd_param *p = &net->params[c->net_param[b->param]];
    const float *g = host_view(c, net, p->g, b->off, (size_t)b->len);
    int rc = queue(c, dense_conn(c, k), PD_MSG_PUSH_BLOCK, (uint32_t)k, 0, g, (size_t)b->len * 4, NULL, 0);
    if (rc < 0) return rc;
    c->fed[k] = 1;
    return 0;
}

static int feed(pd_client *c, int all)
{
    pd_net *net = c->feeding;
    if (!net) return 0;
    const pd_layout *l = c->lay;
    int left = 0;
    for (int k = c->feed_first; k < l->nblocks; k++) {
        if (c->fed[k]) continue;
        if (c->ready && !c->ready[k]) { /* the backward has not finished it yet */
            left = 1;
            continue;
        }
        if (!all && pd_conn_unsent(dense_conn(c, k)) >= FEED_AHEAD) {
            left = 1;
            continue;
        }
        int rc = feed_one(c, k);
        if (rc < 0) return rc;
        if (!left) c->feed_first = k + 1;
    }
    if (!left) c->feeding = NULL;
    return 0;
}

/* Pservers writing their checkpoint shards (PD_HB_SAVING) may send nothing
 * for as long as their disks take: said after SAVING_SAY_S, then every
 * SAVING_SAY_EVERY_S; 1 when one does (no answer is then no fault). */
#define SAVING_SAY_S 10
#define SAVING_SAY_EVERY_S 30
static int saving_wait(pd_client *c)
{
    double now = pd_now(), first = 0;
    int s0 = -1;
    for (int s = 0; s < c->np; s++)
        if (c->saving[s] > 0 && (s0 < 0 || c->saving[s] < first)) first = c->saving[s], s0 = s;
    if (s0 < 0) return 0;
    double waited = now - first;
    /* said for an earlier save (before this one began) counts for nothing */
    if (waited >= SAVING_SAY_S && (c->saving_said < first || now - c->saving_said >= SAVING_SAY_EVERY_S)) {
        c->saving_said = now;
        PD_INFO("waiting for pserver %d (%s:%d): it has been writing its checkpoint shard for %.0f s (a slow disk?)",
                s0, c->eps[s0].host, c->eps[s0].port, waited);
    }
    return 1;
}

static int on_ready(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx);
static int on_pass_done(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx);
static int on_decided(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx);
static int on_saved(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx);

/* What a long wait in exchange waits for, in the words of its note. */
static const char *waiting_for(reply_fn fn)
{
    if (fn == on_ready) return "the parameters (trainer 0 sends them to the pservers first)";
    if (fn == on_pass_done) return "the end of this pass (other trainers still in it?)";
    if (fn == on_decided) return "trainer 0's word on early stopping (it tests the model after each pass)";
    if (fn == on_saved) return "the checkpoint's shards (other trainers not at this checkpoint yet?)";
    return "the step's answers (other trainers still in this step?)";
}

/* Send everything queued and read replies until *pending is 0, or until
 * *c->until is set when it is not NULL. Replies of a posted step
 * (c->inflight) and rows a pull left to the forward (c->rows_pending)
 * that come first are applied on the way. */
static int exchange(pd_client *c, pd_net *net, int *pending, reply_fn fn, void *ctx)
{
    int n = c->np * c->nper;
    if (!c->pfd) c->pfd = pd_xcalloc((size_t)n, sizeof *c->pfd);
    struct pollfd *pfd = c->pfd;
    int rc = 0;
    double deadline = pd_now() + c->timeout;
    double last_note = pd_now(), since = last_note;
    if (c->prefetch > 0 && fn != on_rows && (rc = settle_prefetch(c)) < 0) return rc;
    c->recv_net = net;
    for (;;) {
        int want_out = 0;
        /* feed and flush until every connection waits on its socket or
         * every block is queued */
        for (int drained = 1; drained;) {
            if ((rc = feed(c, 0)) < 0) goto out;
            drained = 0;
            want_out = 0;
            for (int i = 0; i < n; i++) {
                pd_conn *k = &c->conns[i];
                if (k->out_len > k->out_off) {
                    if ((rc = pd_conn_flush(k)) < 0) {
                        pd_err_wrap(rc, "pserver %d", i / c->nper);
                        rc = closed_why(c, i, rc);
                        goto out;
                    }
                    if (rc == 0) want_out = 1;
                    else drained = c->feeding != NULL;
                }
                rc = 0;
            }
        }
        if ((*pending == 0 || (c->until && *c->until)) && !want_out) break;
        if ((rc = heartbeat_due(c)) < 0 || (rc = silent_pserver(c, since)) < 0) goto out;
        for (int i = 0; i < n; i++) {
            pfd[i].fd = c->conns[i].fd;
            pfd[i].events = POLLIN | (c->conns[i].out_len > c->conns[i].out_off ? POLLOUT : 0);
            pfd[i].revents = 0;
        }
        int r = poll(pfd, (nfds_t)n, 1000);
        if (r < 0 && errno != EINTR) {
            rc = pd_err_set(PD_EIO, "poll: %s", strerror(errno));
            goto out;
        }
        if (r <= 0) {
            if (saving_wait(c)) deadline = pd_now() + c->timeout;
            if (pd_now() > deadline) {
                rc = pd_err_set(PD_ETIMEDOUT, "no answer from the pservers within %.0f s (%d replies missing)",
                                c->timeout, *pending);
                goto out;
            }
            if (pd_now() - last_note > 30) {
                PD_INFO("waiting for %d repl%s from the pservers: %s", *pending, *pending == 1 ? "y" : "ies",
                        waiting_for(fn));
                last_note = pd_now();
            }
            continue;
        }
        deadline = pd_now() + c->timeout;
        for (int i = 0; i < n; i++) {
            if (!(pfd[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            for (;;) {
                pd_frame f;
                int eof = 0;
                int got = pd_conn_read(&c->conns[i], &f, &eof);
                if (got < 0) {
                    rc = closed_why(c, i, pd_err_wrap(got, "pserver %d", i / c->nper));
                    goto out;
                }
                if (got == 0) {
                    if (eof) {
                        rc = pd_err_set(PD_ECONN, "pserver %d closed the connection", i / c->nper);
                        goto out;
                    }
                    break;
                }
                int s = i / c->nper;
                c->heard[s] = pd_now();
                if (f.type == PD_MSG_HEARTBEAT && f.a == PD_HB_SAVING) {
                    if (c->saving[s] == 0) c->saving[s] = pd_now();
                    continue;
                }
                c->saving[s] = 0; /* SAVED, its error, or the pserver's loop running again */
                if (f.type == PD_MSG_HEARTBEAT) continue;
                if (f.type == PD_MSG_ERROR) {
                    rc = pd_err_set(PD_EPROTO, "pserver %d: %.*s", i / c->nper, (int)PD_MIN(f.len, 500),
                                    (char *)f.payload);
                    goto out;
                }
                if (c->rows_pending > 0 && fn != on_rows && f.type == PD_MSG_ROWS) {
                    if ((rc = on_rows(c, c->rows_net, i / c->nper, &f, NULL)) < 0) goto out;
                    c->rows_pending--;
                    continue;
                }
                if (c->inflight > 0 && fn != on_step_reply &&
                    (f.type == PD_MSG_BLOCK_VALUES || f.type == PD_MSG_ROWS_DONE)) {
                    if ((rc = on_step_reply(c, c->posted, i / c->nper, &f, NULL)) < 0) goto out;
                    c->inflight--;
                    continue;
                }
                if ((rc = fn(c, net, i / c->nper, &f, ctx)) < 0) goto out;
                (*pending)--;
            }
        }
    }
out:
    c->recv_net = NULL;
    c->bytes_in = 0;
    c->bytes_out = 0;
    for (int i = 0; i < n; i++) {
        c->bytes_in += c->conns[i].bytes_in;
        c->bytes_out += c->conns[i].bytes_out;
    }
    return rc;
}

/* --- parameters in the net ------------------------------------------------------ */

static int map_params(pd_client *c, pd_net *net)
{
    if (c->net_param) return 0;
    const pd_layout *l = c->lay;
    int *fwd = pd_xmalloc(((size_t)l->nparams + 1) * sizeof(int));
    int *back = pd_xmalloc(((size_t)net->nparams + 1) * sizeof(int));
    for (int i = 0; i < net->nparams; i++) back[i] = -1;
    for (int i = 0; i < l->nparams; i++) {
        pd_param *p = pd_net_param(net, l->params[i].name);
        if (!p || p->hash != l->params[i].hash || (!p->hash && p->rows != l->params[i].rows) ||
            p->cols != l->params[i].cols) {
            free(fwd);
            free(back);
            return pd_err_set(PD_EINVAL, "parameter '%s' differs between the net and the layout", l->params[i].name);
        }
        fwd[i] = (int)(p - net->params);
        back[fwd[i]] = i;
    }
    c->net_param = fwd;
    c->layout_param = back;
    c->seen = pd_xcalloc((size_t)l->ntables + 1, sizeof *c->seen);
    for (int t = 0; t < l->ntables; t++) c->seen[t] = pd_xcalloc((size_t)l->params[l->tables[t]].rows, 1);
    return 0;
}

static float *host_buf(pd_client *c, size_t n)
{
    if (n > c->cap_host) {
        free(c->host);
        c->host = pd_xmalloc(n * sizeof(float));
        c->cap_host = n;
    }
    return c->host;
}

/* Host view of floats [off, off+n) of a device array (copied if needed). */
static const float *host_view(pd_client *c, pd_net *net, const float *dev, size_t off, size_t n)
{
    if (net->be->host_memory) return dev + off;
    float *h = host_buf(c, n);
    net->be->download(h, dev + off, n * sizeof(float));
    return h;
}

/* The gradients of p's touched rows where the host can read them: p->g
 * itself in host memory, else a copy of those rows alone (one transfer, not
 * one a row); NULL when the device has no room. touched_row: the i-th. */
static const float *touched_grads(pd_net *net, pd_param *p)
{
    return net->be->host_memory ? p->g : pd_param_touched_grads(net, p);
}

static const float *touched_row(const pd_net *net, const pd_param *p, const float *g, int i)
{
    return g + (size_t)(net->be->host_memory ? p->touched[i] : i) * p->cols;
}

static void store(pd_net *net, float *dev, size_t off, const void *src, size_t n)
{
    if (src != dev + off) net->be->upload(dev + off, src, n * sizeof(float));
}

/* A block's new values are received straight into the parameter when it
 * lives in host memory (proto.h: pd_conn.place), rows read where they lie
 * in a ring; anything else goes to the connection's buffer and is checked
 * by the reply's handler. */
static void *place_values(void *ctx, const pd_frame *h)
{
    pd_client *c = ctx;
    if (h->type == PD_MSG_ROWS) return PD_PLACE_IN_RING; /* on_rows copies them into their table */
    pd_net *net = c->inflight > 0 ? c->posted : c->recv_net;
    const pd_layout *l = c->lay;
    if (!net || !net->be->host_memory || !c->net_param || h->type != PD_MSG_BLOCK_VALUES ||
        h->a >= (uint32_t)l->nblocks || h->len != (uint32_t)l->blocks[h->a].len * 4)
        return NULL;
    const pd_lblock *b = &l->blocks[h->a];
    return net->params[c->net_param[b->param]].w + b->off;
}

static int on_block_values(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx)
{
    (void)ctx;
    const pd_layout *l = c->lay;
    if (f->type != PD_MSG_BLOCK_VALUES || f->a >= (uint32_t)l->nblocks || pd_block_owner(l, (int)f->a) != server ||
        f->len != (uint32_t)l->blocks[f->a].len * 4)
        return pd_err_set(PD_EPROTO, "pserver %d: unexpected %s reply", server,
                          pd_msg_name(f->type) ? pd_msg_name(f->type) : "?");
    const pd_lblock *b = &l->blocks[f->a];
    pd_param *p = &net->params[c->net_param[b->param]];
    store(net, p->w, b->off, f->payload, (size_t)b->len);
    if ((long)f->b > c->step) c->step = (long)f->b;
    return 0;
}

static int on_simple(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx)
{
    (void)c;
    (void)net;
    int want = *(int *)ctx;
    if (f->type != want)
        return pd_err_set(PD_EPROTO, "pserver %d: expected %s, got %s", server, pd_msg_name(want),
                          pd_msg_name(f->type) ? pd_msg_name(f->type) : "?");
    return 0;
}

static int pull_dense(pd_client *c, pd_net *net)
{
    int pending = 0;
    for (int k = 0; k < c->lay->nblocks; k++) {
        pd_conn_queue(dense_conn(c, k), PD_MSG_PULL_BLOCK, (uint32_t)k, 0, NULL, 0, NULL, 0);
        pending++;
    }
    return exchange(c, net, &pending, on_block_values, NULL);
}

/* Every pserver's READY: the checkpoint it resumed from (-1: none) and
 * this trainer's position in it. */
typedef struct ready_ctx {
    long *step;
    int *pass, *batch;
} ready_ctx;

/* READY: empty from a pserver that started fresh; from one that resumed,
 * the checkpoint's step (u64) and this trainer's position in a, b. */
static int on_ready(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx)
{
    (void)net;
    ready_ctx *r = ctx;
    if (f->type != PD_MSG_READY || (f->len != 0 && f->len != 8))
        return pd_err_set(PD_EPROTO, "pserver %d: expected READY", server);
    long step = -1;
    if (f->len == 8) {
        uint64_t v;
        memcpy(&v, f->payload, 8);
        if (v > (uint64_t)LONG_MAX || f->a > 1000000 || f->b > (uint32_t)INT32_MAX)
            return pd_err_set(PD_EPROTO, "pserver %d: READY with a bad checkpoint position", server);
        step = (long)v;
    }
    int pass = step < 0 ? 0 : (int)f->a, batch = step < 0 ? 0 : (int)f->b;
    if (r->step[server] != -2 && (r->step[server] != step || r->pass[server] != pass || r->batch[server] != batch))
        return pd_err_set(PD_EPROTO, "pserver %d: two READY frames that differ", server);
    r->step[server] = step, r->pass[server] = pass, r->batch[server] = batch;
    (void)c;
    return 0;
}

/* A COMMIT's answer (kind 1 or 2): the worst of them in *worst (1 all
 * marked, 0 a shard missing, 3 a marker not written). */
static int on_commit_answer(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx)
{
    (void)c;
    (void)net;
    int *worst = ctx;
    if (f->type != PD_MSG_COMMIT || f->len || f->b > 3)
        return pd_err_set(PD_EPROTO, "pserver %d: expected COMMIT, got %s", server,
                          pd_msg_name(f->type) ? pd_msg_name(f->type) : "?");
    if (f->b == 3) *worst = 3;
    else if (f->b == 0 && *worst != 3) *worst = 0;
    return 0;
}

/* COMMIT of kind for step to every pserver; waits for the answers, and
 * returns the worst (on_commit_answer), or < 0. */
static int commit_all(pd_client *c, pd_net *net, long step, int kind)
{
    int pending = 0, worst = 1;
    if (step < 0 || step > (long)UINT32_MAX)
        return pd_err_set(PD_EDATA, "checkpoint %ld: a step past what a COMMIT frame carries", step);
    for (int s = 0; s < c->np; s++) {
        pd_conn_queue(&c->conns[s * c->nper], PD_MSG_COMMIT, (uint32_t)step, (uint32_t)kind, NULL, 0, NULL, 0);
        pending++;
    }
    int rc = exchange(c, net, &pending, on_commit_answer, &worst);
    return rc < 0 ? rc : worst;
}

/* Every pserver must have resumed from the same checkpoint. A checkpoint
 * is complete once every pserver saved its shard; each pserver marks it so
 * when a trainer's COMMIT comes, and a job stopped between two COMMITs
 * leaves the pservers behind with an older one. Every pserver is asked to
 * mark the newest one any resumed from, where its shard is there; then the
 * job's next start resumes from it. When a pserver has no shard of it
 * (lost, corrupt), every pserver withdraws it, and the next start takes an
 * older one. */
static int agree_on_checkpoint(pd_client *c, pd_net *net, const ready_ctx *r)
{
    int hi = 0, behind = -1;
    for (int s = 1; s < c->np; s++)
        if (r->step[s] > r->step[hi]) hi = s;
    for (int s = 0; s < c->np; s++) {
        if (r->step[s] != r->step[hi]) {
            if (behind < 0) behind = s;
        } else if (r->pass[s] != r->pass[hi] || r->batch[s] != r->batch[hi]) {
            return pd_err_set(PD_EDATA, "pservers %d and %d resumed from checkpoint %ld at different positions of "
                              "this trainer (%d/%d, %d/%d): shards of two jobs?", hi, s, r->step[hi], r->pass[hi],
                              r->batch[hi], r->pass[s], r->batch[s]);
        }
    }
    if (behind < 0) {
        c->resume_step = r->step[hi];
        c->resume_pass = r->pass[hi];
        c->resume_batch = r->batch[hi];
        return 0;
    }
    long top = r->step[hi];
    char was[48];
    if (r->step[behind] < 0) snprintf(was, sizeof was, "no complete checkpoint");
    else snprintf(was, sizeof was, "checkpoint %ld", r->step[behind]);
    int rc = commit_all(c, net, top, 1);
    if (rc < 0) return rc;
    if (rc == 1)
        return pd_err_set(PD_EDATA, "pserver %d resumed from %s, pserver %d from checkpoint %ld, which every pserver "
                          "saved: %s. It is marked complete on every pserver's disk now: the job's next start of "
                          "every role (a restart, or --resume) resumes from checkpoint %ld", behind, was, hi, top,
                          r->step[behind] < 0 ? "was that pserver started without --resume, or with another "
                          "checkpoint_dir? Or the job stopped before it heard the checkpoint was complete"
                          : "the job stopped before that pserver heard it was complete", top);
    if (rc == 3)
        return pd_err_set(PD_EIO, "pserver %d resumed from %s, pserver %d from checkpoint %ld, and a pserver could "
                          "not mark it complete on its disk (its log says why)", behind, was, hi, top);
    if ((rc = commit_all(c, net, top, 2)) < 0) return rc;
    if (c->ckpt_dir) pd_ckpt_unmark(c->ckpt_dir, top); /* the marker the trainers' host holds */
    return pd_err_set(PD_EDATA, "pserver %d resumed from %s, pserver %d from checkpoint %ld, of which a pserver has "
                      "no shard (lost or corrupt: its log says which): checkpoint %ld is withdrawn, and the job's "
                      "next start of every role (a restart, or --resume) resumes from an older one", behind, was, hi,
                      top, top);
}

void pd_client_commit(pd_client *c, long step)
{
    if (step < 0 || step > (long)UINT32_MAX) return;
    for (int s = 0; s < c->np; s++) {
        pd_conn *k = &c->conns[s * c->nper];
        pd_conn_queue(k, PD_MSG_COMMIT, (uint32_t)step, 0, NULL, 0, NULL, 0);
        (void)pd_conn_flush(k); /* now, not with the next step: a job stopped meanwhile resumes from it */
    }
}

/* --- growing tables: 64-bit ids on the pserver pd_hash_owner names ---------- */

typedef struct keys_ctx {
    int t;
    pd_param *p;
    int32_t **pos;      /* per pserver: the rows of p->w asked, in order */
    int *n;
    int got;            /* KEY_DUMP: rows in the reply */
} keys_ctx;

static int on_key_rows(pd_client *c, pd_net *net, int server, pd_frame *f, void *vctx)
{
    keys_ctx *k = vctx;
    int cols = k->p->cols;
    if (f->type != PD_MSG_KEY_ROWS || f->a != (uint32_t)k->t || f->b != (uint32_t)k->n[server] ||
        (uint64_t)f->len != (uint64_t)f->b * (uint64_t)cols * 4)
        return pd_err_set(PD_EPROTO, "pserver %d: expected KEY_ROWS of %d rows for table %d", server, k->n[server],
                          k->t);
    return pd_param_set_rows(net, k->p, k->pos[server], (const float *)f->payload, (int)f->b);
}

/* The net's fill_rows: the rows of p's bound ids from their pservers. */
static int fill_keys(void *vc, pd_net *net, pd_param *p)
{
    pd_client *c = vc;
    const pd_layout *l = c->lay;
    int t = 0;
    while (t < l->ntables && &net->params[c->net_param[l->tables[t]]] != p) t++;
    if (t == l->ntables) return pd_err_set(PD_EINVAL, "table '%s' is not in the layout", p->name);
    keys_ctx k = {t, p, pd_xcalloc((size_t)c->np, sizeof(int32_t *)), pd_xcalloc((size_t)c->np, sizeof(int)), 0};
    uint64_t **keys = pd_xcalloc((size_t)c->np, sizeof(uint64_t *));
    for (int s = 0; s < c->np; s++) {
        k.pos[s] = pd_xmalloc(((size_t)p->nkeys + 1) * sizeof(int32_t));
        keys[s] = pd_xmalloc(((size_t)p->nkeys + 1) * sizeof(uint64_t));
    }
    for (int i = 0; i < p->nkeys; i++) {
        int s = pd_hash_owner(p->keys[i], c->np);
        k.pos[s][k.n[s]] = i;
        keys[s][k.n[s]++] = p->keys[i];
    }
    int pending = 0, rc = 0;
    for (int s = 0; s < c->np && rc == 0; s++) {
        if (k.n[s] == 0) continue;
        rc = queue(c, sparse_conn(c, s, t), PD_MSG_PULL_KEYS, (uint32_t)t, (uint32_t)k.n[s], keys[s],
                   (size_t)k.n[s] * 8, NULL, 0);
        pending++;
    }
    if (rc == 0) rc = exchange(c, net, &pending, on_key_rows, &k);
    for (int s = 0; s < c->np; s++) {
        free(k.pos[s]);
        free(keys[s]);
    }
    free(k.pos);
    free(k.n);
    free(keys);
    return rc < 0 ? pd_err_wrap(rc, "table '%s'", p->name) : 0;
}

/* PUSH_KEYS to every pserver (sync: an empty one counts too): the ids the
 * step touched and their gradients. */
static int push_keys(pd_client *c, pd_net *net, int t, pd_param *p, int *pending)
{
    const float *g = touched_grads(net, p);
    if (!g) return pd_err_wrap(PD_ENOMEM, "table '%s'", p->name);
    uint64_t *keys = pd_xmalloc(((size_t)p->ntouched + 1) * sizeof *keys);
    float *vals = pd_xmalloc(((size_t)p->ntouched * p->cols + 1) * sizeof(float));
    int rc = 0;
    for (int s = 0; s < c->np && rc == 0; s++) {
        int n = 0;
        for (int i = 0; i < p->ntouched; i++) {
            int32_t r = p->touched[i];
            if (pd_hash_owner(p->keys[r], c->np) != s) continue;
            keys[n] = p->keys[r];
            pd_copy_row(vals + (size_t)n * p->cols, touched_row(net, p, g, i), (size_t)p->cols * sizeof(float));
            n++;
        }
        rc = queue(c, sparse_conn(c, s, t), PD_MSG_PUSH_KEYS, (uint32_t)t, (uint32_t)n, keys, (size_t)n * 8, vals,
                   (size_t)n * p->cols * sizeof(float));
        (*pending)++;
    }
    free(keys);
    free(vals);
    return rc < 0 ? pd_err_wrap(rc, "table '%s'", p->name) : 0;
}

static int on_key_dump(pd_client *c, pd_net *net, int server, pd_frame *f, void *vctx)
{
    keys_ctx *k = vctx;
    int cols = k->p->cols;
    if (f->type != PD_MSG_KEY_DUMP || f->a != (uint32_t)k->t ||
        (uint64_t)f->len != (uint64_t)f->b * (8 + 4 * (uint64_t)cols))
        return pd_err_set(PD_EPROTO, "pserver %d: expected KEY_DUMP for table %d", server, k->t);
    for (uint32_t i = 0; i < f->b; i++) {
        uint64_t key;
        memcpy(&key, f->payload + 8 * (size_t)i, 8);
        memcpy(pd_hashtab_put(k->p->tab, key), f->payload + 8 * (size_t)f->b + 4 * (size_t)cols * i,
               (size_t)cols * sizeof(float));
    }
    k->got = (int)f->b;
    return 0;
}

/* Every row of growing table t from every pserver into p->tab (a model's
 * save), chunk by chunk. */
static int fetch_keys(pd_client *c, pd_net *net, int t, pd_param *p)
{
    keys_ctx k = {t, p, NULL, NULL, 0};
    int rc = 0;
    pd_hashtab_clear(p->tab);
    for (int s = 0; s < c->np && rc == 0; s++) {
        uint32_t first = 0;
        do {
            int pending = 1;
            if ((rc = pd_conn_queue(sparse_conn(c, s, t), PD_MSG_DUMP_KEYS, (uint32_t)t, first, NULL, 0, NULL, 0)) < 0 ||
                (rc = exchange(c, net, &pending, on_key_dump, &k)) < 0)
                break;
            first += (uint32_t)k.got;
        } while (k.got > 0);
    }
    return rc < 0 ? pd_err_wrap(rc, "table '%s'", p->name) : 0;
}

int pd_client_init(pd_client *c, pd_net *net)
{
    int rc;
    const pd_layout *l = c->lay;
    if ((rc = map_params(c, net)) < 0) return rc;
    if (c->trainer == 0) {
        for (int k = 0; k < l->nblocks; k++) {
            const pd_lblock *b = &l->blocks[k];
            pd_param *p = &net->params[c->net_param[b->param]];
            const float *v = host_view(c, net, p->w, b->off, (size_t)b->len);
            pd_conn_queue(dense_conn(c, k), PD_MSG_INIT_BLOCK, (uint32_t)k, 0, v, (size_t)b->len * 4, NULL, 0);
        }
        for (int t = 0; t < l->ntables; t++) {
            pd_param *p = &net->params[c->net_param[l->tables[t]]];
            if (p->hash) { /* its rows start at pd_init_row, on their pserver */
                if (pd_hashtab_rows(p->tab) > 0)
                    PD_WARN("table '%s': the %ld rows loaded here (--init_model) are not sent to the pservers; "
                            "growing tables start empty there", p->name, pd_hashtab_rows(p->tab));
                continue;
            }
            const float *all = host_view(c, net, p->w, 0, (size_t)p->rows * p->cols);
            for (int s = 0; s < c->np; s++) {
                size_t limit = PD_MIN(sparse_conn(c, s, t)->max_frame, (size_t)PD_MAX_FRAME);
                size_t per_frame = PD_MAX(limit / (4 + 4 * (size_t)p->cols) / 2, 1);
                int nrows = pd_rows_on(l, p->rows, s);
                for (int start = 0; start < nrows; start += (int)per_frame) {
                    int cnt = (int)PD_MIN((size_t)(nrows - start), per_frame);
                    int32_t *ids = pd_xmalloc((size_t)cnt * 4);
                    float *vals = pd_xmalloc((size_t)cnt * p->cols * 4);
                    for (int i = 0; i < cnt; i++) {
                        ids[i] = (int32_t)((start + i) * c->np + s);
                        memcpy(vals + (size_t)i * p->cols, all + (size_t)ids[i] * p->cols, (size_t)p->cols * 4);
                    }
                    pd_conn_queue(sparse_conn(c, s, t), PD_MSG_INIT_ROWS, (uint32_t)t, (uint32_t)cnt, ids,
                                  (size_t)cnt * 4, vals, (size_t)cnt * p->cols * 4);
                    free(ids);
                    free(vals);
                }
            }
        }
    }
    int pending = 0;
    /* trainer 0 says INIT_DONE on every connection, after its INIT frames
     * there; the others ask once per pserver */
    for (int s = 0; s < c->np; s++)
        for (int k = 0; k < (c->trainer == 0 ? c->nper : 1); k++) {
            pd_conn_queue(&c->conns[s * c->nper + k], PD_MSG_INIT_DONE, c->trainer == 0, 0, NULL, 0, NULL, 0);
            pending++;
        }
    ready_ctx r = {pd_xmalloc((size_t)c->np * sizeof(long)), pd_xcalloc((size_t)c->np, sizeof(int)),
                   pd_xcalloc((size_t)c->np, sizeof(int))};
    for (int s = 0; s < c->np; s++) r.step[s] = -2; /* not heard */
    rc = exchange(c, net, &pending, on_ready, &r);
    if (rc == 0) rc = agree_on_checkpoint(c, net, &r);
    free(r.step);
    free(r.pass);
    free(r.batch);
    if (rc < 0) return rc;
    net->fill_rows = fill_keys;
    net->fill_ctx = c;
    net->tick = tick;
    net->tick_ctx = c;
    return pull_dense(c, net);
}

/* Unique ids of table t that the bound batch uses (or batch next will),
 * sorted by nothing; -1 when next does not give them as the bound one did. */
static int batch_ids(pd_client *c, pd_net *net, int t, const pd_batch *next, int32_t **out)
{
    int n = 0, rc = 0;
    pd_param *p = &net->params[c->net_param[c->lay->tables[t]]];
    uint8_t *seen = c->seen[t];
    for (int i = 0; i < net->nlayers && rc == 0; i++) {
        pd_layer *l = &net->layers[i];
        if (l->p[0] != p || strcmp(l->d->type, "embedding") != 0) continue;
        pd_layer *x = l->in[0];
        const int32_t *xids = x->h_ids;
        int rows = next ? pd_net_batch_ids(x, next, &xids) : x->rows;
        if (rows < 0 || (next && x->d->range != p->rows)) {
            rc = -1;
            break;
        }
        for (int r = 0; r < rows; r++) {
            int32_t id = xids[r];
            if (seen[id]) continue;
            seen[id] = 1;
            if ((size_t)n + 1 > c->cap_ids) {
                c->cap_ids = c->cap_ids ? c->cap_ids * 2 : 1024;
                c->ids = pd_xrealloc(c->ids, c->cap_ids * sizeof *c->ids);
            }
            c->ids[n++] = id;
        }
    }
    for (int i = 0; i < n; i++) seen[c->ids[i]] = 0;
    *out = c->ids;
    return rc < 0 ? rc : n;
}

/* Have all rows asked of table t come? */
static int table_done(const pd_client *c, int t)
{
    for (int s = 0; s < c->np; s++) {
        int slot = s * c->lay->ntables + t;
        if (c->ndone[slot] < c->nasked[slot]) return 0;
    }
    return 1;
}

static int on_rows(pd_client *c, pd_net *net, int server, pd_frame *f, void *vctx)
{
    (void)vctx;
    const pd_layout *l = c->lay;
    if (f->type != PD_MSG_ROWS || f->a >= (uint32_t)l->ntables)
        return pd_err_set(PD_EPROTO, "pserver %d: expected ROWS", server);
    int t = (int)f->a, slot = server * l->ntables + t;
    pd_param *p = &net->params[c->net_param[l->tables[t]]];
    if (f->b == 0 || f->b > (uint32_t)(c->nsent[slot] - c->ndone[slot]) ||
        (uint64_t)f->len != (uint64_t)f->b * (uint64_t)p->cols * 4)
        return pd_err_set(PD_EPROTO, "pserver %d: ROWS of the wrong size", server);
    int rc = pd_param_set_rows(net, p, c->asked[slot] + c->ndone[slot], (const float *)f->payload, (int)f->b);
    c->ndone[slot] += (int)f->b;
    if (c->table_in) c->table_in[t] = table_done(c, t);
    return rc;
}

/* Queue the next PULL_ROWS chunks: each reply fits one frame, and the
 * replies asked on one connection in one round fit one frame together (so
 * that a pserver never holds more than a frame of them for us). *pending:
 * the requests queued. only: table only's (a round's tables in order from
 * 0), or every table's (-1). */
static int queue_row_chunks(pd_client *c, pd_net *net, int only, int *pending)
{
    const pd_layout *l = c->lay;
    size_t *budget = c->budget;
    if (only <= 0) memset(budget, 0, (size_t)c->np * c->nper * sizeof *budget);
    for (int t = 0; t < l->ntables; t++) {
        if (only >= 0 && t != only) continue;
        pd_param *p = &net->params[c->net_param[l->tables[t]]];
        size_t row_bytes = 4 * (size_t)PD_MAX(p->cols, 1);
        for (int s = 0; s < c->np; s++) {
            int slot = s * l->ntables + t;
            pd_conn *k = sparse_conn(c, s, t);
            size_t limit = PD_MIN(k->max_frame, (size_t)PD_MAX_FRAME), per = limit / row_bytes;
            size_t *used = &budget[k - c->conns];
            if (per == 0) return pd_err_set(PD_ERANGE, "table '%s': one row is over the frame limit", p->name);
            while (c->nsent[slot] < c->nasked[slot]) {
                size_t cnt = PD_MIN((size_t)(c->nasked[slot] - c->nsent[slot]), per);
                if (*used > 0 && *used + cnt * row_bytes > limit) break;
                int rc = queue(c, k, PD_MSG_PULL_ROWS, (uint32_t)t, (uint32_t)cnt, c->asked[slot] + c->nsent[slot],
                               cnt * 4, NULL, 0);
                if (rc < 0) return rc;
                *used += cnt * row_bytes;
                c->nsent[slot] += (int)cnt;
                (*pending)++;
            }
        }
    }
    return 0;
}

static int post_queued(pd_client *c, pd_net *net);
static int flush_all(pd_client *c);
static int wait_posted(pd_client *c);
static int post_with_pull(pd_client *c, pd_net *held, pd_net *net);
static int queue_step(pd_client *c, pd_net *net, int *pending);
static void queue_dense(pd_client *c, pd_net *net, int *pending);
static int queue_table(pd_client *c, pd_net *net, int t, int *pending);
static int wait_rows(pd_client *c, int t);

/* The held step, sent right behind the requests queued: those leave
 * first, so the pservers answer them before they apply the step. */
static int post_behind(pd_client *c)
{
    pd_net *net = c->deferred;
    c->deferred = NULL;
    int rc = flush_all(c);
    return rc < 0 ? rc : post_queued(c, net);
}

/* The requests of a pull, per pserver and table: every row of every table
 * (all), the rows the bound batch uses, or those batch next will use; 1
 * (nothing asked) when next does not give them as the bound batch did. */
static int ask_rows(pd_client *c, pd_net *net, int all, const pd_batch *next)
{
    const pd_layout *l = c->lay;
    int nslots = c->np * l->ntables;
    if (!c->asked) {
        c->asked = pd_xcalloc((size_t)nslots, sizeof *c->asked);
        c->asked_cap = pd_xcalloc((size_t)nslots, sizeof *c->asked_cap);
        c->nasked = pd_xcalloc((size_t)nslots, sizeof *c->nasked);
        c->nsent = pd_xcalloc((size_t)nslots, sizeof *c->nsent);
        c->ndone = pd_xcalloc((size_t)nslots, sizeof *c->ndone);
        c->budget = pd_xcalloc((size_t)c->np * c->nper, sizeof *c->budget);
    }
    memset(c->nasked, 0, (size_t)nslots * sizeof *c->nasked);
    memset(c->nsent, 0, (size_t)nslots * sizeof *c->nsent);
    memset(c->ndone, 0, (size_t)nslots * sizeof *c->ndone);
    for (int t = 0; t < l->ntables; t++) {
        pd_param *p = &net->params[c->net_param[l->tables[t]]];
        int32_t *ids = NULL;
        int n = p->hash ? 0 : all ? p->rows : batch_ids(c, net, t, next, &ids);
        if (n < 0) {
            memset(c->nasked, 0, (size_t)nslots * sizeof *c->nasked);
            return 1;
        }
        for (int s = 0; s < c->np; s++) {
            int slot = s * l->ntables + t;
            size_t want = (size_t)(all ? pd_rows_on(l, n, s) : n) + 1;
            if (want > c->asked_cap[slot]) {
                free(c->asked[slot]);
                c->asked[slot] = pd_xmalloc(want * sizeof(int32_t));
                c->asked_cap[slot] = want;
            }
        }
        for (int i = 0; i < n; i++) {
            int32_t id = all ? i : ids[i];
            int slot = pd_row_owner(l, id) * l->ntables + t;
            c->asked[slot][c->nasked[slot]++] = id;
        }
    }
    return 0;
}

/* The rounds of a pull not sent yet, each of chunks that fit the frame
 * limit, and their replies; a held step (async) follows the first. */
static int pull_rounds(pd_client *c, pd_net *net)
{
    int rc = 0;
    for (;;) {
        int pending = 0;
        if ((rc = queue_row_chunks(c, net, -1, &pending)) < 0) break;
        if (c->deferred && (rc = post_behind(c)) < 0) break;
        if (pending == 0) break;
        if ((rc = exchange(c, net, &pending, on_rows, NULL)) < 0) break;
    }
    return rc;
}

/* The replies of a prefetch no pull took (another exchange came first):
 * read into the table, which the next pull asks again. */
static int settle_prefetch(pd_client *c)
{
    int pending = c->prefetch;
    c->prefetch = 0;
    c->prefetched = 0;
    return pending ? exchange(c, c->prefetch_net, &pending, on_rows, NULL) : 0;
}

/* Pull the rows the bound batch uses (all: every row of every table). */
static int pull_rows(pd_client *c, pd_net *net, int all)
{
    if (c->lay->ntables == 0) return 0;
    int rc = settle_prefetch(c);
    if (rc == 0) rc = wait_rows(c, -1); /* the last pull's, had no forward read them */
    if (rc == 0) rc = ask_rows(c, net, all, NULL);
    return rc < 0 ? rc : pull_rounds(c, net);
}

int pd_client_pull_rows(pd_client *c, pd_net *net)
{
    int rc = map_params(c, net);
    if (rc == 0 && c->prefetched && c->prefetch_net == net) {
        /* async: asked for while the batch before computed, behind the step
         * before that one; its replies come first, then the rows */
        if ((rc = settle_prefetch(c)) < 0 || (rc = wait_posted(c)) < 0) return rc;
        /* rounds after the first, if the rows need more than a frame: the
         * held step waits for them too, or their rows (and the step's
         * replies read meanwhile) would be of after it */
        pd_net *held = c->deferred;
        c->deferred = NULL;
        rc = pull_rounds(c, net);
        c->deferred = held;
        return rc < 0 || !held ? rc : post_behind(c);
    }
    if (rc == 0 && c->deferred && c->deferred_first) {
        /* sync: the held step, the requests behind it, then every reply
         * of both (the batch computes with the step's values) */
        pd_net *held = c->deferred;
        c->deferred = NULL;
        if (c->values_in_forward && net->values_ctx == c) return post_with_pull(c, held, net);
        if ((rc = post_queued(c, held)) < 0 || (rc = pull_rows(c, net, 0)) < 0) return rc;
        return wait_posted(c);
    }
    /* async: with a step held, the one before it is answered before new
     * requests go out (the held one is posted among them); without, the
     * replies of a posted step are read as they come */
    if (rc == 0 && c->deferred) rc = wait_posted(c);
    return rc < 0 ? rc : pull_rows(c, net, 0);
}

static int on_step_reply(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx)
{
    if (f->type == PD_MSG_ROWS_DONE) {
        if ((long)f->b > c->step) c->step = (long)f->b;
        return 0;
    }
    int rc = on_block_values(c, net, server, f, ctx);
    if (rc == 0 && c->arrived) c->arrived[f->a] = 1;
    return rc;
}

/* The replies of a posted step, if any are still to come (and the rows
 * a pull left to the forward). */
static int wait_posted(pd_client *c)
{
    int rc = c->prefetch > 0 ? settle_prefetch(c) : 0; /* its replies may come before the step's */
    if (rc == 0) rc = wait_rows(c, -1);
    if (rc < 0) return rc;
    int pending = c->inflight;
    c->inflight = 0;
    return pending ? exchange(c, c->posted, &pending, on_step_reply, NULL) : 0;
}

/* The rows a pull left to the forward: those of table t (-1: all), and
 * the replies before them. */
static int wait_rows(pd_client *c, int t)
{
    if (c->rows_pending == 0 || (t >= 0 && c->table_in[t])) return 0;
    int pending = c->rows_pending;
    c->rows_pending = 0;
    c->until = t >= 0 ? &c->table_in[t] : NULL;
    int rc = exchange(c, c->rows_net, &pending, on_rows, NULL);
    c->until = NULL;
    c->rows_pending = pending;
    return rc;
}

/* The posted step's values of block k: read (and the replies before
 * them) unless they are in. */
static int wait_block(pd_client *c, int k)
{
    if (c->inflight == 0 || c->arrived[k]) return 0;
    int pending = c->inflight;
    c->inflight = 0;
    c->until = &c->arrived[k];
    int rc = exchange(c, c->posted, &pending, on_step_reply, NULL);
    c->until = NULL;
    c->inflight = pending;
    return rc;
}

/* The net's values_wanted (pd_client_values_in_forward): p's blocks or
 * its table's rows, or (p NULL) every reply of the pull and the step. */
static int values_wanted(void *ctx, pd_net *net, pd_param *p)
{
    pd_client *c = ctx;
    if (c->inflight == 0 && c->rows_pending == 0) return 0;
    if (!p || net != c->posted) return wait_posted(c);
    int lp = c->layout_param[p - net->params];
    if (lp < 0) return 0;
    const pd_lparam *q = &c->lay->params[lp];
    if (q->table >= 0) return wait_rows(c, q->table);
    if (!c->arrived) return wait_posted(c);
    for (int k = q->first_block; k < q->first_block + q->nblocks; k++) {
        int rc = wait_block(c, k);
        if (rc < 0) return rc;
    }
    return 0;
}

static int fixed_tables_only(pd_client *c, pd_net *net);

int pd_client_values_in_forward(pd_client *c, pd_net *net)
{
    int fixed = fixed_tables_only(c, net);
    if (fixed <= 0) return fixed;
    c->values_in_forward = 1;
    net->values_wanted = values_wanted;
    net->values_ctx = c;
    return 1;
}

/* Sync, pd_client_values_in_forward: the held step's gradients in the
 * order of the parameters (the forward's), each table's followed by the
 * requests of the next batch's rows of it. Returns with the rows still to
 * come (read as the forward reaches their tables), or, when they need
 * more than one round, with them read. */
static int post_with_pull(pd_client *c, pd_net *held, pd_net *net)
{
    const pd_layout *l = c->lay;
    int pending = 0, rows = 0, rc;
    if ((rc = settle_prefetch(c)) < 0 || (rc = wait_rows(c, -1)) < 0 || (rc = map_params(c, held)) < 0) return rc;
    int asked = ask_rows(c, net, 0, NULL);
    if (asked < 0) return asked;
    queue_dense(c, held, &pending);
    /* in the order the forward uses them, on one connection per pserver
     * where there is one for dense blocks and one for tables (the pserver
     * reads its connections one after the other); a table's requests go
     * where its rows went (the backward may have sent them) */
    int one = l->ports_num == 1 && l->ports_sparse == 1;
    for (int i = 0; i < l->nparams && rc == 0; i++) {
        const pd_lparam *q = &l->params[i];
        for (int k = q->first_block; q->table < 0 && k < q->first_block + q->nblocks && rc == 0; k++)
            if (!c->fed[k]) rc = feed_one(c, k);
        if (q->table < 0) continue;
        c->one_conn = one && !(c->early && c->early[q->table]);
        if ((rc = queue_table(c, held, q->table, &pending)) == 0 && asked == 0)
            rc = queue_row_chunks(c, net, q->table, &rows);
    }
    c->one_conn = 0;
    if (rc < 0) return rc;
    c->early_started = 0;
    c->inflight = pending;
    c->posted = held;
    if (l->nblocks > 0) {
        if (!c->arrived) c->arrived = pd_xmalloc((size_t)l->nblocks);
        memset(c->arrived, 0, (size_t)l->nblocks);
    }
    /* the next backward overwrites the gradients: every block is queued
     * before this returns */
    if ((rc = feed(c, 1)) < 0 || (rc = flush_all(c)) < 0) return rc;
    int one_round = 1;
    for (int i = 0; i < c->np * l->ntables; i++) one_round &= c->nsent[i] == c->nasked[i];
    if (!one_round) {
        /* the later rounds' requests go where the rows went too */
        c->one_conn = one;
        if (rows > 0) rc = exchange(c, net, &rows, on_rows, NULL);
        if (rc == 0) rc = pull_rounds(c, net);
        c->one_conn = 0;
        return rc;
    }
    if (!c->table_in) c->table_in = pd_xmalloc((size_t)l->ntables + 1);
    for (int t = 0; t < l->ntables; t++) c->table_in[t] = table_done(c, t);
    c->rows_pending = rows;
    c->rows_net = net;
    return 0;
}

/* Every step sent and answered: a held step is sent first. */
static int drain(pd_client *c)
{
    int rc = wait_posted(c);
    if (rc < 0 || !c->deferred) return rc;
    pd_net *net = c->deferred;
    c->deferred = NULL;
    if ((rc = post_queued(c, net)) < 0) return rc;
    return wait_posted(c);
}

/* PUSH_ROWS of table t (fixed) to every pserver (sync: an empty one counts
 * too): the ids the step touched, then their gradients, written straight
 * into the connection's output. */
static int push_rows(pd_client *c, pd_net *net, int t, pd_param *p)
{
    const pd_layout *l = c->lay;
    const float *g = touched_grads(net, p);
    if (!g) return pd_err_wrap(PD_ENOMEM, "table '%s'", p->name);
    for (int s = 0; s < c->np; s++) {
        int n = 0;
        for (int i = 0; i < p->ntouched; i++)
            if (pd_row_owner(l, p->touched[i]) == s) n++;
        pd_conn *k = sparse_conn(c, s, t);
        size_t row = (size_t)p->cols * 4, len = (size_t)n * 4 + (size_t)n * row;
        uint8_t *ids = pd_conn_reserve(k, PD_MSG_PUSH_ROWS, len, (size_t)n * 4);
        if (!ids) return pd_err_wrap(PD_ERANGE, "table '%s'", p->name);
        uint8_t *vals = ids + (size_t)n * 4;
        int j = 0;
        for (int i = 0; i < p->ntouched; i++) {
            int32_t id = p->touched[i];
            if (pd_row_owner(l, id) != s) continue;
            memcpy(ids + 4 * (size_t)j, &id, 4);
            pd_conn_fill(k, vals + (size_t)j * row, touched_row(net, p, g, i), row);
            j++;
        }
        pd_conn_commit(k, PD_MSG_PUSH_ROWS, (uint32_t)t, (uint32_t)n, len);
    }
    return 0;
}

/* The step's dense blocks, to be queued by feed; what the backward sent
 * already (grad_ready) is only counted. */
static void queue_dense(pd_client *c, pd_net *net, int *pending)
{
    const pd_layout *l = c->lay;
    if (l->nblocks == 0) return;
    if (!c->fed) c->fed = pd_xmalloc((size_t)l->nblocks);
    if (!c->early_started) {
        memset(c->fed, 0, (size_t)l->nblocks);
        c->feed_first = 0;
    }
    if (c->ready) memset(c->ready, 1, (size_t)l->nblocks);
    c->feeding = net;
    *pending += l->nblocks;
}

/* The step's rows (or keys) of table t, unless the backward pushed them. */
static int queue_table(pd_client *c, pd_net *net, int t, int *pending)
{
    pd_param *p = &net->params[c->net_param[c->lay->tables[t]]];
    int rc;
    if (p->hash) return push_keys(c, net, t, p, pending);
    if (!(c->early && c->early[t]) && (rc = push_rows(c, net, t, p)) < 0) return rc;
    if (c->early) c->early[t] = 0;
    *pending += c->np;
    return 0;
}

/* Queue the step's gradients: dense blocks, then each table's rows. */
static int queue_step(pd_client *c, pd_net *net, int *pending)
{
    int rc;
    if ((rc = map_params(c, net)) < 0) return rc;
    queue_dense(c, net, pending);
    for (int t = 0; t < c->lay->ntables; t++)
        if ((rc = queue_table(c, net, t, pending)) < 0) return rc;
    c->early_started = 0;
    return 0;
}

/* Send what the sockets take now, without waiting (only: to the pservers
 * only[s] names, or NULL: to all). */
static int flush_some(pd_client *c, const uint8_t *only)
{
    for (int i = 0; i < c->np * c->nper; i++) {
        pd_conn *k = &c->conns[i];
        if (only && !only[i / c->nper]) continue;
        int rc = k->out_len > k->out_off ? pd_conn_flush(k) : 0;
        if (rc < 0) return pd_err_wrap(rc, "pserver %d", i / c->nper);
    }
    return 0;
}

static int flush_all(pd_client *c)
{
    return flush_some(c, NULL);
}

#define EARLY_SEND (128 << 10) /* bytes the backward queues before it sends them */

/* The net's grad_ready: p's gradient is final while the backward goes on.
 * Its blocks are fed (as their connections drain) or its table's rows
 * pushed now, so that the pservers apply them while the trainer computes
 * the layers below; the step (queue_step) sends the rest. */
static int grad_ready(void *ctx, pd_net *net, pd_param *p)
{
    pd_client *c = ctx;
    const pd_layout *l = c->lay;
    int rc;
    if ((rc = map_params(c, net)) < 0) return rc;
    if (!c->early_started) { /* the first of this backward */
        if (c->feeding && (rc = feed(c, 1)) < 0) return rc; /* the last step's blocks: all queued by now */
        if (!c->early) c->early = pd_xcalloc((size_t)l->ntables + 1, 1);
        if (l->nblocks > 0) {
            if (!c->fed) c->fed = pd_xmalloc((size_t)l->nblocks);
            if (!c->ready) c->ready = pd_xmalloc((size_t)l->nblocks);
            memset(c->fed, 0, (size_t)l->nblocks);
            memset(c->ready, 0, (size_t)l->nblocks);
            c->feed_first = 0;
            c->feeding = net;
        }
        c->early_started = 1;
    }
    int lp = c->layout_param[p - net->params];
    if (lp < 0) return 0;
    const pd_lparam *q = &l->params[lp];
    if (q->table >= 0) {
        /* a growing table's keys go with the step; so do the rows when the
         * step goes with the next pull (pd_client_values_in_forward): its
         * row requests follow each table's rows there */
        if (p->hash || c->values_in_forward) return 0;
        if ((rc = push_rows(c, net, q->table, p)) < 0) return rc;
        c->early[q->table] = 1;
        /* each send wakes a pserver up: rows leave together, by
         * EARLY_SEND (the rows for the others wait for the step) */
        size_t unsent = 0;
        for (int i = 0; i < c->np * c->nper; i++)
            if (c->early_to[i / c->nper]) unsent += pd_conn_unsent(&c->conns[i]);
        if (unsent < EARLY_SEND) return 0;
    } else {
        /* large blocks leave as they are queued (pd_conn_queue); small
         * ones wait for the next table's rows, to go out together */
        for (int k = q->first_block; k < q->first_block + q->nblocks; k++)
            c->ready[k] = c->early_to[pd_block_owner(l, k)];
        return feed(c, 0);
    }
    return flush_some(c, c->early_to);
}

/* Is the peer of connected socket fd on this host (a Unix socket, or an
 * address of this host)? */
static int same_host(int fd)
{
    uint32_t addr = 0;
    int family = peer_family(fd, &addr);
    return family == AF_UNIX || (family == AF_INET && pd_addr_is_here(addr));
}

int pd_client_send_early(pd_client *c, pd_net *net, int local_too)
{
    if (!c->early_to) c->early_to = pd_xcalloc((size_t)c->np, 1);
    int n = 0;
    for (int s = 0; s < c->np; s++) n += c->early_to[s] = local_too || !same_host(c->conns[s * c->nper].fd);
    net->grad_ready = n ? grad_ready : NULL;
    net->grad_ctx = n ? c : NULL;
    return n;
}

int pd_client_prefetch_from(pd_client *c, int local_too)
{
    c->prefetch_on = local_too;
    for (int s = 0; s < c->np && !c->prefetch_on; s++) c->prefetch_on = !same_host(c->conns[s * c->nper].fd);
    return c->prefetch_on;
}

int pd_client_step(pd_client *c, pd_net *net)
{
    int pending = 0, rc;
    if ((rc = drain(c)) < 0 || (rc = queue_step(c, net, &pending)) < 0) return rc;
    return exchange(c, net, &pending, on_step_reply, NULL);
}

int pd_client_post_step(pd_client *c, pd_net *net)
{
    int rc = drain(c);
    return rc < 0 ? rc : post_queued(c, net);
}

/* 1 when the net has sparse tables and all of them fixed (a step may be
 * held for the next batch's pull), 0 when not, < 0 on an error. */
static int fixed_tables_only(pd_client *c, pd_net *net)
{
    const pd_layout *l = c->lay;
    int rc = map_params(c, net);
    if (rc < 0) return rc;
    for (int t = 0; t < l->ntables; t++)
        if (net->params[c->net_param[l->tables[t]]].hash) return 0;
    return l->ntables > 0;
}

int pd_client_defer_step(pd_client *c, pd_net *net)
{
    int fixed = fixed_tables_only(c, net);
    if (fixed < 0) return fixed;
    if (!fixed || c->deferred) return pd_client_post_step(c, net);
    c->deferred = net;
    c->deferred_first = 0;
    return 0;
}

int pd_client_prefetch_rows(pd_client *c, pd_net *net, const pd_batch *next)
{
    if (!c->prefetch_on) return 0;
    int fixed = fixed_tables_only(c, net);
    if (fixed <= 0 || c->prefetched || c->deferred) return fixed < 0 ? fixed : 0;
    int pending = 0, rc = ask_rows(c, net, 0, next);
    if (rc != 0) return rc < 0 ? rc : 0;
    if ((rc = queue_row_chunks(c, net, -1, &pending)) < 0 || (rc = flush_all(c)) < 0) return rc;
    c->prefetched = 1;
    c->prefetch = pending;
    c->prefetch_net = net;
    return 0;
}

int pd_client_hold_step(pd_client *c, pd_net *net)
{
    int fixed = fixed_tables_only(c, net);
    if (fixed <= 0) return fixed;
    if (c->deferred || c->inflight) return 0;
    c->deferred = net;
    c->deferred_first = 1;
    return 1;
}

/* Queue the step (no step may be in flight) and send what the sockets take. */
static int post_queued(pd_client *c, pd_net *net)
{
    int pending = 0, rc;
    if ((rc = queue_step(c, net, &pending)) < 0) return rc;
    c->inflight = pending;
    c->posted = net;
    /* the next batch's backward overwrites the gradients: every block is
     * queued (or sent) before this returns */
    if ((rc = feed(c, 1)) < 0) return rc;
    /* send what the sockets take now; the rest goes with the next exchange */
    return flush_all(c);
}


static int on_pass_done(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx)
{
    int want = PD_MSG_PASS_DONE;
    int rc = on_simple(c, net, server, f, &want);
    if (rc == 0 && ctx) *(long *)ctx = (long)f->b;
    return rc;
}

int pd_client_pass_end(pd_client *c, int pass, int batches, long *total)
{
    int pending = 0, rc = drain(c);
    if (rc < 0) return rc;
    for (int s = 0; s < c->np; s++) {
        pd_conn_queue(&c->conns[s * c->nper], PD_MSG_PASS_END, (uint32_t)pass, (uint32_t)batches, NULL, 0, NULL, 0);
        pending++;
    }
    return exchange(c, NULL, &pending, on_pass_done, total);
}

static int on_decided(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx)
{
    int want = PD_MSG_DECIDED;
    int rc = on_simple(c, net, server, f, &want);
    if (rc == 0 && f->b > 1) rc = pd_err_set(PD_EPROTO, "pserver %d: DECIDED %u (0 or 1 expected)", server, f->b);
    if (rc == 0) *(int *)ctx = (int)f->b;
    return rc;
}

int pd_client_decide(pd_client *c, int pass, int stop, int *decided)
{
    int pending = 1, rc = drain(c);
    *decided = 0;
    if (rc < 0) return rc;
    pd_conn_queue(&c->conns[0], PD_MSG_DECIDE, (uint32_t)pass, stop ? 1u : 0u, NULL, 0, NULL, 0);
    return exchange(c, NULL, &pending, on_decided, decided);
}

int pd_client_fetch_all(pd_client *c, pd_net *net)
{
    int rc = drain(c);
    if (rc == 0) rc = map_params(c, net);
    if (rc == 0) rc = pull_dense(c, net);
    if (rc == 0) rc = pull_rows(c, net, 1);
    for (int t = 0; rc == 0 && t < c->lay->ntables; t++) {
        pd_param *p = &net->params[c->net_param[c->lay->tables[t]]];
        if (p->hash) rc = fetch_keys(c, net, t, p);
    }
    return rc;
}

static int on_saved(pd_client *c, pd_net *net, int server, pd_frame *f, void *ctx)
{
    int want = PD_MSG_SAVED;
    int rc = on_simple(c, net, server, f, &want);
    if (rc == 0) *(int *)ctx = (int)f->b;
    return rc;
}

int pd_client_save(pd_client *c, long step, int pass, int batch, int *writer)
{
    int pending = 0;
    uint32_t pos[2] = {(uint32_t)pass, (uint32_t)batch};
    if (step < 0 || step > (long)UINT32_MAX) return pd_err_set(PD_ERANGE, "checkpoint step %ld out of range", step);
    int rc = drain(c);
    if (rc < 0) return rc;
    for (int s = 0; s < c->np; s++) {
        pd_conn_queue(&c->conns[s * c->nper], PD_MSG_SAVE, (uint32_t)step, 0, pos, sizeof pos, NULL, 0);
        pending++;
    }
    *writer = -1;
    return exchange(c, NULL, &pending, on_saved, writer);
}

/* The answer to FINISH from pserver s (on its first connection), by the
 * deadline: 0, or an error naming it. Heartbeats and a late reply of a
 * step that failed to drain are read past. */
static int finish_answer(pd_client *c, int s, double deadline)
{
    pd_conn *k = &c->conns[s * c->nper];
    pd_frame f;
    int rc;
    while (pd_now() < deadline && (rc = pd_conn_recv(k, &f, PD_MAX(0.05, deadline - pd_now()))) == 0) {
        if (f.type == PD_MSG_FINISH) return 0;
        if (f.type == PD_MSG_ERROR)
            return pd_err_set(PD_EPROTO, "pserver %d: %.*s", s, (int)PD_MIN(f.len, 500), (char *)f.payload);
    }
    if (pd_now() >= deadline) rc = pd_err_set(PD_ETIMEDOUT, "no answer within %.0f s", c->hb_timeout);
    return pd_err_wrap(rc, "pserver %d (%s:%d)", s, c->eps[s].host, c->eps[s].port);
}

void pd_client_finish(pd_client *c)
{
    if (c->finished) return;
    c->finished = 1;
    if (drain(c) < 0) PD_WARN("the last step's replies: %s", pd_err_msg());
    /* FINISH to every pserver first (one that does not take it keeps it
     * from none of the others), then each one's answer: it counted this
     * trainer as finished before the connections close (a close with
     * unread input, a HEARTBEAT, could reset a connection before the
     * pserver read FINISH) */
    double deadline = pd_now() + PD_MIN(c->hb_timeout, c->timeout);
    char *sent = pd_xcalloc((size_t)c->np, 1);
    for (int s = 0; s < c->np; s++) {
        pd_conn *k = &c->conns[s * c->nper];
        int rc = pd_conn_queue(k, PD_MSG_FINISH, 0, 0, NULL, 0, NULL, 0);
        if (rc == 0) rc = pd_conn_send_all(k, PD_MAX(0.05, deadline - pd_now()));
        if (rc < 0) {
            pd_err_wrap(rc, "pserver %d (%s:%d)", s, c->eps[s].host, c->eps[s].port);
            PD_WARN("FINISH not sent: %s (that pserver may wait for this trainer)", pd_err_msg());
        }
        sent[s] = rc == 0;
    }
    for (int s = 0; s < c->np; s++)
        if (sent[s] && finish_answer(c, s, deadline) < 0)
            PD_WARN("FINISH not answered: %s (that pserver may wait for this trainer)", pd_err_msg());
    free(sent);
}
