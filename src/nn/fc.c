/*
 * fc.c - fully connected: out = act(in * W + b), W is [in, size], b [1, size].
 */
#include "net.h"
#include "../core/pd.h"

static int setup(pd_layer *l)
{
    int rc;
    if ((rc = pd_layer_check(l, 1, -1)) < 0 || (rc = pd_layer_need_dense(l, 0, -1)) < 0) return rc;
    if ((rc = pd_layer_need_param(l, 0, l->in[0]->size, l->size)) < 0) return rc;
    if (l->p[0]->sparse) return pd_layer_fail(l, "weight '%s' is marked sparse", l->p[0]->name);
    if (l->d->nparams > 1 && (rc = pd_layer_need_param(l, 1, 1, l->size)) < 0) return rc;
    return 0;
}

static int forward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    const pd_backend *be = l->be;
    int rc;
    l->rows = x->rows;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    be->gemm(0, 0, l->rows, l->size, x->size, 1.f, x->out, x->size, l->p[0]->w, l->size, 0.f, l->out,
             l->size);
    be->bias_act_forward(pd_act_from_name(l->d->act), l->out, l->p[1] ? l->p[1]->w : NULL, l->rows, l->size);
    return 0;
}

static int backward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    const pd_backend *be = l->be;
    pd_param *w = l->p[0], *b = l->p[1];
    /* grad := d cost / d pre-activation, in place; db (+)= sum of its rows */
    be->act_bias_backward(pd_act_from_name(l->d->act), l->grad, l->out, b ? b->g : NULL,
                          b ? pd_param_grad_beta(b) != 0 : 0, l->rows, l->size);
    /* dx (+)= grad * W^T, with W as it is before this step */
    if (x->grad)
        be->gemm(0, 1, l->rows, x->size, l->size, 1.f, l->grad, l->size, w->w, l->size, pd_layer_grad_beta(x),
                 x->grad, x->size);
    /* dW (+)= x^T * grad; or, plain SGD applied here, W := beta * W + alpha * x^T * grad */
    float alpha, beta;
    if (pd_param_sgd_in_place(l->net, w, &alpha, &beta))
        be->gemm(1, 0, x->size, l->size, l->rows, alpha, x->out, x->size, l->grad, l->size, beta, w->w, l->size);
    else
        be->gemm(1, 0, x->size, l->size, l->rows, 1.f, x->out, x->size, l->grad, l->size, pd_param_grad_beta(w),
                 w->g, l->size);
    return 0;
}

const pd_layer_ops pd_layer_fc = {"fc", setup, forward, backward, NULL};
