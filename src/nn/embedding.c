/*
 * embedding.c - ids -> rows of a table [range, dim]. The table is a sparse
 * parameter: backward records which rows got gradient (pd_param_touch), so
 * that only those rows are updated locally or pushed to the pservers.
 * An id_list input gives a sequence: one output row per id, same offsets.
 * Over ids without a range the table is a growing one: pd_net_bind put the
 * rows of the batch's distinct ids in w and each id's row in lids.
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
    if (x->d->range == 0) { /* a growing table: w holds the batch's rows */
        if (!l->p[0] || !l->p[0]->hash || l->p[0]->cols != l->size)
            return pd_layer_fail(l, "ids without a range need a growing table of width %d", l->size);
    } else if ((rc = pd_layer_need_param(l, 0, x->d->range, l->size)) < 0) {
        return rc;
    }
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
    l->be->gather(l->out, l->p[0]->w, l->p[0]->hash ? l->lids : x->ids, l->rows, l->size);
    return 0;
}

static int backward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    int hash = l->p[0]->hash;
    pd_param_touch(l->p[0], hash ? l->h_lids : x->h_ids, l->rows);
    l->be->scatter_add(l->p[0]->g, l->grad, hash ? l->lids : x->ids, l->rows, l->size);
    return 0;
}

const pd_layer_ops pd_layer_embedding = {"embedding", setup, forward, backward, NULL};
