/* seq_pool.c - pool each sample's rows of a sequence: sum, average or max. */
#include "net.h"
#include "../core/pd.h"

#include <string.h>

static int pool_of(const pd_layer *l)
{
    if (!l->d->pool) return PD_POOL_SUM;
    if (strcmp(l->d->pool, "average") == 0) return PD_POOL_AVERAGE;
    if (strcmp(l->d->pool, "max") == 0) return PD_POOL_MAX;
    return PD_POOL_SUM;
}

static int setup(pd_layer *l)
{
    int rc;
    if ((rc = pd_layer_check(l, 1, -1)) < 0) return rc;
    pd_layer *x = l->in[0];
    /* a sequence of floats: the embedding of an id_list */
    if (!x->d->seq || x->is_data) return pd_layer_fail(l, "input '%s' is not a sequence of vectors", x->d->name);
    if (x->size != l->size) return pd_layer_fail(l, "has width %d, its input '%s' %d", l->size, x->d->name, x->size);
    const char *p = l->d->pool;
    if (p && strcmp(p, "sum") && strcmp(p, "average") && strcmp(p, "max"))
        return pd_layer_fail(l, "unknown pooling '%s'", p);
    return 0;
}

static int forward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    int rc;
    l->rows = l->n;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    int32_t *argmax = NULL;
    if (pool_of(l) == PD_POOL_MAX && !(argmax = pd_layer_iscratch(l, (size_t)l->rows * l->size)))
        return PD_ENOMEM;
    l->be->seq_pool_forward(pool_of(l), l->out, x->out, x->offsets, l->n, l->size, argmax);
    return 0;
}

static int backward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    if (!x->grad) return 0;
    /* max pooling adds into the rows it picked only: the others need zeros */
    int max = pool_of(l) == PD_POOL_MAX, acc = 1;
    if (max)
        pd_layer_grad_acc(x);
    else
        acc = pd_layer_grad_beta(x) != 0.f;
    l->be->seq_pool_backward(pool_of(l), x->grad, l->grad, x->offsets, l->n, l->size, max ? l->iscratch : NULL, acc);
    return 0;
}

const pd_layer_ops pd_layer_seq_pool = {"seq_pool", setup, forward, backward, NULL};
