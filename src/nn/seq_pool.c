/* seq_pool.c - pool each sample's rows of a sequence: sum, average or max. */
#include "net.h"
#include "../core/pd.h"

#include <string.h>

static int pool_of(const pd_layer *l)
{
    if (strcmp(l->d->pool, "average") == 0) return PD_POOL_AVERAGE;
    if (strcmp(l->d->pool, "max") == 0) return PD_POOL_MAX;
    return PD_POOL_SUM;
}

static int setup(pd_layer *l)
{
    if (l->nin != 1 || !l->in[0]->d->seq) return pd_err_set(PD_ERECIPE, "seq_pool needs a sequence input");
    return 0;
}

static void forward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    l->rows = l->n;
    PD_ASSERT(pd_layer_reserve(l, l->rows) == 0);
    int32_t *argmax = NULL;
    if (pool_of(l) == PD_POOL_MAX) argmax = pd_layer_iscratch(l, (size_t)l->rows * l->size);
    l->be->seq_pool_forward(pool_of(l), l->out, x->out, x->offsets, l->n, l->size, argmax);
}

static void backward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    if (!x->grad) return;
    l->be->seq_pool_backward(pool_of(l), x->grad, l->grad, x->offsets, l->n, l->size,
                             pool_of(l) == PD_POOL_MAX ? l->iscratch : NULL);
}

const pd_layer_ops pd_layer_seq_pool = {"seq_pool", setup, forward, backward, NULL};
