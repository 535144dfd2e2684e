/* auc.c - the auc metric layer and the exact AUC of an evaluation. See auc.h. */
#include "auc.h"
#include "../core/auc.h"
#include "../core/pd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int setup(pd_layer *l)
{
    int rc;
    if ((rc = pd_layer_check(l, 2, 1)) < 0 || (rc = pd_layer_need_dense(l, 0, 1)) < 0 ||
        (rc = pd_layer_need_dense(l, 1, 1)) < 0)
        return rc;
    return 0;
}

static int forward(pd_layer *l)
{
    int rc;
    l->rows = l->in[0]->rows;
    if ((rc = pd_layer_reserve(l, l->rows)) < 0) return rc;
    l->be->zero(l->out, (size_t)l->rows * sizeof(float));
    return 0;
}

static int backward(pd_layer *l) { (void)l; return 0; /* a metric has no gradient */ }

const pd_layer_ops pd_layer_auc = {"auc", setup, forward, backward, NULL};

/* --- the accumulation ------------------------------------------------------- */

void pd_auc_add(pd_auc *a, const float *score, const float *label, long n)
{
    if (n <= 0) return;
    if (a->n + n > a->cap) {
        long cap = a->cap ? a->cap : 1024;
        while (cap < a->n + n) cap *= 2;
        a->score = pd_xrealloc(a->score, (size_t)cap * sizeof *a->score);
        a->label = pd_xrealloc(a->label, (size_t)cap * sizeof *a->label);
        a->cap = cap;
    }
    memcpy(a->score + a->n, score, (size_t)n * sizeof *score);
    memcpy(a->label + a->n, label, (size_t)n * sizeof *label);
    a->n += n;
}

void pd_auc_add_layer(pd_auc *a, pd_net *net, int layer)
{
    pd_layer *l = &net->layers[layer];
    pd_layer *p = l->in[0], *y = l->in[1];
    long n = p->rows;
    if (n <= 0) return;
    if (net->be->host_memory) {
        pd_auc_add(a, p->out, y->out, n);
        return;
    }
    float *h = pd_xmalloc(2 * (size_t)n * sizeof *h);
    net->be->download(h, p->out, (size_t)n * sizeof *h);
    net->be->download(h + n, y->out, (size_t)n * sizeof *h);
    pd_auc_add(a, h, h + n, n);
    free(h);
}

double pd_auc_value(const pd_auc *a) { return pd_auc_compute(a->score, a->label, a->n); }

void pd_auc_free(pd_auc *a)
{
    free(a->score);
    free(a->label);
    memset(a, 0, sizeof *a);
}
