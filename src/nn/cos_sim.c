/* cos_sim.c - out = scale * cos(a, b) per sample (the recommender's score). */
#include "net.h"
#include "../core/pd.h"

static void forward(pd_layer *l)
{
    pd_layer *a = l->in[0], *b = l->in[1];
    l->rows = a->rows;
    PD_ASSERT(pd_layer_reserve(l, l->rows) == 0);
    l->be->cos_sim_forward(l->out, a->out, b->out, l->rows, a->size, (float)l->d->scale);
}

static void backward(pd_layer *l)
{
    pd_layer *a = l->in[0], *b = l->in[1];
    l->be->cos_sim_backward(a->grad, b->grad, a->out, b->out, l->out, l->grad, l->rows, a->size,
                            (float)l->d->scale);
}

const pd_layer_ops pd_layer_cos_sim = {"cos_sim", NULL, forward, backward, NULL};
