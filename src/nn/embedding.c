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
    int rc;
    if ((rc = pd_layer_check(l, 1, -1)) < 0 || (rc = pd_layer_need_ids(l, 0, 1)) < 0) return rc;
    pd_layer *x = l->in[0];
    if (!l->d->seq != !x->d->seq)
        return pd_layer_fail(l, "is %smarked as a sequence but its input '%s' is %s", l->d->seq ? "" : "not ",
                             x->d->name, x->d->kind);
    if ((rc = pd_layer_need_param(l, 0, x->d->range, l->size)) < 0) return rc;
    if (!l->p[0]->sparse) return pd_layer_fail(l, "table '%s' is not marked sparse", l->p[0]->name);
    if (l->d->nparams != 1) return pd_layer_fail(l, "has %d parameters, only a table", l->d->nparams);
    return 0;
}

static int forward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    int rc;
    l->rows = x->rows;
    l->offsets = x->offsets;
    l->h_offsets = x->h_offsets;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    l->be->gather(l->out, l->p[0]->w, x->ids, l->rows, l->size);
    return 0;
}

static int backward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    pd_param_touch(l->p[0], x->h_ids, l->rows);
    l->be->scatter_add(l->p[0]->g, l->grad, x->ids, l->rows, l->size);
    return 0;
}

const pd_layer_ops pd_layer_embedding = {"embedding", setup, forward, backward, NULL};
