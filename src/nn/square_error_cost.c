/* square_error_cost.c - per sample sum of (pred - label)^2. */
#include "net.h"
#include "../core/pd.h"

static int forward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    int rc;
    l->rows = p->rows;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    l->be->square_error_forward(l->out, p->out, y->out, l->rows, p->size);
    return 0;
}

static int backward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    if (p->grad) l->be->square_error_backward(pd_layer_grad_acc(p), p->out, y->out, l->rows, p->size);
    /* the label may be a layer too (nn.square_error_cost takes any two dense
     * layers); the cost is symmetric, so its gradient is the same op swapped */
    if (y->grad) l->be->square_error_backward(pd_layer_grad_acc(y), y->out, p->out, l->rows, p->size);
    return 0;
}

const pd_layer_ops pd_layer_square_error_cost = {"square_error_cost", pd_layer_setup_pair, forward, backward, NULL};
