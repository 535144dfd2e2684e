/* square_error_cost.c - per sample sum of (pred - label)^2. */
#include "net.h"
#include "../core/pd.h"

static void forward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    l->rows = p->rows;
    PD_ASSERT(pd_layer_reserve(l, l->rows) == 0);
    l->be->square_error_forward(l->out, p->out, y->out, l->rows, p->size);
}

static void backward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    if (p->grad) l->be->square_error_backward(p->grad, p->out, y->out, l->rows, p->size);
    /* the label may be a layer too (nn.square_error_cost takes any two dense
     * layers); the cost is symmetric, so its gradient is the same op swapped */
    if (y->grad) l->be->square_error_backward(y->grad, y->out, p->out, l->rows, p->size);
}

const pd_layer_ops pd_layer_square_error_cost = {"square_error_cost", NULL, forward, backward, NULL};
