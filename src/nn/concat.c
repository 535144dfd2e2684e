/* concat.c - inputs side by side: out = [a | b | ...]. */
#include "net.h"
#include "../core/pd.h"

static int setup(pd_layer *l)
{
    int rc;
    long total = 0;
    if ((rc = pd_layer_check(l, -1, -1)) < 0) return rc;
    for (int j = 0; j < l->nin; j++) {
        if ((rc = pd_layer_need_dense(l, j, -1)) < 0) return rc;
        total += l->in[j]->size;
    }
    if (total != l->size) return pd_layer_fail(l, "has width %d, its inputs %ld together", l->size, total);
    return 0;
}

static int forward(pd_layer *l)
{
    int rc;
    l->rows = l->in[0]->rows;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    int col = 0;
    for (int j = 0; j < l->nin; j++) {
        pd_layer *x = l->in[j];
        if (x->rows != l->rows)
            return pd_layer_fail(l, "input %d has %d rows, input 1 %d", j + 1, x->rows, l->rows);
        l->be->copy_cols(l->out + col, l->size, x->out, x->size, l->rows, x->size, 0);
        col += x->size;
    }
    return 0;
}

static int backward(pd_layer *l)
{
    int col = 0;
    for (int j = 0; j < l->nin; j++) {
        pd_layer *x = l->in[j];
        if (x->grad)
            l->be->copy_cols(x->grad, x->size, l->grad + col, l->size, l->rows, x->size, pd_layer_grad_beta(x) != 0.f);
        col += x->size;
    }
    return 0;
}

const pd_layer_ops pd_layer_concat = {"concat", setup, forward, backward, NULL};
