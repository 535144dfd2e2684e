/* classification_error.c - metric: 1 where argmax(pred) != label, else 0. */
#include "net.h"
#include "../core/pd.h"

static int forward(pd_layer *l)
{
    pd_layer *p = l->in[0], *y = l->in[1];
    int rc;
    l->rows = p->rows;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    l->be->class_error(l->out, p->out, y->ids, l->rows, p->size);
    return 0;
}

static int backward(pd_layer *l) { (void)l; return 0; /* a metric has no gradient */ }

const pd_layer_ops pd_layer_classification_error = {"classification_error", pd_layer_class_setup, forward, backward,
                                                    NULL};
