/* classification_error.c - metric: 1 where argmax(pred) != label, else 0. */
#include "net.h"
#include "../core/pd.h"

static void forward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    l->rows = p->rows;
    PD_ASSERT(pd_layer_reserve(l, l->rows) == 0);
    l->be->class_error(l->out, p->out, y->ids, l->rows, p->size);
}

static void backward(pd_layer *l) { (void)l; /* a metric has no gradient */ }

const pd_layer_ops pd_layer_classification_error = {"classification_error", NULL, forward, backward, NULL};
