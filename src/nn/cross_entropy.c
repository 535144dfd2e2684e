/*
 * cross_entropy.c - -log p[label] of a probability row (an fc with softmax),
 * and the fused, numerically stable softmax_cross_entropy on logits.
 */
#include "net.h"
#include "../core/pd.h"

int pd_layer_class_setup(pd_layer *l)
{
    int rc;
    if ((rc = pd_layer_check(l, 2, 1)) < 0 || (rc = pd_layer_need_dense(l, 0, -1)) < 0 ||
        (rc = pd_layer_need_ids(l, 1, 0)) < 0)
        return rc;
    pd_layer *p = l->in[0], *y = l->in[1];
    if (y->d->range != p->size)
        return pd_layer_fail(l, "label '%s' has %d classes but prediction '%s' has width %d", y->d->name,
                             y->d->range, p->d->name, p->size);
    return 0;
}

static int forward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    int rc;
    l->rows = p->rows;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    l->be->cross_entropy_forward(l->out, p->out, y->ids, l->rows, p->size);
    return 0;
}

static int backward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    if (p->grad) l->be->cross_entropy_backward(pd_layer_grad_acc(p), p->out, y->ids, l->rows, p->size);
    return 0;
}

const pd_layer_ops pd_layer_cross_entropy = {"cross_entropy", pd_layer_class_setup, forward, backward, NULL};

static int sx_forward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    int rc;
    l->rows = p->rows;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    float *prob = pd_layer_fscratch(l, (size_t)l->rows * p->size);
    if (!prob) return PD_ENOMEM;
    l->be->softmax_xent_forward(l->out, prob, p->out, y->ids, l->rows, p->size);
    return 0;
}

static int sx_backward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    if (p->grad) l->be->softmax_xent_backward(pd_layer_grad_acc(p), l->fscratch, y->ids, l->rows, p->size);
    return 0;
}

const pd_layer_ops pd_layer_softmax_cross_entropy = {"softmax_cross_entropy", pd_layer_class_setup, sx_forward,
                                                     sx_backward, NULL};
