/*
 * fc.c - fully connected: out = act(in * W + b), W is [in, size].
 */
#include "net.h"
#include "../core/pd.h"

static int setup(pd_layer *l)
{
    pd_layer *x = l->in[0];
    if (l->nin != 1 || l->p[0] == NULL) return pd_err_set(PD_ERECIPE, "fc needs one input and a weight");
    if (l->p[0]->rows != x->size || l->p[0]->cols != l->size)
        return pd_err_set(PD_ERECIPE, "fc weight is %dx%d, expected %dx%d", l->p[0]->rows, l->p[0]->cols,
                          x->size, l->size);
    return 0;
}

static void forward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    const pd_backend *be = l->be;
    l->rows = x->rows;
    PD_ASSERT(pd_layer_reserve(l, l->rows) == 0);
    be->gemm(0, 0, l->rows, l->size, x->size, 1.f, x->out, x->size, l->p[0]->w, l->size, 0.f, l->out,
             l->size);
    if (l->p[1]) be->add_bias(l->out, l->p[1]->w, l->rows, l->size);
    be->act_forward(pd_act_from_name(l->d->act), l->out, l->out, l->rows, l->size);
}

static void backward(pd_layer *l)
{
    pd_layer *x = l->in[0];
    const pd_backend *be = l->be;
    /* grad := d cost / d pre-activation, in place */
    be->act_backward(pd_act_from_name(l->d->act), l->grad, l->out, l->grad, l->rows, l->size);
    /* dW += x^T * grad; db += sum of grad rows; dx += grad * W^T */
    be->gemm(1, 0, x->size, l->size, l->rows, 1.f, x->out, x->size, l->grad, l->size, 1.f, l->p[0]->g,
             l->size);
    if (l->p[1]) be->bias_grad(l->p[1]->g, l->grad, l->rows, l->size);
    if (x->grad)
        be->gemm(0, 1, l->rows, x->size, l->size, 1.f, l->grad, l->size, l->p[0]->w, l->size, 1.f, x->grad,
                 x->size);
}

const pd_layer_ops pd_layer_fc = {"fc", setup, forward, backward, NULL};
