/* concat.c - inputs side by side: out = [a | b | ...]. */
#include "net.h"
#include "../core/pd.h"

static void forward(pd_layer *l)
{
    l->rows = l->in[0]->rows;
    PD_ASSERT(pd_layer_reserve(l, l->rows) == 0);
    int col = 0;
    for (int j = 0; j < l->nin; j++) {
        pd_layer *x = l->in[j];
        PD_ASSERT(x->rows == l->rows);
        l->be->copy_cols(l->out + col, l->size, x->out, x->size, l->rows, x->size, 0);
        col += x->size;
    }
}

static void backward(pd_layer *l)
{
    int col = 0;
    for (int j = 0; j < l->nin; j++) {
        pd_layer *x = l->in[j];
        if (x->grad) l->be->copy_cols(x->grad, x->size, l->grad + col, l->size, l->rows, x->size, 1);
        col += x->size;
    }
}

const pd_layer_ops pd_layer_concat = {"concat", NULL, forward, backward, NULL};
