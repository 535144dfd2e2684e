/*
 * embedding.c - ids -> rows of a table [range, dim]. The table is a sparse
 * parameter: backward records which rows got gradient (pd_param_touch), so
 * that only those rows are updated locally or pushed to the pservers.
 * An id_list input gives a sequence: one output row per id, same offsets.
 */
#include "net.h"
#include "../core/pd.h"

static int setup(pd_layer *l)
{
    pd_layer *x = l->in[0];
    if (l->nin != 1 || !x->is_data || l->p[0] == NULL)
        return pd_err_set(PD_ERECIPE, "embedding needs one id data layer as input");
    if (l->p[0]->rows != x->d->range || l->p[0]->cols != l->size)
        return pd_err_set(PD_ERECIPE, "embedding table is %dx%d, expected %dx%d", l->p[0]->rows,
                          l->p[0]->cols, x->d->range, l->size);
    return 0;
}

static void forward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    l->rows = x->rows;
    l->offsets = x->offsets;
    l->h_offsets = x->h_offsets;
    PD_ASSERT(pd_layer_reserve(l, l->rows) == 0);
    l->be->gather(l->out, l->p[0]->w, x->ids, l->rows, l->size);
}

static void backward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    pd_param_touch(l->p[0], x->h_ids, l->rows);
    l->be->scatter_add(l->p[0]->g, l->grad, x->ids, l->rows, l->size);
}

const pd_layer_ops pd_layer_embedding = {"embedding", setup, forward, backward, NULL};
