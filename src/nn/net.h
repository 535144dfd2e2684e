/*
 * net.h - the network a recipe's model describes, on one backend.
 *
 * pd_net_build() makes the layers and parameters of a recipe's model;
 * training is a plain loop:
 *
 *     pd_net net;
 *     pd_net_build(&net, &recipe, &pd_backend_cpu, seed);
 *     while (next batch b) {
 *         double cost;
 *         pd_net_bind(&net, &b);          // data layers take the batch
 *         pd_net_forward(&net, &cost);    // each of these returns 0 or PD_E*
 *         pd_net_backward(&net);          // parameter gradients (batch mean)
 *         pd_net_update(&net, &opt, step); // or push them to the pservers
 *     }
 *     pd_net_free(&net);
 *
 * Each layer is a file in src/nn/ with a pd_layer_ops table; all its math is
 * done through net->be, so the same code runs on every backend. The driver
 * of training is src/nn/driver.h.
 */
#ifndef PD_NET_H
#define PD_NET_H

#include "../backend/backend.h"
#include "../data/batch.h"
#include "../core/recipe.h"
#include "hashtab.h"

#include <stdint.h>

typedef struct pd_param {
    char *name;
    int rows, cols;
    int sparse;         /* rows are pulled, pushed and updated one by one */
    pd_init init;
    float *w, *g;       /* values and gradient, [rows, cols] on the backend */
    float *s1, *s2;     /* optimizer state, allocated on first update */
    int g_stale;        /* dense: g still holds the last step's gradient; the
                         * first write of a backward overwrites it (beta 0) */
    int users;          /* layers that use it */
    int applied;        /* this backward applied its update (pd_param_sgd_in_place) */
    /* sparse parameters: which rows have a gradient this step (host) */
    int32_t *touched;
    int ntouched, cap_touched;
    uint8_t *mark;      /* rows: 1 when in touched */
    /* growing tables (hash): w and g hold one row for each distinct id of
     * the bound batch, keys[0..nkeys) in that order (rows: the room for
     * them); the rows live in tab (paddle train, models) or on the pservers */
    int hash;
    pd_hashtab *tab;
    uint64_t *keys;
    int nkeys, cap_keys;
    int32_t *kmap;      /* open addressing over keys: row, or -1 */
    size_t kmap_cap;
    /* moving rows on a device backend (pd_param_touched_ids and the two
     * below): ids and rows on the device, rows on the host; dids holds
     * touched[0..ntouched) while dids_touched is set */
    int32_t *dids;
    float *drows, *hrows;
    size_t cap_dids, cap_drows, cap_hrows;
    int dids_touched;
} pd_param;

typedef struct pd_layer pd_layer;
typedef struct pd_net pd_net;

typedef struct pd_layer_ops {
    const char *type;
    /* check inputs and parameters (kinds, widths, shapes), allocate what does
     * not depend on the batch; 0 or PD_EINVAL (pd_layer_fail) */
    int (*setup)(pd_layer *l);
    /* 0, or PD_ENOMEM naming the layer when its outputs cannot be allocated */
    int (*forward)(pd_layer *l);
    /* add d cost / d input into each input's grad (pd_layer_grad_beta,
     * pd_layer_grad_acc), and into parameters' g */
    int (*backward)(pd_layer *l);
    void (*free)(pd_layer *l);
} pd_layer_ops;

struct pd_layer {
    const pd_layer_ops *ops;
    const pd_layer_desc *d;
    pd_net *net;
    const pd_backend *be;
    int index;
    int size;               /* output width */
    int nin;
    pd_layer *in[PD_MAX_INPUTS];
    pd_param *p[2];
    int is_data;
    int slot;               /* data layers: slot index in the bound batch */

    int n;                  /* samples in the current batch */
    int rows;               /* rows of out: n, or the ids of a sequence */
    int cap_rows;
    float *out, *grad;      /* [rows, size] on the backend (grad: NULL for data) */
    int grad_stale;         /* grad still holds the last backward's: not yet written in this one */
    int32_t *ids;           /* id data layers: rows ids on the backend */
    int32_t *offsets;       /* sequences: n + 1 offsets on the backend */
    const int32_t *h_ids;   /* the same on the host */
    const int32_t *h_offsets;
    int cap_ids, cap_offsets;
    const uint64_t *h_keys; /* id data layers without a range: rows 64-bit ids (host) */
    int32_t *lids, *h_lids; /* embeddings of growing tables: rows of the table's w (backend, host) */
    int cap_lids, cap_h_lids;

    float *fscratch;        /* layer-private scratch */
    int32_t *iscratch;
    size_t cap_fscratch, cap_iscratch;
};

struct pd_net {
    const pd_backend *be;
    const pd_recipe *r;
    int nlayers;
    pd_layer *layers;
    int nparams;
    pd_param *params;
    int cost, predict;
    uint64_t rng;
    int n;                  /* samples in the bound batch */
    int bound_layout;       /* slots resolved for the batch layout */
    int shapes_only;        /* pd_net_check: parameters have no memory */
    uint64_t seed;          /* the recipe's: growing tables' initial rows */
    int opt_state;          /* optimizer state floats per weight */
    /* Growing tables: fill w's rows for keys after a bind (a trainer pulls
     * them from the pservers). NULL: from the table's own tab. */
    int (*fill_rows)(void *ctx, pd_net *net, pd_param *p);
    void *fill_ctx;
    /* Called by pd_net_backward as soon as parameter p's gradient is final
     * (after the last layer, in backward order, that writes it), while the
     * backward goes on with the layers below: a trainer sends it to the
     * pservers meanwhile. Parameters no layer wrote are not named. < 0
     * ends the backward with that error. NULL: none. */
    int (*grad_ready)(void *ctx, pd_net *net, pd_param *p);
    void *grad_ctx;
    /* Called by pd_net_forward before a layer computes, for each parameter
     * it reads, and once with p NULL after the last layer: a trainer whose
     * step's new values are still coming in (sync mode) waits there for
     * p's, so that the pservers apply the upper layers' while the lower
     * ones compute, and for all of them before the backward. < 0 ends the
     * forward with that error. NULL: none. */
    int (*values_wanted)(void *ctx, pd_net *net, pd_param *p);
    void *values_ctx;
    /* Called during a trainer's long local work: by pd_evaluate after each
     * batch, by pd_model_save after each 4 MB written, and while the reader
     * keeps it waiting for a batch (pd_reader_set_tick). Such work may take
     * longer than heartbeat_timeout, and its pservers (the other trainers
     * waiting on it) must hear it lives meanwhile. < 0 ends the evaluation
     * or the wait with that error (a save goes on). NULL: none. */
    int (*tick)(void *ctx);
    void *tick_ctx;
    /* Local training with plain SGD: the product that computes a dense
     * parameter's gradient may add -lr times it straight into w instead
     * (pd_param_sgd_in_place), w scaled by 1 - lr * weight_decay. */
    int sgd_in_place;
    float sgd_lr, sgd_decay;
};

int pd_net_build(pd_net *net, const pd_recipe *r, const pd_backend *be, uint64_t seed);
/* Everything pd_net_build checks (every layer's inputs, widths and
 * parameter shapes), without allocating the parameters: what `paddle check`
 * needs, for a model of any size. 0 or PD_E* with a message. */
int pd_net_check(const pd_recipe *r, const pd_backend *be);
void pd_net_free(pd_net *net);

/* Point the data layers at batch b (uploads it). Fails, naming the slot,
 * when b lacks a slot the model reads or an id is out of range. */
int pd_net_bind(pd_net *net, const pd_batch *b);
/* The ids the data layer x (of a net bound before) would take from batch b,
 * without binding it: their count and *ids, or -1 when b does not give x
 * ids of its range as the bound batch did (pd_net_bind names the fault). */
int pd_net_batch_ids(const pd_layer *x, const pd_batch *b, const int32_t **ids);
/* Forward through every layer; *cost: the mean cost over the batch.
 * 0, or < 0 when a layer failed (out of memory), naming it. */
int pd_net_forward(pd_net *net, double *cost);
/* Forward only the layers `layer` depends on (a prediction without the
 * cost and its label). 0 or < 0, naming the layer that failed. */
int pd_net_forward_to(pd_net *net, int layer);
/* live[i] = 1 for `layer` and every layer it depends on (nlayers bytes). */
void pd_net_live(const pd_net *net, int layer, uint8_t *live);
/* Mean over the batch of a layer's per-sample output (costs, metrics). */
double pd_net_mean(pd_net *net, int layer);
/* Backpropagate the cost into the parameter gradients (a parameter that no
 * layer gives a gradient gets zeros). 0 or < 0. */
int pd_net_backward(pd_net *net);
/* Apply the optimizer to every parameter (local training). step counts
 * updates from 1. 0, or PD_ENOMEM when the optimizer's state cannot be
 * allocated. */
int pd_net_update(pd_net *net, const pd_optimizer_desc *o, long step);
pd_param *pd_net_param(pd_net *net, const char *name);

/* Helpers for layer code. */
/* Make room for rows rows of out (and grad, unless a data layer); 0, or
 * PD_ENOMEM with a message naming the layer and the size. */
int pd_layer_reserve(pd_layer *l, int rows);
/* Layer-private scratch of n floats / ints, or NULL with a message. */
float *pd_layer_fscratch(pd_layer *l, size_t n);
int32_t *pd_layer_iscratch(pd_layer *l, size_t n);
/* PD_EINVAL with "layer NAME (TYPE) at WHERE: message" */
int pd_layer_fail(const pd_layer *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Setup checks, 0 or pd_layer_fail(): nin inputs (-1: at least one) and an
 * output width of size (-1: any); input j gives dense, unsequenced rows of
 * width (-1: any); input j is an id data layer (kind "id", or "id_list"
 * too when lists). */
int pd_layer_check(const pd_layer *l, int nin, int size);
int pd_layer_need_dense(const pd_layer *l, int j, int width);
int pd_layer_need_ids(const pd_layer *l, int j, int lists);
/* The setup of a layer that compares two dense inputs of the same width
 * into one value per sample (costs, cos_sim). */
int pd_layer_setup_pair(pd_layer *l);
/* Parameter j exists with shape [rows, cols]. */
int pd_layer_need_param(const pd_layer *l, int j, int rows, int cols);
/* The setup of cross_entropy, softmax_cross_entropy, classification_error:
 * a dense prediction of C classes and an id label of range C. */
int pd_layer_class_setup(pd_layer *l);
/* The beta with which a layer adds its share into dense parameter p's
 * gradient: 0 for the first share of a backward (g held the last step's
 * gradient, not zeros), 1 for the shares after it (a shared parameter). */
static inline float pd_param_grad_beta(pd_param *p)
{
    float beta = p->g_stale ? 0.f : 1.f;
    p->g_stale = 0;
    return beta;
}
/* The beta with which a layer adds its share into input x's gradient: 0 for
 * the first share of a backward (grad held the last step's, not zeros), 1
 * for the shares after it. Layers' gradients are not zeroed before a
 * backward: their first writer overwrites them. */
static inline float pd_layer_grad_beta(pd_layer *x)
{
    float beta = x->grad_stale ? 0.f : 1.f;
    x->grad_stale = 0;
    return beta;
}
/* x's gradient for a writer that can only add into it: zeroed first if no
 * layer has written it in this backward. */
static inline float *pd_layer_grad_acc(pd_layer *x)
{
    if (x->grad && x->grad_stale) x->be->zero(x->grad, (size_t)x->rows * x->size * sizeof(float));
    x->grad_stale = 0;
    return x->grad;
}
/* Whether the layer computing dense parameter p's gradient applies plain
 * SGD itself, as part of that product: *alpha (-lr) times the product added
 * into p->w scaled by *beta (1 - lr * weight_decay), as pd_net_update would
 * apply it, with no gradient written. Only where net->sgd_in_place (local
 * training), no hook wants the gradient, and the layer is p's only user;
 * p is then marked applied for this step (pd_net_update skips it). The
 * layer must be done reading p->w when it runs that product. */
static inline int pd_param_sgd_in_place(pd_net *net, pd_param *p, float *alpha, float *beta)
{
    if (!net->sgd_in_place || net->grad_ready || p->sparse || p->hash || p->users != 1) return 0;
    *alpha = -net->sgd_lr;
    *beta = 1.f - net->sgd_lr * net->sgd_decay;
    p->applied = 1;
    return 1;
}
/* Record that rows ids[0..n) of sparse parameter p get gradient (host ids). */
void pd_param_touch(pd_param *p, const int32_t *ids, int n);
/* p->touched where the backend reads it (uploaded once after each change
 * on a device backend); NULL and PD_ENOMEM when the device has no room. */
const int32_t *pd_param_touched_ids(pd_net *net, pd_param *p);
/* The gradients of p's touched rows, in host memory, row k for touched[k]
 * (one gather and one download on a device backend); NULL and PD_ENOMEM. */
const float *pd_param_touched_grads(pd_net *net, pd_param *p);
/* w[ids[i]] = vals[i] for n distinct rows (host ids and values; one upload
 * of each and one launch on a device backend); 0 or PD_ENOMEM. */
int pd_param_set_rows(pd_net *net, pd_param *p, const int32_t *ids, const float *vals, int n);

/* Fill host array w with init values (deterministic in *rng). */
void pd_init_fill(const pd_init *init, float *w, int rows, int cols, uint64_t *rng);
/* The initial row of id in growing table `table` (cols floats): a function
 * of the init, the table's name, the seed and the id, the same everywhere. */
void pd_init_row(const pd_init *init, const char *table, uint64_t seed, uint64_t id, float *w, int cols);
/* Growing tables: the rows of p's bound ids from its tab (or initial ones). */
void pd_param_fill_local(pd_net *net, pd_param *p);
/* Growing tables: the optimizer on the rows of tab for n ids (admission
 * and the cap as the table says; a new row starts at pd_init_row); g: their
 * gradients, cols floats each, host memory. */
void pd_hash_update(pd_hashtab *tab, const pd_init *init, int cols, const uint64_t *keys, const float *g, int n,
                    const pd_opt_hyper *h, uint64_t seed);
/* Rows a growing table's row holds: the weights and the optimizer state. */
static inline int pd_hash_width(int cols, int opt_state) { return cols * (1 + opt_state); }

int pd_act_from_name(const char *name);
int pd_opt_from_name(const char *name);
void pd_opt_hyper_from(pd_opt_hyper *h, const pd_optimizer_desc *o, long step);

const pd_layer_ops *pd_layer_ops_find(const char *type);

#endif
