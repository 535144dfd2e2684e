/*
 * net.c - building a network from a recipe, binding batches, the forward and
 * backward loops, parameter initialisation and local optimizer updates.
 */
#include "net.h"
#include "npy.h"
#include "../core/pd.h"
#include "../core/rng.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n values of w; fan: fan in + fan out, for xavier */
static void init_values(const pd_init *init, float *w, size_t n, double fan, uint64_t *rng)
{
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
        double lim = sqrt(6.0 / fan);
        for (size_t i = 0; i < n; i++) w[i] = (float)(lim * (2 * pd_rng_uniform(rng) - 1));
    }
}

void pd_init_fill(const pd_init *init, float *w, int rows, int cols, uint64_t *rng)
{
    init_values(init, w, (size_t)rows * cols, (double)rows + cols, rng);
}

void pd_init_row(const pd_init *init, const char *table, uint64_t seed, uint64_t id, float *w, int cols)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the table's name */
    for (const char *c = table; *c; c++) h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
    uint64_t rng = pd_hash_id(id ^ pd_hash_id(h ^ pd_hash_id(seed)));
    /* one row; xavier over a table without rows: fan in = fan out = cols */
    init_values(init, w, (size_t)cols, 2.0 * cols, &rng);
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

static int layer_verr(int code, const pd_layer *l, const char *fmt, va_list ap)
{
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    const pd_layer_desc *d = l->d;
    return pd_err_set(code, "%s%slayer '%s' (%s): %s", d->where ? d->where : "", d->where ? ": " : "",
                      d->name ? d->name : "?", d->type ? d->type : "?", text);
}

int pd_layer_fail(const pd_layer *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = layer_verr(PD_EINVAL, l, fmt, ap);
    va_end(ap);
    return rc;
}

static int layer_nomem(const pd_layer *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int layer_nomem(const pd_layer *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = layer_verr(PD_ENOMEM, l, fmt, ap);
    va_end(ap);
    return rc;
}

/* "4.0 GB" */
static const char *size_text(double bytes, char *buf, size_t len)
{
    static const char *units[] = {"bytes", "KB", "MB", "GB", "TB", "PB", "EB"};
    int u = 0;
    while (bytes >= 1024 && u < (int)PD_COUNT(units) - 1) bytes /= 1024, u++;
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}

int pd_layer_reserve(pd_layer *l, int rows)
{
    if (rows <= l->cap_rows) return 0;
    size_t cap = l->cap_rows ? (size_t)l->cap_rows : 16;
    while (cap < (size_t)rows) cap *= 2;
    if (cap > INT_MAX) cap = (size_t)rows;
    size_t width = l->size > 0 ? (size_t)l->size : 1, nbuf = l->is_data ? 1 : 2;
    char text[32];
    if (cap > SIZE_MAX / sizeof(float) / width / nbuf)
        return layer_nomem(l, "cannot allocate %s for %d x %d outputs",
                           size_text((double)rows * width * nbuf * sizeof(float), text, sizeof text), rows, l->size);
    size_t bytes = cap * width * sizeof(float);
    float *out = l->be->alloc(bytes), *grad = NULL;
    if (!l->is_data && out) grad = l->be->alloc(bytes);
    if (!out || (!l->is_data && !grad)) {
        l->be->free(out);
        return layer_nomem(l, "cannot allocate %s for %zu x %d outputs%s",
                           size_text((double)bytes * nbuf, text, sizeof text), cap, l->size,
                           l->is_data ? "" : " and their gradients");
    }
    l->be->free(l->out);
    l->be->free(l->grad);
    l->out = out;
    l->grad = grad;
    l->cap_rows = (int)cap;
    return 0;
}

float *pd_layer_fscratch(pd_layer *l, size_t n)
{
    if (n > l->cap_fscratch) {
        char text[32];
        l->be->free(l->fscratch);
        l->cap_fscratch = 0;
        l->fscratch = n <= SIZE_MAX / sizeof(float) ? l->be->alloc(n * sizeof(float)) : NULL;
        if (!l->fscratch) {
            layer_nomem(l, "cannot allocate %s of scratch", size_text((double)n * sizeof(float), text, sizeof text));
            return NULL;
        }
        l->cap_fscratch = n;
    }
    return l->fscratch;
}

int32_t *pd_layer_iscratch(pd_layer *l, size_t n)
{
    if (n > l->cap_iscratch) {
        char text[32];
        l->be->free(l->iscratch);
        l->cap_iscratch = 0;
        l->iscratch = n <= SIZE_MAX / sizeof(int32_t) ? l->be->alloc(n * sizeof(int32_t)) : NULL;
        if (!l->iscratch) {
            layer_nomem(l, "cannot allocate %s of scratch", size_text((double)n * sizeof(int32_t), text, sizeof text));
            return NULL;
        }
        l->cap_iscratch = n;
    }
    return l->iscratch;
}

/* --- setup checks ------------------------------------------------------------ */

int pd_layer_check(const pd_layer *l, int nin, int size)
{
    if (nin >= 0 && l->nin != nin)
        return pd_layer_fail(l, "takes %d input%s, the description gives %d", nin, nin == 1 ? "" : "s", l->nin);
    if (nin < 0 && l->nin < 1) return pd_layer_fail(l, "takes at least one input, the description gives none");
    if (size >= 0 && l->size != size) return pd_layer_fail(l, "has width %d, expected %d", l->size, size);
    if (l->d->seq && strcmp(l->d->type, "embedding") && !l->is_data)
        return pd_layer_fail(l, "is marked as a sequence, but only id_list data and their embeddings are");
    return 0;
}

int pd_layer_need_dense(const pd_layer *l, int j, int width)
{
    const pd_layer *x = l->in[j];
    if (x->is_data && strcmp(x->d->kind, "dense"))
        return pd_layer_fail(l, "input %d '%s' holds ids (%s), a dense input is needed", j + 1, x->d->name,
                             x->d->kind);
    if (x->d->seq) return pd_layer_fail(l, "input %d '%s' is a sequence; pool it first", j + 1, x->d->name);
    if (width >= 0 && x->size != width)
        return pd_layer_fail(l, "input %d '%s' has width %d, expected %d", j + 1, x->d->name, x->size, width);
    return 0;
}

int pd_layer_setup_pair(pd_layer *l)
{
    int rc;
    if ((rc = pd_layer_check(l, 2, 1)) < 0 || (rc = pd_layer_need_dense(l, 0, -1)) < 0 ||
        (rc = pd_layer_need_dense(l, 1, l->in[0]->size)) < 0)
        return rc;
    return 0;
}

int pd_layer_need_ids(const pd_layer *l, int j, int lists)
{
    const pd_layer *x = l->in[j];
    if (!x->is_data || !(strcmp(x->d->kind, "id") == 0 || (lists && strcmp(x->d->kind, "id_list") == 0)))
        return pd_layer_fail(l, "input %d '%s' must be an id%s data layer", j + 1, x->d->name,
                             lists ? " or id_list" : "");
    return 0;
}

int pd_layer_need_param(const pd_layer *l, int j, int rows, int cols)
{
    const pd_param *p = j < l->d->nparams ? l->p[j] : NULL;
    if (!p) return pd_layer_fail(l, "needs a parameter %d", j + 1);
    if (p->rows != rows || p->cols != cols)
        return pd_layer_fail(l, "parameter '%s' is %dx%d, expected %dx%d", p->name, p->rows, p->cols, rows, cols);
    return 0;
}

/* --- growing tables ----------------------------------------------------------- */

static int upload_ids(pd_layer *l, const int32_t *h, int n, int32_t **dev, int *cap);

void pd_hash_update(pd_hashtab *tab, const pd_init *init, int cols, const uint64_t *keys, const float *g, int n,
                    const pd_opt_hyper *h, uint64_t seed)
{
    int k = tab->rows.width / cols - 1;
    for (int i = 0; i < n; i++) {
        int created;
        float *row = pd_hashtab_update(tab, keys[i], &created);
        if (!row) continue; /* not admitted yet: the gradient was counted */
        if (created) pd_init_row(init, tab->name, seed, keys[i], row, cols);
        pd_backend_cpu.opt_update(h, row, g + (size_t)i * cols, k > 0 ? row + cols : NULL,
                                  k > 1 ? row + 2 * cols : NULL, (size_t)cols);
    }
}

void pd_param_fill_local(pd_net *net, pd_param *p)
{
    float *host = net->be->host_memory ? p->w : pd_xmalloc((size_t)p->nkeys * p->cols * sizeof(float) + 1);
    for (int i = 0; i < p->nkeys; i++) {
        float *dst = host + (size_t)i * p->cols, *row = pd_hashtab_find(p->tab, p->keys[i]);
        if (row) memcpy(dst, row, (size_t)p->cols * sizeof(float));
        else pd_init_row(&p->init, p->name, net->seed, p->keys[i], dst, p->cols);
    }
    if (!net->be->host_memory) {
        net->be->upload(p->w, host, (size_t)p->nkeys * p->cols * sizeof(float));
        free(host);
    }
}

/* The row of key among p's bound ids, added when new. */
static int32_t map_key(pd_param *p, uint64_t key)
{
    if ((size_t)(p->nkeys + 1) * 2 > p->kmap_cap) {
        size_t cap = p->kmap_cap ? p->kmap_cap * 2 : 1024;
        free(p->kmap);
        p->kmap = pd_xmalloc(cap * sizeof *p->kmap);
        memset(p->kmap, 0xff, cap * sizeof *p->kmap);
        p->kmap_cap = cap;
        for (int i = 0; i < p->nkeys; i++) {
            size_t h = pd_hash_id(p->keys[i]) & (cap - 1);
            while (p->kmap[h] >= 0) h = (h + 1) & (cap - 1);
            p->kmap[h] = i;
        }
    }
    size_t mask = p->kmap_cap - 1, h = pd_hash_id(key) & mask;
    while (p->kmap[h] >= 0) {
        if (p->keys[p->kmap[h]] == key) return p->kmap[h];
        h = (h + 1) & mask;
    }
    PD_GROW(&p->keys, &p->cap_keys, p->nkeys + 1);
    p->keys[p->nkeys] = key;
    p->kmap[h] = p->nkeys;
    return p->nkeys++;
}

/* Room in w and g for rows rows (contents dropped; g zero). */
static int hash_reserve(pd_net *net, pd_param *p, int rows)
{
    if (rows <= p->rows) return 0;
    int cap = p->rows > 0 ? p->rows : 256;
    while (cap < rows) cap *= 2;
    size_t bytes = (size_t)cap * p->cols * sizeof(float);
    net->be->free(p->w);
    net->be->free(p->g);
    p->w = net->be->alloc(bytes);
    p->g = net->be->alloc(bytes);
    p->rows = 0;
    if (!p->w || !p->g)
        return pd_err_set(PD_ENOMEM, "table '%s': cannot allocate %d rows of %d floats", p->name, cap, p->cols);
    net->be->zero(p->g, bytes);
    free(p->mark);
    p->mark = pd_xcalloc((size_t)cap, 1);
    p->ntouched = 0;
    p->dids_touched = 0;
    p->rows = cap;
    return 0;
}

/* After a bind: every growing table's rows for the batch's ids. */
static int bind_hash(pd_net *net)
{
    int rc;
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (!p->hash) continue;
        p->nkeys = 0;
        if (p->kmap) memset(p->kmap, 0xff, p->kmap_cap * sizeof *p->kmap);
    }
    for (int i = 0; i < net->nlayers; i++) {
        pd_layer *l = &net->layers[i];
        if (l->is_data || !l->p[0] || !l->p[0]->hash || strcmp(l->d->type, "embedding")) continue;
        pd_layer *x = l->in[0];
        PD_GROW(&l->h_lids, &l->cap_h_lids, x->rows + 1);
        for (int k = 0; k < x->rows; k++) l->h_lids[k] = map_key(l->p[0], x->h_keys[k]);
        if ((rc = upload_ids(l, l->h_lids, x->rows, &l->lids, &l->cap_lids)) < 0) return rc;
    }
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (!p->hash) continue;
        if ((rc = hash_reserve(net, p, p->nkeys)) < 0) return rc;
        if (net->fill_rows) {
            if ((rc = net->fill_rows(net->fill_ctx, net, p)) < 0) return rc;
        } else {
            pd_param_fill_local(net, p);
        }
    }
    return 0;
}

void pd_param_touch(pd_param *p, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (p->mark[id]) continue;
        p->mark[id] = 1;
        PD_GROW(&p->touched, &p->cap_touched, p->ntouched + 1);
        p->touched[p->ntouched++] = id;
        p->dids_touched = 0;
    }
}

/* *buf on the backend with room for n items of size bytes (grown, never
 * shrunk); 0, or PD_ENOMEM naming p. */
static int dev_room(pd_net *net, pd_param *p, void **buf, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap && *buf) return 0;
    size_t want = *cap ? *cap : 256;
    while (want < n) want *= 2;
    net->be->free(*buf);
    *cap = 0;
    if (want > SIZE_MAX / size || !(*buf = net->be->alloc(want * size)))
        return pd_err_set(PD_ENOMEM, "parameter '%s': no room on the device for %zu rows' transfer", p->name, n);
    *cap = want;
    return 0;
}

const int32_t *pd_param_touched_ids(pd_net *net, pd_param *p)
{
    if (net->be->host_memory) {
        PD_GROW(&p->touched, &p->cap_touched, 1); /* never NULL */
        return p->touched;
    }
    if (p->dids_touched) return p->dids;
    if (dev_room(net, p, (void **)&p->dids, &p->cap_dids, (size_t)p->ntouched, sizeof(int32_t)) < 0) return NULL;
    net->be->upload(p->dids, p->touched, (size_t)p->ntouched * sizeof(int32_t));
    p->dids_touched = 1;
    return p->dids;
}

const float *pd_param_touched_grads(pd_net *net, pd_param *p)
{
    size_t n = (size_t)p->ntouched * p->cols;
    if (n > p->cap_hrows || !p->hrows) {
        free(p->hrows);
        p->hrows = pd_xmalloc((n + 1) * sizeof(float));
        p->cap_hrows = n;
    }
    if (net->be->host_memory) {
        net->be->gather(p->hrows, p->g, p->touched, p->ntouched, p->cols);
        return p->hrows;
    }
    const int32_t *ids = pd_param_touched_ids(net, p);
    if (!ids || dev_room(net, p, (void **)&p->drows, &p->cap_drows, n, sizeof(float)) < 0) return NULL;
    net->be->gather(p->drows, p->g, ids, p->ntouched, p->cols);
    net->be->download(p->hrows, p->drows, n * sizeof(float));
    return p->hrows;
}

int pd_param_set_rows(pd_net *net, pd_param *p, const int32_t *ids, const float *vals, int n)
{
    size_t cols = (size_t)p->cols;
    if (net->be->host_memory) {
        net->be->set_rows(p->w, vals, ids, n, p->cols);
        return 0;
    }
    int rc;
    if ((rc = dev_room(net, p, (void **)&p->dids, &p->cap_dids, (size_t)n, sizeof(int32_t))) < 0 ||
        (rc = dev_room(net, p, (void **)&p->drows, &p->cap_drows, (size_t)n * cols, sizeof(float))) < 0)
        return rc;
    p->dids_touched = 0;
    net->be->upload(p->dids, ids, (size_t)n * sizeof(int32_t));
    net->be->upload(p->drows, vals, (size_t)n * cols * sizeof(float));
    net->be->set_rows(p->w, p->drows, p->dids, n, p->cols);
    return 0;
}

/* --- building ------------------------------------------------------------ */

static int add_param(pd_net *net, const pd_param_desc *d, pd_param **out)
{
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (strcmp(p->name, d->name) == 0) {
            if ((!p->hash && p->rows != d->rows) || p->cols != d->cols || p->hash != d->hash)
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
    p->hash = d->hash;
    *out = p;
    if (net->shapes_only) return 0;
    if (p->hash) {
        pd_hashtab_limits lim = {.min_count = d->min_count, .ttl = d->ttl, .max_rows = d->max_rows};
        p->tab = pd_xmalloc(sizeof *p->tab);
        pd_hashtab_init(p->tab, p->name, pd_hash_width(p->cols, net->opt_state), &lim);
        p->rows = 0;
        return hash_reserve(net, p, 256);
    }
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

/* What the layer loop and the layers' setup rely on before they look. */
static int check_desc(const pd_recipe *r, const pd_layer_desc *d, int i)
{
    const char *where = d->where ? d->where : r->path ? r->path : "model";
    if (!d->name || !d->type) return pd_err_set(PD_EINVAL, "%s: layer %d has no name or no type", where, i);
    if (d->ninputs < 0 || d->ninputs > PD_MAX_INPUTS || d->nparams < 0 || d->nparams > 2)
        return pd_err_set(PD_EINVAL, "%s: layer '%s' (%s): %d inputs and %d parameters (at most %d and 2)", where,
                          d->name, d->type, d->ninputs, d->nparams, PD_MAX_INPUTS);
    if (d->size <= 0) return pd_err_set(PD_EINVAL, "%s: layer '%s' (%s): width %d", where, d->name, d->type, d->size);
    for (int j = 0; j < d->ninputs; j++)
        if (d->inputs[j] < 0 || d->inputs[j] >= i)
            return pd_err_set(PD_EINVAL, "%s: layer '%s' (%s): input %d is layer %d, not one before it", where,
                              d->name, d->type, j + 1, d->inputs[j]);
    for (int j = 0; j < d->nparams; j++) {
        const pd_param_desc *p = &d->params[j];
        if (pd_param_name_check(p->name) < 0)
            return pd_err_wrap(PD_EINVAL, "%s: layer '%s' (%s)", where, d->name, d->type);
        if (p->rows < 0 || (p->rows == 0 && !p->hash) || p->cols <= 0 ||
            (size_t)p->rows * (size_t)p->cols > (size_t)INT_MAX)
            return pd_err_set(PD_EINVAL, "%s: layer '%s' (%s): parameter '%s' is %dx%d", where, d->name, d->type,
                              p->name, p->rows, p->cols);
    }
    return 0;
}

static int build_layer(pd_net *net, int i)
{
    const pd_recipe *r = net->r;
    const pd_layer_desc *d = &r->layers[i];
    pd_layer *l = &net->layers[i];
    int rc;
    if ((rc = check_desc(r, d, i)) < 0) return rc;
    l->d = d;
    l->net = net;
    l->be = net->be;
    l->index = i;
    l->size = d->size;
    l->slot = -1;
    l->ops = pd_layer_ops_find(d->type);
    if (!l->ops)
        return pd_err_set(PD_EINVAL, "%s: unknown layer type '%s'", d->where ? d->where : r->path ? r->path : "model",
                          d->type);
    l->is_data = strcmp(d->type, "data") == 0;
    l->nin = d->ninputs;
    for (int j = 0; j < d->ninputs; j++) l->in[j] = &net->layers[d->inputs[j]];
    for (int j = 0; j < d->nparams; j++) {
        if ((rc = add_param(net, &d->params[j], &l->p[j])) < 0) return rc;
        l->p[j]->users++;
    }
    return l->ops->setup ? l->ops->setup(l) : 0;
}

static int build(pd_net *net, const pd_recipe *r, const pd_backend *be, uint64_t seed, int shapes_only)
{
    int rc;
    memset(net, 0, sizeof *net);
    net->shapes_only = shapes_only;
    net->be = be;
    net->r = r;
    net->rng = seed * 0x2545F4914F6CDD1Dull + 1;
    net->seed = seed;
    net->opt_state = pd_opt_state_floats(pd_opt_from_name(r->optimizer.type));
    if (net->opt_state < 0) net->opt_state = 0;
    net->cost = r->cost;
    net->predict = r->predict;
    net->nlayers = r->nlayers;
    net->layers = pd_xcalloc((size_t)r->nlayers + 1, sizeof *net->layers);
    int maxp = 0;
    for (int i = 0; i < r->nlayers; i++)
        maxp += r->layers[i].nparams > 0 && r->layers[i].nparams <= 2 ? r->layers[i].nparams : 0;
    net->params = pd_xcalloc((size_t)maxp + 1, sizeof *net->params);
    for (int i = 0; i < r->nlayers; i++) {
        if ((rc = build_layer(net, i)) < 0) {
            net->nlayers = i + 1; /* free what was made */
            goto err;
        }
    }
    if (net->cost < 0 || net->cost >= net->nlayers) {
        rc = pd_err_set(PD_ERECIPE, "%s: the model has no cost layer", r->path);
        goto err;
    }
    if (net->predict < -1 || net->predict >= net->nlayers) {
        rc = pd_err_set(PD_EINVAL, "%s: prediction layer %d is not in the model", r->path, net->predict);
        goto err;
    }
    for (int i = 0; i < r->nmetrics; i++)
        if (r->metrics[i].layer < 0 || r->metrics[i].layer >= net->nlayers) {
            rc = pd_err_set(PD_EINVAL, "%s: metric '%s' reads layer %d, not in the model", r->path,
                            r->metrics[i].name ? r->metrics[i].name : "?", r->metrics[i].layer);
            goto err;
        }
    return 0;
err:
    pd_net_free(net);
    return rc;
}

int pd_net_build(pd_net *net, const pd_recipe *r, const pd_backend *be, uint64_t seed)
{
    return build(net, r, be, seed, 0);
}

int pd_net_check(const pd_recipe *r, const pd_backend *be)
{
    pd_net net;
    int rc = build(&net, r, be, 0, 1);
    if (rc == 0) pd_net_free(&net);
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
        if (!be->host_memory) be->free(l->lids);
        free(l->h_lids);
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
        be->free(p->dids);
        be->free(p->drows);
        free(p->hrows);
        free(p->mark);
        free(p->keys);
        free(p->kmap);
        if (p->tab) pd_hashtab_free(p->tab);
        free(p->tab);
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
        *cap = 0;
        *dev = l->be->alloc((size_t)n * sizeof(int32_t));
        if (!*dev) return layer_nomem(l, "cannot allocate %d ids", n);
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
        if ((d->range == 0) != (s->width == 0))
            return pd_err_set(PD_ERECIPE, "%s: data layer '%s' has %s but slot '%s' of the reader gives %s",
                              d->where ? d->where : "model", d->name, d->range ? "an id range" : "no id range",
                              s->name, s->width ? "ids of a range" : "64-bit ids");
        if (d->range == 0) {
            l->rows = nids;
            l->h_keys = s->keys;
            if (want == PD_SLOT_ID_LIST) {
                l->h_offsets = s->offsets;
                if ((rc = upload_ids(l, s->offsets, b->n + 1, &l->offsets, &l->cap_offsets)) < 0) return rc;
            }
            continue;
        }
        for (int k = 0; k < nids; k++)
            if (s->ids[k] < 0 || s->ids[k] >= d->range)
                return pd_err_set(PD_EINPUT, "slot '%s': id %d is outside [0, %d) declared by %s",
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
    return bind_hash(net);
}

int pd_net_batch_ids(const pd_layer *x, const pd_batch *b, const int32_t **ids)
{
    if (!x->is_data || x->slot < 0 || x->slot >= b->nslots || x->d->range <= 0) return -1;
    const pd_slot *s = &b->slots[x->slot];
    int kind = slot_kind(x->d->kind);
    if (strcmp(s->name, x->d->slot) != 0 || s->kind != kind || s->width == 0 || !s->ids) return -1;
    if (kind != PD_SLOT_ID && (kind != PD_SLOT_ID_LIST || !s->offsets)) return -1;
    int n = kind == PD_SLOT_ID ? b->n : s->offsets[b->n];
    if (n < 0) return -1;
    for (int k = 0; k < n; k++)
        if (s->ids[k] < 0 || s->ids[k] >= x->d->range) return -1;
    *ids = s->ids;
    return n;
}

/* --- forward, backward, update --------------------------------------------- */

/* Layer l's parameters, their values complete (pd_net.values_wanted). */
static int values_of(pd_net *net, pd_layer *l)
{
    for (int k = 0; k < 2; k++) {
        int rc = l->p[k] ? net->values_wanted(net->values_ctx, net, l->p[k]) : 0;
        if (rc < 0) return rc;
    }
    return 0;
}

int pd_net_forward(pd_net *net, double *cost)
{
    int rc;
    for (int i = 0; i < net->nlayers; i++) {
        pd_layer *l = &net->layers[i];
        if (l->is_data) continue;
        l->n = net->n;
        if (net->values_wanted && (rc = values_of(net, l)) < 0) return rc;
        if ((rc = l->ops->forward(l)) < 0) return rc;
    }
    if (net->values_wanted && (rc = net->values_wanted(net->values_ctx, net, NULL)) < 0) return rc;
    *cost = pd_net_mean(net, net->cost);
    return 0;
}

void pd_net_live(const pd_net *net, int layer, uint8_t *live)
{
    memset(live, 0, (size_t)net->nlayers);
    live[layer] = 1;
    for (int i = layer; i >= 0; i--) {
        if (!live[i]) continue;
        const pd_layer *l = &net->layers[i];
        for (int j = 0; j < l->nin; j++) live[l->in[j]->index] = 1;
    }
}

int pd_net_forward_to(pd_net *net, int layer)
{
    int rc = 0;
    uint8_t *live = pd_xmalloc((size_t)net->nlayers);
    pd_net_live(net, layer, live);
    for (int i = 0; i <= layer && rc == 0; i++) {
        pd_layer *l = &net->layers[i];
        if (!live[i] || l->is_data) continue;
        l->n = net->n;
        if (net->values_wanted && (rc = values_of(net, l)) < 0) break;
        rc = l->ops->forward(l);
    }
    if (rc == 0 && net->values_wanted) rc = net->values_wanted(net->values_ctx, net, NULL);
    free(live);
    return rc;
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

/* Dense gradients are not zeroed: their first writer overwrites them
 * (pd_param_grad_beta), and zero_unwritten_grads() zeroes those that no
 * layer wrote. Sparse ones have their touched rows zeroed. */
static int zero_param_grads(pd_net *net)
{
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (!p->sparse) {
            p->g_stale = 1;
            p->applied = 0;
            continue;
        }
        const int32_t *ids = pd_param_touched_ids(net, p);
        if (!ids) return PD_ENOMEM;
        net->be->zero_rows(p->g, ids, p->ntouched, p->cols);
        for (int k = 0; k < p->ntouched; k++) p->mark[p->touched[k]] = 0;
        p->ntouched = 0;
        p->dids_touched = 0;
    }
    return 0;
}

static void zero_unwritten_grads(pd_net *net)
{
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (p->sparse || !p->g_stale || p->applied) continue;
        net->be->zero(p->g, (size_t)p->rows * p->cols * sizeof(float));
        p->g_stale = 0;
    }
}

/* Per parameter: the lowest live layer that uses it (the last to write its
 * gradient in a backward), or -1. */
static int *last_writers(pd_net *net, const uint8_t *live)
{
    int *last = pd_xmalloc(((size_t)net->nparams + 1) * sizeof *last);
    for (int i = 0; i < net->nparams; i++) last[i] = -1;
    for (int i = 0; i < net->nlayers; i++) {
        pd_layer *l = &net->layers[i];
        if (!live[i] || l->is_data) continue;
        for (int k = 0; k < 2; k++)
            if (l->p[k] && last[l->p[k] - net->params] < 0) last[l->p[k] - net->params] = i;
    }
    return last;
}

/* After layer l's backward: name the parameters whose gradients it
 * finished (a dense one only if some layer wrote it). */
static int grads_ready(pd_net *net, pd_layer *l, int *last)
{
    for (int k = 0; k < 2; k++) {
        pd_param *p = l->p[k];
        if (!p || last[p - net->params] != l->index || (!p->sparse && p->g_stale)) continue;
        last[p - net->params] = -1; /* once */
        int rc = net->grad_ready(net->grad_ctx, net, p);
        if (rc < 0) return rc;
    }
    return 0;
}

int pd_net_backward(pd_net *net)
{
    int rc = zero_param_grads(net);
    if (rc < 0) return rc;
    /* only layers the cost depends on take part */
    uint8_t *live = pd_xcalloc((size_t)net->nlayers, 1);
    live[net->cost] = 1;
    for (int i = net->cost; i >= 0; i--) {
        if (!live[i]) continue;
        pd_layer *l = &net->layers[i];
        for (int j = 0; j < l->nin; j++) live[l->in[j]->index] = 1;
    }
    /* each gradient is written by its first writer (pd_layer_grad_beta) */
    for (int i = 0; i < net->nlayers; i++) net->layers[i].grad_stale = live[i] && !net->layers[i].is_data;
    int *last = net->grad_ready ? last_writers(net, live) : NULL;
    for (int i = net->cost; i >= 0; i--) {
        pd_layer *l = &net->layers[i];
        if (!live[i] || l->is_data) continue;
        pd_layer_grad_acc(l); /* zeros where no layer above wrote it (the cost's own) */
        if ((rc = l->ops->backward(l)) < 0) break;
        if (last && (rc = grads_ready(net, l, last)) < 0) break;
    }
    zero_unwritten_grads(net);
    free(live);
    free(last);
    return rc;
}

static int ensure_state(pd_net *net, pd_param *p, int type)
{
    int k = pd_opt_state_floats(type);
    size_t bytes = (size_t)p->rows * p->cols * sizeof(float);
    for (int j = 0; j < k && j < 2; j++) {
        float **s = j ? &p->s2 : &p->s1;
        if (*s) continue;
        if (!(*s = net->be->alloc(bytes)))
            return pd_err_set(PD_ENOMEM, "parameter '%s': cannot allocate the optimizer's state (%dx%d floats)",
                              p->name, p->rows, p->cols);
        net->be->zero(*s, bytes);
    }
    return 0;
}

/* Local training: p's touched rows into its tab. */
static int hash_step(pd_net *net, pd_param *p, const pd_opt_hyper *h)
{
    const float *g = pd_param_touched_grads(net, p);
    if (!g) return PD_ENOMEM;
    uint64_t *keys = pd_xmalloc((size_t)p->ntouched * sizeof *keys + 1);
    for (int k = 0; k < p->ntouched; k++) keys[k] = p->keys[p->touched[k]];
    pd_hash_update(p->tab, &p->init, p->cols, keys, g, p->ntouched, h, net->seed);
    free(keys);
    return 0;
}

int pd_net_update(pd_net *net, const pd_optimizer_desc *o, long step)
{
    pd_opt_hyper h;
    int rc;
    pd_opt_hyper_from(&h, o, step);
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (p->hash) {
            if ((rc = hash_step(net, p, &h)) < 0) return rc;
            continue;
        }
        if ((rc = ensure_state(net, p, h.type)) < 0) return rc;
        if (p->applied) { /* by its layer, in the backward */
            p->applied = 0;
            continue;
        }
        if (!p->sparse) {
            net->be->opt_update(&h, p->w, p->g, p->s1, p->s2, (size_t)p->rows * p->cols);
            continue;
        }
        const int32_t *ids = pd_param_touched_ids(net, p);
        if (!ids) return PD_ENOMEM;
        net->be->opt_update_rows(&h, p->w, p->g, p->s1, p->s2, ids, p->ntouched, p->cols);
    }
    return 0;
}
