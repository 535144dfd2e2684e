/* rendezvous.c - the master that forms the job, and the ranks that join it. */
#include "rendezvous.h"
#include "plan.h"
#include "../core/crypto.h"
#include "../core/pd.h"
#include "../ps/proto.h"
#include "secret.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_LEN (PD_RDV_MAX + 256)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int send_line(int fd, const char *fmt, ...)
{
    char buf[LINE_MAX_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof buf - 1) return -1;
    buf[n++] = '\n';
    for (int off = 0; off < n;) {
        ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        off += (int)w;
    }
    return 0;
}

/* One line (without its newline) by the deadline. 0, or -1 (EOF, error,
 * too long) or -2 (timed out). */
static int read_line(int fd, char *buf, size_t len, double deadline)
{
    size_t got = 0;
    for (;;) {
        double left = deadline - now();
        if (left <= 0) return -2;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) continue;
        char ch;
        ssize_t n = read(fd, &ch, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        if (ch == '\n') break;
        if (got + 1 >= len) return -1;
        buf[got++] = ch;
    }
    buf[got] = '\0';
    return 0;
}

/* --- ports ---------------------------------------------------------------- */

static int bind_any(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Hold nports free ports from base up (the first free range), bound without
 * SO_REUSEADDR so that no other rank on this host takes them meanwhile. */
static int hold_ports(int base, int nports, pd_rdv_result *res)
{
    if (nports < 1 || nports > (int)PD_COUNT(res->held))
        return pd_err_set(PD_ERANGE, "a pserver needs %d ports, at most %d here", nports, (int)PD_COUNT(res->held));
    if (base < 1024 || base + nports > 65535) base = 20000;
    for (int p = base; p + nports <= 65535 && p < base + 2000 * nports; p += nports) {
        res->nheld = 0;
        for (int k = 0; k < nports; k++) {
            int fd = bind_any(p + k);
            if (fd < 0) break;
            res->held[res->nheld++] = fd;
        }
        if (res->nheld == nports) {
            res->port = p;
            return 0;
        }
        pd_rdv_release(res);
    }
    return pd_err_set(PD_EIO, "no %d free ports from %d up for a pserver", nports, base);
}

void pd_rdv_release(pd_rdv_result *res)
{
    for (int k = 0; k < res->nheld; k++) close(res->held[k]);
    res->nheld = 0;
}

/* --- hostlists ---------------------------------------------------------- */

int pd_hostlist_first(const char *list, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = list; *p && *p != ','; p++) {
        if (*p == '[') {
            const char *q = p + 1;
            while (*q && *q != '-' && *q != ',' && *q != ']') {
                if (n + 1 >= len) return pd_err_set(PD_ERANGE, "hostlist '%s' is too long", list);
                out[n++] = *q++;
            }
            p = strchr(p, ']');
            if (!p) return pd_err_set(PD_EINVAL, "hostlist '%s' has a '[' without ']'", list);
            continue;
        }
        if (n + 1 >= len) return pd_err_set(PD_ERANGE, "hostlist '%s' is too long", list);
        out[n++] = *p;
    }
    out[n] = '\0';
    return n ? 0 : pd_err_set(PD_EINVAL, "hostlist '%s' is empty", list);
}

/* --- the master ------------------------------------------------------------ */

typedef struct peer {
    int fd, stage;             /* 0 HELLO awaited, 1 AUTH awaited, 2 registered */
    char in[LINE_MAX_LEN];
    size_t got;
    uint8_t nc[PD_NONCE], ns[PD_NONCE];
    int rank, kind, port, slot;
    char host[256], addr[64];
} peer;

typedef struct master {
    const pd_rdv_opts *o;
    uint8_t job[PD_JOB_ID];
    peer *peers;               /* [0] is the master itself */
    int npeers, cap, registered;
    char refused[512];
    char err[1024];            /* a fault of the job: every rank is told */
} master;

static void refuse(master *m, peer *p, const char *why)
{
    size_t l = strlen(m->refused);
    if (l < sizeof m->refused - 100)
        snprintf(m->refused + l, sizeof m->refused - l, "%s%s (%s)", l ? ", " : "", p->addr, why);
    send_line(p->fd, "PDRV1 ERR %s", why);
    close(p->fd);
    p->fd = -1;
}

static void on_hello(master *m, peer *p, const char *line)
{
    char job[2 * PD_JOB_ID + 2], nc[2 * PD_NONCE + 2], kind;
    uint8_t jb[PD_JOB_ID];
    int size;
    if (sscanf(line, "PDRV1 HELLO %33s %33s %d %d %c %d %255s", job, nc, &p->rank, &size, &kind, &p->port,
               p->host) != 7 ||
        pd_unhex(job, jb, PD_JOB_ID) < 0 || pd_unhex(nc, p->nc, PD_NONCE) < 0 || p->port < 0 || p->port > 65535)
        return refuse(m, p, "not a rendezvous message");
    if (memcmp(jb, m->job, PD_JOB_ID) != 0) return refuse(m, p, "another job: its PADDLE_JOB_SECRET differs");
    if (size != m->o->size) {
        snprintf(m->err, sizeof m->err, "rank %d at %s has %s=%d, the master's %s is %d", p->rank, p->addr,
                 m->o->size_var, size, m->o->size_var, m->o->size);
        return;
    }
    if (p->rank >= m->o->size) {
        snprintf(m->err, sizeof m->err, "rank %d at %s is beyond %s=%d", p->rank, p->addr, m->o->size_var,
                 m->o->size);
        return;
    }
    p->kind = kind == 'P' ? PD_ROLE_PSERVER : kind == 'T' ? PD_ROLE_TRAINER : -1;
    char ns[2 * PD_NONCE + 1], proof[2 * PD_MAC + 1];
    uint8_t mac[PD_MAC];
    pd_random(p->ns, PD_NONCE);
    pd_proof(m->o->secret, "rendezvous master", p->nc, p->ns, m->job, mac);
    pd_hex(p->ns, PD_NONCE, ns);
    pd_hex(mac, PD_MAC, proof);
    send_line(p->fd, "PDRV1 CHALLENGE %s %s", ns, proof);
    p->stage = 1;
}

static void on_auth(master *m, peer *p, const char *line)
{
    char hex[2 * PD_MAC + 2];
    uint8_t got[PD_MAC], want[PD_MAC];
    if (sscanf(line, "PDRV1 AUTH %65s", hex) != 1 || pd_unhex(hex, got, PD_MAC) < 0)
        return refuse(m, p, "not a rendezvous message");
    pd_proof(m->o->secret, "rendezvous rank", p->ns, p->nc, m->job, want);
    if (!pd_mac_equal(got, want, PD_MAC)) return refuse(m, p, "another job: its PADDLE_JOB_SECRET differs");
    for (int i = 0; i < m->npeers; i++)
        if (p->rank >= 0 && m->peers[i].stage == 2 && m->peers[i].rank == p->rank) {
            snprintf(m->err, sizeof m->err, "two ranks claim %s=%d: %s and %s", m->o->rank_var, p->rank,
                     m->peers[i].addr, p->addr);
            return;
        }
    p->stage = 2;
    m->registered++;
}

static void on_readable(master *m, peer *p)
{
    ssize_t n = read(p->fd, p->in + p->got, sizeof p->in - 1 - p->got);
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) {
        if (p->stage == 2) {
            snprintf(m->err, sizeof m->err, "rank %d at %s left before the job was formed", p->rank, p->addr);
            m->registered--;
        }
        close(p->fd);
        p->fd = -1;
        return;
    }
    p->got += (size_t)n;
    char *nl;
    while (p->fd >= 0 && (nl = memchr(p->in, '\n', p->got))) {
        *nl = '\0';
        if (p->stage == 0) on_hello(m, p, p->in);
        else if (p->stage == 1) on_auth(m, p, p->in);
        else return refuse(m, p, "spoke out of turn");
        size_t used = (size_t)(nl + 1 - p->in);
        memmove(p->in, nl + 1, p->got - used);
        p->got -= used;
    }
    if (p->fd >= 0 && p->got >= sizeof p->in - 1) refuse(m, p, "line too long");
}

static void on_accept(master *m, int lfd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) return;
    if (m->npeers == m->cap) {
        close(fd); /* more connections than ranks: a stranger; the timeout will tell */
        return;
    }
    peer *p = &m->peers[m->npeers++];
    memset(p, 0, sizeof *p);
    p->fd = fd;
    p->slot = -1;
    if (ss.ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, p->addr, sizeof p->addr);
    else if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, p->addr, sizeof p->addr);
    else
        strcpy(p->addr, "?");
}

/* The ranks that have not arrived, as text. */
static void missing(master *m, char *out, size_t len)
{
    int numbered = m->o->rank >= 0;
    size_t l = 0;
    for (int i = 0; i < m->npeers; i++) numbered &= m->peers[i].stage != 2 || m->peers[i].rank >= 0;
    if (!numbered) {
        snprintf(out, len, "%d of the %d ranks", m->o->size - m->registered, m->o->size);
        return;
    }
    out[0] = '\0';
    for (int r = 0; r < m->o->size && l < len - 16; r++) {
        int here = 0;
        for (int i = 0; i < m->npeers; i++) here |= m->peers[i].stage == 2 && m->peers[i].rank == r;
        if (!here) l += (size_t)snprintf(out + l, len - l, "%s%d", l ? ", " : "", r);
    }
    char tmp[512];
    if (snprintf(tmp, sizeof tmp, "%s %s (%s)", strchr(out, ',') ? "ranks" : "rank", out, m->o->rank_var) >=
        (int)sizeof tmp)
        memcpy(tmp + sizeof tmp - 4, "...", 4); /* a long list of ranks ends in "..." */
    snprintf(out, len, "%s", tmp);
}

/* Slots: ranks by number, then those asking for a kind, then the rest. */
static int assign(master *m, int *slot_peer)
{
    const pd_rdv_opts *o = m->o;
    for (int s = 0; s < o->size; s++) slot_peer[s] = -1;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < m->npeers; i++) {
            peer *p = &m->peers[i];
            if (p->stage != 2 || p->slot >= 0) continue;
            if (pass == 0 && p->rank < 0) continue;
            if (pass == 1 && p->kind < 0) continue;
            int s = p->rank;
            if (p->rank < 0)
                for (s = 0; s < o->size; s++)
                    if (slot_peer[s] < 0 && (p->kind < 0 || (s < o->npservers) == (p->kind == PD_ROLE_PSERVER)))
                        break;
            if (s >= o->size)
                return snprintf(m->err, sizeof m->err, "more ranks ask for the role %s than the job's %d "
                                "(the one at %s)", pd_role_name(p->kind),
                                p->kind == PD_ROLE_PSERVER ? o->npservers : o->ntrainers, p->addr), -1;
            if (p->kind >= 0 && (s < o->npservers) != (p->kind == PD_ROLE_PSERVER))
                return snprintf(m->err, sizeof m->err, "rank %d at %s asks for the role %s, but ranks 0..%d "
                                "are the pservers (--pservers=%d)", s, p->addr, pd_role_name(p->kind),
                                o->npservers - 1, o->npservers), -1;
            p->slot = s;
            slot_peer[s] = i;
        }
    return 0;
}

/* The endpoint table, or an error when two pservers share an address. */
static int table(master *m, const int *slot_peer, char *eps, size_t len)
{
    size_t l = 0;
    eps[0] = '\0';
    for (int s = 0; s < m->o->npservers; s++) {
        peer *p = &m->peers[slot_peer[s]];
        const char *h = strcmp(p->host, "-") ? p->host : p->addr;
        int n = snprintf(eps + l, len - l, "%s%s:%d", s ? "," : "", h, p->port);
        if (n < 0 || (size_t)n >= len - l)
            return snprintf(m->err, sizeof m->err, "the pserver table is over %zu bytes", len), -1;
        l += (size_t)n;
    }
    for (int s = 0; s < m->o->npservers; s++)
        for (int t = 0; t < s; t++) {
            peer *a = &m->peers[slot_peer[s]], *b = &m->peers[slot_peer[t]];
            if (a->port == b->port && strcmp(a->host, b->host) == 0 && strcmp(a->addr, b->addr) == 0)
                return snprintf(m->err, sizeof m->err, "pservers %d and %d are both at %s port %d", t, s,
                                b->addr, a->port), -1;
        }
    return 0;
}

static int master_finish(master *m, pd_rdv_result *res)
{
    int *slot_peer = pd_xcalloc((size_t)m->o->size, sizeof *slot_peer);
    int rc = assign(m, slot_peer);
    if (rc == 0) rc = table(m, slot_peer, res->endpoints, sizeof res->endpoints);
    for (int i = 0; rc == 0 && i < m->npeers; i++) {
        peer *p = &m->peers[i];
        if (p->stage != 2) continue;
        int kind = p->slot < m->o->npservers ? PD_ROLE_PSERVER : PD_ROLE_TRAINER;
        int id = kind == PD_ROLE_PSERVER ? p->slot : p->slot - m->o->npservers;
        if (i == 0) {
            res->kind = kind, res->id = id, res->rank = p->slot;
        } else if (send_line(p->fd, "PDRV1 ROLE %d %d %d %s", kind, id, p->slot, res->endpoints) < 0) {
            snprintf(m->err, sizeof m->err, "rank %d at %s went away before it got its role", p->slot, p->addr);
            rc = -1;
        }
    }
    free(slot_peer);
    return rc;
}

static int listen_on(const pd_rdv_opts *o, int *fd_out)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->master_port)};
    const struct sockaddr *sa = (struct sockaddr *)&any;
    socklen_t sl = sizeof any;
    if (o->master < 0) { /* whoever can bind the master's own address */
        if (getaddrinfo(o->master_host, NULL, &hints, &ai) != 0 || !ai) return 1;
        ((struct sockaddr_in *)ai->ai_addr)->sin_port = htons((uint16_t)o->master_port);
        sa = ai->ai_addr, sl = ai->ai_addrlen;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int ok = fd >= 0 && bind(fd, sa, sl) == 0 && listen(fd, 256) == 0;
    int e = errno;
    if (ai) freeaddrinfo(ai);
    if (ok) {
        *fd_out = fd;
        return 0;
    }
    if (fd >= 0) close(fd);
    if (o->master < 0) return 1; /* someone else is the master */
    return pd_err_set(PD_EIO, "rank %d cannot listen for the rendezvous on port %d (%s %s:%d): %s", o->rank,
                      o->master_port, o->master_from, o->master_host, o->master_port, strerror(e));
}

static void master_fail(master *m)
{
    for (int i = 1; i < m->npeers; i++)
        if (m->peers[i].fd >= 0) send_line(m->peers[i].fd, "PDRV1 ERR %s", m->err);
}

static int master_run(const pd_rdv_opts *o, int lfd, pd_rdv_result *res)
{
    master m = {.o = o, .cap = 2 * o->size + 8};
    pd_job_id(o->secret, m.job);
    m.peers = pd_xcalloc((size_t)m.cap, sizeof *m.peers);
    peer *me = &m.peers[m.npeers++];
    me->fd = -1, me->stage = 2, me->rank = o->rank, me->kind = o->kind, me->port = res->port, me->slot = -1;
    snprintf(me->host, sizeof me->host, "%s", o->host ? o->host : o->master_host);
    snprintf(me->addr, sizeof me->addr, "%.63s", me->host);
    m.registered = 1;
    struct pollfd *pf = pd_xcalloc((size_t)m.cap + 1, sizeof *pf);
    double deadline = now() + o->timeout;
    while (m.registered < o->size && !m.err[0] && now() < deadline) {
        int n = 0;
        pf[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 1; i < m.npeers; i++) pf[n++] = (struct pollfd){.fd = m.peers[i].fd, .events = POLLIN};
        if (poll(pf, (nfds_t)n, 200) <= 0) continue;
        if (pf[0].revents) on_accept(&m, lfd);
        for (int i = 1; i < n && !m.err[0]; i++)
            if (pf[i].revents && m.peers[i].fd >= 0) on_readable(&m, &m.peers[i]);
    }
    int rc = 0;
    if (!m.err[0] && m.registered < o->size) {
        char miss[512];
        missing(&m, miss, sizeof miss);
        if (snprintf(m.err, sizeof m.err, "%s never arrived at the rendezvous (%s:%d) within %.0f s%s%s", miss,
                     o->master_host, o->master_port, o->timeout, m.refused[0] ? "; refused: " : "",
                     m.refused) >= (int)sizeof m.err)
            memcpy(m.err + sizeof m.err - 4, "...", 4);
    }
    if (!m.err[0] && master_finish(&m, res) < 0) rc = -1;
    if (m.err[0]) {
        master_fail(&m);
        rc = pd_err_set(m.registered < o->size ? PD_ETIMEDOUT : PD_EINVAL, "%s", m.err);
    }
    for (int i = 1; i < m.npeers; i++)
        if (m.peers[i].fd >= 0) close(m.peers[i].fd);
    free(pf);
    free(m.peers);
    return rc;
}

/* --- a rank ------------------------------------------------------------------ */

static int connect_master(const pd_rdv_opts *o, double deadline, int *fd_out)
{
    char port[16];
    snprintf(port, sizeof port, "%d", o->master_port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    while (now() < deadline) {
        struct addrinfo *ai = NULL;
        if (getaddrinfo(o->master_host, port, &hints, &ai) == 0 && ai) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
            freeaddrinfo(ai);
            if (ok) {
                *fd_out = fd;
                return 0;
            }
            if (fd >= 0) close(fd);
        }
        usleep(200 * 1000);
    }
    return pd_err_set(PD_ETIMEDOUT, "the rendezvous master %s:%d (%s) never answered within %.0f s", o->master_host,
                      o->master_port, o->master_from, o->timeout);
}

static int rank_talk(const pd_rdv_opts *o, int fd, pd_rdv_result *res, double deadline)
{
    uint8_t job[PD_JOB_ID], nc[PD_NONCE], ns[PD_NONCE], mac[PD_MAC], want[PD_MAC];
    char jh[2 * PD_JOB_ID + 1], nh[2 * PD_NONCE + 1], line[LINE_MAX_LEN], a[80], b[80];
    const char *where = o->master_from;
    pd_job_id(o->secret, job);
    pd_random(nc, PD_NONCE);
    pd_hex(job, PD_JOB_ID, jh);
    pd_hex(nc, PD_NONCE, nh);
    if (send_line(fd, "PDRV1 HELLO %s %s %d %d %c %d %s", jh, nh, o->rank, o->size,
                  o->kind < 0 ? '-' : o->kind == PD_ROLE_PSERVER ? 'P' : 'T', res->port, o->host ? o->host : "-") < 0 ||
        read_line(fd, line, sizeof line, deadline) < 0)
        return pd_err_set(PD_ECONN, "the rendezvous master %s:%d (%s) closed the connection", o->master_host,
                          o->master_port, where);
    if (strncmp(line, "PDRV1 ERR ", 10) == 0) {
        char who[32] = "this process (no rank given)";
        if (o->rank >= 0) snprintf(who, sizeof who, "rank %d", o->rank);
        return pd_err_set(PD_EAUTH, "the rendezvous master %s:%d refused %s: %s", o->master_host, o->master_port,
                          who, line + 10);
    }
    if (sscanf(line, "PDRV1 CHALLENGE %65s %79s", a, b) != 2 || pd_unhex(a, ns, PD_NONCE) < 0 ||
        pd_unhex(b, mac, PD_MAC) < 0)
        return pd_err_set(PD_EPROTO, "%s:%d (%s) is not a paddle rendezvous master", o->master_host, o->master_port,
                          where);
    pd_proof(o->secret, "rendezvous master", nc, ns, job, want);
    if (!pd_mac_equal(mac, want, PD_MAC))
        return pd_err_set(PD_EAUTH, "the rendezvous master %s:%d belongs to another job: its PADDLE_JOB_SECRET "
                          "differs", o->master_host, o->master_port);
    pd_proof(o->secret, "rendezvous rank", ns, nc, job, mac);
    pd_hex(mac, PD_MAC, a);
    int r = send_line(fd, "PDRV1 AUTH %s", a) < 0 ? -1 : read_line(fd, line, sizeof line, deadline);
    if (r == -2)
        return pd_err_set(PD_ETIMEDOUT, "rank %d: the rendezvous master %s:%d sent no roles within %.0f s",
                          o->rank, o->master_host, o->master_port, o->timeout);
    if (r < 0)
        return pd_err_set(PD_ECONN, "the rendezvous master %s:%d (%s) closed the connection", o->master_host,
                          o->master_port, where);
    if (strncmp(line, "PDRV1 ERR ", 10) == 0) return pd_err_set(PD_EINVAL, "rendezvous: %s", line + 10);
    int n = 0;
    if (sscanf(line, "PDRV1 ROLE %d %d %d %n", &res->kind, &res->id, &res->rank, &n) != 3 || n == 0 ||
        strlen(line + n) >= sizeof res->endpoints || (res->kind != PD_ROLE_PSERVER && res->kind != PD_ROLE_TRAINER))
        return pd_err_set(PD_EPROTO, "the rendezvous master %s:%d sent a malformed role", o->master_host,
                          o->master_port);
    strcpy(res->endpoints, line + n);
    return 0;
}

int pd_rdv_run(const pd_rdv_opts *o, pd_rdv_result *res)
{
    memset(res, 0, sizeof *res);
    int rc, fd = -1, lfd = -1;
    if ((rc = hold_ports(o->base_port, o->nports, res)) < 0) return rc;
    if (o->master != 0 && (rc = listen_on(o, &lfd)) < 0) goto out;
    if (lfd >= 0) {
        rc = master_run(o, lfd, res);
        close(lfd);
        goto out;
    }
    double deadline = now() + o->timeout + 5; /* the master's own timeout comes first, with the names */
    if ((rc = connect_master(o, now() + o->timeout, &fd)) == 0) rc = rank_talk(o, fd, res, deadline);
    if (fd >= 0) close(fd);
out:
    if (rc < 0) pd_rdv_release(res);
    return rc;
}
