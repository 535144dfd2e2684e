/*
 * test_layers.c - every layer type against finite differences, and the
 * forward values of every layer on cases worked out by hand.
 *
 * The networks are built without Lua: a pd_recipe is filled in C (data
 * layers, layers, parameters), built on the CPU backend and bound to a batch
 * of random values. gradcheck() then compares, in float32,
 *
 *   - every parameter gradient (for sparse tables every row: touched rows
 *     against finite differences, untouched rows must stay zero), and
 *   - the gradient flowing into every non-data layer the cost depends on
 *     (what the layers above send, before the layer's own backward),
 *
 * with central differences of the mean cost that fwd() returns
 * (float per-sample costs, summed in double), to a relative error of 1e-3.
 * Inputs are kept away from kinks and ill-conditioned points (relu near 0,
 * ties in max pooling, cos_sim of short vectors).
 *
 *     PD_GRAD_VERBOSE=1 build/musl/unit_tests grad_    worst errors per tensor
 */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/data/batch.h"
#include "../../src/nn/net.h"
#include "../../src/core/rng.h"
#include "../../src/nn/npy.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define TOL 1e-3
#define STEP 1e-2

/* --- building a model by hand ----------------------------------------------- */

#define MAXL 24

/* pd_net_forward that must succeed: the mean cost */
static double fwd(pd_net *net)
{
    double c = NAN;
    if (pd_net_forward(net, &c) < 0) pd_test_fail(__FILE__, __LINE__, "pd_net_forward: %s", pd_err_msg());
    return c;
}


typedef struct model {
    pd_recipe r;
    pd_layer_desc l[MAXL];
    char pname[MAXL][2][48];
    pd_slot layout[MAXL];
    int nslots;
    int maxlen;     /* id_list slots: sequences of 1..maxlen distinct ids */
    int empty_last; /* and the last sample's sequence empty */
} model;

static void model_init(model *m)
{
    memset(m, 0, sizeof *m);
    m->r.path = (char *)"test_layers.c";
    m->r.layers = m->l;
    m->r.cost = -1;
    m->r.predict = -1;
    m->maxlen = 4;
    m->empty_last = 1;
}

static int add_layer(model *m, const char *type, const char *name, int size, int in0, int in1)
{
    PD_ASSERT(m->r.nlayers < MAXL);
    int i = m->r.nlayers++;
    pd_layer_desc *d = &m->l[i];
    d->name = (char *)name;
    d->type = (char *)type;
    d->size = size;
    if (in0 >= 0) d->inputs[d->ninputs++] = in0;
    if (in1 >= 0) d->inputs[d->ninputs++] = in1;
    return i;
}

static void add_param(model *m, int layer, const char *name, int rows, int cols, int sparse)
{
    pd_layer_desc *d = &m->l[layer];
    pd_param_desc *p = &d->params[d->nparams];
    snprintf(m->pname[layer][d->nparams], sizeof m->pname[0][0], "%s", name);
    p->name = m->pname[layer][d->nparams];
    p->rows = rows;
    p->cols = cols;
    p->sparse = sparse;
    snprintf(p->init.kind, sizeof p->init.kind, "uniform");
    p->init.a = -0.8;
    p->init.b = 0.8;
    d->nparams++;
}

static int add_data(model *m, const char *name, const char *kind, int size_or_range)
{
    int dense = strcmp(kind, "dense") == 0;
    int i = add_layer(m, "data", name, dense ? size_or_range : 1, -1, -1);
    pd_layer_desc *d = &m->l[i];
    d->kind = (char *)kind;
    d->slot = (char *)name;
    d->range = dense ? 0 : size_or_range;
    d->seq = strcmp(kind, "id_list") == 0;
    pd_slot *s = &m->layout[m->nslots++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->kind = dense ? PD_SLOT_DENSE : d->seq ? PD_SLOT_ID_LIST : PD_SLOT_ID;
    s->width = size_or_range;
    return i;
}

/* fc with a weight "<name>.w" (or the weight called shared) and a bias */
static int add_fc_w(model *m, const char *name, int in, int size, const char *act, const char *shared)
{
    int i = add_layer(m, "fc", name, size, in, -1);
    char pn[48];
    m->l[i].act = (char *)act;
    snprintf(pn, sizeof pn, "%s.w", name);
    add_param(m, i, shared ? shared : pn, m->l[in].size, size, 0);
    snprintf(pn, sizeof pn, "%s.b", name);
    add_param(m, i, pn, 1, size, 0);
    return i;
}

static int add_fc(model *m, const char *name, int in, int size, const char *act)
{
    return add_fc_w(m, name, in, size, act, NULL);
}

static int add_embedding(model *m, const char *name, int in, int dim)
{
    int i = add_layer(m, "embedding", name, dim, in, -1);
    char pn[48];
    m->l[i].seq = m->l[in].seq;
    snprintf(pn, sizeof pn, "%s.w", name);
    add_param(m, i, pn, m->l[in].range, dim, 1);
    return i;
}

static int add_seq_pool(model *m, const char *name, int in, const char *pool)
{
    int i = add_layer(m, "seq_pool", name, m->l[in].size, in, -1);
    m->l[i].pool = (char *)pool;
    return i;
}

static int add_cost(model *m, const char *type, int pred, int label)
{
    int i = add_layer(m, type, type, 1, pred, label);
    m->r.cost = i;
    return i;
}

/* --- batches --------------------------------------------------------------- */

static double uni(uint64_t *rng, double lo, double hi) { return lo + (hi - lo) * pd_rng_uniform(rng); }

/* n samples: dense values uniform in [-1, 1), ids uniform in their range,
 * sequences of 1..maxlen distinct ids, the last sample's empty unless
 * told otherwise. */
static void fill_batch(pd_batch *b, model *m, int n, uint64_t seed)
{
    uint64_t rng = seed;
    pd_batch_init(b, m->layout, m->nslots);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < m->nslots; k++) {
            pd_slot *s = &b->slots[k];
            if (s->kind == PD_SLOT_DENSE) {
                float *v = pd_slot_push_dense(s, i);
                for (int c = 0; c < s->width; c++) v[c] = (float)uni(&rng, -1, 1);
            } else if (s->kind == PD_SLOT_ID) {
                pd_slot_push_id(s, i, (int32_t)(pd_rng_next(&rng) % (uint64_t)s->width));
            } else {
                int32_t ids[16];
                int len = m->empty_last && i == n - 1 ? 0 : 1 + (int)(pd_rng_next(&rng) % (uint64_t)m->maxlen);
                PD_ASSERT(len <= s->width && len <= 16);
                for (int j = 0; j < len; j++) {
                    int dup;
                    do {
                        ids[j] = (int32_t)(pd_rng_next(&rng) % (uint64_t)s->width);
                        dup = 0;
                        for (int q = 0; q < j; q++) dup |= ids[q] == ids[j];
                    } while (dup);
                }
                pd_slot_push_ids(s, i, ids, len);
            }
        }
        b->n++;
    }
}

static void build(pd_net *net, model *m, uint64_t seed)
{
    int rc = pd_net_build(net, &m->r, &pd_backend_cpu, seed);
    if (rc < 0) pd_test_fail(__FILE__, __LINE__, "pd_net_build: %s", pd_err_msg());
    CHECK(net->be->host_memory); /* the checks below read and poke device memory */
}

static void bind(pd_net *net, const pd_batch *b)
{
    int rc = pd_net_bind(net, b);
    if (rc < 0) pd_test_fail(__FILE__, __LINE__, "pd_net_bind: %s", pd_err_msg());
}

/* Give each column of a table distinct values, 0.2 apart in a shuffled
 * order, so that max pooling has no ties and stays differentiable under the
 * finite-difference steps. */
static void distinct_values(pd_param *p, uint64_t seed)
{
    int *perm = pd_xmalloc((size_t)p->rows * sizeof *perm);
    for (int c = 0; c < p->cols; c++) {
        for (int i = 0; i < p->rows; i++) perm[i] = i;
        for (int i = p->rows - 1; i > 0; i--) {
            int j = (int)(pd_rng_next(&seed) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int i = 0; i < p->rows; i++)
            p->w[(size_t)i * p->cols + c] = (float)(0.2 * (perm[i] - p->rows / 2) + 0.03 * c + 0.01);
    }
    free(perm);
}

/* --- the gradient check ------------------------------------------------------ */

/* A finite difference of a float32 forward cannot resolve a gradient finer
 * than the cost's own rounding divided by the step: the cost is a mean of
 * float per-sample costs, each good to a few FLT_EPSILON of its size. So an
 * element passes when
 *
 *     |analytic - numeric| <= TOL * max(|analytic|, |numeric|) + noise,
 *     noise = 8 * FLT_EPSILON * (1 + |cost|) / h,
 *
 * that is, relative error <= TOL wherever the difference can tell (noise
 * is about 1e-4 for a cost near 1 and h = 1e-2: it only matters for the
 * small elements of a gradient). */
typedef struct fd {
    double d;       /* the derivative */
    double noise;   /* what the cost's rounding can make of it */
} fd;

typedef struct stats {
    double max_rel;     /* worst |a - n| / (TOL * max(|a|, |n|) + noise), in units of TOL */
    double max_grad;    /* largest |analytic| seen */
    int compared;
} stats;

static void compare(stats *st, const char *what, int idx, double analytic, fd num)
{
    double err = fabs(analytic - num.d);
    double allowed = TOL * fmax(fabs(analytic), fabs(num.d)) + num.noise;
    if (!(err <= allowed))
        pd_test_fail(__FILE__, __LINE__,
                     "gradient of %s[%d]: analytic %.7g, numeric %.7g (relative error %.3g > %g, noise %.2g)",
                     what, idx, analytic, num.d, err / fmax(fabs(analytic), fabs(num.d)), TOL, num.noise);
    st->max_rel = fmax(st->max_rel, TOL * err / allowed);
    st->max_grad = fmax(st->max_grad, fabs(analytic));
    st->compared++;
}

/* The mean cost after running the non-data layers from index `from` on;
 * from < 0: pd_net_forward. */
static double cost_at(pd_net *net, float *x, float v, int from)
{
    *x = v;
    if (from < 0) return fwd(net);
    for (int i = from; i < net->nlayers; i++) {
        pd_layer *l = &net->layers[i];
        if (!l->is_data) l->ops->forward(l);
    }
    return pd_net_mean(net, net->cost);
}

/* d cost / d *x by fourth-order central differences,
 *     (8 (c(x+h) - c(x-h)) - (c(x+2h) - c(x-2h))) / 12h,
 * with h = STEP * max(|x|, xmin): the truncation error is O(h^4), so the
 * step can be large enough to keep the float noise small. */
static fd numeric(pd_net *net, float *x, int from, double xmin)
{
    float x0 = *x;
    double h = STEP * fmax(xmin, fabs(x0));
    double c0 = cost_at(net, x, x0, from);
    double c1 = cost_at(net, x, (float)(x0 + h), from) - cost_at(net, x, (float)(x0 - h), from);
    double c2 = cost_at(net, x, (float)(x0 + 2 * h), from) - cost_at(net, x, (float)(x0 - 2 * h), from);
    cost_at(net, x, x0, from);
    fd r = {(8 * c1 - c2) / (12 * h), 8 * FLT_EPSILON * (1 + fabs(c0)) / h};
    return r;
}

static void live_layers(pd_net *net, uint8_t *live)
{
    memset(live, 0, (size_t)net->nlayers);
    live[net->cost] = 1;
    for (int i = net->cost; i >= 0; i--)
        if (live[i])
            for (int j = 0; j < net->layers[i].nin; j++) live[net->layers[i].in[j]->index] = 1;
}

static int feeds_log(pd_net *net, int k)
{
    for (int i = k + 1; i < net->nlayers; i++)
        if (strcmp(net->layers[i].d->type, "cross_entropy") == 0 && net->layers[i].in[0]->index == k) return 1;
    return 0;
}

static void report(const char *what, const stats *st)
{
    if (!st->compared || st->max_grad < 1e-3)
        pd_test_fail(__FILE__, __LINE__, "%s: gradient is all but zero (max %g): a vacuous check", what,
                     st->max_grad);
    if (getenv("PD_GRAD_VERBOSE"))
        printf("    %-30s %4d compared, worst %.2e of %g, max |g| %.3g\n", what, st->compared, st->max_rel,
               TOL, st->max_grad);
}

/* NaN in every layer's gradient: a backward must write each before it
 * reads it (they are not zeroed), or the NaN shows in what it computes. */
static void poison_layer_grads(pd_net *net)
{
    for (int i = 0; i < net->nlayers; i++) {
        pd_layer *l = &net->layers[i];
        for (int j = 0; l->grad && j < l->rows * l->size; j++) l->grad[j] = NAN;
    }
}

/* Forward and backward once, then check every parameter gradient and the
 * gradient into every live non-data layer below the cost. */
static void gradcheck(pd_net *net)
{
    char what[96];
    fwd(net);
    poison_layer_grads(net);
    pd_net_backward(net);

    for (int pi = 0; pi < net->nparams; pi++) {
        pd_param *p = &net->params[pi];
        int n = p->rows * p->cols;
        float *g = pd_xmalloc((size_t)n * sizeof *g);
        memcpy(g, p->g, (size_t)n * sizeof *g);
        uint8_t *mark = p->sparse ? pd_xcalloc((size_t)p->rows, 1) : NULL;
        for (int k = 0; p->sparse && k < p->ntouched; k++) mark[p->touched[k]] = 1;
        stats st = {0, 0, 0};
        snprintf(what, sizeof what, "parameter %s", p->name);
        for (int i = 0; i < n; i++) {
            /* weights act on inputs of order one: steps of at least STEP */
            fd num = numeric(net, &p->w[i], -1, 1.0);
            if (p->sparse && !mark[i / p->cols]) {
                /* an untouched row has no gradient, and the cost does not read it */
                CHECK(g[i] == 0);
                CHECK(num.d == 0);
                continue;
            }
            compare(&st, what, i, g[i], num);
        }
        report(what, &st);
        free(g);
        free(mark);
    }

    uint8_t *live = pd_xmalloc((size_t)net->nlayers);
    live_layers(net, live);
    for (int k = 0; k < net->cost; k++) {
        pd_layer *lk = &net->layers[k];
        if (!live[k] || lk->is_data) continue;
        /* analytic: what the layers above k send into k's grad (k's own
         * backward would turn it into the gradient of its pre-activation) */
        fwd(net);
        for (int i = 0; i < net->nlayers; i++) {
            pd_layer *l = &net->layers[i];
            if (!l->is_data && l->grad) memset(l->grad, 0, (size_t)l->rows * l->size * sizeof(float));
        }
        for (int i = net->cost; i > k; i--)
            if (live[i] && !net->layers[i].is_data) net->layers[i].ops->backward(&net->layers[i]);
        int n = lk->rows * lk->size;
        float *g = pd_xmalloc((size_t)n * sizeof *g);
        memcpy(g, lk->grad, (size_t)n * sizeof *g);
        stats st = {0, 0, 0};
        snprintf(what, sizeof what, "layer %s output", lk->d->name);
        /* steps relative to the value down to 0.1; probabilities that feed
         * a log (cross_entropy) change on the scale of the value itself */
        double xmin = feeds_log(net, k) ? 0 : 0.1;
        for (int i = 0; i < n; i++) compare(&st, what, i, g[i], numeric(net, &lk->out[i], k + 1, xmin));
        report(what, &st);
        free(g);
    }
    free(live);
    /* leave the net as a plain forward and backward would */
    fwd(net);
    pd_net_backward(net);
}

/* Whether a built, bound and forwarded net is a fair place for finite
 * differences (no kink or ill-conditioned point within reach of the steps). */
typedef int (*fair_fn)(pd_net *net);

/* Build with seed, bind n random samples and check; with fair, first move
 * on to the next seed until fair(net) holds. */
static void check_model_fair(model *m, int n, uint64_t seed, fair_fn fair)
{
    for (int tries = 0;; tries++, seed++) {
        CHECK(tries < 1000);
        pd_net net;
        pd_batch b;
        build(&net, m, seed);
        fill_batch(&b, m, n, seed + 1000);
        bind(&net, &b);
        for (int i = 0; i < net.nparams; i++)
            if (net.params[i].sparse) distinct_values(&net.params[i], seed + i);
        fwd(&net);
        int ok = !fair || fair(&net);
        if (ok) gradcheck(&net);
        pd_net_free(&net);
        pd_batch_free(&b);
        if (ok) return;
    }
}

static void check_model(model *m, int n, uint64_t seed) { check_model_fair(m, n, seed, NULL); }

/* relu: every pre-activation farther from the kink than any step moves it
 * (2 * STEP times inputs and weights below 1), with units on both sides */
static int relu_fair(pd_net *net)
{
    for (int li = 0; li < net->nlayers; li++) {
        pd_layer *l = &net->layers[li], *x = l->in[0];
        if (strcmp(l->d->type, "fc") != 0 || strcmp(l->d->act, "relu") != 0) continue;
        int pos = 0, neg = 0;
        for (int r = 0; r < x->rows; r++)
            for (int c = 0; c < l->size; c++) {
                double z = l->p[1]->w[c];
                for (int k = 0; k < x->size; k++)
                    z += (double)x->out[(size_t)r * x->size + k] * l->p[0]->w[(size_t)k * l->size + c];
                if (fabs(z) < 0.05) return 0;
                pos += z > 0;
                neg += z < 0;
            }
        if (pos < 3 || neg < 3) return 0;
    }
    return 1;
}

/* cos_sim: inputs of norm well above zero, where the cosine turns slowly */
static int cos_fair(pd_net *net)
{
    for (int li = 0; li < net->nlayers; li++) {
        pd_layer *l = &net->layers[li];
        if (strcmp(l->d->type, "cos_sim") != 0) continue;
        for (int j = 0; j < 2; j++)
            for (int r = 0; r < l->rows; r++) {
                double nn = 0;
                for (int c = 0; c < l->in[j]->size; c++) {
                    double v = l->in[j]->out[(size_t)r * l->in[j]->size + c];
                    nn += v * v;
                }
                if (sqrt(nn) < 0.5) return 0;
            }
    }
    return 1;
}

/* --- fc with each activation -------------------------------------------------- */

/* x(4) -> fc tanh(5) -> fc act(3) -> square_error_cost against y(3): the
 * second fc's input is a layer, so the gradient into it is checked too. */
static void check_fc_act(const char *act)
{
    model m;
    model_init(&m);
    int x = add_data(&m, "x", "dense", 4);
    int y = add_data(&m, "y", "dense", 3);
    int h = add_fc(&m, "hidden", x, 5, "tanh");
    int o = add_fc(&m, "out", h, 3, act);
    add_cost(&m, "square_error_cost", o, y);
    check_model_fair(&m, 4, 11, strcmp(act, "relu") == 0 ? relu_fair : NULL);
}

PD_TEST(grad_fc_linear) { check_fc_act("linear"); }
PD_TEST(grad_fc_relu) { check_fc_act("relu"); }
PD_TEST(grad_fc_sigmoid) { check_fc_act("sigmoid"); }
PD_TEST(grad_fc_tanh) { check_fc_act("tanh"); }
PD_TEST(grad_fc_softmax_square_error) { check_fc_act("softmax"); }

/* x(4) -> fc tanh(6) -> fc softmax(5) -> cross_entropy against an id */
PD_TEST(grad_fc_softmax_cross_entropy)
{
    model m;
    model_init(&m);
    int x = add_data(&m, "x", "dense", 4);
    int label = add_data(&m, "label", "id", 5);
    int h = add_fc(&m, "hidden", x, 6, "tanh");
    int p = add_fc(&m, "prob", h, 5, "softmax");
    add_cost(&m, "cross_entropy", p, label);
    check_model(&m, 5, 21);
}

/* x(4) -> fc tanh(6) -> fc linear(5) -> softmax_cross_entropy against an id */
PD_TEST(grad_softmax_cross_entropy)
{
    model m;
    model_init(&m);
    int x = add_data(&m, "x", "dense", 4);
    int label = add_data(&m, "label", "id", 5);
    int h = add_fc(&m, "hidden", x, 6, "tanh");
    int z = add_fc(&m, "logits", h, 5, "linear");
    add_cost(&m, "softmax_cross_entropy", z, label);
    check_model(&m, 5, 31);
}

/* square_error_cost between two layers: both inputs get gradient */
PD_TEST(grad_square_error_cost)
{
    model m;
    model_init(&m);
    int x = add_data(&m, "x", "dense", 3);
    int a = add_fc(&m, "a", x, 4, "tanh");
    int b = add_fc(&m, "b", x, 4, "linear");
    add_cost(&m, "square_error_cost", a, b);
    check_model(&m, 4, 41);
}

/* --- embedding and seq_pool ------------------------------------------------------ */

/* id(7) -> embedding(4) -> fc softmax(3) -> cross_entropy */
PD_TEST(grad_embedding_id)
{
    model m;
    model_init(&m);
    int id = add_data(&m, "word", "id", 7);
    int label = add_data(&m, "label", "id", 3);
    int e = add_embedding(&m, "emb", id, 4);
    int p = add_fc(&m, "prob", e, 3, "softmax");
    add_cost(&m, "cross_entropy", p, label);
    check_model(&m, 5, 51);
}

/* id_list(9) -> embedding(4) -> seq_pool -> fc tanh(3) -> square_error_cost */
static void check_seq_pool(const char *pool)
{
    model m;
    model_init(&m);
    int ids = add_data(&m, "words", "id_list", 9);
    int y = add_data(&m, "y", "dense", 3);
    int e = add_embedding(&m, "emb", ids, 4);
    int s = add_seq_pool(&m, "pool", e, pool);
    int o = add_fc(&m, "out", s, 3, "tanh");
    add_cost(&m, "square_error_cost", o, y);

    pd_net net;
    pd_batch b;
    build(&net, &m, 61);
    fill_batch(&b, &m, 5, 62);
    bind(&net, &b);
    distinct_values(&net.params[0], 63);
    gradcheck(&net);

    /* the touched rows are exactly the ids of the batch */
    pd_param *t = pd_net_param(&net, "emb.w");
    const pd_slot *s_ids = &b.slots[0];
    uint8_t seen[9] = {0};
    int nseen = 0;
    for (int i = 0; i < s_ids->offsets[b.n]; i++) nseen += !seen[s_ids->ids[i]], seen[s_ids->ids[i]] = 1;
    CHECK_EQ_INT(t->ntouched, nseen);
    for (int k = 0; k < t->ntouched; k++) CHECK(seen[t->touched[k]]);
    /* the empty sequence pools to zeros */
    pd_layer *ls = &net.layers[s];
    for (int c = 0; c < ls->size; c++) CHECK(ls->out[(size_t)(b.n - 1) * ls->size + c] == 0);
    pd_net_free(&net);
    pd_batch_free(&b);
}

PD_TEST(grad_embedding_seq_sum) { check_seq_pool("sum"); }
PD_TEST(grad_embedding_seq_average) { check_seq_pool("average"); }
PD_TEST(grad_embedding_seq_max) { check_seq_pool("max"); }

/* --- concat, cos_sim, shared parameters ------------------------------------------- */

/* [fc tanh(x1) | fc sigmoid(x2)] -> fc linear(2) -> square_error_cost */
PD_TEST(grad_concat)
{
    model m;
    model_init(&m);
    int x1 = add_data(&m, "x1", "dense", 3);
    int x2 = add_data(&m, "x2", "dense", 4);
    int y = add_data(&m, "y", "dense", 2);
    int a = add_fc(&m, "a", x1, 3, "tanh");
    int b = add_fc(&m, "b", x2, 2, "sigmoid");
    int c = add_layer(&m, "concat", "cat", 5, a, b);
    int o = add_fc(&m, "out", c, 2, "linear");
    add_cost(&m, "square_error_cost", o, y);
    check_model(&m, 4, 71);
}

/* x -> fc tanh h; h feeds two towers a, b; 5 * cos(a, b) -> square_error_cost.
 * h's gradient is the sum of what both towers send. */
PD_TEST(grad_cos_sim)
{
    model m;
    model_init(&m);
    int x = add_data(&m, "x", "dense", 4);
    int y = add_data(&m, "y", "dense", 1);
    int h = add_fc(&m, "h", x, 5, "tanh");
    int a = add_fc(&m, "a", h, 4, "linear");
    int b = add_fc(&m, "b", h, 4, "tanh");
    int c = add_layer(&m, "cos_sim", "cos", 1, a, b);
    m.l[c].scale = 5;
    add_cost(&m, "square_error_cost", c, y);
    check_model_fair(&m, 5, 81, cos_fair);
}

/* two fcs on different inputs share one weight: its gradient sums both uses */
PD_TEST(grad_shared_param)
{
    model m;
    model_init(&m);
    int x1 = add_data(&m, "x1", "dense", 3);
    int x2 = add_data(&m, "x2", "dense", 3);
    int y = add_data(&m, "y", "dense", 1);
    int a = add_fc_w(&m, "a", x1, 4, "tanh", "tower.w");
    int b = add_fc_w(&m, "b", x2, 4, "tanh", "tower.w");
    int c = add_layer(&m, "cos_sim", "cos", 1, a, b);
    m.l[c].scale = 5;
    add_cost(&m, "square_error_cost", c, y);

    pd_net net;
    build(&net, &m, 91);
    CHECK_EQ_INT(net.nparams, 3); /* tower.w, a.b, b.b */
    CHECK(net.layers[a].p[0] == net.layers[b].p[0]);
    pd_net_free(&net);
    check_model_fair(&m, 4, 91, cos_fair);
}

/* Layers whose output feeds several layers: what the consumers send must
 * add up. Each backward that accumulates into a shared input runs after
 * another consumer has written there, so one that overwrote would show:
 * e feeds three poolings, h feeds two cos_sims (as either input), a concat
 * and an fc.
 *
 *   words -> e -> max, average, sum pools
 *   x -> fc tanh h;  c1 = cos(h, max), c2 = cos(sum, h), [h | average],
 *   g = fc tanh(h);  [h | average | c1 | c2 | g] -> fc -> square_error_cost */
PD_TEST(grad_shared_inputs)
{
    model m;
    model_init(&m);
    m.empty_last = 0; /* cos_sim of an all-zero pool has no direction */
    int ids = add_data(&m, "words", "id_list", 9);
    int x = add_data(&m, "x", "dense", 3);
    int y = add_data(&m, "y", "dense", 2);
    int e = add_embedding(&m, "emb", ids, 4);
    int pmax = add_seq_pool(&m, "pool_max", e, "max");
    int pavg = add_seq_pool(&m, "pool_avg", e, "average");
    int psum = add_seq_pool(&m, "pool_sum", e, "sum");
    int h = add_fc(&m, "h", x, 4, "tanh");
    int c1 = add_layer(&m, "cos_sim", "cos1", 1, h, pmax);
    int c2 = add_layer(&m, "cos_sim", "cos2", 1, psum, h);
    m.l[c1].scale = m.l[c2].scale = 5;
    int cat = add_layer(&m, "concat", "cat", 8, h, pavg);
    int cat2 = add_layer(&m, "concat", "cat2", 2, c1, c2);
    int cat3 = add_layer(&m, "concat", "cat3", 10, cat, cat2);
    int g = add_fc(&m, "g", h, 3, "tanh");
    int cat4 = add_layer(&m, "concat", "cat4", 13, cat3, g);
    int o = add_fc(&m, "out", cat4, 2, "linear");
    add_cost(&m, "square_error_cost", o, y);
    check_model_fair(&m, 5, 101, cos_fair);
}

/* One layer taking the same input twice (add, concat), beside another user
 * of it: the first share is written, the others added. */
PD_TEST(grad_same_input_twice)
{
    model m;
    model_init(&m);
    int x = add_data(&m, "x", "dense", 3);
    int y = add_data(&m, "y", "dense", 2);
    int h = add_fc(&m, "h", x, 4, "tanh");
    int twice = add_layer(&m, "add", "twice", 4, h, h);
    int cat = add_layer(&m, "concat", "cat", 8, h, h);
    int g = add_fc(&m, "g", h, 3, "tanh");
    int both = add_layer(&m, "concat", "both", 12, twice, cat);
    int all = add_layer(&m, "concat", "all", 15, both, g);
    int o = add_fc(&m, "out", all, 2, "linear");
    add_cost(&m, "square_error_cost", o, y);
    check_model(&m, 5, 41);
}

/* What pd_net.grad_ready saw: per parameter, how often it was grads_seen, in
 * which order, and its gradient then. */
typedef struct grads_seen {
    int times[16], order[16], n;
    float *g[16];
} grads_seen;

static int on_grad_ready(void *ctx, pd_net *net, pd_param *p)
{
    grads_seen *s = ctx;
    int i = (int)(p - net->params);
    size_t bytes = (size_t)p->rows * p->cols * sizeof(float);
    s->times[i]++;
    s->order[i] = s->n++;
    free(s->g[i]);
    s->g[i] = pd_xmalloc(bytes);
    memcpy(s->g[i], p->g, bytes);
    return 0;
}

/* The backward names each parameter a layer writes once, as soon as its
 * gradient is final: the top layer's first, a weight shared by two layers
 * after the lower of them, a parameter no layer of the cost uses never; and
 * the gradient it had then is the one the backward ends with. */
PD_TEST(net_names_each_gradient_once_it_is_final)
{
    model m;
    model_init(&m);
    m.empty_last = 0;
    int u = add_data(&m, "user", "id", 7);
    int words = add_data(&m, "words", "id_list", 9);
    int x = add_data(&m, "x", "dense", 3);
    int y = add_data(&m, "y", "dense", 1);
    int eu = add_embedding(&m, "eu", u, 4);
    int ew = add_seq_pool(&m, "pool", add_embedding(&m, "ew", words, 4), "sum");
    int a = add_fc_w(&m, "a", eu, 4, "tanh", "tower.w");
    int b = add_fc_w(&m, "b", ew, 4, "tanh", "tower.w");
    add_fc(&m, "dead", x, 2, "tanh"); /* not on the cost's path */
    int cat = add_layer(&m, "concat", "cat", 11, a, b);
    m.l[cat].inputs[m.l[cat].ninputs++] = x;
    int o = add_fc(&m, "out", cat, 1, "linear");
    add_cost(&m, "square_error_cost", o, y);
    pd_net net;
    build(&net, &m, 5);
    PD_ASSERT(net.nparams <= 16);
    grads_seen s = {0};
    net.grad_ready = on_grad_ready;
    net.grad_ctx = &s;
    for (int step = 0; step < 2; step++) {
        memset(&s, 0, offsetof(grads_seen, g));
        pd_batch batch;
        fill_batch(&batch, &m, 6, 40 + (uint64_t)step);
        bind(&net, &batch);
        double cost;
        CHECK_EQ_INT(pd_net_forward(&net, &cost), 0);
        CHECK_EQ_INT(pd_net_backward(&net), 0);
        for (int i = 0; i < net.nparams; i++) {
            pd_param *p = &net.params[i];
            int dead = strncmp(p->name, "dead.", 5) == 0;
            CHECK_EQ_INT(s.times[i], dead ? 0 : 1);
            if (dead || !s.g[i]) continue;
            CHECK(memcmp(s.g[i], p->g, (size_t)p->rows * p->cols * sizeof(float)) == 0);
        }
        pd_param *out_w = pd_net_param(&net, "out.w"), *tower = pd_net_param(&net, "tower.w");
        pd_param *b_b = pd_net_param(&net, "b.b"), *ew_w = pd_net_param(&net, "ew.w");
        CHECK(out_w && tower && b_b && ew_w);
        CHECK(s.order[out_w - net.params] < 2); /* out.w and out.b come first */
        /* tower.w once a (the lower) wrote it, not with b; before the tables */
        CHECK(s.order[tower - net.params] > s.order[b_b - net.params]);
        CHECK(s.order[tower - net.params] < s.order[ew_w - net.params]);
        pd_batch_free(&batch);
    }
    for (int i = 0; i < 16; i++) free(s.g[i]);
    pd_net_free(&net);
}

/* --- forward values ------------------------------------------------------------- */

PD_TEST(classification_error_forward)
{
    model m;
    model_init(&m);
    int p = add_data(&m, "pred", "dense", 3);
    int label = add_data(&m, "label", "id", 3);
    int e = add_layer(&m, "classification_error", "err", 1, p, label);
    m.r.cost = e;

    static const float pred[4][3] = {{0.1f, 0.7f, 0.2f}, {0.5f, 0.3f, 0.2f}, {0.2f, 0.1f, 0.7f}, {-3, -1, -2}};
    static const int32_t lab[4] = {1, 2, 2, 0};
    static const float want[4] = {0, 1, 0, 1};
    pd_batch b;
    pd_batch_init(&b, m.layout, m.nslots);
    for (int i = 0; i < 4; i++) {
        memcpy(pd_slot_push_dense(&b.slots[0], i), pred[i], sizeof pred[i]);
        pd_slot_push_id(&b.slots[1], i, lab[i]);
        b.n++;
    }
    pd_net net;
    build(&net, &m, 1);
    bind(&net, &b);
    CHECK_NEAR(fwd(&net), 0.5, 1e-12);
    CHECK_EQ_INT(net.layers[e].rows, 4);
    for (int i = 0; i < 4; i++) CHECK_NEAR(net.layers[e].out[i], want[i], 0);
    CHECK_NEAR(pd_net_mean(&net, e), 0.5, 1e-12);
    pd_net_backward(&net); /* a metric has no gradient; must not touch anything */
    pd_net_free(&net);
    pd_batch_free(&b);
}

/* x [2x3] -> fc(2) with known weights; every activation by hand */
/* The fc layer's fused tail gives, bit for bit, what its separate ops give:
 * the bias then the activation; the activation's derivative then the bias
 * gradient, accumulated or written. */
/* The backend's tanh (a polynomial exponential, so that it vectorizes)
 * against tanh in double: every float step near 0, a dense sweep of
 * [-12, 12] and the extremes. Both entry points (with and without bias). */
PD_TEST(cpu_tanh_accuracy)
{
    const pd_backend *be = &pd_backend_cpu;
    enum { N = 200003 };
    static float x[N], y[N], z[N], zero[N];
    int n = 0;
    for (float v = 1e-30f; v < 0.2f && n < 40000; v *= 1.0007f) {
        x[n++] = v;
        x[n++] = -v;
    }
    while (n < N - 8) x[n] = -12.f + 24.f * (float)n / (float)N, n++;
    const float edge[] = {0.f, -0.f, 0.05f, -0.05f, 9.f, -9.f, 1e30f, -1e30f};
    for (int i = 0; i < 8; i++) x[n++] = edge[i];
    be->act_forward(PD_ACT_TANH, y, x, 1, n);
    memcpy(z, x, sizeof x);
    be->bias_act_forward(PD_ACT_TANH, z, zero, 1, n);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double err = fabs((double)y[i] - tanh((double)x[i]));
        if (err > worst) worst = err;
        CHECK(y[i] == z[i]);
        CHECK(y[i] >= -1.f && y[i] <= 1.f);
        /* near 0 the error is relative: tanh x ~ x */
        if (fabsf(x[i]) < 0.05f) CHECK(fabs((double)y[i] - tanh((double)x[i])) <= 2e-7 * fabs((double)x[i]) + 1e-37);
    }
    CHECK(worst < 3e-7);
}

/* The row ops of a sparse table's step (backend.h): set_rows, zero_rows
 * and opt_update_rows change the rows named, each as its whole-array op
 * would, and no other row. */
PD_TEST(cpu_row_ops_touch_only_their_rows)
{
    const pd_backend *be = &pd_backend_cpu;
    enum { R = 11, C = 5 };
    float w[R * C], keep[R * C], src[3 * C], g[R * C], s1[R * C], s2[R * C];
    float ew[R * C], es1[R * C], es2[R * C];
    for (int i = 0; i < R * C; i++) {
        w[i] = keep[i] = (float)(i % 7) - 3.25f;
        g[i] = 0.1f * (float)(i % 5) - 0.2f;
        s1[i] = es1[i] = 0.01f * (float)(i % 3);
        s2[i] = es2[i] = 0.02f * (float)(i % 4);
    }
    for (int i = 0; i < 3 * C; i++) src[i] = 100.f + (float)i;
    const int32_t set[3] = {7, 2, 9}, zero[2] = {2, 10}, upd[3] = {3, 0, 10};

    be->set_rows(w, src, set, 3, C);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            int k = r == 7 ? 0 : r == 2 ? 1 : r == 9 ? 2 : -1;
            CHECK(w[r * C + c] == (k >= 0 ? src[k * C + c] : keep[r * C + c]));
        }
    memcpy(keep, w, sizeof w);
    be->zero_rows(w, zero, 2, C);
    for (int i = 0; i < R * C; i++) CHECK(w[i] == (i / C == 2 || i / C == 10 ? 0.f : keep[i]));

    /* Adam on rows 3, 0 and 10, against opt_update on each row alone */
    pd_opt_hyper h = {.type = PD_OPT_ADAM, .lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-6f,
                      .weight_decay = 0.01f, .t = 3};
    memcpy(ew, w, sizeof w);
    for (int k = 0; k < 3; k++) {
        size_t off = (size_t)upd[k] * C;
        be->opt_update(&h, ew + off, g + off, es1 + off, es2 + off, C);
    }
    be->opt_update_rows(&h, w, g, s1, s2, upd, 3, C);
    for (int i = 0; i < R * C; i++) {
        CHECK(w[i] == ew[i]);
        CHECK(s1[i] == es1[i]);
        CHECK(s2[i] == es2[i]);
        int r = i / C;
        if (r != 3 && r != 0 && r != 10) CHECK(w[i] == (r == 2 ? 0.f : keep[i]));
    }
    CHECK(w[3 * C] != keep[3 * C] || w[3 * C + 1] != keep[3 * C + 1]); /* the update did something */
}

PD_TEST(fc_fused_tail_matches_ops)
{
    const pd_backend *be = &pd_backend_cpu;
    enum { ROWS = 9, COLS = 37, N = ROWS * COLS };
    static float y0[N], y1[N], y2[N], b[COLS], d1[N], d2[N], g1[COLS], g2[COLS];
    uint64_t rng = 7;
    for (int act = PD_ACT_LINEAR; act <= PD_ACT_SOFTMAX; act++) {
        for (int i = 0; i < N; i++) y0[i] = (float)(pd_rng_uniform(&rng) * 6 - 3);
        for (int c = 0; c < COLS; c++) b[c] = (float)(pd_rng_uniform(&rng) * 2 - 1);
        memcpy(y1, y0, sizeof y0);
        memcpy(y2, y0, sizeof y0);
        be->add_bias(y1, b, ROWS, COLS);
        be->act_forward(act, y1, y1, ROWS, COLS);
        be->bias_act_forward(act, y2, b, ROWS, COLS);
        CHECK(memcmp(y1, y2, sizeof y1) == 0);
        for (int acc = 0; acc <= 1; acc++) {
            for (int i = 0; i < N; i++) d1[i] = d2[i] = (float)(pd_rng_uniform(&rng) * 2 - 1);
            for (int c = 0; c < COLS; c++) g1[c] = g2[c] = acc ? (float)pd_rng_uniform(&rng) : 0;
            be->act_backward(act, d1, y1, d1, ROWS, COLS);
            be->bias_grad(g1, d1, ROWS, COLS);
            if (!acc) g2[0] = 12345; /* written, not added to */
            be->act_bias_backward(act, d2, y2, g2, acc, ROWS, COLS);
            CHECK(memcmp(d1, d2, sizeof d1) == 0);
            CHECK(memcmp(g1, g2, sizeof g1) == 0);
        }
        memcpy(y2, y0, sizeof y0);
        be->act_forward(act, y1, y0, ROWS, COLS);
        be->bias_act_forward(act, y2, NULL, ROWS, COLS);
        CHECK(memcmp(y1, y2, sizeof y1) == 0);
    }
}

/* Random floats in [-0.5, 0.5) into each of n-float x and y (the same). */
static void fill_twice(float *x, float *y, size_t n, uint64_t *rng)
{
    for (size_t i = 0; i < n; i++) x[i] = y[i] = (float)(pd_rng_uniform(rng) - 0.5);
}

/* Updates of a table's rows large enough to be cut between threads (rows
 * written, zeroed, updated by Adam and by plain SGD, which has no state)
 * give, bit for bit, what one thread gives: each row is written by one
 * thread, with the same arithmetic. A gather is not cut, and must give
 * the same either way too. */
PD_TEST(row_ops_cut_between_threads)
{
    const pd_backend *be = &pd_backend_cpu;
    enum { ROWS = 50000, DIM = 9, N = 8001 }; /* N / 2 rows of DIM: over the split size */
    uint64_t rng = 17;
    float *t[2], *o[2], *s1[2], *s2[2];
    float *src = malloc((size_t)N * DIM * sizeof *src), *g = malloc((size_t)ROWS * DIM * sizeof *g);
    int32_t *ids = malloc(N * sizeof *ids);
    uint8_t *used = calloc(ROWS, 1);
    for (int i = 0; i < N; i++) { /* distinct, in no order */
        int id;
        do id = (int)(pd_rng_uniform(&rng) * ROWS); while (used[id]);
        used[id] = 1;
        ids[i] = id;
    }
    for (int k = 0; k < 2; k++) {
        t[k] = malloc((size_t)ROWS * DIM * sizeof(float));
        s1[k] = malloc((size_t)ROWS * DIM * sizeof(float));
        s2[k] = malloc((size_t)ROWS * DIM * sizeof(float));
        o[k] = malloc((size_t)N * DIM * sizeof(float));
    }
    fill_twice(src, src, (size_t)N * DIM, &rng);
    fill_twice(t[0], t[1], (size_t)ROWS * DIM, &rng);
    fill_twice(g, g, (size_t)ROWS * DIM, &rng);
    fill_twice(s1[0], s1[1], (size_t)ROWS * DIM, &rng);
    for (size_t i = 0; i < (size_t)ROWS * DIM; i++) s2[0][i] = s2[1][i] = 0.25f;
    pd_opt_hyper h = {.type = PD_OPT_ADAM, .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-6f, .t = 2};
    pd_opt_hyper sgd = {.type = PD_OPT_SGD, .lr = 0.1f, .weight_decay = 0.01f};
    for (int op = 0; op < 5; op++) {
        fill_twice(o[0], o[1], (size_t)N * DIM, &rng);
        for (int k = 0; k < 2; k++) {
            pd_blas_threads(k ? 1 : 3); /* cut in three, then whole */
            switch (op) {
            case 0: be->set_rows(t[k], src, ids, N, DIM); break;
            case 1: be->opt_update_rows(&h, t[k], g, s1[k], s2[k], ids, N, DIM); break;
            case 2: be->opt_update_rows(&sgd, t[k], g, NULL, NULL, ids + 2, N - 2, DIM); break;
            case 3: be->zero_rows(t[k], ids + 1, N / 2, DIM); break;
            default: be->gather(o[k], t[k], ids, N, DIM);
            }
        }
        pd_blas_threads(1);
        if (memcmp(t[0], t[1], (size_t)ROWS * DIM * sizeof(float)) ||
            memcmp(o[0], o[1], (size_t)N * DIM * sizeof(float)) ||
            memcmp(s1[0], s1[1], (size_t)ROWS * DIM * sizeof(float)) ||
            memcmp(s2[0], s2[1], (size_t)ROWS * DIM * sizeof(float)))
            pd_test_fail(__FILE__, __LINE__, "row operation %d: cut between threads differs from whole", op);
    }
    for (int k = 0; k < 2; k++) {
        free(t[k]);
        free(s1[k]);
        free(s2[k]);
        free(o[k]);
    }
    free(src);
    free(g);
    free(ids);
    free(used);
}

/* A product big enough to be cut between threads gives what OpenBLAS
 * gives for it whole, for every transpose and both betas, to float
 * rounding (OpenBLAS's blocking of a block differs from the whole's). */
PD_TEST(cpu_gemm_cut_matches_whole)
{
    const pd_backend *be = &pd_backend_cpu;
    static const int shapes[][3] = {{128, 512, 784}, {784, 512, 128}, {130, 33, 1000}, {37, 700, 300}, {5, 4, 3}};
    uint64_t rng = 11;
    for (size_t s = 0; s < PD_COUNT(shapes); s++)
        for (int t = 0; t < 8; t++) {
            int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], ta = t & 1, tb = (t >> 1) & 1;
            float beta = (t >> 2) ? 1.f : 0.f;
            float *a = malloc((size_t)m * k * sizeof *a), *b = malloc((size_t)k * n * sizeof *b);
            float *c1 = malloc((size_t)m * n * sizeof *c1), *c2 = malloc((size_t)m * n * sizeof *c2);
            for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (float)(pd_rng_uniform(&rng) - 0.5);
            for (size_t i = 0; i < (size_t)k * n; i++) b[i] = (float)(pd_rng_uniform(&rng) - 0.5);
            /* beta 0: C is not read (a layer's gradient holds the last step's) */
            for (size_t i = 0; i < (size_t)m * n; i++) c1[i] = c2[i] = beta == 0 ? NAN : (float)pd_rng_uniform(&rng);
            int lda = ta ? m : k, ldb = tb ? k : n;
            pd_blas_threads(3); /* cut in three */
            be->gemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, beta, c1, n);
            pd_blas_threads(1); /* whole */
            be->gemm(ta, tb, m, n, k, 0.5f, a, lda, b, ldb, beta, c2, n);
            for (size_t i = 0; i < (size_t)m * n; i++)
                if (!(fabsf(c1[i] - c2[i]) <= 1e-6f * (float)k))
                    pd_test_fail(__FILE__, __LINE__, "%dx%dx%d ta %d tb %d beta %g: element %zu %.9g != %.9g", m, n,
                                 k, ta, tb, beta, i, c1[i], c2[i]);
            free(a);
            free(b);
            free(c1);
            free(c2);
        }
}

/* A worker waits long for the next product only while the machine is not
 * crowded: threads stalled for a core under a fifth of the time, from the
 * growth of /proc/pressure/cpu's total between two looks; without it,
 * /proc/loadavg's running threads against the process's cores and one;
 * with neither, crowded. */
PD_TEST(cpu_crowded_from_pressure_or_loadavg)
{
    pd_crowd c = {.ema = -1, .crowded = 1};
    /* the first look only notes the total */
    CHECK(pd_crowd_update(&c, "some avg10=0.00 avg60=0.00 avg300=0.00 total=1000000\n"
                              "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", NULL, 2, 5e6));
    /* 20 ms later, 1 ms more stalled (a trainer alone): not crowded */
    CHECK(!pd_crowd_update(&c, "some avg10=0.00 avg60=0.00 avg300=0.00 total=1001000\n", NULL, 2, 5.02e6));
    CHECK(c.ema > 0.049 && c.ema < 0.051);
    /* busy loops beside: 14 ms of each 20 stalled; crowded at the first look (0.375) */
    CHECK(pd_crowd_update(&c, "some avg10=5.00 avg60=1.00 avg300=0.00 total=1015000\n", NULL, 2, 5.04e6));
    CHECK(pd_crowd_update(&c, "some avg10=9.00 avg60=2.00 avg300=0.00 total=1029000\n", NULL, 2, 5.06e6));
    /* the loops gone: 0.27, then 0.14 */
    CHECK(pd_crowd_update(&c, "some avg10=9.00 avg60=2.00 avg300=0.00 total=1029100\n", NULL, 2, 5.08e6));
    CHECK(!pd_crowd_update(&c, "some avg10=9.00 avg60=2.00 avg300=0.00 total=1029200\n", NULL, 2, 5.10e6));
    /* a total that went back, or no time between looks, changes nothing */
    CHECK(!pd_crowd_update(&c, "some avg10=0 avg60=0 avg300=0 total=5\n", NULL, 2, 5.12e6));
    CHECK(!pd_crowd_update(&c, "some avg10=0 avg60=0 avg300=0 total=900000\n", NULL, 2, 5.12e6));
    /* no pressure figures: /proc/loadavg's running threads, smoothed */
    pd_crowd l = {.ema = -1, .crowded = 1};
    CHECK(!pd_crowd_update(&l, NULL, "0.52 0.58 0.59 2/145 4242\n", 2, 1));
    CHECK(!pd_crowd_update(&l, "garbled", "0.52 0.58 0.59 3/145 4242\n", 2, 2)); /* 2.25 */
    int n = 0;
    while (!pd_crowd_update(&l, NULL, "4.00 3.00 2.00 5/150 4300\n", 2, 3)) n++;
    CHECK(n == 1); /* 2.94, then 3.45 */
    pd_crowd w = {.ema = -1, .crowded = 1};
    CHECK(!pd_crowd_update(&w, NULL, "9 9 9 17/400 1\n", 16, 1)); /* 16 cores: 17 running is not crowded */
    pd_crowd x = {.ema = -1, .crowded = 0};
    CHECK(pd_crowd_update(&x, NULL, "9 9 9 18/400 1\n", 16, 1));
    /* nothing readable, or nothing parsable: crowded, and the figures start again */
    CHECK(pd_crowd_update(&c, NULL, NULL, 2, 6e6));
    CHECK(c.ema < 0 && c.at == 0);
    pd_crowd y = {.ema = -1, .crowded = 0};
    CHECK(pd_crowd_update(&y, "some total=", "0.1 0.1 0.1 x/3 9", 2, 1));
    y.crowded = 0;
    CHECK(pd_crowd_update(&y, "full avg10=0 total=7", "0.1 0.1 0.1 -1/3 9", 2, 1));
}

/* Spins until *stop (a thread that takes a core from the product threads). */
static void *busy(void *arg)
{
    volatile int *stop = arg;
    while (!*stop) {
    }
    return NULL;
}

/* The parts of a cut product go to whichever thread comes first: with
 * more threads than cores and a busy loop beside them, the workers are
 * often late and the caller takes their parts. Products one after the
 * other, each against the whole, catch a part run twice or not at all
 * (beta 1 adds twice) or a late worker taking a part of the next. */
PD_TEST(cpu_gemm_parts_go_to_the_first_thread_free)
{
    const pd_backend *be = &pd_backend_cpu;
    const int m = 256, n = 200, k = 128;
    uint64_t rng = 5;
    float *a = malloc((size_t)m * k * sizeof *a), *b = malloc((size_t)k * n * sizeof *b);
    float *c1 = malloc((size_t)m * n * sizeof *c1), *c2 = malloc((size_t)m * n * sizeof *c2);
    for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (float)(pd_rng_uniform(&rng) - 0.5);
    for (size_t i = 0; i < (size_t)k * n; i++) b[i] = (float)(pd_rng_uniform(&rng) - 0.5);
    for (size_t i = 0; i < (size_t)m * n; i++) c2[i] = (float)pd_rng_uniform(&rng);
    memcpy(c1, c2, (size_t)m * n * sizeof *c1);
    pd_blas_threads(1);
    for (int r = 0; r < 50; r++) be->gemm(0, 0, m, n, k, 0.01f, a, k, b, n, 1.f, c2, n);
    volatile int stop = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, busy, (void *)&stop) == 0);
    pd_blas_threads(4);
    for (int r = 0; r < 50; r++) be->gemm(0, 0, m, n, k, 0.01f, a, k, b, n, 1.f, c1, n);
    pd_blas_threads(1);
    stop = 1;
    pthread_join(t, NULL);
    for (size_t i = 0; i < (size_t)m * n; i++)
        if (fabsf(c1[i] - c2[i]) > 1e-4f) { /* rounding apart; a part twice adds about 0.01 */
            pd_test_fail(__FILE__, __LINE__, "element %zu: %.9g cut, %.9g whole", i, c1[i], c2[i]);
            break;
        }
    free(a);
    free(b);
    free(c1);
    free(c2);
}

PD_TEST(fc_forward_by_hand)
{
    static const float xv[2][3] = {{1, 2, 3}, {-1, 0, 0.5f}};
    static const float w[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f}; /* [3x2] */
    static const float bias[2] = {0.05f, -0.1f};
    /* z = x W + b, worked out by hand */
    static const double z[2][2] = {{-0.75, 2.3}, {-0.3, 0.4}};
    static const char *acts[] = {"linear", "relu", "sigmoid", "tanh", "softmax"};

    for (size_t ai = 0; ai < PD_COUNT(acts); ai++) {
        model m;
        model_init(&m);
        int x = add_data(&m, "x", "dense", 3);
        int y = add_data(&m, "y", "dense", 2);
        int o = add_fc(&m, "out", x, 2, acts[ai]);
        add_cost(&m, "square_error_cost", o, y);
        pd_batch b;
        pd_batch_init(&b, m.layout, m.nslots);
        for (int i = 0; i < 2; i++) {
            memcpy(pd_slot_push_dense(&b.slots[0], i), xv[i], sizeof xv[i]);
            float *yv = pd_slot_push_dense(&b.slots[1], i);
            yv[0] = 0;
            yv[1] = i == 0 ? 2 : 0;
            b.n++;
        }
        pd_net net;
        build(&net, &m, 3);
        memcpy(pd_net_param(&net, "out.w")->w, w, sizeof w);
        memcpy(pd_net_param(&net, "out.b")->w, bias, sizeof bias);
        bind(&net, &b);
        double cost = fwd(&net);
        double want[2][2], sq = 0;
        for (int r = 0; r < 2; r++) {
            double s = exp(z[r][0]) + exp(z[r][1]);
            for (int c = 0; c < 2; c++) {
                double v = z[r][c];
                switch (ai) {
                case 1: v = v > 0 ? v : 0; break;
                case 2: v = 1 / (1 + exp(-v)); break;
                case 3: v = tanh(v); break;
                case 4: v = exp(v) / s; break;
                }
                want[r][c] = v;
                double d = v - (r == 0 && c == 1 ? 2 : 0);
                sq += d * d;
            }
        }
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 2; c++) CHECK_NEAR(net.layers[o].out[r * 2 + c], want[r][c], 1e-6);
        CHECK_NEAR(cost, sq / 2, 1e-6);
        if (ai == 0) CHECK_NEAR(cost, (0.75 * 0.75 + 0.3 * 0.3 + 0.3 * 0.3 + 0.4 * 0.4) / 2, 1e-6);
        pd_net_free(&net);
        pd_batch_free(&b);
    }
}

/* embedding, the three poolings (one sequence empty), concat, cos_sim and
 * the costs, on values worked out by hand */
PD_TEST(layers_forward_by_hand)
{
    model m;
    model_init(&m);
    int ids = add_data(&m, "words", "id_list", 5);
    int y = add_data(&m, "y", "dense", 2);
    int e = add_embedding(&m, "emb", ids, 2);
    int psum = add_seq_pool(&m, "sum", e, "sum");
    int pavg = add_seq_pool(&m, "avg", e, "average");
    int pmax = add_seq_pool(&m, "max", e, "max");
    int cat = add_layer(&m, "concat", "cat", 4, psum, pavg);
    int cos = add_layer(&m, "cos_sim", "cos", 1, psum, pmax);
    m.l[cos].scale = 5;
    int se = add_cost(&m, "square_error_cost", pmax, y);

    static const float table[5][2] = {{0.1f, 0.9f}, {0.5f, -0.2f}, {-0.3f, 0.4f}, {0.8f, 0}, {-0.6f, -0.7f}};
    static const int32_t seq0[] = {1, 3, 2}, seq1[] = {4}, seq3[] = {0, 4};
    static const int32_t *seqs[4] = {seq0, seq1, NULL, seq3};
    static const int lens[4] = {3, 1, 0, 2};
    static const double want_sum[4][2] = {{1.0, 0.2}, {-0.6, -0.7}, {0, 0}, {-0.5, 0.2}};
    static const double want_avg[4][2] = {{1.0 / 3, 0.2 / 3}, {-0.6, -0.7}, {0, 0}, {-0.25, 0.1}};
    static const double want_max[4][2] = {{0.8, 0.4}, {-0.6, -0.7}, {0, 0}, {0.1, 0.9}};
    pd_batch b;
    pd_batch_init(&b, m.layout, m.nslots);
    for (int i = 0; i < 4; i++) {
        pd_slot_push_ids(&b.slots[0], i, seqs[i], lens[i]);
        float *yv = pd_slot_push_dense(&b.slots[1], i);
        yv[0] = 1;
        yv[1] = 0;
        b.n++;
    }
    pd_net net;
    build(&net, &m, 1);
    memcpy(pd_net_param(&net, "emb.w")->w, table, sizeof table);
    bind(&net, &b);
    double cost = fwd(&net);

    /* the embedding: one row per id, in order */
    CHECK_EQ_INT(net.layers[e].rows, 6);
    static const int32_t all[6] = {1, 3, 2, 4, 0, 4};
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 2; c++) CHECK_NEAR(net.layers[e].out[r * 2 + c], table[all[r]][c], 0);
    double se_sum = 0;
    for (int i = 0; i < 4; i++) {
        double dot = 0, nsum = 0, nmax = 0, want_se = 0;
        for (int c = 0; c < 2; c++) {
            CHECK_NEAR(net.layers[psum].out[i * 2 + c], want_sum[i][c], 1e-6);
            CHECK_NEAR(net.layers[pavg].out[i * 2 + c], want_avg[i][c], 1e-6);
            CHECK_NEAR(net.layers[pmax].out[i * 2 + c], want_max[i][c], 1e-6);
            CHECK_NEAR(net.layers[cat].out[i * 4 + c], want_sum[i][c], 1e-6);
            CHECK_NEAR(net.layers[cat].out[i * 4 + 2 + c], want_avg[i][c], 1e-6);
            dot += want_sum[i][c] * want_max[i][c];
            nsum += want_sum[i][c] * want_sum[i][c];
            nmax += want_max[i][c] * want_max[i][c];
            double d = want_max[i][c] - (c == 0 ? 1 : 0);
            want_se += d * d;
        }
        double want_cos = nsum > 0 ? 5 * dot / sqrt(nsum * nmax) : 0; /* an empty pool scores 0 */
        CHECK_NEAR(net.layers[cos].out[i], want_cos, 1e-5);
        CHECK_NEAR(net.layers[se].out[i], want_se, 1e-6);
        se_sum += want_se;
    }
    CHECK_NEAR(net.layers[cos].out[0], 5 * (0.8 + 0.08) / sqrt(1.04 * 0.8), 1e-5);
    CHECK_NEAR(cost, se_sum / 4, 1e-6);
    pd_net_free(&net);
    pd_batch_free(&b);

    /* cross_entropy of probabilities, softmax_cross_entropy of logits */
    model m2;
    model_init(&m2);
    int p = add_data(&m2, "p", "dense", 3);
    int label = add_data(&m2, "label", "id", 3);
    int ce = add_cost(&m2, "cross_entropy", p, label);
    int sx = add_cost(&m2, "softmax_cross_entropy", p, label);
    static const float pv[2][3] = {{0.2f, 0.5f, 0.3f}, {0.7f, 0.2f, 0.1f}};
    static const int32_t lv[2] = {1, 2};
    pd_batch_init(&b, m2.layout, m2.nslots);
    for (int i = 0; i < 2; i++) {
        memcpy(pd_slot_push_dense(&b.slots[0], i), pv[i], sizeof pv[i]);
        pd_slot_push_id(&b.slots[1], i, lv[i]);
        b.n++;
    }
    build(&net, &m2, 1);
    bind(&net, &b);
    cost = fwd(&net);
    CHECK_NEAR(net.layers[ce].out[0], -log(0.5), 1e-6);
    CHECK_NEAR(net.layers[ce].out[1], -log(0.1), 1e-6);
    CHECK_NEAR(net.layers[sx].out[0], log(exp(0.2) + exp(0.5) + exp(0.3)) - 0.5, 1e-6);
    CHECK_NEAR(net.layers[sx].out[1], log(exp(0.7) + exp(0.2) + exp(0.1)) - 0.1, 1e-6);
    CHECK_NEAR(cost, ((double)net.layers[sx].out[0] + net.layers[sx].out[1]) / 2, 1e-12);
    CHECK_NEAR(pd_net_mean(&net, ce), (-log(0.5) - log(0.1)) / 2, 1e-6);
    pd_net_free(&net);
    pd_batch_free(&b);
}

/* the same seed gives the same weights and the same cost; another seed not */
PD_TEST(net_forward_deterministic)
{
    model m;
    model_init(&m);
    int ids = add_data(&m, "words", "id_list", 20);
    int x = add_data(&m, "x", "dense", 3);
    int label = add_data(&m, "label", "id", 4);
    int e = add_embedding(&m, "emb", ids, 5);
    int s = add_seq_pool(&m, "pool", e, "average");
    int h = add_fc(&m, "h", x, 5, "relu");
    int c = add_layer(&m, "concat", "cat", 10, s, h);
    int p = add_fc(&m, "prob", c, 4, "softmax");
    add_cost(&m, "cross_entropy", p, label);
    pd_batch b;
    fill_batch(&b, &m, 8, 5);

    pd_net n1, n2, n3;
    build(&n1, &m, 7);
    build(&n2, &m, 7);
    build(&n3, &m, 8);
    bind(&n1, &b);
    bind(&n2, &b);
    bind(&n3, &b);
    int same_w = 1;
    for (int i = 0; i < n1.nparams; i++) {
        size_t bytes = (size_t)n1.params[i].rows * n1.params[i].cols * sizeof(float);
        CHECK(memcmp(n1.params[i].w, n2.params[i].w, bytes) == 0);
        same_w &= memcmp(n1.params[i].w, n3.params[i].w, bytes) == 0;
    }
    CHECK(!same_w);
    double c1 = fwd(&n1), c2 = fwd(&n2), c3 = fwd(&n3);
    CHECK(c1 == c2);
    CHECK(c1 != c3);
    CHECK(isfinite(c1) && c1 > 0);
    CHECK(fwd(&n1) == c1); /* forward has no hidden state */
    /* backward starts from zero gradients each time, sparse rows included */
    pd_net_backward(&n1);
    fwd(&n1);
    pd_net_backward(&n1);
    pd_net_backward(&n2);
    for (int i = 0; i < n1.nparams; i++) {
        size_t bytes = (size_t)n1.params[i].rows * n1.params[i].cols * sizeof(float);
        CHECK(memcmp(n1.params[i].g, n2.params[i].g, bytes) == 0);
    }
    pd_net_free(&n1);
    pd_net_free(&n2);
    pd_net_free(&n3);
    pd_batch_free(&b);
}

/* --- failures: allocation, inconsistent descriptions, parameter names ------- */

/* the CPU backend, but nothing over 1 MB can be allocated */
static void *small_alloc(size_t bytes) { return bytes > (1u << 20) ? NULL : pd_backend_cpu.alloc(bytes); }

PD_TEST(layer_alloc_failure_names_layer)
{
    pd_backend be = pd_backend_cpu;
    be.alloc = small_alloc;
    model m;
    model_init(&m);
    int x = add_data(&m, "x", "dense", 4), y = add_data(&m, "y", "dense", 512);
    int fc = add_fc(&m, "fc_1", x, 512, "linear");
    add_cost(&m, "square_error_cost", fc, y);
    pd_net net;
    CHECK_EQ_INT(pd_net_build(&net, &m.r, &be, 1), 0);
    /* 1000 rows (room for 1024) of 512 outputs and as many gradients: 4 MB */
    pd_batch big, small;
    fill_batch(&big, &m, 1000, 2);
    bind(&net, &big);
    double cost = 0;
    int rc = pd_net_forward(&net, &cost);
    CHECK_EQ_INT(rc, PD_ENOMEM);
    CHECK_CONTAINS(pd_err_msg(), "layer 'fc_1' (fc)");
    CHECK_CONTAINS(pd_err_msg(), "cannot allocate 4.0 MB");
    CHECK_CONTAINS(pd_err_msg(), "1024 x 512 outputs");
    /* the net is still usable with a batch that fits */
    fill_batch(&small, &m, 8, 3);
    bind(&net, &small);
    CHECK_EQ_INT(pd_net_forward(&net, &cost), 0);
    CHECK(isfinite(cost) && cost > 0);
    CHECK_EQ_INT(pd_net_backward(&net), 0);
    pd_net_free(&net);
    pd_batch_free(&big);
    pd_batch_free(&small);
}

/* pd_net_build of m fails with PD_EINVAL, naming layer `name` and where it
 * was declared, and saying `what` */
static void build_fails(model *m, int layer, const char *what)
{
    pd_net net;
    char where[32], named[64];
    snprintf(where, sizeof where, "bad.lua:%d", layer + 10);
    m->l[layer].where = where;
    int rc = pd_net_build(&net, &m->r, &pd_backend_cpu, 1);
    if (rc == 0) pd_test_fail(__FILE__, __LINE__, "layer '%s' (%s) was accepted", m->l[layer].name, what);
    CHECK_EQ_INT(rc, PD_EINVAL);
    snprintf(named, sizeof named, "%s: layer '%s' (%s)", where, m->l[layer].name, m->l[layer].type);
    CHECK_CONTAINS(pd_err_msg(), named);
    CHECK_CONTAINS(pd_err_msg(), what);
    m->l[layer].where = NULL;
}

PD_TEST(setup_rejects_inconsistent_shapes)
{
    model m;
    int a, b, c, l;

    model_init(&m); /* concat: the inputs' widths add up to 5, not 6 */
    a = add_data(&m, "a", "dense", 3), b = add_data(&m, "b", "dense", 2);
    l = add_layer(&m, "concat", "cat", 6, a, b);
    build_fails(&m, l, "has width 6, its inputs 5 together");

    model_init(&m); /* cos_sim of widths 3 and 4 */
    a = add_data(&m, "a", "dense", 3), b = add_data(&m, "b", "dense", 4);
    l = add_layer(&m, "cos_sim", "cs", 1, a, b);
    build_fails(&m, l, "input 2 'b' has width 4, expected 3");

    model_init(&m); /* cos_sim of width 2 */
    a = add_data(&m, "a", "dense", 3), b = add_data(&m, "b", "dense", 3);
    l = add_layer(&m, "cos_sim", "cs", 2, a, b);
    build_fails(&m, l, "has width 2, expected 1");

    model_init(&m); /* square error of a 3-wide prediction and a 2-wide label */
    a = add_data(&m, "a", "dense", 3), b = add_data(&m, "b", "dense", 2);
    l = add_cost(&m, "square_error_cost", a, b);
    build_fails(&m, l, "input 2 'b' has width 2, expected 3");

    model_init(&m); /* cross entropy with a dense label */
    a = add_data(&m, "a", "dense", 3), b = add_data(&m, "b", "dense", 1);
    l = add_cost(&m, "cross_entropy", a, b);
    build_fails(&m, l, "input 2 'b' must be an id data layer");

    model_init(&m); /* classification error: 5 classes of label, 3 of prediction */
    a = add_data(&m, "a", "dense", 3), b = add_data(&m, "b", "id", 5);
    l = add_layer(&m, "classification_error", "err", 1, a, b);
    build_fails(&m, l, "label 'b' has 5 classes but prediction 'a' has width 3");

    model_init(&m); /* softmax cross entropy on ids */
    a = add_data(&m, "a", "id", 3), b = add_data(&m, "b", "id", 3);
    l = add_cost(&m, "softmax_cross_entropy", a, b);
    build_fails(&m, l, "input 1 'a' holds ids (id), a dense input is needed");

    model_init(&m); /* fc whose weight is [4, 2] over a 3-wide input */
    a = add_data(&m, "a", "dense", 3);
    l = add_layer(&m, "fc", "fc_w", 2, a, -1);
    add_param(&m, l, "fc_w.w", 4, 2, 0);
    build_fails(&m, l, "parameter 'fc_w.w' is 4x2, expected 3x2");

    model_init(&m); /* fc whose bias is [1, 3] for width 2 */
    a = add_data(&m, "a", "dense", 3);
    l = add_layer(&m, "fc", "fc_b", 2, a, -1);
    add_param(&m, l, "fc_b.w", 3, 2, 0);
    add_param(&m, l, "fc_b.b", 1, 3, 0);
    build_fails(&m, l, "parameter 'fc_b.b' is 1x3, expected 1x2");

    model_init(&m); /* fc over ids */
    a = add_data(&m, "a", "id", 3);
    l = add_layer(&m, "fc", "fc_i", 2, a, -1);
    add_param(&m, l, "fc_i.w", 1, 2, 0);
    build_fails(&m, l, "holds ids");

    model_init(&m); /* embedding table of 5 rows for ids in [0, 6) */
    a = add_data(&m, "a", "id", 6);
    l = add_layer(&m, "embedding", "emb", 4, a, -1);
    add_param(&m, l, "emb.w", 5, 4, 1);
    build_fails(&m, l, "parameter 'emb.w' is 5x4, expected 6x4");

    model_init(&m); /* embedding of a dense layer */
    a = add_data(&m, "a", "dense", 6);
    l = add_layer(&m, "embedding", "emb", 4, a, -1);
    add_param(&m, l, "emb.w", 6, 4, 1);
    build_fails(&m, l, "input 1 'a' must be an id or id_list data layer");

    model_init(&m); /* seq_pool of a plain dense layer */
    a = add_data(&m, "a", "dense", 4);
    l = add_seq_pool(&m, "pool", a, "sum");
    build_fails(&m, l, "input 'a' is not a sequence of vectors");

    model_init(&m); /* seq_pool wider than its sequence */
    a = add_data(&m, "a", "id_list", 6);
    c = add_embedding(&m, "emb", a, 4);
    l = add_seq_pool(&m, "pool", c, "max");
    m.l[l].size = 5;
    build_fails(&m, l, "has width 5, its input 'emb' 4");

    model_init(&m); /* an input that is not an earlier layer */
    a = add_data(&m, "a", "dense", 3);
    l = add_layer(&m, "concat", "cat", 3, a, -1);
    m.l[l].inputs[0] = l;
    build_fails(&m, l, "input 1 is layer 1, not one before it");
}

PD_TEST(param_name_refused)
{
    static const char *bad[] = {"../x", "", ".x", "a/b", "a\nb", "a\"b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK_EQ_INT(pd_param_name_check(bad[i]), PD_EINVAL);
    char lng[200];
    memset(lng, 'a', sizeof lng - 1);
    lng[sizeof lng - 1] = '\0';
    CHECK_EQ_INT(pd_param_name_check(lng), PD_EINVAL);
    CHECK_CONTAINS(pd_err_msg(), "longer than 128 bytes");
    lng[128] = '\0';
    CHECK_EQ_INT(pd_param_name_check(lng), 0);
    CHECK_EQ_INT(pd_param_name_check("fc_0.w_0"), 0);

    /* a description naming a parameter "../x" is refused when the net is built */
    model m;
    model_init(&m);
    int a = add_data(&m, "a", "dense", 3), y = add_data(&m, "y", "dense", 1);
    int fc = add_fc_w(&m, "fc", a, 1, "linear", "../x");
    add_cost(&m, "square_error_cost", fc, y);
    pd_net net;
    CHECK_EQ_INT(pd_net_build(&net, &m.r, &pd_backend_cpu, 1), PD_EINVAL);
    CHECK_CONTAINS(pd_err_msg(), "layer 'fc' (fc)");
    CHECK_CONTAINS(pd_err_msg(), "parameter name '../x' starts with '.'");

    /* and a net whose parameter became "../x" is neither saved nor loaded */
    snprintf(m.pname[fc][0], sizeof m.pname[0][0], "fc.w");
    build(&net, &m, 1);
    free(net.params[0].name);
    net.params[0].name = pd_xstrdup("../x");
    char *dir = pd_xasprintf("%s/out/pass-00000", pd_test_dir());
    pd_model_info info = {.pass = 0, .train_cost = 1, .test_cost = 1, .samples = 1};
    CHECK_EQ_INT(pd_model_save(&net, dir, &info), PD_EINVAL);
    CHECK_CONTAINS(pd_err_msg(), "'../x'");
    char *outside = pd_xasprintf("%s/out/x.npy", pd_test_dir());
    CHECK(access(outside, F_OK) != 0);
    CHECK(access(dir, F_OK) != 0);
    CHECK_EQ_INT(pd_model_load(&net, dir), PD_EINVAL);
    free(outside);
    free(dir);
    pd_net_free(&net);
}

static int save_ticks;
static int count_tick(void *ctx)
{
    (void)ctx;
    save_ticks++;
    return -1; /* a failed heartbeat does not stop the save */
}

/* A save of 12 MB of weights ticks the net (a trainer's heartbeat) after
 * each 4 MB it writes, and a failing tick leaves the model whole */
PD_TEST(model_save_ticks_while_it_writes)
{
    model m;
    model_init(&m);
    int a = add_data(&m, "a", "dense", 1024), y = add_data(&m, "y", "dense", 1);
    int h = add_fc(&m, "h", a, 3072, "linear");
    add_cost(&m, "square_error_cost", add_fc(&m, "out", h, 1, "linear"), y);
    pd_net net;
    build(&net, &m, 1);
    net.tick = count_tick;
    save_ticks = 0;
    char *dir = pd_xasprintf("%s/ticked/pass-00000", pd_test_dir());
    pd_model_info info = {.pass = 0, .train_cost = 1, .test_cost = 1, .samples = 1};
    CHECK_EQ_INT(pd_model_save(&net, dir, &info), 0);
    CHECK(save_ticks >= 3); /* 1024 x 3072 floats: 3 chunks of 4 MB */
    float w0 = net.params[0].w[12345];
    net.params[0].w[12345] = 0;
    CHECK_EQ_INT(pd_model_load(&net, dir), 0);
    CHECK(net.params[0].w[12345] == w0);
    free(dir);
    pd_net_free(&net);
}

/* --- CTR: sigmoid_cross_entropy, add ------------------------------------------------ */

/* x(4) -> fc tanh(5) -> fc linear(2) logits -> sigmoid_cross_entropy against
 * dense targets in (0, 1) of width 2 */
PD_TEST(grad_sigmoid_cross_entropy)
{
    model m;
    model_init(&m);
    int x = add_data(&m, "x", "dense", 4);
    int y = add_data(&m, "y", "dense", 2);
    int h = add_fc(&m, "hidden", x, 5, "tanh");
    int z = add_fc(&m, "logits", h, 2, "linear");
    add_cost(&m, "sigmoid_cross_entropy", z, y);
    check_model(&m, 5, 91);
}

/* wide & deep: an embedding (wide) plus fc(fc(x)) (deep), added, -> the
 * logistic cost: the sum sends its gradient into both */
PD_TEST(grad_add)
{
    model m;
    model_init(&m);
    int id = add_data(&m, "c", "id", 6);
    int x = add_data(&m, "x", "dense", 3);
    int y = add_data(&m, "y", "dense", 1);
    int wide = add_embedding(&m, "wide", id, 1);
    int h = add_fc(&m, "h", x, 4, "tanh");
    int deep = add_fc(&m, "deep", h, 1, "linear");
    int sum = add_layer(&m, "add", "sum", 1, wide, deep);
    int o = add_fc(&m, "out", sum, 1, "tanh"); /* a layer above the sum: its gradient is checked too */
    add_cost(&m, "sigmoid_cross_entropy", o, y);
    check_model(&m, 5, 101);
}

/* the logistic cost by hand, and no overflow at large logits */
PD_TEST(sigmoid_cross_entropy_by_hand)
{
    const float x[5] = {0.f, 2.f, -3.f, 100.f, -100.f}, y[5] = {1.f, 0.f, 1.f, 0.f, 0.f};
    float out[5], dx[5] = {0};
    pd_backend_cpu.sigmoid_xent_forward(out, x, y, 5, 1);
    CHECK_NEAR(out[0], log(2.0), 1e-6);
    CHECK_NEAR(out[1], 2 + log1p(exp(-2.0)), 1e-6);
    CHECK_NEAR(out[2], log1p(exp(-3.0)) + 3, 1e-6);
    CHECK_NEAR(out[3], 100, 1e-6);
    CHECK(isfinite(out[4]) && out[4] >= 0 && out[4] < 1e-30);
    pd_backend_cpu.sigmoid_xent_backward(dx, x, y, 5, 1);
    CHECK_NEAR(dx[0], (0.5 - 1) / 5, 1e-6);
    CHECK_NEAR(dx[3], 1.0 / 5, 1e-6);
    CHECK(dx[4] >= 0 && dx[4] < 1e-30);
}

/* add: out = a + b + c, and setup refuses inputs of another width */
PD_TEST(add_forward_and_shapes)
{
    model m;
    model_init(&m);
    int a = add_data(&m, "a", "dense", 3);
    int b = add_data(&m, "b", "dense", 3);
    int s = add_layer(&m, "add", "sum", 3, a, b);
    m.l[s].inputs[m.l[s].ninputs++] = a;
    add_cost(&m, "square_error_cost", s, a);
    pd_net net;
    pd_batch batch;
    build(&net, &m, 1);
    fill_batch(&batch, &m, 4, 2);
    bind(&net, &batch);
    fwd(&net);
    const float *va = batch.slots[0].values, *vb = batch.slots[1].values, *o = net.layers[s].out;
    for (int i = 0; i < 12; i++) CHECK_NEAR(o[i], 2 * va[i] + vb[i], 1e-6);
    pd_net_free(&net);
    pd_batch_free(&batch);

    model_init(&m);
    a = add_data(&m, "a", "dense", 3);
    b = add_data(&m, "b", "dense", 2);
    s = add_layer(&m, "add", "sum", 3, a, b);
    add_cost(&m, "square_error_cost", s, a);
    CHECK(pd_net_build(&net, &m.r, &pd_backend_cpu, 1) < 0);
    CHECK_CONTAINS(pd_err_msg(), "input 2 'b' has width 2, expected 3");
}

/* cos_sim's backward, its gradients 8 floats wide where the CPU has AVX2,
 * gives bit for bit what the plain loop gives (its sums stay in order),
 * written into da and db or added to them. */
static void cos_sim_backward_is_the_plain_loop(int acc)
{
    enum { ROWS = 5, DIM = 37, N = ROWS * DIM };
    static float a[N], b[N], da[N], db[N], ra[N], rb[N], dout[ROWS];
    uint64_t rng = 3;
    for (int i = 0; i < N; i++) {
        a[i] = (float)(pd_rng_uniform(&rng) * 2 - 1);
        b[i] = (float)(pd_rng_uniform(&rng) * 2 - 1);
        ra[i] = da[i] = (float)pd_rng_uniform(&rng);
        rb[i] = db[i] = (float)pd_rng_uniform(&rng);
    }
    for (int r = 0; r < ROWS; r++) dout[r] = (float)(pd_rng_uniform(&rng) * 2 - 1);
    const float scale = 5, eps = 1e-8f;
    pd_backend_cpu.cos_sim_backward(da, db, a, b, NULL, dout, ROWS, DIM, scale, acc, acc);
    for (int r = 0; r < ROWS; r++) {
        const float *x = a + r * DIM, *y = b + r * DIM;
        float xy = 0, xx = 0, yy = 0;
        for (int c = 0; c < DIM; c++) {
            xy += x[c] * y[c];
            xx += x[c] * x[c];
            yy += y[c] * y[c];
        }
        float nx = sqrtf(xx), ny = sqrtf(yy), den = nx * ny + eps, g = dout[r] * scale;
        float kx = nx > 0 ? xy * ny / (nx * den * den) : 0, ky = ny > 0 ? xy * nx / (ny * den * den) : 0;
        for (int c = 0; c < DIM; c++) {
            float ga = g * (y[c] / den - kx * x[c]), gb = g * (x[c] / den - ky * y[c]);
            ra[r * DIM + c] = acc ? ra[r * DIM + c] + ga : ga;
            rb[r * DIM + c] = acc ? rb[r * DIM + c] + gb : gb;
        }
    }
    CHECK(memcmp(da, ra, sizeof da) == 0);
    CHECK(memcmp(db, rb, sizeof db) == 0);
}

PD_TEST(cpu_cos_sim_backward_is_the_plain_loop_bit_for_bit)
{
    cos_sim_backward_is_the_plain_loop(0);
    cos_sim_backward_is_the_plain_loop(1);
}

/* da and db one buffer (cos_sim of a layer's output with itself, through
 * two inputs): a's share is written first, b's added to it. */
PD_TEST(cpu_cos_sim_backward_into_one_buffer)
{
    enum { ROWS = 4, DIM = 19, N = ROWS * DIM };
    static float a[N], b[N], d[N], ra[N], rb[N], dout[ROWS];
    uint64_t rng = 5;
    for (int i = 0; i < N; i++) {
        a[i] = (float)(pd_rng_uniform(&rng) * 2 - 1);
        b[i] = (float)(pd_rng_uniform(&rng) * 2 - 1);
        d[i] = NAN;
    }
    for (int r = 0; r < ROWS; r++) dout[r] = (float)(pd_rng_uniform(&rng) * 2 - 1);
    pd_backend_cpu.cos_sim_backward(ra, NULL, a, b, NULL, dout, ROWS, DIM, 3, 0, 0);
    pd_backend_cpu.cos_sim_backward(NULL, rb, a, b, NULL, dout, ROWS, DIM, 3, 0, 0);
    pd_backend_cpu.cos_sim_backward(d, d, a, b, NULL, dout, ROWS, DIM, 3, 0, 1);
    for (int i = 0; i < N; i++) CHECK(d[i] == ra[i] + rb[i]);
}
