/*
 * net.c - building a network from a recipe, binding batches, the forward and
 * backward loops, parameter initialisation and local optimizer updates.
 */
#include "net.h"
#include "../core/pd.h"
#include "../core/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pd_init_fill(const pd_init *init, float *w, int rows, int cols, uint64_t *rng)
{
    size_t n = (size_t)rows * cols;
    if (strcmp(init->kind, "zero") == 0) {
        memset(w, 0, n * sizeof *w);
    } else if (strcmp(init->kind, "constant") == 0) {
        for (size_t i = 0; i < n; i++) w[i] = (float)init->a;
    } else if (strcmp(init->kind, "uniform") == 0) {
        double lo = init->a, hi = init->b;
        if (lo == 0 && hi == 0) lo = -1, hi = 1;
        for (size_t i = 0; i < n; i++) w[i] = (float)(lo + (hi - lo) * pd_rng_uniform(rng));
    } else if (strcmp(init->kind, "normal") == 0) {
        double mean = init->a, std = init->b != 0 ? init->b : 1;
        for (size_t i = 0; i < n; i++) {
            double u1 = pd_rng_uniform(rng), u2 = pd_rng_uniform(rng);
            if (u1 < 1e-300) u1 = 1e-300;
            w[i] = (float)(mean + std * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
        }
    } else { /* xavier: uniform in +-sqrt(6 / (fan_in + fan_out)) */
        double lim = sqrt(6.0 / ((double)rows + cols));
        for (size_t i = 0; i < n; i++) w[i] = (float)(lim * (2 * pd_rng_uniform(rng) - 1));
    }
}

int pd_act_from_name(const char *name)
{
    static const char *names[] = {"linear", "relu", "sigmoid", "tanh", "softmax"};
    for (int i = 0; i < (int)PD_COUNT(names); i++)
        if (name && strcmp(name, names[i]) == 0) return i;
    return PD_ACT_LINEAR;
}

int pd_opt_from_name(const char *name)
{
    static const char *names[] = {"sgd", "momentum", "adagrad", "adam", "rmsprop"};
    for (int i = 0; i < (int)PD_COUNT(names); i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

void pd_opt_hyper_from(pd_opt_hyper *h, const pd_optimizer_desc *o, long step)
{
    memset(h, 0, sizeof *h);
    h->type = pd_opt_from_name(o->type);
    h->lr = (float)o->learning_rate;
    h->momentum = (float)o->momentum;
    h->beta1 = (float)o->beta1;
    h->beta2 = (float)o->beta2;
    h->epsilon = (float)o->epsilon;
    h->rho = (float)o->rho;
    h->weight_decay = (float)o->weight_decay;
    h->nesterov = o->nesterov;
    h->t = step;
}

/* --- layers' helpers ------------------------------------------------------ */

int pd_layer_reserve(pd_layer *l, int rows)
{
    if (rows <= l->cap_rows) return 0;
    int cap = l->cap_rows ? l->cap_rows : 16;
    while (cap < rows) cap *= 2;
    size_t bytes = (size_t)cap * l->size * sizeof(float);
    float *out = l->be->alloc(bytes), *grad = NULL;
    if (!l->is_data) grad = l->be->alloc(bytes);
    if (!out || (!l->is_data && !grad)) {
        l->be->free(out);
        l->be->free(grad);
        return pd_err_set(PD_ENOMEM, "layer '%s': cannot allocate %d rows of %d", l->d->name, cap, l->size);
    }
    l->be->free(l->out);
    l->be->free(l->grad);
    l->out = out;
    l->grad = grad;
    l->cap_rows = cap;
    return 0;
}

float *pd_layer_fscratch(pd_layer *l, size_t n)
{
    if (n > l->cap_fscratch) {
        l->be->free(l->fscratch);
        l->fscratch = l->be->alloc(n * sizeof(float));
        PD_ASSERT(l->fscratch);
        l->cap_fscratch = n;
    }
    return l->fscratch;
}

int32_t *pd_layer_iscratch(pd_layer *l, size_t n)
{
    if (n > l->cap_iscratch) {
        l->be->free(l->iscratch);
        l->iscratch = l->be->alloc(n * sizeof(int32_t));
        PD_ASSERT(l->iscratch);
        l->cap_iscratch = n;
    }
    return l->iscratch;
}

void pd_param_touch(pd_param *p, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (p->mark[id]) continue;
        p->mark[id] = 1;
        PD_GROW(&p->touched, &p->cap_touched, p->ntouched + 1);
        p->touched[p->ntouched++] = id;
    }
}

/* --- building ------------------------------------------------------------ */

static int add_param(pd_net *net, const pd_param_desc *d, pd_param **out)
{
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (strcmp(p->name, d->name) == 0) {
            if (p->rows != d->rows || p->cols != d->cols)
                return pd_err_set(PD_ERECIPE, "parameter '%s' is shared with shapes %dx%d and %dx%d",
                                  d->name, p->rows, p->cols, d->rows, d->cols);
            *out = p;
            return 0;
        }
    }
    pd_param *p = &net->params[net->nparams++];
    memset(p, 0, sizeof *p);
    p->name = pd_xstrdup(d->name);
    p->rows = d->rows;
    p->cols = d->cols;
    p->sparse = d->sparse;
    p->init = d->init;
    size_t n = (size_t)p->rows * p->cols;
    p->w = net->be->alloc(n * sizeof(float));
    p->g = net->be->alloc(n * sizeof(float));
    if (!p->w || !p->g)
        return pd_err_set(PD_ENOMEM, "parameter '%s': cannot allocate %dx%d floats", p->name, p->rows, p->cols);
    float *host = pd_xmalloc(n * sizeof(float));
    pd_init_fill(&p->init, host, p->rows, p->cols, &net->rng);
    net->be->upload(p->w, host, n * sizeof(float));
    free(host);
    net->be->zero(p->g, n * sizeof(float));
    if (p->sparse) p->mark = pd_xcalloc((size_t)p->rows, 1);
    *out = p;
    return 0;
}

int pd_net_build(pd_net *net, const pd_recipe *r, const pd_backend *be, uint64_t seed)
{
    int rc;
    memset(net, 0, sizeof *net);
    net->be = be;
    net->r = r;
    net->rng = seed * 0x2545F4914F6CDD1Dull + 1;
    net->cost = r->cost;
    net->predict = r->predict;
    net->nlayers = r->nlayers;
    net->layers = pd_xcalloc((size_t)r->nlayers + 1, sizeof *net->layers);
    int maxp = 0;
    for (int i = 0; i < r->nlayers; i++) maxp += r->layers[i].nparams;
    net->params = pd_xcalloc((size_t)maxp + 1, sizeof *net->params);

    for (int i = 0; i < r->nlayers; i++) {
        const pd_layer_desc *d = &r->layers[i];
        pd_layer *l = &net->layers[i];
        l->d = d;
        l->net = net;
        l->be = be;
        l->index = i;
        l->size = d->size;
        l->slot = -1;
        l->ops = pd_layer_ops_find(d->type);
        if (!l->ops) {
            rc = pd_err_set(PD_ERECIPE, "%s: unknown layer type '%s'", d->where ? d->where : r->path, d->type);
            goto err;
        }
        l->is_data = strcmp(d->type, "data") == 0;
        l->nin = d->ninputs;
        for (int j = 0; j < d->ninputs; j++) {
            if (d->inputs[j] < 0 || d->inputs[j] >= i) {
                rc = pd_err_set(PD_ERECIPE, "layer '%s': bad input index", d->name);
                goto err;
            }
            l->in[j] = &net->layers[d->inputs[j]];
        }
        for (int j = 0; j < d->nparams; j++)
            if ((rc = add_param(net, &d->params[j], &l->p[j])) < 0) goto err;
        if (l->ops->setup && (rc = l->ops->setup(l)) < 0) {
            pd_err_wrap(rc, "%s: layer '%s'", d->where ? d->where : r->path, d->name);
            goto err;
        }
    }
    if (net->cost < 0 || net->cost >= net->nlayers) {
        rc = pd_err_set(PD_ERECIPE, "%s: the model has no cost layer", r->path);
        goto err;
    }
    return 0;
err:
    pd_net_free(net);
    return rc;
}

void pd_net_free(pd_net *net)
{
    if (!net->be) return;
    const pd_backend *be = net->be;
    for (int i = 0; i < net->nlayers; i++) {
        pd_layer *l = &net->layers[i];
        if (l->ops && l->ops->free) l->ops->free(l);
        if (!(l->is_data && be->host_memory)) be->free(l->out); /* else: the batch's */
        be->free(l->grad);
        be->free(l->fscratch);
        be->free(l->iscratch);
        if (!be->host_memory && l->is_data) {
            be->free(l->ids);
            be->free(l->offsets);
        }
    }
    free(net->layers);
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        free(p->name);
        be->free(p->w);
        be->free(p->g);
        be->free(p->s1);
        be->free(p->s2);
        free(p->touched);
        free(p->mark);
    }
    free(net->params);
    memset(net, 0, sizeof *net);
}

pd_param *pd_net_param(pd_net *net, const char *name)
{
    for (int i = 0; i < net->nparams; i++)
        if (strcmp(net->params[i].name, name) == 0) return &net->params[i];
    return NULL;
}

/* --- binding a batch ------------------------------------------------------ */

static int slot_kind(const char *kind)
{
    if (strcmp(kind, "id") == 0) return PD_SLOT_ID;
    if (strcmp(kind, "id_list") == 0) return PD_SLOT_ID_LIST;
    return PD_SLOT_DENSE;
}

static int upload_ids(pd_layer *l, const int32_t *h, int n, int32_t **dev, int *cap)
{
    if (l->be->host_memory) {
        *dev = (int32_t *)h;
        return 0;
    }
    if (n > *cap) {
        l->be->free(*dev);
        *dev = l->be->alloc((size_t)n * sizeof(int32_t));
        if (!*dev) return pd_err_set(PD_ENOMEM, "cannot allocate %d ids", n);
        *cap = n;
    }
    l->be->upload(*dev, h, (size_t)n * sizeof(int32_t));
    return 0;
}

int pd_net_bind(pd_net *net, const pd_batch *b)
{
    int rc;
    net->n = b->n;
    for (int i = 0; i < net->nlayers; i++) {
        pd_layer *l = &net->layers[i];
        if (!l->is_data) continue;
        const pd_layer_desc *d = l->d;
        const pd_slot *s = NULL;
        if (l->slot >= 0 && l->slot < b->nslots && strcmp(b->slots[l->slot].name, d->slot) == 0)
            s = &b->slots[l->slot];
        for (int k = 0; !s && k < b->nslots; k++)
            if (strcmp(b->slots[k].name, d->slot) == 0) {
                s = &b->slots[k];
                l->slot = k;
            }
        if (!s) {
            char have[512] = "";
            for (int k = 0; k < b->nslots; k++) {
                size_t len = strlen(have);
                snprintf(have + len, sizeof have - len, "%s%s", k ? ", " : "", b->slots[k].name);
            }
            return pd_err_set(PD_ERECIPE, "%s: data layer '%s' reads slot '%s', but the reader gives [%s]",
                              d->where ? d->where : "model", d->name, d->slot, have);
        }
        int want = slot_kind(d->kind);
        if (s->kind != want || (want == PD_SLOT_DENSE && s->width != d->size))
            return pd_err_set(PD_ERECIPE, "%s: data layer '%s' is %s of %d but slot '%s' of the reader is %s of %d",
                              d->where ? d->where : "model", d->name, d->kind,
                              want == PD_SLOT_DENSE ? d->size : d->range, s->name,
                              s->kind == PD_SLOT_DENSE ? "dense" : s->kind == PD_SLOT_ID ? "id" : "id_list",
                              s->width);
        l->n = b->n;
        if (want == PD_SLOT_DENSE) {
            l->rows = b->n;
            if (net->be->host_memory) {
                l->out = s->values;
            } else {
                if ((rc = pd_layer_reserve(l, b->n)) < 0) return rc;
                net->be->upload(l->out, s->values, (size_t)b->n * s->width * sizeof(float));
            }
            continue;
        }
        int nids = want == PD_SLOT_ID ? b->n : s->offsets[b->n];
        for (int k = 0; k < nids; k++)
            if (s->ids[k] < 0 || s->ids[k] >= d->range)
                return pd_err_set(PD_EDATA, "slot '%s': id %d is outside [0, %d) declared by %s",
                                  s->name, s->ids[k], d->range, d->where ? d->where : d->name);
        l->rows = nids;
        l->h_ids = s->ids;
        if ((rc = upload_ids(l, s->ids, nids, &l->ids, &l->cap_ids)) < 0) return rc;
        if (want == PD_SLOT_ID_LIST) {
            l->h_offsets = s->offsets;
            if ((rc = upload_ids(l, s->offsets, b->n + 1, &l->offsets, &l->cap_offsets)) < 0) return rc;
        }
    }
    net->bound_layout = 1;
    return 0;
}

/* --- forward, backward, update --------------------------------------------- */

double pd_net_forward(pd_net *net)
{
    for (int i = 0; i < net->nlayers; i++) {
        pd_layer *l = &net->layers[i];
        if (l->is_data) continue;
        l->n = net->n;
        l->ops->forward(l);
    }
    return pd_net_mean(net, net->cost);
}

double pd_net_mean(pd_net *net, int layer)
{
    pd_layer *l = &net->layers[layer];
    if (l->rows == 0) return 0;
    size_t n = (size_t)l->rows * l->size;
    const float *h = l->out;
    float *copy = NULL;
    if (!net->be->host_memory) {
        h = copy = pd_xmalloc(n * sizeof(float));
        net->be->download(copy, l->out, n * sizeof(float));
    }
    double s = 0;
    for (size_t i = 0; i < n; i++) s += h[i];
    free(copy);
    return s / l->rows;
}

static void zero_param_grads(pd_net *net)
{
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (!p->sparse) {
            net->be->zero(p->g, (size_t)p->rows * p->cols * sizeof(float));
            continue;
        }
        for (int k = 0; k < p->ntouched; k++) {
            net->be->zero(p->g + (size_t)p->touched[k] * p->cols, (size_t)p->cols * sizeof(float));
            p->mark[p->touched[k]] = 0;
        }
        p->ntouched = 0;
    }
}

void pd_net_backward(pd_net *net)
{
    zero_param_grads(net);
    /* only layers the cost depends on take part */
    uint8_t *live = pd_xcalloc((size_t)net->nlayers, 1);
    live[net->cost] = 1;
    for (int i = net->cost; i >= 0; i--) {
        if (!live[i]) continue;
        pd_layer *l = &net->layers[i];
        for (int j = 0; j < l->nin; j++) live[l->in[j]->index] = 1;
    }
    for (int i = 0; i < net->nlayers; i++) {
        pd_layer *l = &net->layers[i];
        if (live[i] && !l->is_data && l->grad)
            net->be->zero(l->grad, (size_t)l->rows * l->size * sizeof(float));
    }
    for (int i = net->cost; i >= 0; i--) {
        pd_layer *l = &net->layers[i];
        if (!live[i] || l->is_data) continue;
        l->ops->backward(l);
    }
    free(live);
}

static int ensure_state(pd_net *net, pd_param *p, int type)
{
    int k = pd_opt_state_floats(type);
    size_t bytes = (size_t)p->rows * p->cols * sizeof(float);
    if (k >= 1 && !p->s1) {
        if (!(p->s1 = net->be->alloc(bytes))) return PD_ENOMEM;
        net->be->zero(p->s1, bytes);
    }
    if (k >= 2 && !p->s2) {
        if (!(p->s2 = net->be->alloc(bytes))) return PD_ENOMEM;
        net->be->zero(p->s2, bytes);
    }
    return 0;
}

void pd_net_update(pd_net *net, const pd_optimizer_desc *o, long step)
{
    pd_opt_hyper h;
    pd_opt_hyper_from(&h, o, step);
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        PD_ASSERT(ensure_state(net, p, h.type) == 0);
        if (!p->sparse) {
            net->be->opt_update(&h, p->w, p->g, p->s1, p->s2, (size_t)p->rows * p->cols);
            continue;
        }
        for (int k = 0; k < p->ntouched; k++) {
            size_t off = (size_t)p->touched[k] * p->cols;
            net->be->opt_update(&h, p->w + off, p->g + off, p->s1 ? p->s1 + off : NULL,
                                p->s2 ? p->s2 + off : NULL, (size_t)p->cols);
        }
    }
}
