/* add.c - element-wise sum of layers of one width: out = a + b + ... (wide & deep). */
#include "net.h"
#include "../core/pd.h"

static int setup(pd_layer *l)
{
    int rc;
    if ((rc = pd_layer_check(l, -1, -1)) < 0) return rc;
    if (l->nin < 2) return pd_layer_fail(l, "adds at least two inputs, the description gives %d", l->nin);
    for (int j = 0; j < l->nin; j++)
        if ((rc = pd_layer_need_dense(l, j, l->size)) < 0) return rc;
    return 0;
}

static int forward(pd_layer *l)
{
    int rc;
    l->rows = l->in[0]->rows;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    size_t n = (size_t)l->rows * l->size;
    for (int j = 0; j < l->nin; j++)
        if (l->in[j]->rows != l->rows)
            return pd_layer_fail(l, "input %d has %d rows, input 1 %d", j + 1, l->in[j]->rows, l->rows);
    l->be->copy(l->out, l->in[0]->out, n * sizeof(float));
    for (int j = 1; j < l->nin; j++) l->be->axpy(n, 1.f, l->in[j]->out, l->out);
    return 0;
}

static int backward(pd_layer *l)
{
    size_t n = (size_t)l->rows * l->size;
    for (int j = 0; j < l->nin; j++) {
        pd_layer *x = l->in[j];
        if (!x->grad) continue;
        if (pd_layer_grad_beta(x) == 0.f)
            l->be->copy(x->grad, l->grad, n * sizeof(float));
        else
            l->be->axpy(n, 1.f, l->grad, x->grad);
    }
    return 0;
}

const pd_layer_ops pd_layer_add = {"add", setup, forward, backward, NULL};
