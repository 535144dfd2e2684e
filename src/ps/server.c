/*
 * server.c - the pserver: an epoll loop over its listening ports and its
 * trainers' connections; every frame is checked before it is used, and a
 * peer that breaks the protocol is logged and dropped.
 */
#include "server.h"
#include "layout.h"
#include "../backend/backend.h"
#include "../core/log.h"
#include "../core/pd.h"
#include "../nn/net.h"
#include "../nn/npy.h"
#include "../core/crypto.h"
#include "../core/rng.h"
#include "../core/fs.h"
#include "ckpt.h"
#include "http.h"
#include "hashshard.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CONNS 4096          /* connections a pserver holds at once */
#define MAX_PASS 1000000 /* the highest pass a PASS_END may name (a trainer's READY check too) */
#define MAX_LISTEN 128          /* ports a pserver listens on (ports_num + ports_num_for_sparse) */
#define LISTEN_BACKLOG 128
/* epoll ids: listening socket i is i (TCP port i below MAX_LISTEN, the Unix
 * socket beside it at MAX_LISTEN + i), connection slot k is CONN_ID_BASE + k */
#define CONN_ID_BASE 1000
#define HTTP_ID (CONN_ID_BASE - 1) /* the /metrics responder */
#define MAX_EVENTS 64           /* epoll events taken per wake */
#define FRAMES_PER_WAKE 64      /* frames read from one peer before serving others */
#define ACCEPTS_PER_WAKE 64     /* connections accepted from one port before serving others */
#define TICK_MS 200             /* the loop checks deadlines and signals this often */
#define ACCEPT_PAUSE_S 0.5      /* out of descriptors: listeners rest this long */
#define DRAIN_ON_DROP 65536     /* unread bytes read away before a close, so the ERROR frame is not lost to a reset */

_Static_assert(2 * MAX_LISTEN <= HTTP_ID, "listener ids must stay below the others");

enum { ST_HELLO, ST_AUTH, ST_READY };

typedef struct sconn {
    pd_conn c;
    int used;
    unsigned gen;
    int state;
    int trainer;
    int kind;               /* 0 dense, 1 sparse */
    int port_index;
    int local;              /* over a Unix socket */
    int offered;            /* shared memory offered (once a connection) */
    char peer[64];
    uint8_t cnonce[PD_NONCE], snonce[PD_NONCE];
    int want_out;
    int dirty;              /* replies queued, to be sent at the end of the loop's turn (in s->dirty) */
    int again;              /* frames left in its read buffer (in s->again) */
    int init_done;          /* INIT_DONE seen on this connection */
    double since;           /* accepted at (pd_now) */
} sconn;

typedef struct waiter {
    int slot;
    unsigned gen;
} waiter;

typedef struct sblock {
    int k;                  /* global block index */
    int len;
    float *w, *g, *s1, *s2;
    int npushed;
    uint8_t *pushed;        /* per trainer */
    waiter *wait;           /* per trainer */
    long t;
} sblock;

typedef struct stable {
    int param, rows, dim;   /* rows held here */
    float *w, *g, *s1, *s2;
    int32_t *touched;
    int ntouched, cap_touched;
    uint8_t *mark;
    uint8_t *dup;           /* scratch: rows seen in the frame being checked */
    int npushed;
    uint8_t *pushed;
    waiter *wait;
    long t;
    pd_hshard *hs;          /* a growing table: its rows here, by id (else NULL) */
    struct held_pull *held; /* sync: pulls that wait for this step's update */
    int nheld, cap_held;
} stable;

/* Sync: a trainer's PULL_ROWS that came behind its PUSH_ROWS of the same
 * table, before the step's barrier: answered once the step is applied. */
typedef struct held_pull {
    waiter w;
    int trainer;
    uint32_t n;
    uint8_t *ids;           /* the request's payload, n ids */
} held_pull;

typedef struct server {
    const pd_recipe *r;
    const pd_server_opts *o;
    pd_layout lay;
    pd_opt_hyper hyper;
    int sync;
    int epfd;
    int nlisten;
    int listen_fd[2 * MAX_LISTEN]; /* TCP, then Unix (-1: none) */
    int reserve_fd;         /* closed to accept-and-close when out of descriptors */
    int fds_short;          /* out of descriptors: logged once until an accept succeeds */
    double accept_paused_until; /* > 0: listeners out of epoll until then */
    size_t max_out;         /* cap on a trainer connection's unsent replies */
    int *dirty, ndirty;     /* connections with replies queued this turn */
    int *again, nagain;     /* connections with frames read ahead and not served */
    int again_all;          /* the list was full: look at every connection */
    int *serving;           /* serve_again's copy of the list */
    int rows_queued;        /* ROWS wait in the output: they leave before the next update is applied */
    float *gscratch;        /* a block's gradient copied out of a ring, added to the step's others */
    size_t gscratch_len;
    size_t *held_bytes;     /* per trainer: the replies its held pulls will need */
    int nunauth;            /* connections not through the handshake */
    int unauth_full;        /* refusing for PD_MAX_UNAUTH: logged once */
    double handshake_timeout;
    uint8_t init_port[MAX_LISTEN]; /* trainer 0's INIT_DONE arrived on this port */
    sconn *conns;
    int nblocks;
    sblock *blocks;
    int *block_index;       /* global block -> index in blocks, or -1 */
    stable *tables;
    int ready;              /* parameters initialised */
    int init_done;          /* ports on which trainer 0 said INIT_DONE */
    waiter *ready_wait;
    int nready_wait, cap_ready_wait;
    uint8_t *active;        /* trainer counts towards barriers this pass */
    uint8_t *pass_ended;
    waiter *pass_wait;
    int npass_ended, pass;
    uint8_t *finished;
    int nfinished;
    uint8_t *seen;          /* trainer connected at least once */
    uint8_t *asked;         /* per trainer and port: READY asked there (twice: a new process) */
    int fatal, fatal_slot;  /* the job can't go on: end with fatal_why (an error code) */
    long moved;             /* frames of this life that changed the job (pushes, pass ends, saves) */
    int disagreed;          /* a trainer found the pservers resumed from different checkpoints */
    double disagreed_at;
    int forget_earlier;     /* a new job: before its first change, pd_ckpt_forget_earlier */
    char fatal_why[400];
    long rows_pulled, rows_pushed;  /* sparse rows moved (this pass) */
    double pass_started;
    int nseen;
    double started;
    long batches_total;     /* batches of every trainer in the passes done */
    uint32_t *ended_batch;  /* per trainer: batches it did in the pass it ended */
    uint32_t *pos_pass, *pos_batch; /* per trainer: its data position at the checkpoint */
    long save_step;         /* the checkpoint being gathered */
    int nsave;
    uint8_t *save_got;      /* per trainer: SAVE for save_step arrived */
    waiter *save_wait;
    int decided_pass;       /* early stopping: the last pass trainer 0 decided on, */
    int decided_stop;       /* and whether the job stops after it */
    int32_t *decide_pass;   /* per trainer: the pass it waits a decision on, or -1 */
    waiter *decide_wait;
    long resume_step;       /* -1: started fresh */
    long withdrawn;         /* the oldest checkpoint a COMMIT withdrew in this life (-1: none) */
    double *last_heard;     /* per trainer: its last frame (pd_now) */
    double hb_timeout, hb_sent;
    /* for /metrics */
    pd_http http;
    uint64_t bytes_in_gone, bytes_out_gone; /* of connections already closed */
    long rows_pulled_total, rows_pushed_total; /* of the passes done (rows_pulled/pushed: this one) */
    long updates;           /* optimizer updates applied (blocks and tables) */
    long ckpt_step;         /* the last checkpoint written or loaded (-1: none) */
    double ckpt_time;       /* when it was written (pd_wall) */
} server;

/* --- helpers -------------------------------------------------------------- */

static void update_events(server *s, int slot)
{
    sconn *c = &s->conns[slot];
    int want = c->c.out_len > c->c.out_off;
    if (want == c->want_out) return;
    c->want_out = want;
    struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.u64 = (uint64_t)slot + CONN_ID_BASE};
    epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->c.fd, &ev);
}

static void drop(server *s, int slot, const char *why)
{
    sconn *c = &s->conns[slot];
    if (!c->used) return;
    if (why) PD_WARN("dropping %s%s: %s", c->peer,
                     c->state == ST_READY ? "" : " (not authenticated)", why);
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->c.fd, NULL);
    if (why) {
        /* read away what the peer sent after the bad frame: closing with
         * unread input resets the connection, and the peer could lose the
         * ERROR frame that says why */
        char buf[4096];
        for (size_t n = 0; n < DRAIN_ON_DROP;) {
            ssize_t k = recv(c->c.fd, buf, sizeof buf, MSG_DONTWAIT);
            if (k <= 0) break;
            n += (size_t)k;
        }
    }
    if (c->state != ST_READY) s->nunauth--;
    s->bytes_in_gone += c->c.bytes_in;
    s->bytes_out_gone += c->c.bytes_out;
    pd_conn_free(&c->c);
    c->used = 0;
    c->dirty = 0;
    c->again = 0;
    c->gen++;
}

/* Tell the peer why it is dropped (best effort: its queue may be full). */
static void send_error(server *s, int slot, int code, const char *msg)
{
    sconn *c = &s->conns[slot];
    size_t max_out = c->c.max_out;
    c->c.max_out = 0;
    pd_conn_queue(&c->c, PD_MSG_ERROR, (uint32_t)-code, 0, msg, PD_MIN(strlen(msg), PD_MAX_HANDSHAKE), NULL, 0);
    c->c.max_out = max_out;
    pd_conn_flush(&c->c);
}

static sconn *waiter_conn(server *s, waiter w)
{
    if (w.slot < 0 || w.slot >= MAX_CONNS) return NULL;
    sconn *c = &s->conns[w.slot];
    return c->used && c->gen == w.gen ? c : NULL;
}

/* Replies queued on one connection in one turn of the loop go out together
 * at its end (flush_dirty), in one write where the socket takes them; a
 * connection with this much waiting is written at once. */
#define FLUSH_AT 65536
/* room in the lists of connections to flush or serve again */
#define LIST_CAP (2 * MAX_CONNS)

static void send_queued(server *s, int slot)
{
    sconn *c = &s->conns[slot];
    if (pd_conn_flush(&c->c) < 0) {
        drop(s, slot, pd_err_msg());
        return;
    }
    update_events(s, slot);
}

static void flush_dirty(server *s)
{
    s->rows_queued = 0;
    for (int i = 0; i < s->ndirty; i++) {
        sconn *c = &s->conns[s->dirty[i]];
        if (!c->used || !c->dirty) continue;
        c->dirty = 0;
        send_queued(s, s->dirty[i]);
    }
    s->ndirty = 0;
}

/* Connection slot has output for flush_dirty to send. (A dropped slot's
 * entry stays in the list, and its reuse may add the slot again: with the
 * list full, the output is sent at once.) */
static void mark_dirty(server *s, int slot)
{
    sconn *c = &s->conns[slot];
    if (c->dirty) return;
    if (s->ndirty == LIST_CAP) {
        send_queued(s, slot);
        return;
    }
    c->dirty = 1;
    s->dirty[s->ndirty++] = slot;
}

/* The reply queued on w's connection: sent by flush_dirty, or now if much
 * waits. An over-limit reply drops the connection (after saying why). */
static void queued(server *s, waiter w, int rc)
{
    sconn *c = &s->conns[w.slot];
    if (rc < 0) {
        char why[PD_MAX_HANDSHAKE];
        snprintf(why, sizeof why, "%s", pd_err_msg());
        send_error(s, w.slot, rc, why);
        drop(s, w.slot, why);
        return;
    }
    if (pd_conn_unsent(&c->c) >= FLUSH_AT) {
        send_queued(s, w.slot);
        return;
    }
    mark_dirty(s, w.slot);
}

static void reply(server *s, waiter w, int type, uint32_t a, uint32_t b, const void *p, size_t n)
{
    sconn *c = waiter_conn(s, w);
    if (c) queued(s, w, pd_conn_queue(&c->c, type, a, b, p, n, NULL, 0));
}

/* HEARTBEAT (a, b) queued on every trainer connection; a trainer that
 * finished may close at any time: nothing more for it. */
static void heartbeat_all(server *s, uint32_t a, uint32_t b)
{
    for (int i = 0; i < MAX_CONNS; i++) {
        if (!s->conns[i].used || s->conns[i].state != ST_READY || s->finished[s->conns[i].trainer]) continue;
        waiter w = {i, s->conns[i].gen};
        reply(s, w, PD_MSG_HEARTBEAT, a, b, NULL, 0);
    }
}

/* --- state ---------------------------------------------------------------- */

static float *zalloc(size_t n)
{
    return pd_xcalloc(n ? n : 1, sizeof(float));
}

static void make_state(server *s)
{
    const pd_layout *l = &s->lay;
    int T = s->o->ntrainers, id = s->o->id;
    int k_state = pd_opt_state_floats(s->hyper.type);
    s->block_index = pd_xmalloc(((size_t)l->nblocks + 1) * sizeof(int));
    s->blocks = pd_xcalloc((size_t)l->nblocks + 1, sizeof *s->blocks);
    for (int k = 0; k < l->nblocks; k++) {
        s->block_index[k] = -1;
        if (pd_block_owner(l, k) != id) continue;
        sblock *b = &s->blocks[s->nblocks];
        b->k = k;
        b->len = l->blocks[k].len;
        b->w = zalloc((size_t)b->len);
        b->g = zalloc((size_t)b->len);
        if (k_state >= 1) b->s1 = zalloc((size_t)b->len);
        if (k_state >= 2) b->s2 = zalloc((size_t)b->len);
        b->pushed = pd_xcalloc((size_t)T, 1);
        b->wait = pd_xcalloc((size_t)T, sizeof(waiter));
        s->block_index[k] = s->nblocks++;
        if ((size_t)b->len > s->gscratch_len) s->gscratch_len = (size_t)b->len;
    }
    s->gscratch = zalloc(s->gscratch_len);
    s->tables = pd_xcalloc((size_t)l->ntables + 1, sizeof *s->tables);
    for (int t = 0; t < l->ntables; t++) {
        stable *tb = &s->tables[t];
        const pd_lparam *p = &l->params[l->tables[t]];
        tb->param = l->tables[t];
        if (p->hash) {
            tb->hs = pd_xmalloc(sizeof *tb->hs);
            pd_hshard_init(tb->hs, s->r, p->desc, k_state, id, l->npservers);
        }
        tb->rows = pd_rows_on(l, p->rows, id);
        tb->dim = p->cols;
        size_t n = (size_t)tb->rows * tb->dim;
        tb->w = zalloc(n);
        tb->g = zalloc(n);
        if (k_state >= 1) tb->s1 = zalloc(n);
        if (k_state >= 2) tb->s2 = zalloc(n);
        tb->mark = pd_xcalloc((size_t)tb->rows + 1, 1);
        tb->dup = pd_xcalloc((size_t)tb->rows + 1, 1);
        tb->pushed = pd_xcalloc((size_t)T, 1);
        tb->wait = pd_xcalloc((size_t)T, sizeof(waiter));
    }
    s->active = pd_xmalloc((size_t)T);
    memset(s->active, 1, (size_t)T);
    s->pass_ended = pd_xcalloc((size_t)T, 1);
    s->pass_wait = pd_xcalloc((size_t)T, sizeof(waiter));
    s->finished = pd_xcalloc((size_t)T, 1);
    s->seen = pd_xcalloc((size_t)T, 1);
    s->asked = pd_xcalloc((size_t)T * MAX_LISTEN, 1);
    s->ended_batch = pd_xcalloc((size_t)T, sizeof *s->ended_batch);
    s->pos_pass = pd_xcalloc((size_t)T, sizeof *s->pos_pass);
    s->pos_batch = pd_xcalloc((size_t)T, sizeof *s->pos_batch);
    s->save_got = pd_xcalloc((size_t)T, 1);
    s->save_wait = pd_xcalloc((size_t)T, sizeof(waiter));
    s->decide_wait = pd_xcalloc((size_t)T, sizeof(waiter));
    s->decide_pass = pd_xcalloc((size_t)T, sizeof *s->decide_pass);
    for (int t = 0; t < T; t++) s->decide_pass[t] = -1;
    s->decided_pass = -1;
    s->last_heard = pd_xcalloc((size_t)T, sizeof(double));
    s->held_bytes = pd_xcalloc((size_t)T, sizeof(size_t));
}

static void free_state(server *s)
{
    for (int i = 0; i < s->nblocks; i++) {
        sblock *b = &s->blocks[i];
        free(b->w); free(b->g); free(b->s1); free(b->s2); free(b->pushed); free(b->wait);
    }
    free(s->blocks);
    free(s->block_index);
    free(s->gscratch);
    for (int t = 0; t < s->lay.ntables; t++) {
        stable *tb = &s->tables[t];
        free(tb->w); free(tb->g); free(tb->s1); free(tb->s2); free(tb->mark); free(tb->dup); free(tb->touched);
        free(tb->pushed); free(tb->wait);
        for (int i = 0; i < tb->nheld; i++) free(tb->held[i].ids);
        free(tb->held);
        if (tb->hs) pd_hshard_free(tb->hs);
        free(tb->hs);
    }
    free(s->tables);
    free(s->active);
    free(s->pass_ended);
    free(s->pass_wait);
    free(s->finished);
    free(s->seen);
    free(s->asked);
    free(s->ready_wait);
    free(s->ended_batch);
    free(s->pos_pass);
    free(s->pos_batch);
    free(s->save_got);
    free(s->save_wait);
    free(s->decide_wait);
    free(s->decide_pass);
    free(s->last_heard);
    free(s->held_bytes);
}

/* Back to a fresh pserver's state: what a shard that failed to load half
 * way left (parameters, optimizer state, a growing table's rows) goes. */
static void reset_state(server *s)
{
    free_state(s);
    s->nblocks = 0;
    s->gscratch_len = 0;
    s->ready_wait = NULL;
    s->nready_wait = s->cap_ready_wait = 0;
    make_state(s);
}

/* --- applying updates -------------------------------------------------------- */

/* Has every active trainer pushed? (at least one push) */
static int complete(server *s, const uint8_t *pushed, int npushed)
{
    if (npushed == 0) return 0;
    for (int t = 0; t < s->o->ntrainers; t++)
        if (s->active[t] && !pushed[t]) return 0;
    return 1;
}

/* Apply the step's gradient g of block b (b->g, or the frame of the only
 * trainer that pushed it) and send the new values to those that pushed. */
static void apply_block(server *s, sblock *b, const float *g)
{
    pd_opt_hyper h = s->hyper;
    h.t = ++b->t;
    s->updates++;
    if (b->npushed > 1) pd_backend_cpu.scale((size_t)b->len, 1.f / (float)b->npushed, b->g);
    pd_backend_cpu.opt_update(&h, b->w, g, b->s1, b->s2, (size_t)b->len);
    /* rows asked before this step (gathered when asked) leave before its
     * replies; only now: g may be a frame in a connection's buffer, which
     * a failed write to that connection frees */
    if (s->rows_queued) flush_dirty(s);
    for (int t = 0; t < s->o->ntrainers; t++) {
        if (!b->pushed[t]) continue;
        reply(s, b->wait[t], PD_MSG_BLOCK_VALUES, (uint32_t)b->k, (uint32_t)b->t, b->w,
              (size_t)b->len * sizeof(float));
        b->pushed[t] = 0;
    }
    b->npushed = 0;
}

static uint32_t rd32(const uint8_t *p);

/* ROWS of table ti for the n ids at ids (as PULL_ROWS carries them),
 * gathered straight into w's connection's output. */
static int answer_rows(server *s, waiter w, int ti, const uint8_t *ids, uint32_t n)
{
    stable *tb = &s->tables[ti];
    sconn *c = waiter_conn(s, w);
    if (!c) return 0;
    size_t bytes = (size_t)n * tb->dim * sizeof(float);
    uint8_t *v = pd_conn_reserve(&c->c, PD_MSG_ROWS, bytes, 0);
    if (!v) return PD_ERANGE; /* message set */
    s->rows_pulled += n;
    for (uint32_t i = 0; i < n; i++)
        pd_conn_fill(&c->c, v + (size_t)i * tb->dim * sizeof(float),
               tb->w + (size_t)pd_row_local(&s->lay, (int32_t)rd32(ids + 4 * (size_t)i)) * tb->dim,
               (size_t)tb->dim * sizeof(float));
    pd_conn_commit(&c->c, PD_MSG_ROWS, (uint32_t)ti, n, bytes);
    s->rows_queued = 1;
    queued(s, w, 0);
    return 0;
}

/* What a held pull of n values counts against its trainer's cap: its
 * reply, and its entry (so that pulls of no rows cannot pile up). */
static size_t held_charge(size_t n) { return n * sizeof(float) + sizeof(held_pull); }

/* The pulls held for table ti's step, answered in the order they came. */
static void answer_held(server *s, int ti)
{
    stable *tb = &s->tables[ti];
    for (int i = 0; i < tb->nheld; i++) {
        held_pull *h = &tb->held[i];
        s->held_bytes[h->trainer] -= held_charge((size_t)h->n * tb->dim);
        int rc = answer_rows(s, h->w, ti, h->ids, h->n);
        if (rc < 0) queued(s, h->w, rc); /* says why, drops the trainer */
        free(h->ids);
    }
    tb->nheld = 0;
}

/* Apply table ti's step: the rows accumulated in tb->g, or (f not NULL) the
 * rows of PUSH_ROWS f, the step's only push (checked: each row once), taken
 * straight from the frame. */
static void apply_table(server *s, int ti, const pd_frame *f)
{
    stable *tb = &s->tables[ti];
    pd_opt_hyper h = s->hyper;
    h.t = ++tb->t;
    s->updates++;
    /* the frame first: a failed write to its connection frees it */
    const float *vals = f ? (const float *)(f->payload + 4 * (size_t)f->b) : NULL;
    for (uint32_t i = 0; f && i < f->b; i++) {
        size_t off = (size_t)pd_row_local(&s->lay, (int32_t)rd32(f->payload + 4 * i)) * tb->dim;
        if (i + PD_AHEAD < f->b) {
            size_t ahead = (size_t)pd_row_local(&s->lay, (int32_t)rd32(f->payload + 4 * (i + PD_AHEAD))) * tb->dim;
            PD_PREFETCH_ROW(tb->w + ahead, tb->dim, 1);
            if (tb->s1) PD_PREFETCH_ROW(tb->s1 + ahead, tb->dim, 1);
            if (tb->s2) PD_PREFETCH_ROW(tb->s2 + ahead, tb->dim, 1);
        }
        pd_backend_cpu.opt_update(&h, tb->w + off, vals + (size_t)i * tb->dim, tb->s1 ? tb->s1 + off : NULL,
                                  tb->s2 ? tb->s2 + off : NULL, (size_t)tb->dim);
    }
    if (s->rows_queued) flush_dirty(s); /* rows asked before this step (gathered then) leave first */
    float inv = tb->npushed > 1 ? 1.f / (float)tb->npushed : 1.f;
    if (tb->hs) pd_hshard_apply(tb->hs, &h, inv);
    for (int i = 0; i < tb->ntouched; i++) {
        size_t off = (size_t)tb->touched[i] * tb->dim;
        if (i + PD_AHEAD < tb->ntouched) {
            size_t ahead = (size_t)tb->touched[i + PD_AHEAD] * tb->dim;
            PD_PREFETCH_ROW(tb->w + ahead, tb->dim, 1);
            PD_PREFETCH_ROW(tb->g + ahead, tb->dim, 1);
            if (tb->s1) PD_PREFETCH_ROW(tb->s1 + ahead, tb->dim, 1);
            if (tb->s2) PD_PREFETCH_ROW(tb->s2 + ahead, tb->dim, 1);
        }
        if (inv != 1.f) pd_backend_cpu.scale((size_t)tb->dim, inv, tb->g + off);
        pd_backend_cpu.opt_update(&h, tb->w + off, tb->g + off, tb->s1 ? tb->s1 + off : NULL,
                                  tb->s2 ? tb->s2 + off : NULL, (size_t)tb->dim);
        memset(tb->g + off, 0, (size_t)tb->dim * sizeof(float));
        tb->mark[tb->touched[i]] = 0;
    }
    tb->ntouched = 0;
    for (int t = 0; t < s->o->ntrainers; t++) {
        if (!tb->pushed[t]) continue;
        reply(s, tb->wait[t], PD_MSG_ROWS_DONE, (uint32_t)ti, (uint32_t)tb->t, NULL, 0);
        tb->pushed[t] = 0;
    }
    tb->npushed = 0;
    answer_held(s, ti);
}

/* After the set of active trainers shrank: finish what now is complete. */
static void recheck_barriers(server *s)
{
    for (int i = 0; i < s->nblocks; i++)
        if (complete(s, s->blocks[i].pushed, s->blocks[i].npushed)) apply_block(s, &s->blocks[i], s->blocks[i].g);
    for (int t = 0; t < s->lay.ntables; t++)
        if (complete(s, s->tables[t].pushed, s->tables[t].npushed)) apply_table(s, t, NULL);
}

/* --- checkpoints --------------------------------------------------------------- */

/* A growing table's dump, DIR/table-N.hash, and its line "file NAME SUM". */
static int shard_hash(pd_hshard *hs, const char *dir, int index, FILE *f, const char *text)
{
    char name[64], want[96];
    snprintf(name, sizeof name, "table-%d.hash", index);
    char *path = pd_xasprintf("%s/%s", dir, name);
    uint32_t sum = 0;
    int rc;
    if (f) {
        if ((rc = pd_hshard_save(hs, path, &sum)) == 0) fprintf(f, "file %s %u\n", name, sum);
    } else {
        snprintf(want, sizeof want, "\nfile %s ", name);
        const char *line = text ? strstr(text, want) : NULL;
        rc = line ? pd_hshard_load(hs, path, (uint32_t)strtoul(line + strlen(want), NULL, 10))
                  : pd_err_set(PD_EDATA, "%s: not in the shard's list (an incomplete checkpoint)", path);
    }
    free(path);
    return rc;
}

/* One array of a shard: a dense block's or a table's values or optimizer
 * state, and its name in shard.txt ("block-3.w", "table-0.s1"). */
typedef struct {
    float *data;
    size_t count;
    int rows, cols;
    char name[48];
} shard_array;

/* Every array of the shard that holds values, in order (*n of them). */
static shard_array *shard_list(server *s, int *n)
{
    static const char *what[3] = {"w", "s1", "s2"};
    shard_array *a = pd_xcalloc((size_t)(s->nblocks + s->lay.ntables) * 3 + 1, sizeof *a);
    *n = 0;
    for (int i = 0; i < s->nblocks + s->lay.ntables; i++) {
        int is_block = i < s->nblocks;
        sblock *b = is_block ? &s->blocks[i] : NULL;
        stable *tb = is_block ? NULL : &s->tables[i - s->nblocks];
        float *arrs[3] = {is_block ? b->w : tb->w, is_block ? b->s1 : tb->s1, is_block ? b->s2 : tb->s2};
        int rows = is_block ? 1 : tb->rows, cols = is_block ? b->len : tb->dim;
        for (int k = 0; k < 3 && rows > 0 && cols > 0; k++) {
            if (!arrs[k]) continue;
            a[*n].data = arrs[k];
            a[*n].rows = rows;
            a[*n].cols = cols;
            a[*n].count = (size_t)rows * (size_t)cols;
            snprintf(a[*n].name, sizeof a[*n].name, "%s-%d.%s", is_block ? "block" : "table",
                     is_block ? b->k : i - s->nblocks, what[k]);
            (*n)++;
        }
    }
    return a;
}

/* A shard's arrays go back to back into as few files as they fit
 * (DIR/arrays-P.npy, one float32 vector each, at most PACK_VALUES values
 * unless one array is larger): a file, its sync and its name cost more
 * than its bytes here. Each array's line in f: "array NAME FILE OFFSET SUM". */
#define PACK_VALUES (1L << 30)

static int write_pack(const char *dir, int pack, const shard_array *a, int n, FILE *f)
{
    const float **parts = pd_xcalloc((size_t)n + 1, sizeof *parts);
    size_t *counts = pd_xcalloc((size_t)n + 1, sizeof *counts), offset = 0;
    char name[32];
    snprintf(name, sizeof name, "arrays-%d.npy", pack);
    for (int i = 0; i < n; i++) {
        parts[i] = a[i].data;
        counts[i] = a[i].count;
        fprintf(f, "array %s %s %zu %u\n", a[i].name, name, offset, pd_checksum(a[i].data, a[i].count * sizeof(float)));
        offset += a[i].count;
    }
    char *path = pd_xasprintf("%s/%s", dir, name);
    int rc = pd_npy_write_parts(path, parts, counts, n);
    free(path);
    free(parts);
    free(counts);
    return rc;
}

static int write_arrays(const char *dir, FILE *f, const shard_array *a, int n)
{
    int rc = 0, pack = 0, first = 0;
    size_t used = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (used > 0 && used + a[i].count > (size_t)PACK_VALUES) {
            rc = write_pack(dir, pack++, a + first, i - first, f);
            first = i;
            used = 0;
        }
        used += a[i].count;
    }
    if (rc == 0 && n > first) rc = write_pack(dir, pack, a + first, n - first, f);
    return rc;
}

/* An array from its line in text: from its pack, or (a checkpoint of an
 * earlier version, "file NAME.npy SUM") from a file of its own; its
 * checksum checked. */
static int read_array(const char *dir, const char *text, const shard_array *a)
{
    char want[96], file[64] = "";
    size_t offset = 0;
    unsigned sum = 0;
    int rc;
    snprintf(want, sizeof want, "\narray %s ", a->name);
    const char *line = strstr(text, want);
    if (line) {
        if (sscanf(line + strlen(want), "%63s %zu %u", file, &offset, &sum) != 3 ||
            strspn(file, "abcdefghijklmnopqrstuvwxyz0123456789-.") != strlen(file) || file[0] == '.')
            return pd_err_set(PD_EDATA, "%s/shard.txt: malformed line for %s", dir, a->name);
        char *path = pd_xasprintf("%s/%s", dir, file);
        rc = pd_npy_read_part(path, offset, a->data, a->count);
        free(path);
    } else {
        snprintf(file, sizeof file, "%s.npy", a->name);
        snprintf(want, sizeof want, "\nfile %s ", file);
        if (!(line = strstr(text, want)))
            return pd_err_set(PD_EDATA, "%s/%s: not in the shard's list (an incomplete checkpoint)", dir, file);
        sum = (unsigned)strtoul(line + strlen(want), NULL, 10);
        char *path = pd_xasprintf("%s/%s", dir, file);
        rc = pd_npy_read(path, a->data, a->rows, a->cols);
        free(path);
    }
    if (rc == 0 && sum != pd_checksum(a->data, a->count * sizeof(float)))
        rc = pd_err_set(PD_EDATA, "%s/%s: checksum mismatch for %s (a corrupt or incomplete checkpoint)", dir, file,
                        a->name);
    return rc;
}

/* Write (f != NULL: the arrays into DIR's packs and their lines, each
 * block's and table's step counter and each growing table's dump to f) or
 * read (f == NULL: all of it from DIR, checked against the sums in text)
 * the shard. */
static int shard_arrays(server *s, const char *dir, FILE *f, const char *text)
{
    int n, rc = 0;
    shard_array *a = shard_list(s, &n);
    if (f) rc = write_arrays(dir, f, a, n);
    for (int i = 0; i < n && rc == 0 && !f; i++) rc = read_array(dir, text, &a[i]);
    free(a);
    for (int i = 0; i < s->nblocks + s->lay.ntables && rc == 0; i++) {
        int is_block = i < s->nblocks;
        stable *tb = is_block ? NULL : &s->tables[i - s->nblocks];
        int index = is_block ? s->blocks[i].k : i - s->nblocks;
        long *t = is_block ? &s->blocks[i].t : &tb->t;
        char key[64];
        snprintf(key, sizeof key, "\n%s %d t ", is_block ? "block" : "table", index);
        if (f) fprintf(f, "%s%ld\n", key + 1, *t);
        else if (strstr(text, key)) *t = strtol(strstr(text, key) + strlen(key), NULL, 10);
        if (tb && tb->hs) rc = shard_hash(tb->hs, dir, index, f, text);
    }
    return rc;
}

/* The text of shard.txt but its last line: who, what model, the counters,
 * the trainers' positions at the checkpoint's step. */
static void shard_header(server *s, FILE *f, long step)
{
    char digest[65];
    pd_hex(s->lay.digest, 32, digest);
    fprintf(f, "pserver %d of %d\ndigest %s\nsteps %ld\npass %d\nbatches %ld\ntrainers %d\n", s->o->id,
            s->o->npservers, digest, step, s->pass, s->batches_total, s->o->ntrainers);
    for (int t = 0; t < s->o->ntrainers; t++)
        fprintf(f, "trainer %d pass %u batch %u\n", t, s->pos_pass[t], s->pos_batch[t]);
    /* what the digest is of and the batch size, to say what differs when a
     * resume finds another job's checkpoint */
    fprintf(f, "batch_size %d\n", s->r->batch_size);
    for (const char *p = s->lay.digest_text; *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(f, "layout %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

/* Is the line line[0..n) one of the lines of text? */
static int has_line(const char *text, const char *line, size_t n)
{
    for (const char *q = text; *q;) {
        size_t k = strcspn(q, "\n");
        if (k == n && !strncmp(q, line, n)) return 1;
        q += k + (q[k] == '\n');
    }
    return 0;
}

/* A shard's "layout" lines, each ended by a newline: the digest text of
 * the job that wrote it ("" in a shard written before they were kept). */
static char *shard_layout(const char *text)
{
    char *saved = pd_xstrdup("");
    size_t len = 0;
    for (const char *p = text; (p = strstr(p, "\nlayout ")); p += 8) {
        size_t n = strcspn(p + 8, "\n");
        saved = pd_xrealloc(saved, len + n + 2);
        memcpy(saved + len, p + 8, n);
        len += n;
        saved[len++] = '\n';
        saved[len] = '\0';
    }
    return saved;
}

/* The first line of a shard's layout (saved) that this job's digest text
 * (mine) lacks into a, and the first of mine that the shard lacks into b. */
static void layout_difference(const char *saved, const char *mine, char *a, size_t na, char *b, size_t nb)
{
    a[0] = b[0] = '\0';
    for (const char *q = saved; *q && !a[0];) {
        size_t k = strcspn(q, "\n");
        if (!has_line(mine, q, k)) snprintf(a, na, "%.*s", (int)k, q);
        q += k + (q[k] == '\n');
    }
    for (const char *q = mine; *q && !b[0];) {
        size_t k = strcspn(q, "\n");
        if (!has_line(saved, q, k)) snprintf(b, nb, "%.*s", (int)k, q);
        q += k + (q[k] == '\n');
    }
}

/* The last line of the digest text t: the optimizer's, "opt KIND
 * settings..." (layout.c writes it last), or "" where t has none. */
static const char *opt_line(const char *t, size_t *n)
{
    size_t len = strlen(t);
    if (len && t[len - 1] == '\n') len--;
    const char *line = t + len;
    while (line > t && line[-1] != '\n') line--;
    *n = (size_t)(t + len - line);
    return *n > 4 && !strncmp(line, "opt ", 4) ? line : "";
}

/* Whether the digest texts a (a shard's) and b (this job's) differ in the
 * optimizer's settings alone, not its kind: the shard's arrays are the
 * same then. */
static int opt_settings_only(const char *a, const char *b)
{
    size_t na, nb;
    const char *oa = opt_line(a, &na), *ob = opt_line(b, &nb);
    if (!*oa || !*ob || oa - a != ob - b || strncmp(a, b, (size_t)(oa - a)) != 0) return 0;
    size_t ka = 4 + strcspn(oa + 4, " \n"), kb = 4 + strcspn(ob + 4, " \n");
    return ka == kb && !strncmp(oa, ob, ka);
}

/* The optimizer settings that differ between a shard's "opt" line (was)
 * and this job's (now), named into buf: "learning_rate 0.001 -> 0.0005". */
static void opt_changes(const char *was, const char *now, char *buf, size_t n)
{
    static const char *const names[] = {"learning_rate", "momentum", "beta1", "beta2",
                                        "epsilon",       "rho",      "weight_decay", "nesterov"};
    char a[8][32], b[8][32];
    int na = sscanf(was, "opt %*s %31s %31s %31s %31s %31s %31s %31s %31s", a[0], a[1], a[2], a[3], a[4], a[5],
                    a[6], a[7]);
    int nb = sscanf(now, "opt %*s %31s %31s %31s %31s %31s %31s %31s %31s", b[0], b[1], b[2], b[3], b[4], b[5],
                    b[6], b[7]);
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < 8 && i < na && i < nb && len < n; i++)
        if (strcmp(a[i], b[i]) != 0)
            len += (size_t)snprintf(buf + len, n - len, "%s%s %s -> %s", len ? ", " : "", names[i], a[i], b[i]);
}

/* Write the shard for step into CHECKPOINT_DIR/ckpt-<step>/pserver-N:
 * everything (the arrays' packs, the growing tables' dumps, shard.txt with
 * their checksums) into pserver-N.tmp, fsynced all at once, then renamed
 * into place. */
static int save_shard(server *s, long step)
{
    char *ck = pd_ckpt_path(s->r->checkpoint_dir, step);
    char *tmp = pd_xasprintf("%s/pserver-%d.tmp", ck, s->o->id), *dst = pd_xasprintf("%s/pserver-%d", ck, s->o->id);
    char *marker = pd_xasprintf("%s/complete", ck), *text = NULL, *path = NULL;
    size_t len = 0;
    int rc = pd_mkdir_p(ck);
    /* a marker left by an earlier life of the job no longer holds */
    if (rc == 0 && unlink(marker) == 0) rc = pd_ckpt_fsync_file(ck);
    if (rc == 0) rc = pd_ckpt_remove_tree(tmp);
    if (rc == 0) rc = pd_mkdir_p(tmp);
    FILE *f = rc == 0 ? open_memstream(&text, &len) : NULL;
    if (rc == 0 && !f) rc = pd_err_set(PD_ENOMEM, "out of memory");
    if (f) {
        shard_header(s, f, step);
        rc = shard_arrays(s, tmp, f, NULL);
        fclose(f);
    }
    if (rc == 0) {
        size_t n = strlen(text);
        text = pd_xrealloc(text, n + 32);
        snprintf(text + n, 32, "sum %u\n", pd_checksum(text, n));
        path = pd_xasprintf("%s/shard.txt", tmp);
        rc = pd_ckpt_write_file(path, text, strlen(text));
    }
    /* every file on disk before the directory that holds them takes its
     * name: until then the shard is not there */
    if (rc == 0) rc = pd_ckpt_fsync_files_in(tmp);
    if (rc == 0) rc = pd_ckpt_remove_tree(dst);
    if (rc == 0 && rename(tmp, dst) < 0) rc = pd_err_set(PD_EIO, "rename %s: %s", tmp, strerror(errno));
    if (rc == 0) rc = pd_ckpt_fsync_file(ck);
    free(ck); free(tmp); free(dst); free(marker); free(text); free(path);
    return rc;
}

/* shard.txt of dir, its last line's checksum checked (malloc'd), or NULL. */
/* A shard's text, its checksum checked; NULL with *code PD_EDATA (not
 * there, or corrupt) or PD_EIO (there, but not readable). */
static char *read_shard_text(const char *dir, int *code)
{
    char *path = pd_xasprintf("%s/shard.txt", dir);
    FILE *f = fopen(path, "r");
    free(path);
    if (!f) {
        *code = pd_err_set(errno == ENOENT ? PD_EDATA : PD_EIO, "cannot open %s/shard.txt: %s", dir, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *text = pd_xmalloc(cap + 1);
    size_t k;
    while ((k = fread(text + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap && cap < (64u << 20)) text = pd_xrealloc(text, (cap *= 2) + 1);
        else if (n == cap) break;
    }
    int bad = ferror(f), err = errno;
    fclose(f);
    text[n] = '\0';
    if (bad) { /* an I/O error, not a corrupt shard: nothing is removed for it */
        *code = pd_err_set(PD_EIO, "%s/shard.txt: read error: %s", dir, strerror(err));
        free(text);
        return NULL;
    }
    char *sum = n ? strstr(text, "\nsum ") : NULL;
    if (!sum || strtoul(sum + 5, NULL, 10) != pd_checksum(text, (size_t)(sum - text) + 1)) {
        *code = pd_err_set(PD_EDATA, "%s/shard.txt: checksum mismatch (a corrupt or incomplete checkpoint)", dir);
        free(text);
        return NULL;
    }
    return text;
}

/* The counters and the trainers' positions of a shard's text. */
static int shard_counters(server *s, const char *dir, const char *text)
{
    char key[64];
    const char *p = strstr(text, "\npass ");
    s->pass = p ? atoi(p + 6) : 0;
    p = strstr(text, "\nbatches ");
    s->batches_total = p ? strtol(p + 9, NULL, 10) : 0;
    for (int t = 0; t < s->o->ntrainers; t++) {
        snprintf(key, sizeof key, "\ntrainer %d pass ", t);
        p = strstr(text, key);
        unsigned pp = 0, bb = 0;
        if (p && sscanf(p + strlen(key), "%u batch %u", &pp, &bb) == 2) {
            s->pos_pass[t] = pp;
            s->pos_batch[t] = bb;
        }
    }
    return 0;
}

/* A shard whose digest is not this job's: PD_EINVAL naming what differs,
 * or 1 where its optimizer's settings alone do (a lower learning rate on a
 * resume: the state arrays are the same, and the recipe's settings rule),
 * named into changes. The shard's layout lines must be what its digest is
 * of. */
static int other_layout(server *s, const char *dir, const char *text, const char *digest, char *changes, size_t n)
{
    char *saved = shard_layout(text), hex[65], was[160], now[160];
    uint8_t md[32];
    pd_sha256(saved, strlen(saved), md);
    pd_hex(md, 32, hex);
    int rc = 0;
    if (!saved[0] || strcmp(hex, digest) != 0) {
        rc = pd_err_set(PD_EINVAL, "%s was saved for a different model or optimizer", dir);
    } else if (!opt_settings_only(saved, s->lay.digest_text)) {
        layout_difference(saved, s->lay.digest_text, was, sizeof was, now, sizeof now);
        rc = pd_err_set(PD_EINVAL, "%s was saved for a different model or optimizer: it has '%s' where this job has "
                        "'%s'", dir, was[0] ? was : "(nothing)", now[0] ? now : "(nothing)");
    } else {
        size_t na, nb;
        const char *a = opt_line(saved, &na), *b = opt_line(s->lay.digest_text, &nb);
        snprintf(was, sizeof was, "%.*s", (int)na, a);
        snprintf(now, sizeof now, "%.*s", (int)nb, b);
        opt_changes(was, now, changes, n);
        rc = 1;
    }
    free(saved);
    return rc;
}

/* A shard's header against this job: PD_EINVAL where another job's (its
 * pservers, model, optimizer or trainers differ), PD_EDATA where malformed
 * or not of step (step >= 0: the step its directory is named by). Sets
 * *steps. */
static int check_shard_header(server *s, const char *dir, const char *text, long step, long *steps)
{
    int id = -1, np = -1, nt = -1, settings = 0;
    char digest[80] = "", want[65], changes[256];
    pd_hex(s->lay.digest, 32, want);
    const char *p = strstr(text, "\ntrainers ");
    if (p) nt = atoi(p + 10);
    if (sscanf(text, "pserver %d of %d\ndigest %70s\nsteps %ld", &id, &np, digest, steps) != 4)
        return pd_err_set(PD_EDATA, "%s/shard.txt is malformed", dir);
    if (id != s->o->id || np != s->o->npservers)
        return pd_err_set(PD_EINVAL, "%s holds the shard of pserver %d of %d, this is pserver %d of %d", dir, id, np,
                          s->o->id, s->o->npservers);
    if (strcmp(digest, want) != 0 && (settings = other_layout(s, dir, text, digest, changes, sizeof changes)) < 0)
        return settings;
    const char *bs = strstr(text, "\nbatch_size ");
    if (bs && step >= 0 && atoi(bs + 12) != s->r->batch_size) /* a resume, not --init_shard's parameters */
        return pd_err_set(PD_EINVAL, "%s was saved by a job of batch_size %d, this one has %d (its trainers' places "
                          "in the pass count batches of %d)", dir, atoi(bs + 12), s->r->batch_size, atoi(bs + 12));
    if (p && step >= 0 && nt != s->o->ntrainers) /* the trainers' places, not --init_shard's parameters */
        return pd_err_set(PD_EINVAL, "%s was saved by a job of %d trainers, this one has %d", dir, nt,
                          s->o->ntrainers);
    if (step >= 0 && *steps != step)
        return pd_err_set(PD_EDATA, "%s/shard.txt is of step %ld, its checkpoint of step %ld", dir, *steps, step);
    if (settings)
        PD_WARN("%s was saved with other optimizer settings; this job goes on with the recipe's: %s", dir, changes);
    return 0;
}

/* Load the shard in dir (of step, or -1: any). */
static int load_shard(server *s, const char *dir, long step)
{
    int rc;
    char *text = read_shard_text(dir, &rc);
    if (!text) return rc;
    long steps = 0;
    rc = check_shard_header(s, dir, text, step, &steps);
    if (rc == 0) rc = shard_counters(s, dir, text);
    if (rc == 0) rc = shard_arrays(s, dir, NULL, text);
    if (rc == 0) {
        struct stat st;
        s->resume_step = s->ckpt_step = steps;
        s->ckpt_time = stat(dir, &st) == 0 ? (double)st.st_mtime : pd_wall();
    }
    free(text);
    return rc;
}

/* A checkpoint without this pserver's shard: PD_EINVAL when its complete
 * marker says it was written by another number of pservers (the job's
 * pservers changed), else 0. */
static int shard_missing(server *s, const char *ck)
{
    char *path = pd_xasprintf("%s/complete", ck);
    FILE *f = fopen(path, "r");
    long step;
    int np = -1, rc = 0;
    if (f && fscanf(f, "step %ld pservers %d", &step, &np) == 2 && np != s->o->npservers)
        rc = pd_err_set(PD_EINVAL, "%s was written by a job of %d pservers, this one has %d", ck, np,
                        s->o->npservers);
    if (f) fclose(f);
    free(path);
    return rc;
}

/* resume()'s look at one complete checkpoint: 1 resumed from it, 0
 * skipped, < 0 the start fails. */
static int resume_from(server *s, const char *ck, long step, double t0)
{
    char *marker = pd_xasprintf("%s/complete", ck), *mine = pd_xasprintf("%s/pserver-%d", ck, s->o->id);
    int rc = 0;
    if (access(marker, F_OK) != 0) {
        PD_WARN("checkpoint %s is incomplete (no complete marker): skipped", ck);
    } else if (access(mine, F_OK) != 0 && errno == ENOENT) {
        rc = shard_missing(s, ck);
        if (rc == 0) PD_WARN("checkpoint %s has no shard of pserver %d on this host: skipped", ck, s->o->id);
    } else if ((rc = load_shard(s, mine, step)) == PD_EDATA || rc == PD_ENOENT) {
        /* corrupt, or a file of it missing: its shard directory is there */
        PD_WARN("checkpoint %s skipped: %s", ck, pd_err_msg());
        unlink(marker);
        pd_ckpt_remove_tree(mine);
        s->pass = 0, s->batches_total = 0; /* what the shard set before it failed */
        reset_state(s);
        rc = 0;
    } else if (rc == 0) {
        PD_INFO("resuming from checkpoint %s (step %ld, pass %d), read in %.3f s", ck, step, s->pass, pd_now() - t0);
        rc = 1;
    }
    if (rc < 0) {
        /* another job's (the recipe or the roles changed), or unreadable: left as it is, no fresh start over it */
        rc = pd_err_wrap(rc, "--resume of checkpoint %s", ck);
        if (rc == PD_EINVAL)
            pd_err_set(rc, "%s: resume with the recipe and roles that wrote it, or start a new job without --resume",
                       pd_err_msg());
    }
    free(marker);
    free(mine);
    return rc;
}

/* --resume: the newest complete checkpoint whose shard loads (1), or none
 * (0; < 0: one of another job's, of another recipe, or a shard that could
 * not be read: the start fails and the checkpoints stay as they are). A
 * newer checkpoint whose shard here is corrupt loses its marker and that
 * shard, so that it cannot mix with the ones this life writes; one with no
 * shard here keeps both (the trainers withdraw it everywhere when another
 * pserver resumed from it). A shard without a marker is kept: on a disk of
 * this host alone, it may be complete where a trainer marked it, and a
 * trainer's COMMIT then marks it here (a pserver writing that step again
 * removes the marker first). */
static int resume(server *s)
{
    const char *dir = s->r->checkpoint_dir;
    long steps[64];
    double t0 = pd_now();
    int n = dir ? pd_ckpt_list(dir, steps, 64, 1) : 0;
    for (int i = 0; i < n; i++) {
        char *ck = pd_ckpt_path(dir, steps[i]);
        int rc = resume_from(s, ck, steps[i], t0);
        free(ck);
        if (rc != 0) return rc;
    }
    PD_INFO("no complete checkpoint under %s: starting fresh", dir ? dir : "(no settings.checkpoint_dir)");
    return 0;
}

/* Every trainer that counts towards this step sent SAVE: write the shard
 * and answer SAVED to each (b: the lowest of them, who writes the marker). */
static void save_barrier(server *s)
{
    int lowest = -1;
    for (int t = 0; t < s->o->ntrainers; t++) {
        if (s->active[t] && !s->save_got[t]) return;
        if (!s->active[t]) {
            /* ended its pass before this step: it resumes at that end */
            s->pos_pass[t] = (uint32_t)s->pass;
            s->pos_batch[t] = s->ended_batch[t];
        } else if (lowest < 0) {
            lowest = t;
        }
    }
    /* every trainer hears that the shard is being written (those waiting
     * for SAVED, and those that ended their pass and wait for PASS_DONE):
     * however long the disk takes, this pserver is not hung */
    heartbeat_all(s, PD_HB_SAVING, (uint32_t)s->save_step);
    flush_dirty(s); /* before the shard is written */
    double t0 = pd_now();
    int rc = save_shard(s, s->save_step);
    if (rc < 0) PD_ERROR("checkpoint of step %ld failed: %s", s->save_step, pd_err_msg());
    else PD_INFO("checkpoint: shard of step %ld saved in %.3f s", s->save_step, pd_now() - t0);
    if (rc == 0) {
        s->ckpt_step = s->save_step;
        s->ckpt_time = pd_wall();
    }
    for (int t = 0; t < s->o->ntrainers; t++) {
        if (!s->save_got[t]) continue;
        s->save_got[t] = 0;
        if (rc < 0) {
            sconn *c = waiter_conn(s, s->save_wait[t]);
            if (c) send_error(s, s->save_wait[t].slot, rc, pd_err_msg());
        } else {
            reply(s, s->save_wait[t], PD_MSG_SAVED, (uint32_t)s->save_step, (uint32_t)lowest, NULL, 0);
        }
    }
    s->nsave = 0;
}

/* COMMIT (a = step, b = what): every pserver saved its shard of step.
 * b 0: the trainer wrote the complete marker on its host; where this
 * pserver's checkpoint_dir has none (another host's disk) it writes one
 * and prunes as the trainer does, so that a restart finds the checkpoint
 * here. Only for the step this pserver saved last. Before anything moved
 * in a resumed job, whose pservers resumed from different checkpoints:
 * b 1, mark step if this pserver's shard of it is there and checks
 * (answer: COMMIT step, 1 marked, 0 no such shard, 3 the marker could not
 * be written); b 2, withdraw step's marker, as a pserver has no shard of it
 * (answer: COMMIT step, 2). */
static int on_commit(server *s, waiter me, int T, pd_frame *f)
{
    const char *dir = s->r->checkpoint_dir;
    long step = (long)f->a;
    if (f->len || !dir || f->b > 2) return pd_err_set(PD_EPROTO, "COMMIT %s", f->len ? "with a payload" : !dir ?
                                                      "without checkpoints" : "of an unknown kind");
    if (f->b == 0 && step != s->ckpt_step)
        return pd_err_set(PD_EPROTO, "COMMIT of step %ld, but this pserver saved step %ld last", step, s->ckpt_step);
    if (f->b > 0 && (s->moved > 0 || step < s->resume_step))
        return pd_err_set(PD_EPROTO, "COMMIT of step %ld out of place (resumed from %ld, %ld updates in)", step,
                          s->resume_step, s->moved);
    char *ck = pd_ckpt_path(dir, step), *marker = pd_xasprintf("%s/complete", ck);
    char *mine = pd_xasprintf("%s/pserver-%d", ck, s->o->id);
    int answer = (int)f->b;
    if (f->b == 2) {
        if (pd_ckpt_unmark(dir, step) > 0) PD_WARN("checkpoint %s withdrawn: a pserver has no shard of it", ck);
        if (s->withdrawn < 0 || step < s->withdrawn) s->withdrawn = step;
    } else if (f->b == 1) {
        int rc = 0;
        long steps = 0;
        int withdrawn = s->withdrawn >= 0 && step >= s->withdrawn;
        char *text = withdrawn ? NULL : read_shard_text(mine, &rc); /* its own shard, whatever a shared marker says */
        if (text) rc = check_shard_header(s, mine, text, step, &steps);
        if (withdrawn) {
            /* a trainer late to the agreement another one ended: it stays withdrawn */
            answer = 0;
        } else if (rc < 0) {
            PD_ERROR("checkpoint %s is complete on another pserver, but this pserver's shard of it is lost or "
                     "does not check (%s): it is withdrawn on every host", ck, pd_err_msg());
            answer = 0;
        } else if (access(marker, F_OK) != 0 && pd_ckpt_mark(dir, step, s->o->npservers, s->o->ntrainers) < 0) {
            PD_ERROR("checkpoint %s: %s", ck, pd_err_msg());
            answer = 3;
        }
        free(text);
    } else if (access(marker, F_OK) == 0) {
        /* the trainer's host, or storage both see: it is marked */
    } else if (access(mine, F_OK) != 0) {
        PD_ERROR("trainer %d says checkpoint %s is complete, but this pserver's shard of it is not there (%s)", T,
                 ck, strerror(errno));
    } else if (pd_ckpt_mark(dir, step, s->o->npservers, s->o->ntrainers) < 0) {
        PD_ERROR("checkpoint %s: %s", ck, pd_err_msg());
    } else {
        pd_ckpt_prune(dir, step, s->r->checkpoint_keep, 0);
    }
    if (f->b > 0) {
        reply(s, me, PD_MSG_COMMIT, (uint32_t)step, (uint32_t)answer, NULL, 0);
        if (!s->disagreed) s->disagreed_at = pd_now();
        s->disagreed = 1; /* the trainers stop: this pserver ends once they left (heartbeats) */
    }
    free(ck);
    free(marker);
    free(mine);
    return 0;
}

/* --- frames --------------------------------------------------------------------- */

static int on_handshake(server *s, int slot, pd_frame *f)
{
    sconn *c = &s->conns[slot];
    if (c->state == ST_HELLO) {
        if (f->type != PD_MSG_HELLO || f->len != PD_JOB_ID + 32 + PD_NONCE)
            return pd_err_set(PD_EPROTO, "expected HELLO, got %s of %u bytes", pd_msg_name(f->type), f->len);
        if (f->a != 1 || f->b >= (uint32_t)s->o->ntrainers) {
            send_error(s, slot, PD_EAUTH, "unknown role or trainer id");
            return pd_err_set(PD_EPROTO, "HELLO from role %u id %u (this job has %d trainers)", f->a, f->b,
                              s->o->ntrainers);
        }
        if (memcmp(f->payload, s->o->job, PD_JOB_ID) != 0) {
            send_error(s, slot, PD_EAUTH, "this pserver belongs to another job");
            return pd_err_set(PD_EAUTH, "HELLO for another job");
        }
        if (memcmp(f->payload + PD_JOB_ID, s->lay.digest, 32) != 0) {
            send_error(s, slot, PD_EAUTH,
                       "the trainer's model or optimizer differs from the pserver's (different recipe or "
                       "paddle version on the nodes?)");
            return pd_err_set(PD_EAUTH, "HELLO with a different model digest");
        }
        c->trainer = (int)f->b;
        memcpy(c->cnonce, f->payload + PD_JOB_ID + 32, PD_NONCE);
        if (pd_random(c->snonce, PD_NONCE) < 0) return PD_EIO;
        uint8_t proof[PD_MAC];
        pd_proof(s->o->secret, "pd-server", c->cnonce, c->snonce, s->o->job, proof);
        pd_conn_queue(&c->c, PD_MSG_CHALLENGE, 0, 0, c->snonce, PD_NONCE, proof, PD_MAC);
        c->state = ST_AUTH;
        return 0;
    }
    if (f->type != PD_MSG_AUTH || f->len != PD_MAC)
        return pd_err_set(PD_EPROTO, "expected AUTH, got %s of %u bytes", pd_msg_name(f->type), f->len);
    uint8_t want[PD_MAC];
    pd_proof(s->o->secret, "pd-client", c->snonce, c->cnonce, s->o->job, want);
    if (!pd_mac_equal(want, f->payload, PD_MAC)) {
        send_error(s, slot, PD_EAUTH, "authentication failed: the job secret differs");
        return pd_err_set(PD_EAUTH, "authentication failed (wrong job secret)");
    }
    c->state = ST_READY;
    s->nunauth--;
    s->last_heard[c->trainer] = pd_now();
    c->c.max_frame = PD_MAX_FRAME;
    c->c.max_out = s->max_out;
    c->c.take_fd = c->local; /* the shared memory it may offer */
    uint32_t kind = (uint32_t)c->kind;
    pd_conn_queue(&c->c, PD_MSG_WELCOME, (uint32_t)s->o->id, (uint32_t)s->o->npservers, &kind, 4, NULL, 0);
    if (!s->seen[c->trainer]) {
        s->seen[c->trainer] = 1;
        s->nseen++;
        PD_INFO("trainer %d connected from %s", c->trainer, c->peer);
    }
    return 0;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Check a rows payload: nrows ids (owned, < rows) then optionally nrows x
 * dim floats; a frame with values names each row once. */
static int check_rows(server *s, pd_frame *f, int with_values, stable **out_tb)
{
    if (f->a >= (uint32_t)s->lay.ntables) return pd_err_set(PD_EPROTO, "%s: no table %u", pd_msg_name(f->type), f->a);
    stable *tb = &s->tables[f->a];
    const pd_lparam *p = &s->lay.params[tb->param];
    uint64_t per = 4 + (with_values ? 4ull * (uint64_t)tb->dim : 0);
    if ((uint64_t)f->b * per != f->len)
        return pd_err_set(PD_EPROTO, "%s: %u rows do not fit %u bytes", pd_msg_name(f->type), f->b, f->len);
    uint32_t i;
    int rc = 0;
    for (i = 0; i < f->b && rc == 0; i++) {
        uint32_t row = rd32(f->payload + 4 * i);
        if (row >= (uint32_t)p->rows || pd_row_owner(&s->lay, (int32_t)row) != s->o->id) {
            rc = pd_err_set(PD_EPROTO, "%s: row %u of table '%s' is not held by pserver %d", pd_msg_name(f->type),
                            row, p->name, s->o->id);
        } else if (with_values) {
            int32_t local = pd_row_local(&s->lay, (int32_t)row);
            if (tb->dup[local])
                rc = pd_err_set(PD_EPROTO, "%s: row %u of table '%s' appears twice in one frame",
                                pd_msg_name(f->type), row, p->name);
            tb->dup[local] = 1;
        }
    }
    /* clear the marks of the rows checked so far (the last one too) */
    for (uint32_t j = 0; with_values && j < i; j++) {
        uint32_t row = rd32(f->payload + 4 * j);
        if (row < (uint32_t)p->rows && pd_row_owner(&s->lay, (int32_t)row) == s->o->id)
            tb->dup[pd_row_local(&s->lay, (int32_t)row)] = 0;
    }
    if (rc < 0) return rc;
    *out_tb = tb;
    return 0;
}

static int check_block(server *s, pd_frame *f, sblock **out)
{
    if (f->a >= (uint32_t)s->lay.nblocks || s->block_index[f->a] < 0)
        return pd_err_set(PD_EPROTO, "%s: block %u is not held by pserver %d", pd_msg_name(f->type), f->a, s->o->id);
    sblock *b = &s->blocks[s->block_index[f->a]];
    if (f->type != PD_MSG_PULL_BLOCK && f->len != (uint32_t)b->len * 4)
        return pd_err_set(PD_EPROTO, "%s: block %u has %d floats, frame has %u bytes", pd_msg_name(f->type), f->a,
                          b->len, f->len);
    *out = b;
    return 0;
}

/* READY to one trainer: a fresh start, or (resumed) the checkpoint's step
 * in the payload and the trainer's position in a, b. */
static void send_ready(server *s, waiter w)
{
    sconn *c = waiter_conn(s, w);
    if (!c) return;
    int T = c->trainer;
    if (s->resume_step < 0) {
        reply(s, w, PD_MSG_READY, 0, 0, NULL, 0);
        return;
    }
    uint64_t step = (uint64_t)s->resume_step;
    reply(s, w, PD_MSG_READY, s->pos_pass[T], s->pos_batch[T], &step, sizeof step);
}

/* Trainer T, started before, asks to start again: a new process (its old
 * one died, and something restarted it on its own). While no trainer sent
 * anything that changes the job (in this pserver's life: a resumed one
 * gives the same start again) it may; once the job moved on there is no
 * place for it: its data position and its part of the steps in flight
 * went with the old process, and taking it back at the start would mix
 * passes on the pservers (and hang the job). Ends this pserver, naming why,
 * so that the whole job restarts, as `paddle run` restarts it. Returns 1
 * when refused. */
static int rejoin_refused(server *s, int slot, int T)
{
    if (s->moved == 0) return 0;
    snprintf(s->fatal_why, sizeof s->fatal_why,
             "trainer %d started again (restarted on its own?) while the job is in pass %d, %ld updates in: a "
             "running job cannot take back a trainer that restarted alone; pserver %d ends so that the whole job "
             "restarts (from its last checkpoint with settings.checkpoint_dir and --resume)",
             T, s->pass, s->updates, s->o->id);
    send_error(s, slot, PD_ECONN, s->fatal_why);
    s->fatal = PD_ECONN;
    s->fatal_slot = slot;
    return 1;
}

static void mark_ready(server *s)
{
    s->ready = 1;
    for (int i = 0; i < s->nready_wait; i++) send_ready(s, s->ready_wait[i]);
    s->nready_wait = 0;
}

/* PASS_END: the trainer stops counting towards this pass's barriers; b:
 * the batches it did in the pass. PASS_DONE (b: every trainer's batches so
 * far, the same on every pserver) once all ended it. */
static int on_pass_end(server *s, waiter me, int T, pd_frame *f)
{
    if (f->len) return pd_err_set(PD_EPROTO, "PASS_END with a payload");
    if (f->a > MAX_PASS) return pd_err_set(PD_EPROTO, "PASS_END of pass %u: passes go up to %d", f->a, MAX_PASS);
    if (s->pass_ended[T]) return pd_err_set(PD_EPROTO, "trainer %d ended pass %u twice", T, f->a);
    if (f->a != (uint32_t)s->pass)
        return pd_err_set(PD_EPROTO, "trainer %d ended pass %u while the job is in pass %d", T, f->a, s->pass);
    if (s->save_got[T]) return pd_err_set(PD_EPROTO, "trainer %d ended its pass inside a checkpoint", T);
    s->pass_ended[T] = 1;
    s->pass_wait[T] = me;
    s->active[T] = 0;
    s->ended_batch[T] = f->b;
    s->batches_total += f->b;
    s->npass_ended++;
    /* a checkpoint whose SAVEs came here before this trainer ended its
     * pass (a pserver the step did not need this trainer's push on: one
     * with no blocks or tables) waited for it: it counts no more */
    if (s->nsave > 0 && s->npass_ended < s->o->ntrainers) save_barrier(s);
    if (s->npass_ended == s->o->ntrainers) {
        double secs = pd_now() - s->pass_started;
        if (s->lay.ntables)
            PD_INFO("pass %u done by all %d trainers; sparse rows: %ld pulled, %ld pushed (%.0f rows/s)", f->a,
                    s->o->ntrainers, s->rows_pulled, s->rows_pushed,
                    secs > 0 ? (s->rows_pulled + s->rows_pushed) / secs : 0.0);
        else
            PD_INFO("pass %u done by all %d trainers", f->a, s->o->ntrainers);
        s->rows_pulled_total += s->rows_pulled; /* the passes before this one, for /metrics */
        s->rows_pushed_total += s->rows_pushed;
        for (int t = 0; t < s->lay.ntables; t++)
            if (s->tables[t].hs) pd_hshard_pass_end(s->tables[t].hs, (int)f->a);
        s->rows_pulled = s->rows_pushed = 0;
        s->pass_started = pd_now();
        s->pass = (int)f->a + 1;
        for (int t = 0; t < s->o->ntrainers; t++) {
            reply(s, s->pass_wait[t], PD_MSG_PASS_DONE, f->a, (uint32_t)s->batches_total, NULL, 0);
            s->pass_ended[t] = 0;
            s->active[t] = 1;
        }
        s->npass_ended = 0;
    } else if (s->sync) {
        recheck_barriers(s);
    }
    return 0;
}

/* DECIDE (early stopping; pserver 0 only): a = the pass every trainer just
 * ended, b = trainer 0's decision (1: stop after it; the others send 0).
 * DECIDED (b: stop) goes to each trainer once trainer 0 decided that pass:
 * only trainer 0 evaluates the test set, the others wait for its word. */
static int on_decide(server *s, waiter me, int T, pd_frame *f)
{
    if (f->len) return pd_err_set(PD_EPROTO, "DECIDE with a payload");
    if (f->b > 1) return pd_err_set(PD_EPROTO, "DECIDE %u (0 or 1 expected)", f->b);
    if (s->o->id != 0) return pd_err_set(PD_EPROTO, "DECIDE sent to pserver %d (pserver 0 decides)", s->o->id);
    if (s->decide_pass[T] >= 0) return pd_err_set(PD_EPROTO, "trainer %d sent DECIDE twice", T);
    if (f->a > INT32_MAX || (int)f->a < s->decided_pass)
        return pd_err_set(PD_EPROTO, "DECIDE for pass %u from trainer %d after pass %d was decided", f->a, T,
                          s->decided_pass);
    s->decide_pass[T] = (int32_t)f->a;
    s->decide_wait[T] = me;
    if (T == 0) {
        s->decided_pass = (int)f->a;
        s->decided_stop = (int)f->b;
        if (f->b) PD_INFO("early stopping: trainer 0 ends the job after pass %u", f->a);
    }
    for (int t = 0; t < s->o->ntrainers; t++) {
        if (s->decide_pass[t] < 0 || s->decide_pass[t] != s->decided_pass) continue;
        reply(s, s->decide_wait[t], PD_MSG_DECIDED, (uint32_t)s->decided_pass, (uint32_t)s->decided_stop, NULL, 0);
        s->decide_pass[t] = -1;
    }
    return 0;
}

/* SAVE: a = the checkpoint's step, payload: the sender's pass and batches
 * done (u32 each) at that step. The shard is written once every trainer
 * that counts towards the step said SAVE. */
static int on_save(server *s, waiter me, int T, pd_frame *f)
{
    if (f->len != 8) return pd_err_set(PD_EPROTO, "SAVE of %u bytes (8 expected)", f->len);
    if (!s->r->checkpoint_dir) return pd_err_set(PD_EINVAL, "SAVE, but this pserver has no settings.checkpoint_dir");
    if (s->save_got[T]) return pd_err_set(PD_EPROTO, "trainer %d sent SAVE twice", T);
    if (!s->active[T]) return pd_err_set(PD_EPROTO, "SAVE from trainer %d, which ended its pass", T);
    if (s->nsave > 0 && (long)f->a != s->save_step)
        return pd_err_set(PD_EPROTO, "SAVE for step %u from trainer %d while step %ld is being saved", f->a, T,
                          s->save_step);
    s->save_step = (long)f->a;
    s->save_got[T] = 1;
    s->save_wait[T] = me;
    s->pos_pass[T] = rd32(f->payload);
    s->pos_batch[T] = rd32(f->payload + 4);
    s->nsave++;
    save_barrier(s);
    return 0;
}

static int is_key_request(int type)
{
    return type == PD_MSG_PULL_KEYS || type == PD_MSG_PUSH_KEYS || type == PD_MSG_DUMP_KEYS;
}

/* The frames of growing tables (64-bit ids; the table in a). */
static int on_keys(server *s, waiter me, int T, pd_frame *f)
{
    stable *tb = f->a < (uint32_t)s->lay.ntables ? &s->tables[f->a] : NULL;
    if (!tb || !tb->hs) return pd_err_set(PD_EPROTO, "%s: table %u is not a growing table", pd_msg_name(f->type), f->a);
    int rc;
    size_t len;
    if (f->type == PD_MSG_PULL_KEYS) {
        float *rows;
        if ((rc = pd_hshard_pull(tb->hs, f, &rows, &len)) < 0) return rc;
        s->rows_pulled += f->b;
        reply(s, me, PD_MSG_KEY_ROWS, f->a, f->b, rows, len);
        free(rows);
        return 0;
    }
    if (f->type == PD_MSG_DUMP_KEYS) {
        uint8_t *out;
        uint32_t n;
        if (f->len) return pd_err_set(PD_EPROTO, "DUMP_KEYS with a payload");
        pd_hshard_dump(tb->hs, f->b, PD_MAX_FRAME / 4, &out, &len, &n);
        reply(s, me, PD_MSG_KEY_DUMP, f->a, n, out, len);
        free(out);
        return 0;
    }
    if (!s->ready) return pd_err_set(PD_EPROTO, "PUSH_KEYS before the parameters were initialised");
    if (tb->pushed[T]) return pd_err_set(PD_EPROTO, "trainer %d pushed table %u twice in one step", T, f->a);
    if ((rc = pd_hshard_push(tb->hs, f)) < 0) return rc;
    s->rows_pushed += f->b;
    tb->pushed[T] = 1;
    tb->wait[T] = me;
    tb->npushed++;
    if (!s->sync || complete(s, tb->pushed, tb->npushed)) apply_table(s, (int)f->a, NULL);
    return 0;
}

/* PUSH_ROWS: a table's rows of this trainer's step, summed with the other
 * trainers' (or, the step's only push, applied from the frame). */
static int on_push_rows(server *s, waiter me, int T, pd_frame *f)
{
    stable *tb;
    int rc;
    if (!s->ready) return pd_err_set(PD_EPROTO, "PUSH_ROWS before the parameters were initialised");
    if ((rc = check_rows(s, f, 1, &tb)) < 0) return rc;
    if (tb->pushed[T]) return pd_err_set(PD_EPROTO, "trainer %d pushed table %u twice in one step", T, f->a);
    const float *vals = (const float *)(f->payload + 4 * (size_t)f->b);
    if (!pd_all_finite(vals, (size_t)f->b * tb->dim))
        return pd_err_set(PD_EDATA, "trainer %d pushed a gradient with NaN or Inf for table '%s': refused", T,
                          s->lay.params[tb->param].name);
    s->rows_pushed += f->b;
    tb->pushed[T] = 1;
    tb->wait[T] = me;
    if (tb->npushed == 0 && (!s->sync || complete(s, tb->pushed, 1))) {
        /* the step's only push: applied from the frame, not summed first */
        tb->npushed = 1;
        apply_table(s, (int)f->a, f);
        return 0;
    }
    for (uint32_t i = 0; i < f->b; i++) {
        int32_t local = pd_row_local(&s->lay, (int32_t)rd32(f->payload + 4 * i));
        pd_backend_cpu.axpy((size_t)tb->dim, 1.f, vals + (size_t)i * tb->dim, tb->g + (size_t)local * tb->dim);
        if (!tb->mark[local]) {
            tb->mark[local] = 1;
            PD_GROW(&tb->touched, &tb->cap_touched, tb->ntouched + 1);
            tb->touched[tb->ntouched++] = local;
        }
    }
    tb->npushed++;
    if (!s->sync || complete(s, tb->pushed, tb->npushed)) apply_table(s, (int)f->a, NULL);
    return 0;
}

/* A trainer's gradient of one dense block: applied when every trainer of
 * the step pushed it (sync) or at once (async). */
static int on_push_block(server *s, waiter me, int T, pd_frame *f)
{
    sblock *b;
    int rc;
    if (!s->ready) return pd_err_set(PD_EPROTO, "PUSH_BLOCK before the parameters were initialised");
    if ((rc = check_block(s, f, &b)) < 0) return rc;
    if (b->pushed[T]) return pd_err_set(PD_EPROTO, "trainer %d pushed block %d twice in one step", T, b->k);
    /* read where it lies in the trainer's ring, where the trainer can
     * still write: copied once, into b->g (the step's first) or the
     * scratch (the others'), and checked in that copy */
    const float *g = (const float *)f->payload;
    int finite;
    if (waiter_conn(s, me)->c.ring_held) {
        float *to = b->npushed == 0 ? b->g : s->gscratch;
        finite = pd_copy_finite(to, f->payload, (size_t)b->len);
        g = to;
    } else {
        finite = pd_all_finite(g, (size_t)b->len);
    }
    if (!finite)
        return pd_err_set(PD_EDATA, "trainer %d pushed a gradient with NaN or Inf for block %d: refused", T, b->k);
    b->pushed[T] = 1;
    b->wait[T] = me;
    if (b->npushed == 0 && (!s->sync || complete(s, b->pushed, 1))) {
        /* the only gradient of this update: applied from the frame (or
         * its copy) */
        b->npushed = 1;
        apply_block(s, b, g);
        return 0;
    }
    /* the first gradient of a step is copied, the others added */
    if (b->npushed > 0) pd_backend_cpu.axpy((size_t)b->len, 1.f, g, b->g);
    else if (g != b->g) memcpy(b->g, g, (size_t)b->len * sizeof(float));
    b->npushed++;
    if (complete(s, b->pushed, b->npushed)) apply_block(s, b, b->g);
    return 0;
}

/* A trainer of this host offers shared memory: taken, or refused with
 * the reason (its frames then stay on the socket). */
static int on_ring(server *s, waiter me, int T, pd_frame *f)
{
    sconn *c = waiter_conn(s, me);
    if (f->len) return pd_err_set(PD_EPROTO, "RING with a payload");
    int rc = !c->local    ? pd_err_set(PD_EPROTO, "not over a Unix socket")
             : c->offered ? pd_err_set(PD_EPROTO, "shared memory offered twice on one connection")
                          : pd_conn_take_rings(&c->c, f->a);
    c->offered = 1;
    if (c->c.held_fd) { /* one that came with no offer of its own */
        close(c->c.held_fd - 1);
        c->c.held_fd = 0;
    }
    c->c.take_fd = 0;
    if (rc == 0) {
        reply(s, me, PD_MSG_RING_OK, 1, 0, NULL, 0);
        return 0;
    }
    char why[256];
    snprintf(why, sizeof why, "%s", pd_err_msg());
    PD_WARN("trainer %d (%s): shared memory refused: %s", T, c->peer, why);
    reply(s, me, PD_MSG_RING_OK, 0, 0, why, strlen(why));
    return 0;
}

static int on_frame(server *s, int slot, pd_frame *f)
{
    sconn *c = &s->conns[slot];
    if (c->state != ST_READY) return on_handshake(s, slot, f);
    waiter me = {slot, c->gen};
    int T = c->trainer;
    s->last_heard[T] = pd_now();
    if (is_key_request(f->type)) return on_keys(s, me, T, f); /* growing tables */
    sblock *b;
    stable *tb;
    int rc;
    switch (f->type) {
    case PD_MSG_INIT_BLOCK:
        if ((rc = check_block(s, f, &b)) < 0) return rc;
        if (!s->ready) memcpy(b->w, f->payload, f->len);
        return 0;
    case PD_MSG_INIT_ROWS:
        if ((rc = check_rows(s, f, 1, &tb)) < 0) return rc;
        if (!s->ready) {
            const float *vals = (const float *)(f->payload + 4 * (size_t)f->b);
            for (uint32_t i = 0; i < f->b; i++)
                memcpy(tb->w + (size_t)pd_row_local(&s->lay, (int32_t)rd32(f->payload + 4 * i)) * tb->dim,
                       vals + (size_t)i * tb->dim, (size_t)tb->dim * sizeof(float));
        }
        return 0;
    case PD_MSG_INIT_DONE:
        if (f->len) return pd_err_set(PD_EPROTO, "INIT_DONE with a payload");
        /* trainer 0 sends INIT_DONE on each of its connections, after that
         * connection's INIT frames: ready once all of them arrived */
        if (f->a == 1 && T == 0 && !s->ready && !s->init_port[c->port_index]) {
            s->init_port[c->port_index] = 1; /* a port counts once, however often it says so */
            if (++s->init_done == s->nlisten) {
                PD_INFO("parameters initialised by trainer 0");
                mark_ready(s);
                s->pass_started = pd_now();
            }
        }
        if (s->finished[T]) return pd_err_set(PD_EPROTO, "trainer %d finished already: nothing is left for it", T);
        /* a trainer asks once on each port: a second ask is a new process */
        uint8_t *asked = &s->asked[(size_t)T * MAX_LISTEN + (size_t)c->port_index];
        if (*asked && rejoin_refused(s, slot, T)) return 0;
        *asked = 1;
        if (s->ready) {
            send_ready(s, me);
        } else {
            PD_GROW(&s->ready_wait, &s->cap_ready_wait, s->nready_wait + 1);
            s->ready_wait[s->nready_wait++] = me;
        }
        return 0;
    case PD_MSG_PULL_BLOCK:
        if (f->len) return pd_err_set(PD_EPROTO, "PULL_BLOCK with a payload");
        if ((rc = check_block(s, f, &b)) < 0) return rc;
        reply(s, me, PD_MSG_BLOCK_VALUES, (uint32_t)b->k, (uint32_t)b->t, b->w, (size_t)b->len * sizeof(float));
        return 0;
    case PD_MSG_PUSH_BLOCK:
        return on_push_block(s, me, T, f);
    case PD_MSG_PUSH_ROWS:
        return on_push_rows(s, me, T, f);
    case PD_MSG_PULL_ROWS: {
        if ((rc = check_rows(s, f, 0, &tb)) < 0) return rc;
        size_t n = (size_t)f->b * tb->dim;
        if (n * sizeof(float) > PD_MAX_FRAME)
            return pd_err_set(PD_ERANGE, "PULL_ROWS of %u rows: the reply (%zu bytes) would be over the %u frame limit",
                              f->b, n * sizeof(float), PD_MAX_FRAME);
        if (s->sync && tb->pushed[T]) {
            /* behind this trainer's push of the table, before the step's
             * barrier: the rows it wants are those after the step */
            /* a trainer asks at most a frame of rows per connection and
             * round: the cap on one connection's unsent replies, times
             * its sparse connections */
            size_t cap = s->max_out * (size_t)PD_MAX(s->lay.ports_sparse, 1);
            if (s->held_bytes[T] + held_charge(n) > cap)
                return pd_err_set(PD_ERANGE, "trainer %d: pulls held for the step's barrier would need over %zu bytes",
                                  T, cap);
            PD_GROW(&tb->held, &tb->cap_held, tb->nheld + 1);
            held_pull *h = &tb->held[tb->nheld++];
            *h = (held_pull){me, T, f->b, pd_xmalloc((size_t)f->b * 4 + 1)};
            memcpy(h->ids, f->payload, (size_t)f->b * 4);
            s->held_bytes[T] += held_charge(n);
            return 0;
        }
        return answer_rows(s, me, (int)f->a, f->payload, f->b);
    }
    case PD_MSG_PASS_END:
        return on_pass_end(s, me, T, f);
    case PD_MSG_SAVE:
        return on_save(s, me, T, f);
    case PD_MSG_COMMIT:
        return on_commit(s, me, T, f);
    case PD_MSG_DECIDE:
        return on_decide(s, me, T, f);
    case PD_MSG_HEARTBEAT:
        return f->len ? pd_err_set(PD_EPROTO, "HEARTBEAT with a payload") : 0;
    case PD_MSG_RING:
        return on_ring(s, me, T, f);
    case PD_MSG_FINISH:
        if (f->len) return pd_err_set(PD_EPROTO, "FINISH with a payload");
        if (!s->finished[T]) {
            s->finished[T] = 1;
            s->nfinished++;
            PD_INFO("trainer %d finished (%d of %d)", T, s->nfinished, s->o->ntrainers);
        }
        /* the trainer closes its connections once it heard this: what it
         * sent is read by then (a close with unread input could reset the
         * connection before FINISH was read) */
        reply(s, me, PD_MSG_FINISH, 0, 0, NULL, 0);
        return 0;
    }
    return pd_err_set(PD_EPROTO, "unexpected %s frame", pd_msg_name(f->type));
}

/* --- sockets ------------------------------------------------------------------------ */

static int listen_on(const char *addr, int port, int *fd_out)
{
    int fd = pd_tcp_listen(addr, port, LISTEN_BACKLOG);
    if (fd < 0) return fd;
    *fd_out = fd;
    return 0;
}

static int open_ports(server *s, int *base)
{
    int n = s->nlisten;
    if (s->o->port > 0) {
        for (int i = 0; i < n; i++)
            if (listen_on(s->o->bind_addr, s->o->port + i, &s->listen_fd[i]) < 0) {
                for (int j = 0; j < i; j++) {
                    close(s->listen_fd[j]);
                    s->listen_fd[j] = -1;
                }
                /* a pserver list of consecutive ports on one host gives each too few */
                if (i > 0)
                    pd_err_wrap(PD_EIO, "a pserver listens on %d consecutive ports, %d-%d here (ports_num + "
                                "ports_num_for_sparse): space the pservers of one host %d ports apart", n,
                                s->o->port, s->o->port + n - 1, n);
                else if (strstr(pd_err_msg(), "in use"))
                    pd_err_wrap(PD_EIO, "another process holds port %d (an earlier pserver not ended yet?)",
                                s->o->port);
                return PD_EIO;
            }
        *base = s->o->port;
        return 0;
    }
    uint64_t rng = (uint64_t)getpid() * 2654435761u ^ (uint64_t)(pd_now() * 1e6);
    for (int tries = 0; tries < 200; tries++) {
        int p = 20000 + (int)(pd_rng_next(&rng) % 40000);
        int i;
        for (i = 0; i < n; i++)
            if (listen_on(s->o->bind_addr, p + i, &s->listen_fd[i]) < 0) break;
        if (i == n) {
            *base = p;
            return 0;
        }
        for (int j = 0; j < i; j++) {
            close(s->listen_fd[j]);
            s->listen_fd[j] = -1;
        }
    }
    return pd_err_set(PD_EIO, "found no %d free consecutive ports", n);
}

/* The Unix sockets beside the TCP ports, for roles on this host; without
 * them (the job says so, or one cannot be had) those connect over TCP. */
static void open_unix(server *s, int base)
{
    if (!s->lay.unix_sockets) return;
    for (int i = 0; i < s->nlisten; i++) {
        struct sockaddr_in sa;
        socklen_t len = sizeof sa;
        if (getsockname(s->listen_fd[i], (struct sockaddr *)&sa, &len) < 0) continue;
        int fd = pd_unix_listen(s->o->job, s->o->id, sa.sin_addr.s_addr, base + i, LISTEN_BACKLOG);
        if (fd < 0) {
            PD_WARN("no Unix socket for port %d (%s): roles on this host connect over TCP", base + i,
                    strerror(errno));
            continue;
        }
        s->listen_fd[MAX_LISTEN + i] = fd;
    }
}

/* Say where the pserver listens: in its log, and to the launcher that
 * waits for the first port on ready_fd. */
static void announce(server *s, int base)
{
    const pd_server_opts *o = s->o;
    char range[64] = "";
    if (s->nlisten > 1) snprintf(range, sizeof range, " (ports %d-%d)", base, base + s->nlisten - 1);
    PD_INFO("Server listening on %s:%d%s%s", o->bind_addr ? o->bind_addr : "0.0.0.0", base, range,
            s->listen_fd[MAX_LISTEN] >= 0 ? ", and on Unix sockets for roles on this host" : "");
    if (o->ready_fd >= 0) {
        char line[32];
        int n = snprintf(line, sizeof line, "%d\n", base);
        if (write(o->ready_fd, line, (size_t)n) != n) PD_WARN("cannot report the port to the launcher");
        close(o->ready_fd);
    }
}

/* Listeners in (on) or out of epoll: out for a moment when no descriptor is
 * left, so that a readable listener cannot spin the loop. */
static void listeners_watch(server *s, int on)
{
    for (int i = 0; i < 2 * MAX_LISTEN; i++) {
        if (s->listen_fd[i] < 0) continue;
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)i};
        epoll_ctl(s->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->listen_fd[i], &ev);
    }
}

/* accept failed with EMFILE or ENFILE: the connection stays queued and the
 * listener readable. Take it with the reserve descriptor and close it; if
 * that fails too, rest the listeners for ACCEPT_PAUSE_S. 0: go on accepting. */
static int out_of_fds(server *s, int li, int err)
{
    if (!s->fds_short) {
        PD_WARN("out of file descriptors (%s): refusing new connections until some close", strerror(err));
        s->fds_short = 1;
    }
    if (s->reserve_fd >= 0) {
        close(s->reserve_fd);
        int fd = accept4(s->listen_fd[li], NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) close(fd);
        s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && s->reserve_fd >= 0) return 0;
    }
    listeners_watch(s, 0);
    s->accept_paused_until = pd_now() + ACCEPT_PAUSE_S;
    return -1;
}

/* A free slot, or -1 (logged) when the connection must be refused. */
static int free_slot(server *s)
{
    if (s->nunauth >= PD_MAX_UNAUTH) {
        if (!s->unauth_full)
            PD_WARN("refusing connections: %d have not finished the handshake (logged once until one is taken)",
                    s->nunauth);
        s->unauth_full = 1;
        return -1;
    }
    s->unauth_full = 0;
    for (int i = 0; i < MAX_CONNS; i++)
        if (!s->conns[i].used) return i;
    PD_WARN("refusing a connection: %d connections already", MAX_CONNS);
    return -1;
}

/* Who is at the other end of accepted fd, for messages: an address and
 * port, or the process on this host. */
static void name_peer(int fd, const struct sockaddr_storage *sa, char *out, size_t n)
{
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
        snprintf(out, n, "%s:%d", ip, ntohs(in->sin_port));
        return;
    }
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
        snprintf(out, n, "process %d of this host (Unix socket)", (int)cr.pid);
    else
        snprintf(out, n, "a process of this host (Unix socket)");
}

/* A gradient block that comes through a ring is read where it lies there
 * (on_push_block copies it once, checking it as it goes). */
static void *place_in_ring(void *ctx, const pd_frame *h)
{
    (void)ctx;
    return h->type == PD_MSG_PUSH_BLOCK ? PD_PLACE_IN_RING : NULL;
}

static void accept_all(server *s, int li)
{
    for (int n = 0; n < ACCEPTS_PER_WAKE; n++) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int fd = accept4(s->listen_fd[li], (struct sockaddr *)&sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if ((errno == EMFILE || errno == ENFILE) && out_of_fds(s, li, errno) == 0) continue;
            return;
        }
        s->fds_short = 0;
        int slot = free_slot(s);
        if (slot < 0) {
            close(fd);
            continue;
        }
        int one = 1;
        if (li < MAX_LISTEN) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pd_tcp_buffers(fd);
        sconn *c = &s->conns[slot];
        unsigned gen = c->gen;
        memset(c, 0, sizeof *c);
        c->gen = gen;
        c->used = 1;
        c->since = pd_now();
        s->nunauth++;
        pd_conn_init(&c->c, fd, PD_MAX_HANDSHAKE);
        c->c.place = place_in_ring;
        c->port_index = li % MAX_LISTEN;
        c->local = li >= MAX_LISTEN;
        c->kind = c->port_index >= s->lay.ports_num;
        name_peer(fd, &sa, c->peer, sizeof c->peer);
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)slot + CONN_ID_BASE};
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev);
    }
}

/* Drop the connections whose handshake is over its deadline; bring the
 * listeners back after a pause. */
static void check_deadlines(server *s)
{
    double now = pd_now();
    if (s->accept_paused_until > 0 && now >= s->accept_paused_until) {
        s->accept_paused_until = 0;
        listeners_watch(s, 1);
    }
    for (int i = 0; i < MAX_CONNS && s->nunauth > 0; i++) {
        sconn *c = &s->conns[i];
        if (c->used && c->state != ST_READY && now - c->since > s->handshake_timeout) {
            char why[96];
            snprintf(why, sizeof why, "no handshake within %.1f s", s->handshake_timeout);
            drop(s, i, why);
        }
    }
}

/* Another ready connection of trainer t than slot's is open. */
static int trainer_still_here(const server *s, int t, int slot)
{
    for (int i = 0; i < MAX_CONNS; i++)
        if (i != slot && s->conns[i].used && s->conns[i].state == ST_READY && s->conns[i].trainer == t) return 1;
    return 0;
}

/* Frames that, taken, change the job (rejoin_refused) */
static int changes_job(int type)
{
    return type == PD_MSG_PUSH_BLOCK || type == PD_MSG_PUSH_ROWS || type == PD_MSG_PUSH_KEYS ||
           type == PD_MSG_PASS_END || type == PD_MSG_SAVE || type == PD_MSG_DECIDE;
}

static void on_readable(server *s, int slot)
{
    sconn *c = &s->conns[slot];
    int frames = 0;
    for (; frames < FRAMES_PER_WAKE && c->used; frames++) {
        pd_frame f;
        int eof = 0;
        int rc = pd_conn_read(&c->c, &f, &eof);
        if (rc < 0 || (rc == 0 && eof)) {
            /* the replies to the frames before go first (best effort) */
            char why[PD_MAX_HANDSHAKE];
            snprintf(why, sizeof why, "%s", rc < 0 ? pd_err_msg() : "");
            pd_conn_flush(&c->c);
            /* said once, when its last connection goes */
            if (rc == 0 && c->state == ST_READY && !s->finished[c->trainer] &&
                !trainer_still_here(s, c->trainer, slot))
                PD_WARN("trainer %d (%s) disconnected before it finished", c->trainer, c->peer);
            drop(s, slot, rc < 0 ? why : NULL);
            return;
        }
        if (rc == 0) break;
        if (s->forget_earlier && c->state == ST_READY && changes_job(f.type)) {
            /* the trainers agreed on a new job, and it moves: before the
             * change is applied, so that a pserver that dies applying it,
             * restarted with --resume as the trainers reported a batch,
             * finds no earlier job's marker here (they forgot theirs) */
            s->forget_earlier = 0;
            pd_ckpt_forget_earlier(s->r->checkpoint_dir);
        }
        int frc = on_frame(s, slot, &f);
        if (frc == 0 && changes_job(f.type)) s->moved++;
        if (frc < 0) {
            /* an authenticated peer is told why; an unauthenticated one
             * got its answer from the handshake, if any */
            char why[PD_MAX_HANDSHAKE];
            snprintf(why, sizeof why, "%s", pd_err_msg());
            if (c->used && c->state == ST_READY) send_error(s, slot, frc, why);
            drop(s, slot, why);
            return;
        }
    }
    if (!c->used) return;
    if (pd_conn_buffered(&c->c) && !c->again && frames == FRAMES_PER_WAKE) {
        /* frames read ahead wait in its buffer, not in the socket: epoll
         * would not report them (a full list: every connection is looked at) */
        c->again = 1;
        if (s->nagain < LIST_CAP) s->again[s->nagain++] = slot;
        else s->again_all = 1;
    }
    if (c->c.out_len > c->c.out_off) mark_dirty(s, slot);
}

/* Serve the connections whose read buffers held frames at the last turn. */
static void serve_again(server *s)
{
    int *slots = s->serving, n = 0;
    if (s->again_all) {
        for (int i = 0; i < MAX_CONNS; i++)
            if (s->conns[i].used && s->conns[i].again) slots[n++] = i;
        s->again_all = 0;
    } else {
        n = s->nagain;
        memcpy(slots, s->again, (size_t)n * sizeof *slots);
    }
    s->nagain = 0;
    for (int i = 0; i < n; i++) {
        sconn *c = &s->conns[slots[i]];
        if (!c->used || !c->again) continue;
        c->again = 0;
        on_readable(s, slots[i]);
    }
}

/* Is some trainer waiting on a barrier (a step, a pass end, a checkpoint)? */
static int barrier_pending(server *s)
{
    if (s->npass_ended > 0 || s->nsave > 0) return 1;
    for (int i = 0; s->sync && i < s->nblocks; i++)
        if (s->blocks[i].npushed > 0) return 1;
    for (int t = 0; s->sync && t < s->lay.ntables; t++)
        if (s->tables[t].npushed > 0) return 1;
    return 0;
}

/* Send HEARTBEAT to every trainer connection every third of the timeout
 * (at most every 5 s); a trainer silent for heartbeat_timeout while others
 * wait on a barrier it has not joined is dead or hung: an error naming it. */
static int heartbeats(server *s)
{
    double now = pd_now(), every = PD_MIN(s->hb_timeout / 3, 5.0);
    if (now - s->hb_sent >= every) {
        s->hb_sent = now;
        heartbeat_all(s, 0, 0);
    }
    /* the trainers stopped on pservers resumed from different checkpoints
     * (on_commit): once they all came and left, so does this pserver (a
     * trainer that never came: heartbeat_timeout later), so that each
     * trainer hears the reason from the pservers, not a closed connection */
    int here = 0;
    for (int t = 0; t < s->o->ntrainers && s->disagreed; t++) here |= s->seen[t] && trainer_still_here(s, t, -1);
    if (s->disagreed && !here && (s->nseen == s->o->ntrainers || now - s->disagreed_at > s->hb_timeout))
        return pd_err_set(PD_EDATA, "the pservers resumed from different checkpoints (the trainers' logs say which) "
                          "and the trainers stopped: pserver %d ends too; start every role again with --resume",
                          s->o->id);
    /* a trainer that started and left (every connection closed) before it
     * finished cannot come back (rejoin_refused): the job cannot finish */
    for (int t = 0; t < s->o->ntrainers; t++) {
        if (!s->seen[t] || s->finished[t] || now - s->last_heard[t] <= s->hb_timeout ||
            trainer_still_here(s, t, -1))
            continue;
        return pd_err_set(PD_ECONN,
                          "trainer %d left %.0f s ago before it finished (its connections closed) and did not come "
                          "back (heartbeat_timeout %.0f s): the job cannot finish without it",
                          t, now - s->last_heard[t], s->hb_timeout);
    }
    if (!s->ready || !barrier_pending(s)) return 0;
    for (int t = 0; t < s->o->ntrainers; t++) {
        if (!s->seen[t] || s->finished[t] || now - s->last_heard[t] <= s->hb_timeout) continue;
        return pd_err_set(PD_ETIMEDOUT,
                          "trainer %d sent nothing for %.0f s (heartbeat_timeout %.0f s) while other trainers "
                          "wait on it: dead or hung",
                          t, now - s->last_heard[t], s->hb_timeout);
    }
    return 0;
}

/* This pserver ends with error code: every trainer connected (but the one
 * at slot but) hears why, rather than only that the connection closed. */
static void tell_all(server *s, int code, const char *why, int but)
{
    for (int i = 0; i < MAX_CONNS; i++)
        if (s->conns[i].used && s->conns[i].state == ST_READY && i != but) send_error(s, i, code, why);
}

/* Can the job not go on (a trainer gone or hung, one started again)? Then
 * every trainer hears why, and the error is returned; else 0. */
static int job_over(server *s)
{
    int rc = heartbeats(s);
    if (rc < 0) {
        snprintf(s->fatal_why, sizeof s->fatal_why, "%s", pd_err_msg()); /* a failed send may set another */
        tell_all(s, rc, s->fatal_why, -1);
    } else if (s->fatal) {
        rc = s->fatal;
        tell_all(s, rc, s->fatal_why, s->fatal_slot); /* the one refused heard it already */
    } else {
        return 0;
    }
    return pd_err_set(rc, "%s", s->fatal_why);
}

/* The replies still queued go (best effort) before the end; a trainer
 * gone meanwhile does not replace the error this pserver ends with. */
static int last_flush(server *s, int rc)
{
    if (rc < 0) snprintf(s->fatal_why, sizeof s->fatal_why, "%s", pd_err_msg());
    flush_dirty(s);
    return rc < 0 ? pd_err_set(rc, "%s", s->fatal_why) : rc;
}

/* --- /metrics -------------------------------------------------------------------- */

static void metric(pd_buf *b, const char *name, const char *type, const char *help, double v)
{
    pd_prom_head(b, name, type, help);
    pd_prom_val(b, name, NULL, v);
}

/* The shard's tables: rows held and bytes (values and optimizer state). */
static void table_metrics(server *s, pd_buf *b)
{
    int k_state = pd_opt_state_floats(s->hyper.type);
    double dense = 0;
    for (int i = 0; i < s->nblocks; i++) dense += s->blocks[i].len;
    pd_prom_head(b, "paddle_pserver_parameter_bytes", "gauge",
                 "Bytes of parameters and optimizer state held, by kind (dense blocks, sparse tables).");
    double sparse = 0;
    for (int t = 0; t < s->lay.ntables; t++) sparse += (double)s->tables[t].rows * s->tables[t].dim;
    pd_prom_val(b, "paddle_pserver_parameter_bytes", "kind=\"dense\"", dense * 4 * (1 + k_state));
    pd_prom_val(b, "paddle_pserver_parameter_bytes", "kind=\"sparse\"", sparse * 4 * (1 + k_state));
    if (!s->lay.ntables) return;
    pd_prom_head(b, "paddle_pserver_table_rows", "gauge", "Rows of each sparse table held by this pserver.");
    for (int t = 0; t < s->lay.ntables; t++) {
        char name[128], label[160];
        pd_prom_escape(name, sizeof name, s->lay.params[s->tables[t].param].name);
        snprintf(label, sizeof label, "table=\"%s\"", name);
        pd_prom_val(b, "paddle_pserver_table_rows", label, s->tables[t].rows);
    }
}

/* GET /metrics: this pserver's counters in the Prometheus text format. */
static void write_metrics(void *ctx, pd_buf *b)
{
    server *s = ctx;
    uint64_t in = s->bytes_in_gone, out = s->bytes_out_gone;
    int conns = 0, connected = 0;
    uint8_t *on = pd_xcalloc((size_t)s->o->ntrainers, 1);
    long step = 0;
    for (int i = 0; i < MAX_CONNS; i++) {
        sconn *c = &s->conns[i];
        if (!c->used) continue;
        in += c->c.bytes_in;
        out += c->c.bytes_out;
        conns++;
        if (c->state == ST_READY && !on[c->trainer]) connected += on[c->trainer] = 1;
    }
    free(on);
    for (int i = 0; i < s->nblocks; i++) step = PD_MAX(step, s->blocks[i].t);
    for (int t = 0; t < s->lay.ntables; t++) step = PD_MAX(step, s->tables[t].t);
    pd_prom_head(b, "paddle_pserver_info", "gauge", "This pserver: its id, the job's pservers and trainers, the mode.");
    pd_buf_printf(b, "paddle_pserver_info{pserver=\"%d\",pservers=\"%d\",trainers=\"%d\",mode=\"%s\"} 1\n",
                  s->o->id, s->o->npservers, s->o->ntrainers, s->sync ? "sync" : "async");
    metric(b, "paddle_pserver_step", "gauge",
           "Highest optimizer step of the blocks and tables held (sync: the job's step).", (double)step);
    metric(b, "paddle_pserver_updates_total", "counter", "Optimizer updates applied to blocks and tables.",
           (double)s->updates);
    metric(b, "paddle_pserver_pass", "gauge", "The pass the trainers are in.", s->pass);
    metric(b, "paddle_pserver_batches", "gauge", "Batches of every trainer in the passes done.",
           (double)s->batches_total);
    metric(b, "paddle_pserver_received_bytes_total", "counter", "Bytes received from trainers.", (double)in);
    metric(b, "paddle_pserver_sent_bytes_total", "counter", "Bytes sent to trainers.", (double)out);
    metric(b, "paddle_pserver_rows_pulled_total", "counter", "Sparse rows sent to trainers.",
           (double)(s->rows_pulled_total + s->rows_pulled));
    metric(b, "paddle_pserver_rows_pushed_total", "counter", "Sparse row gradients received.",
           (double)(s->rows_pushed_total + s->rows_pushed));
    metric(b, "paddle_pserver_trainers_connected", "gauge", "Trainers with an authenticated connection.", connected);
    metric(b, "paddle_pserver_trainers_finished", "gauge", "Trainers that said they finished.", s->nfinished);
    metric(b, "paddle_pserver_connections", "gauge", "Open connections (authenticated or not).", conns);
    if (s->ckpt_step >= 0) {
        metric(b, "paddle_pserver_checkpoint_step", "gauge", "Step of the last checkpoint written or resumed from.",
               (double)s->ckpt_step);
        metric(b, "paddle_pserver_checkpoint_age_seconds", "gauge", "Seconds since that checkpoint was written.",
               PD_MAX(0.0, pd_wall() - s->ckpt_time));
    }
    table_metrics(s, b);
    metric(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", pd_prom_rss());
    metric(b, "process_start_time_seconds", "gauge", "Start time of the process since the epoch in seconds.",
           pd_wall() - (pd_now() - s->started));
}

/* Serve /metrics on the pserver's address when asked (o->metrics_port). */
static int open_metrics(server *s)
{
    if (s->o->metrics_port <= 0) return 0;
    int rc = pd_http_open(&s->http, s->o->bind_addr, s->o->metrics_port, write_metrics, s);
    if (rc < 0) return rc;
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = HTTP_ID};
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, pd_http_fd(&s->http), &ev);
    PD_INFO("metrics on http://%s:%d/metrics", s->o->bind_addr ? s->o->bind_addr : "0.0.0.0", s->o->metrics_port);
    return 0;
}

int pd_server_run(const pd_recipe *r, const pd_server_opts *o)
{
    server s_, *s = &s_;
    int rc;
    memset(s, 0, sizeof *s);
    s->r = r;
    s->o = o;
    s->epfd = -1;
    s->http.listen_fd = s->http.epfd = -1;
    s->ckpt_step = -1;
    for (int i = 0; i < 2 * MAX_LISTEN; i++) s->listen_fd[i] = -1;
    s->handshake_timeout = o->handshake_timeout > 0 ? o->handshake_timeout : PD_HANDSHAKE_TIMEOUT_S;
    s->reserve_fd = -1; /* opened once the ports are */
    s->sync = !r->mode || strcmp(r->mode, "async") != 0;
    if (o->ntrainers < 1 || o->npservers < 1 || o->id < 0 || o->id >= o->npservers)
        return pd_err_set(PD_EINVAL, "pserver %d of %d with %d trainers: bad numbers", o->id, o->npservers,
                          o->ntrainers);
    if (r->checkpoint_dir && (rc = pd_ckpt_dir_ready(r->checkpoint_dir)) < 0) return rc;
    if ((rc = pd_layout_make(&s->lay, r, o->npservers)) < 0) return rc;
    pd_opt_hyper_from(&s->hyper, &r->optimizer, 0);
    make_state(s);
    s->resume_step = -1;
    s->withdrawn = -1;
    s->hb_timeout = r->heartbeat_timeout > 0 ? r->heartbeat_timeout : PD_HEARTBEAT_TIMEOUT_S;
    if (o->init_shard) {
        if ((rc = load_shard(s, o->init_shard, -1)) < 0) goto out;
        s->ready = 1;
        /* the parameters only: the trainers start at their beginning */
        s->resume_step = -1;
        s->pass = 0;
        memset(s->pos_pass, 0, (size_t)o->ntrainers * sizeof *s->pos_pass);
        memset(s->pos_batch, 0, (size_t)o->ntrainers * sizeof *s->pos_batch);
        PD_INFO("started from the shard saved in %s", o->init_shard);
    } else if (o->resume && (rc = resume(s)) != 0) {
        if (rc < 0) goto out;
        rc = 0;
        s->ready = 1;
    }
    /* a new job: the earlier one's markers go as this one first moves */
    s->forget_earlier = !o->resume && r->checkpoint_dir;
    s->conns = pd_xcalloc(MAX_CONNS, sizeof *s->conns);
    s->dirty = pd_xmalloc(LIST_CAP * sizeof *s->dirty);
    s->again = pd_xmalloc(LIST_CAP * sizeof *s->again);
    s->serving = pd_xmalloc(LIST_CAP * sizeof *s->serving);
    s->nlisten = s->lay.ports_num + s->lay.ports_sparse;
    if (s->nlisten > MAX_LISTEN) {
        rc = pd_err_set(PD_EINVAL, "%d ports: a pserver listens on at most %d", s->nlisten, MAX_LISTEN);
        goto out;
    }
    int base = 0;
    if ((rc = open_ports(s, &base)) < 0) goto out;
    open_unix(s, base);
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    listeners_watch(s, 1);
    s->started = pd_now();
    if ((rc = open_metrics(s)) < 0) goto out;
    long dense = 0;
    for (int i = 0; i < s->nblocks; i++) dense += s->blocks[i].len;
    /* a step's replies to one trainer are its whole dense shard: that much
     * is legitimate on top of the cap */
    s->max_out = PD_MAX_QUEUED_OUT + (size_t)dense * sizeof(float) + (size_t)s->nblocks * PD_HEADER_SIZE;
    PD_INFO("pserver %d of %d: %d dense blocks (%ld floats), %d sparse tables, %s mode, %d trainers", o->id,
            o->npservers, s->nblocks, dense, s->lay.ntables, s->sync ? "sync" : "async", o->ntrainers);
    announce(s, base);
    s->started = pd_now();
    struct epoll_event evs[MAX_EVENTS];
    while (!(o->stop && *o->stop)) {
        if (s->nfinished == o->ntrainers) {
            PD_INFO("every trainer finished; pserver %d exits", o->id);
            break;
        }
        if (o->idle_timeout > 0 && s->nseen == 0 && pd_now() - s->started > o->idle_timeout) {
            rc = pd_err_set(PD_ETIMEDOUT, "no trainer connected within %.0f s", o->idle_timeout);
            break;
        }
        check_deadlines(s);
        if ((rc = job_over(s)) < 0) break;
        flush_dirty(s);
        int n = epoll_wait(s->epfd, evs, MAX_EVENTS, s->nagain ? 0 : TICK_MS);
        if (n < 0 && errno != EINTR) {
            rc = pd_err_set(PD_EIO, "epoll_wait: %s", strerror(errno));
            break;
        }
        serve_again(s);
        for (int i = 0; i < n; i++) {
            uint64_t id = evs[i].data.u64;
            if (id == HTTP_ID) continue; /* served below */
            if (id < CONN_ID_BASE) {
                accept_all(s, (int)id);
                continue;
            }
            int slot = (int)(id - CONN_ID_BASE);
            if (!s->conns[slot].used) continue;
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(s, slot);
            if (s->conns[slot].used && (evs[i].events & EPOLLOUT)) {
                if (pd_conn_flush(&s->conns[slot].c) < 0) drop(s, slot, pd_err_msg());
                else update_events(s, slot);
            }
        }
        pd_http_serve(&s->http);
    }
    if (o->stop && *o->stop) PD_INFO("pserver %d stopping on a signal", o->id);
    rc = last_flush(s, rc);
    pd_ckpt_wait_removals(); /* old checkpoints a COMMIT retired */
out:
    for (int i = 0; s->conns && i < MAX_CONNS; i++)
        if (s->conns[i].used) pd_conn_free(&s->conns[i].c);
    free(s->conns);
    free(s->dirty);
    free(s->again);
    free(s->serving);
    for (int i = 0; i < 2 * MAX_LISTEN; i++)
        if (s->listen_fd[i] >= 0) close(s->listen_fd[i]);
    if (s->epfd >= 0) close(s->epfd);
    if (s->reserve_fd >= 0) close(s->reserve_fd);
    pd_http_close(&s->http);
    free_state(s);
    pd_layout_free(&s->lay);
    return rc;
}
