/*
 * sigmoid_cross_entropy.c - the binary logistic cost on logits: per sample
 * the sum over columns of -y log(sigmoid(x)) - (1 - y) log(1 - sigmoid(x)),
 * computed as max(x, 0) - x y + log(1 + exp(-|x|)) so that no logit
 * overflows. The label is a dense layer of the same width with targets in
 * [0, 1] (for CTR: nn.data("label", 1) of clicks, 0 or 1).
 */
#include "net.h"
#include "../core/pd.h"

static int forward(pd_layer *l)
{
    pd_layer *x = l->in[0], *y = l->in[1];
    int rc;
    l->rows = x->rows;
    if (y->rows != x->rows) return pd_layer_fail(l, "label has %d rows, the logits %d", y->rows, x->rows);
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    l->be->sigmoid_xent_forward(l->out, x->out, y->out, l->rows, x->size);
    return 0;
}

static int backward(pd_layer *l)
{
    pd_layer *x = l->in[0], *y = l->in[1];
    if (x->grad) l->be->sigmoid_xent_backward(pd_layer_grad_acc(x), x->out, y->out, l->rows, x->size);
    return 0;
}

const pd_layer_ops pd_layer_sigmoid_cross_entropy = {"sigmoid_cross_entropy", pd_layer_setup_pair, forward, backward, NULL};
