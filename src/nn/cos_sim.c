/* cos_sim.c - out = scale * cos(a, b) per sample (the recommender's score). */
#include "net.h"
#include "../core/pd.h"

static int forward(pd_layer *l)
{
    pd_layer *a = l->in[0], *b = l->in[1];
    int rc;
    l->rows = a->rows;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    l->be->cos_sim_forward(l->out, a->out, b->out, l->rows, a->size, (float)l->d->scale);
    return 0;
}

static int backward(pd_layer *l)
{
    pd_layer *a = l->in[0], *b = l->in[1];
    int acc_a = a->grad && pd_layer_grad_beta(a) != 0.f, acc_b = b->grad && pd_layer_grad_beta(b) != 0.f;
    l->be->cos_sim_backward(a->grad, b->grad, a->out, b->out, l->out, l->grad, l->rows, a->size,
                            (float)l->d->scale, acc_a, acc_b);
    return 0;
}

const pd_layer_ops pd_layer_cos_sim = {"cos_sim", pd_layer_setup_pair, forward, backward, NULL};
