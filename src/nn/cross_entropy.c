/*
 * cross_entropy.c - -log p[label] of a probability row (an fc with softmax),
 * and the fused, numerically stable softmax_cross_entropy on logits.
 */
#include "net.h"
#include "../core/pd.h"

static void forward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    l->rows = p->rows;
    PD_ASSERT(pd_layer_reserve(l, l->rows) == 0);
    l->be->cross_entropy_forward(l->out, p->out, y->ids, l->rows, p->size);
}

static void backward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    if (p->grad) l->be->cross_entropy_backward(p->grad, p->out, y->ids, l->rows, p->size);
}

const pd_layer_ops pd_layer_cross_entropy = {"cross_entropy", NULL, forward, backward, NULL};

static void sx_forward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    l->rows = p->rows;
    PD_ASSERT(pd_layer_reserve(l, l->rows) == 0);
    float *prob = pd_layer_fscratch(l, (size_t)l->rows * p->size);
    l->be->softmax_xent_forward(l->out, prob, p->out, y->ids, l->rows, p->size);
}

static void sx_backward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    if (p->grad) l->be->softmax_xent_backward(p->grad, l->fscratch, y->ids, l->rows, p->size);
}

const pd_layer_ops pd_layer_softmax_cross_entropy = {"softmax_cross_entropy", NULL, sx_forward,
                                                     sx_backward, NULL};
