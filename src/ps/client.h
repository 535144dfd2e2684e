/*
 * client.h - a trainer's connections to the pservers.
 *
 *     pd_client c;
 *     pd_client_connect(&c, &layout, endpoints, np, trainer_id, secret, job, timeout, &stop_flag);
 *     pd_client_init(&c, &net);             // trainer 0 seeds the pservers; all pull
 *     for each batch:
 *         pd_net_bind(&net, batch);
 *         pd_client_pull_rows(&c, &net);    // the embedding rows this batch uses
 *         pd_net_forward(&net); pd_net_backward(&net);
 *         pd_client_step(&c, &net);         // push gradients, get new values
 *                                           // (async: pd_client_post_step, no wait)
 *     pd_client_pass_end(&c, pass);
 *     pd_client_finish(&c);
 */
#ifndef PD_CLIENT_H
#define PD_CLIENT_H

#include "layout.h"
#include "proto.h"
#include "../nn/net.h"

struct pollfd;

typedef struct pd_endpoint {
    char host[256];
    int port;
} pd_endpoint;

typedef struct pd_client {
    const pd_layout *lay;
    int trainer;
    int np, nper;
    pd_conn *conns;         /* np * nper: dense connections, then sparse ones */
    double timeout;
    int *net_param;         /* layout param -> net param index */
    int *layout_param;      /* net param -> layout param index, or -1 */
    uint8_t **seen;         /* per table: row marks for unique ids */
    int32_t *ids;           /* scratch */
    size_t cap_ids;
    float *host;            /* scratch for device backends */
    size_t cap_host;
    /* kept from one batch to the next (allocations cost page faults and
     * system calls at every step): exchange's poll set, and pull_rows'
     * requests, per pserver * table */
    struct pollfd *pfd;
    int32_t **asked;
    size_t *asked_cap;
    int *nasked, *nsent, *ndone;
    size_t *budget;         /* per connection */
    uint64_t bytes_out, bytes_in;
    const pd_endpoint *eps; /* the caller's, for messages */
    double hb_timeout;      /* a pserver silent this long while waited on is dead */
    double hb_sent;         /* last HEARTBEAT sent */
    double *heard;          /* per pserver: its last frame (pd_now) */
    double *saving;         /* per pserver: since when it writes its checkpoint
                             * shard (PD_HB_SAVING; 0: it does not) */
    double saving_said;     /* when that wait was last said */
    long step;              /* the pservers' step count after the last step (sync: the global step) */
    int inflight;           /* replies of the step pd_client_post_step sent, not read yet */
    pd_net *posted;         /* the net they update */
    pd_net *deferred;       /* a step held back to go with the next batch's pull (pd_client_defer_step, pd_client_hold_step) */
    int deferred_first;     /* sync (pd_client_hold_step): it goes in front of the pull, not behind it */
    /* sync, pd_client_values_in_forward: the held step's dense values are
     * read as the next forward reaches their layers */
    int values_in_forward;
    uint8_t *arrived;       /* per block: the posted step's values are in */
    int rows_pending;       /* replies of the pull's rows not read yet */
    pd_net *rows_net;       /* the net they go to */
    uint8_t *table_in;      /* per table: its rows are in */
    int one_conn;           /* sparse_conn gives each pserver's first connection */
    const uint8_t *until;   /* exchange returns once *until is set (NULL: when nothing is pending) */
    /* async, pd_client_prefetch_rows: the next batch's rows are asked for */
    int prefetch_on;        /* pd_client_prefetch_from */
    int prefetched;         /* asked (pull_rows' requests) holds them */
    int prefetch;           /* replies of their first round not read yet */
    pd_net *prefetch_net;   /* the net they go to */
    pd_net *recv_net;       /* the net the exchange under way stores values in */
    pd_net *feeding;        /* the net whose dense gradients are being queued, or NULL */
    uint8_t *fed;           /* per block: queued in this step */
    int feed_first;         /* blocks before it are all queued */
    /* sync, pd_client_send_early: what the backward sent already */
    uint8_t *ready;         /* per block: its gradient is final (may be fed) */
    uint8_t *early;         /* per table: its rows are pushed */
    int early_started;      /* a backward has sent some of the step */
    uint8_t *early_to;      /* per pserver: sent to during the backward */
    long resume_step;       /* after init: the checkpoint the pservers resumed from, or -1 */
    const char *ckpt_dir;   /* settings.checkpoint_dir (set before init), or NULL */
    int resume_pass, resume_batch; /* and this trainer's position in it */
    int finished;           /* pd_client_finish was called: no more exchanges */
} pd_client;

/* Parse "host:port,host:port" (or "host" with default_port). A host of
 * digits alone ("1", "2:7164") is refused: a count of pservers, not the
 * address 0.0.0.1. */
int pd_endpoints_parse(const char *spec, int default_port, pd_endpoint **eps, int *n);

/* Connect to every pserver, retrying those not up yet until timeout seconds
 * have passed or *stop is set (a signal; stop may be NULL). */
int pd_client_connect(pd_client *c, const pd_layout *lay, const pd_endpoint *eps, int np, int trainer,
                      const uint8_t *secret, const uint8_t *job, double timeout, volatile int *stop);
/* How many of the pservers this client reaches over their Unix sockets
 * (those of its own host, docs/protocol.md). */
int pd_client_unix_count(const pd_client *c);
/* How many of them it shares memory with (ring.h). */
int pd_client_ring_count(const pd_client *c);
int pd_client_init(pd_client *c, pd_net *net);
int pd_client_pull_rows(pd_client *c, pd_net *net);
int pd_client_step(pd_client *c, pd_net *net);
/* Async mode: push the step's gradients and return without waiting; the
 * pservers' new values are read while the next batch's rows are pulled, or
 * at the latest when the next step (or any other exchange) begins. The
 * next batch computes while the pservers apply this one. */
int pd_client_post_step(pd_client *c, pd_net *net);
/* Async mode, as post_step, but the step's gradients leave with the next
 * batch's pull, right behind its (first round of) requests: the pservers
 * answer those rows before they apply the step, the trainer computes the
 * next batch while they apply it. The rows and the dense values a batch
 * computes with may thus miss this trainer's previous step. Nets with
 * growing tables (their rows are looked up at bind time) and nets without
 * sparse tables post at once. Any other exchange sends a held step first. */
int pd_client_defer_step(pd_client *c, pd_net *net);
/* Async mode, after the batch's pull (the held step is sent by then): ask
 * for the rows batch next will use now, behind that step, so that they
 * come while this batch computes; that batch's pd_client_pull_rows then
 * only reads them (and the step's replies), and sends the step it holds.
 * The batch sees the same values as a pull at its own turn would give it
 * (the rows and dense values of every step but this trainer's last one).
 * Nothing is asked when next does not give the ids as the bound batch did
 * (its bind names the fault), for growing tables, with no sparse table,
 * or unless pd_client_prefetch_from turned it on. Any other exchange reads
 * the replies first. */
int pd_client_prefetch_rows(pd_client *c, pd_net *net, const pd_batch *next);
/* Async mode: turn pd_client_prefetch_rows on when a pserver is on another
 * host (a round trip a step to hide), or local_too (this host's pservers
 * have cores the trainer leaves free: on busy shared cores, answering
 * while the batch computes takes from its computation). Returns 1 (on) or
 * 0 (off). */
int pd_client_prefetch_from(pd_client *c, int local_too);
/* Sync mode: hold the step's gradients until the next batch's rows are
 * pulled, then send the step and the row requests right behind it, and
 * wait for both: the pservers answer the rows once the step is applied
 * (every trainer's, at its barrier), so the batch sees exactly what a step
 * and then a pull would give, one round trip sooner. 1: held; 0: not
 * (growing tables, no sparse table, or a step already held): the caller
 * runs pd_client_step. Any other exchange sends a held step first. */
int pd_client_hold_step(pd_client *c, pd_net *net);
/* Sync mode, with pd_client_hold_step: the held step's dense values are
 * read as the next batch's forward reaches the layers that use them (net's
 * values_wanted), not before it starts: the pull sends the step in
 * parameter order (the forward's), each table's rows followed by the
 * requests of its rows, each dense parameter's blocks, and returns; the
 * forward reads each table's rows and each block's values as it reaches
 * the layers that use them, while the pservers apply the rest. Every value the forward reads is the step's,
 * as before; the backward starts once all are in. Returns 1 (on), 0 (the
 * step is not held: growing tables, or no sparse table) or < 0. */
int pd_client_values_in_forward(pd_client *c, pd_net *net);
/* Sync mode: from now on, net's backward sends each parameter's gradient
 * as soon as it is final (pd_net.grad_ready), so that the pservers apply
 * the upper layers' while the trainer computes the lower ones', to the
 * pservers on other hosts, and to those on this host too when local_too
 * (the trainer leaves them cores: each send wakes a pserver up, and one
 * that shares the trainer's busy cores takes them from its computation).
 * The step sends the rest and counts every reply as before. Returns the
 * number of pservers sent to early (0: none; the backward is as before). */
int pd_client_send_early(pd_client *c, pd_net *net, int local_too);
/* The pass is over after batches batches; *total (may be NULL): every
 * trainer's batches in the passes done, as the pservers count them. */
int pd_client_pass_end(pd_client *c, int pass, int batches, long *total);

/* Early stopping: after pass `pass`, trainer 0 says whether the job stops
 * (stop); every trainer (trainer 0 too) learns the decision in *decided,
 * once trainer 0 gave it. Only pserver 0 takes part. */
int pd_client_decide(pd_client *c, int pass, int stop, int *decided);
/* A checkpoint of step: every pserver saves its shard with this trainer's
 * position (pass, batches done in it). *writer: the trainer that writes the
 * complete marker. */
int pd_client_save(pd_client *c, long step, int pass, int batch, int *writer);
/* After the complete marker of step was written: COMMIT to every pserver,
 * which marks the checkpoint complete on its own host too (a checkpoint_dir
 * on each host's own disk); no answer. */
void pd_client_commit(pd_client *c, long step);
/* HEARTBEAT to every pserver when one is due (during a test: the net's
 * tick); nothing once finished. */
int pd_client_heartbeat(pd_client *c);
/* Pull every dense block and every row of every table into net. */
int pd_client_fetch_all(pd_client *c, pd_net *net);
/* FINISH to every pserver, and their answers: a pserver ends once every
 * trainer has finished. Once only: a later call does nothing. */
void pd_client_finish(pd_client *c);
void pd_client_free(pd_client *c);

#endif
