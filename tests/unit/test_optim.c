/*
 * test_optim.c - every optimizer of the CPU backend against the update
 * rules written out here in double precision, and local updates of sparse
 * parameters.
 *
 * Each optimizer test runs pd_backend_cpu.opt_update for three steps on four
 * weights with given gradients and compares the weights after every step
 * with the reference, to 1e-6 relative. The reference takes the same
 * float hyper-parameters the backend gets. Epsilons are chosen large
 * enough that where they sit in the formula shows in the result.
 */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/data/batch.h"
#include "../../src/nn/net.h"

#include <pthread.h>
#include <stdint.h>

#define N 4
#define STEPS 3

static const float w0[N] = {0.5f, -1.25f, 0.75f, 2.0f};
static const float grads[STEPS][N] = {
    {0.1f, -0.4f, 0.25f, -0.05f},
    {0.3f, -0.2f, -0.15f, 0.05f},
    {-0.2f, -0.1f, 0.35f, 0.02f},
};

/* |got - want| <= 1e-6 |want| (the weights stay well away from zero) */
#define CHECK_REL(got, want)                                                                        \
    do {                                                                                           \
        double g_ = (got), w_ = (want);                                                            \
        if (!(fabs(g_ - w_) <= 1e-6 * fabs(w_)))                                                   \
            pd_test_fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (rel %.3g)", #got, #want, g_, w_, \
                         fabs(g_ - w_) / fabs(w_));                                                \
    } while (0)

/* The reference: one step of h on w (double), state in m and v. */
static void ref_step(const pd_opt_hyper *h, double *w, const float *gf, double *m, double *v, int rms_momentum)
{
    double lr = h->lr, mu = h->momentum, wd = h->weight_decay, eps = h->epsilon;
    for (int i = 0; i < N; i++) {
        double g = gf[i] + wd * w[i]; /* weight decay: an L2 term in the gradient */
        switch (h->type) {
        case PD_OPT_SGD:
            w[i] -= lr * g;
            break;
        case PD_OPT_MOMENTUM:
            /* v <- mu v + g;  w <- w - lr v  (nesterov: w - lr (g + mu v)) */
            m[i] = mu * m[i] + g;
            w[i] -= h->nesterov ? lr * (g + mu * m[i]) : lr * m[i];
            break;
        case PD_OPT_ADAGRAD:
            /* G <- G + g^2;  w <- w - lr g / (sqrt(G) + eps) */
            m[i] += g * g;
            w[i] -= lr * g / (sqrt(m[i]) + eps);
            break;
        case PD_OPT_ADAM: {
            /* m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;
             * w <- w - lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)
             * (PaddlePaddle's form: epsilon on the uncorrected sqrt(v)) */
            double b1 = h->beta1, b2 = h->beta2, t = (double)h->t;
            m[i] = b1 * m[i] + (1 - b1) * g;
            v[i] = b2 * v[i] + (1 - b2) * g * g;
            w[i] -= lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t)) * m[i] / (sqrt(v[i]) + eps);
            break;
        }
        case PD_OPT_RMSPROP: {
            /* E <- rho E + (1 - rho) g^2;  d = lr g / sqrt(E + eps);
             * with momentum: u <- mu u + d;  w <- w - u;  else w <- w - d */
            double rho = h->rho;
            m[i] = rho * m[i] + (1 - rho) * g * g;
            double d = lr * g / sqrt(m[i] + eps);
            if (rms_momentum) {
                v[i] = mu * v[i] + d;
                w[i] -= v[i];
            } else {
                w[i] -= d;
            }
            break;
        }
        }
    }
}

/* STEPS updates of w0 by the backend (state buffers as the optimizer needs:
 * s2 only when with_s2) against the reference. */
static void check_optimizer(pd_opt_hyper h, int with_s2, int rms_momentum)
{
    float w[N], s1[N] = {0}, s2[N] = {0};
    double rw[N], rm[N] = {0}, rv[N] = {0};
    memcpy(w, w0, sizeof w);
    for (int i = 0; i < N; i++) rw[i] = w0[i];
    for (int t = 1; t <= STEPS; t++) {
        double prev[N];
        memcpy(prev, rw, sizeof prev);
        h.t = t;
        pd_backend_cpu.opt_update(&h, w, grads[t - 1], s1, with_s2 ? s2 : NULL, N);
        ref_step(&h, rw, grads[t - 1], rm, rv, rms_momentum);
        for (int i = 0; i < N; i++) {
            CHECK_REL(w[i], rw[i]);
            /* the step moved the weight by far more than the tolerance */
            CHECK(fabs(rw[i] - prev[i]) > 1e-4);
        }
    }
}

static pd_opt_hyper hyper(int type, float lr)
{
    pd_opt_hyper h;
    memset(&h, 0, sizeof h);
    h.type = type;
    h.lr = lr;
    return h;
}

PD_TEST(opt_sgd)
{
    check_optimizer(hyper(PD_OPT_SGD, 0.1f), 0, 0);
}

PD_TEST(opt_momentum)
{
    pd_opt_hyper h = hyper(PD_OPT_MOMENTUM, 0.1f);
    h.momentum = 0.9f;
    check_optimizer(h, 0, 0);
}

PD_TEST(opt_momentum_nesterov)
{
    pd_opt_hyper h = hyper(PD_OPT_MOMENTUM, 0.1f);
    h.momentum = 0.9f;
    h.nesterov = 1;
    check_optimizer(h, 0, 0);
}

PD_TEST(opt_adagrad)
{
    pd_opt_hyper h = hyper(PD_OPT_ADAGRAD, 0.1f);
    h.epsilon = 0.05f;
    check_optimizer(h, 0, 0);
}

PD_TEST(opt_adam)
{
    pd_opt_hyper h = hyper(PD_OPT_ADAM, 0.05f);
    h.beta1 = 0.9f;
    h.beta2 = 0.999f;
    h.epsilon = 0.01f;
    check_optimizer(h, 1, 0);
}

/* without momentum: no second state buffer, or one that momentum 0 leaves
 * equal to the plain step; both must be plain RMSprop */
PD_TEST(opt_rmsprop)
{
    pd_opt_hyper h = hyper(PD_OPT_RMSPROP, 0.01f);
    h.rho = 0.95f;
    h.epsilon = 0.01f;
    check_optimizer(h, 0, 0);
    check_optimizer(h, 1, 0);
}

PD_TEST(opt_rmsprop_momentum)
{
    pd_opt_hyper h = hyper(PD_OPT_RMSPROP, 0.01f);
    h.rho = 0.95f;
    h.epsilon = 0.01f;
    h.momentum = 0.8f;
    check_optimizer(h, 1, 1);
}

/* weight decay adds wd * w to the gradient, in every optimizer */
PD_TEST(opt_weight_decay)
{
    pd_opt_hyper h = hyper(PD_OPT_SGD, 0.1f);
    h.weight_decay = 0.05f;
    check_optimizer(h, 0, 0);

    h = hyper(PD_OPT_MOMENTUM, 0.1f);
    h.momentum = 0.9f;
    h.weight_decay = 0.05f;
    check_optimizer(h, 0, 0);
    h.nesterov = 1;
    check_optimizer(h, 0, 0);

    h = hyper(PD_OPT_ADAGRAD, 0.1f);
    h.epsilon = 0.05f;
    h.weight_decay = 0.05f;
    check_optimizer(h, 0, 0);

    h = hyper(PD_OPT_ADAM, 0.05f);
    h.beta1 = 0.9f;
    h.beta2 = 0.999f;
    h.epsilon = 0.01f;
    h.weight_decay = 0.05f;
    check_optimizer(h, 1, 0);

    h = hyper(PD_OPT_RMSPROP, 0.01f);
    h.rho = 0.95f;
    h.epsilon = 0.01f;
    h.momentum = 0.8f;
    h.weight_decay = 0.05f;
    check_optimizer(h, 1, 1);

    /* and a decay that is not there changes nothing: sgd, wd 0 vs none */
    float a[N], b[N];
    memcpy(a, w0, sizeof a);
    memcpy(b, w0, sizeof b);
    h = hyper(PD_OPT_SGD, 0.1f);
    pd_backend_cpu.opt_update(&h, a, grads[0], NULL, NULL, N);
    for (int i = 0; i < N; i++) b[i] -= 0.1f * grads[0][i];
    for (int i = 0; i < N; i++) CHECK_REL(a[i], b[i]);
}

/* pd_opt_hyper_from carries every field of the recipe's optimizer */
PD_TEST(opt_hyper_from_desc)
{
    pd_optimizer_desc o;
    memset(&o, 0, sizeof o);
    snprintf(o.type, sizeof o.type, "adam");
    o.learning_rate = 0.5;
    o.momentum = 0.25;
    o.beta1 = 0.8;
    o.beta2 = 0.9;
    o.epsilon = 0.125;
    o.rho = 0.75;
    o.weight_decay = 0.0625;
    o.nesterov = 1;
    pd_opt_hyper h;
    pd_opt_hyper_from(&h, &o, 7);
    CHECK_EQ_INT(h.type, PD_OPT_ADAM);
    CHECK_NEAR(h.lr, 0.5, 0);
    CHECK_NEAR(h.momentum, 0.25, 0);
    CHECK_NEAR(h.beta1, 0.8f, 0);
    CHECK_NEAR(h.beta2, 0.9f, 0);
    CHECK_NEAR(h.epsilon, 0.125, 0);
    CHECK_NEAR(h.rho, 0.75, 0);
    CHECK_NEAR(h.weight_decay, 0.0625, 0);
    CHECK_EQ_INT(h.nesterov, 1);
    CHECK_EQ_INT(h.t, 7);
}

/* pd_net_forward that must succeed: the mean cost */
static double fwd(pd_net *net)
{
    double c = NAN;
    if (pd_net_forward(net, &c) < 0) pd_test_fail(__FILE__, __LINE__, "pd_net_forward: %s", pd_err_msg());
    return c;
}

/* --- pd_net_update on a sparse table ------------------------------------------ */

/* id(6) -> embedding(3, sparse) -> fc linear(2) -> square_error_cost(y) */
typedef struct small_net {
    pd_recipe r;
    pd_layer_desc l[5];
    pd_slot layout[2];
} small_net;

static void small_net_init(small_net *s)
{
    memset(s, 0, sizeof *s);
    s->r.path = (char *)"test_optim.c";
    s->r.layers = s->l;
    s->r.nlayers = 5;
    s->r.cost = 4;
    s->r.predict = 3;
    pd_layer_desc *d = s->l;
    d[0] = (pd_layer_desc){.name = (char *)"word", .type = (char *)"data", .kind = (char *)"id",
                           .slot = (char *)"word", .size = 1, .range = 6};
    d[1] = (pd_layer_desc){.name = (char *)"y", .type = (char *)"data", .kind = (char *)"dense",
                           .slot = (char *)"y", .size = 2};
    d[2] = (pd_layer_desc){.name = (char *)"emb", .type = (char *)"embedding", .size = 3, .ninputs = 1,
                           .inputs = {0}, .nparams = 1};
    d[2].params[0] = (pd_param_desc){.name = (char *)"emb.w", .rows = 6, .cols = 3, .sparse = 1,
                                     .init = {.kind = "uniform", .a = -1, .b = 1}};
    d[3] = (pd_layer_desc){.name = (char *)"out", .type = (char *)"fc", .act = (char *)"linear", .size = 2,
                           .ninputs = 1, .inputs = {2}, .nparams = 1};
    d[3].params[0] = (pd_param_desc){.name = (char *)"out.w", .rows = 3, .cols = 2,
                                     .init = {.kind = "uniform", .a = -1, .b = 1}};
    d[4] = (pd_layer_desc){.name = (char *)"cost", .type = (char *)"square_error_cost", .size = 1,
                           .ninputs = 2, .inputs = {3, 1}};
    s->layout[0] = (pd_slot){.name = "word", .kind = PD_SLOT_ID, .width = 6};
    s->layout[1] = (pd_slot){.name = "y", .kind = PD_SLOT_DENSE, .width = 2};
}

static void small_batch(pd_batch *b, small_net *s, const int32_t *ids, int n)
{
    pd_batch_init(b, s->layout, 2);
    for (int i = 0; i < n; i++) {
        pd_slot_push_id(&b->slots[0], i, ids[i]);
        float *y = pd_slot_push_dense(&b->slots[1], i);
        y[0] = 1.5f;
        y[1] = -0.5f;
        b->n++;
    }
}

/* One forward, backward and update on batch ids; checks that exactly the
 * rows of ids changed, each by what the optimizer makes of its gradient
 * (sgd), or at all (others), and that rows never touched (ever[r] == 0)
 * keep zero optimizer state. */
static void sparse_step(pd_net *net, small_net *s, const int32_t *ids, int n, const pd_optimizer_desc *o,
                        long step, uint8_t *ever)
{
    pd_batch b;
    small_batch(&b, s, ids, n);
    CHECK(pd_net_bind(net, &b) == 0);
    fwd(net);
    pd_net_backward(net);

    pd_param *t = pd_net_param(net, "emb.w");
    float before[18], g[18];
    memcpy(before, t->w, sizeof before);
    memcpy(g, t->g, sizeof g);
    int want[6] = {0};
    for (int i = 0; i < n; i++) want[ids[i]] = ever[ids[i]] = 1;
    int nwant = 0;
    for (int r = 0; r < 6; r++) nwant += want[r];
    CHECK_EQ_INT(t->ntouched, nwant);
    for (int k = 0; k < t->ntouched; k++) CHECK(want[t->touched[k]]);

    pd_param *fw = pd_net_param(net, "out.w");
    float fbefore[6];
    memcpy(fbefore, fw->w, sizeof fbefore);

    pd_net_update(net, o, step);
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 3; c++) {
            int i = r * 3 + c;
            if (!want[r]) {
                CHECK(t->w[i] == before[i]); /* bit for bit */
                if (!ever[r] && t->s1) CHECK(t->s1[i] == 0);
                if (!ever[r] && t->s2) CHECK(t->s2[i] == 0);
                continue;
            }
            CHECK(g[i] != 0);
            if (strcmp(o->type, "sgd") == 0)
                CHECK_NEAR(t->w[i], before[i] - o->learning_rate * (g[i] + o->weight_decay * before[i]), 1e-6);
            else
                CHECK(t->w[i] != before[i]);
        }
    /* the dense weight moved everywhere */
    for (int i = 0; i < 6; i++) CHECK(fw->w[i] != fbefore[i]);
    pd_batch_free(&b);
}

PD_TEST(net_update_sparse_touched_rows)
{
    static const char *opts[] = {"sgd", "momentum", "adagrad", "adam", "rmsprop"};
    for (size_t k = 0; k < PD_COUNT(opts); k++) {
        small_net s;
        small_net_init(&s);
        pd_optimizer_desc o;
        memset(&o, 0, sizeof o);
        snprintf(o.type, sizeof o.type, "%s", opts[k]);
        o.learning_rate = 0.1;
        o.momentum = 0.9;
        o.beta1 = 0.9;
        o.beta2 = 0.999;
        o.epsilon = 1e-6;
        o.rho = 0.95;
        o.weight_decay = 0.01;
        pd_net net;
        CHECK(pd_net_build(&net, &s.r, &pd_backend_cpu, 5) == 0);
        /* step 1 touches rows 1 and 4 (1 twice); step 2 rows 2 and 5: rows
         * 1 and 4, with optimizer state by now, must not move in step 2 */
        static const int32_t a[3] = {1, 4, 1}, b[3] = {2, 2, 5};
        uint8_t ever[6] = {0};
        sparse_step(&net, &s, a, 3, &o, 1, ever);
        float after1[18];
        memcpy(after1, pd_net_param(&net, "emb.w")->w, sizeof after1);
        sparse_step(&net, &s, b, 3, &o, 2, ever);
        pd_param *t = pd_net_param(&net, "emb.w");
        for (int c = 0; c < 3; c++) {
            CHECK(t->w[1 * 3 + c] == after1[1 * 3 + c]);
            CHECK(t->w[4 * 3 + c] == after1[4 * 3 + c]);
        }
        pd_net_free(&net);
    }
}

/* An update large enough to be cut between threads gives, bit for bit, what
 * one thread gives (the same elementwise rule on every slice). */
PD_TEST(opt_update_cut_between_threads)
{
    const size_t n = 300007; /* over the split size, not a multiple of 16 */
    static const int types[] = {PD_OPT_SGD, PD_OPT_MOMENTUM, PD_OPT_ADAGRAD, PD_OPT_ADAM, PD_OPT_RMSPROP};
    uint64_t rng = 5;
    float *g = malloc(n * sizeof *g), *w[2], *s1[2], *s2[2];
    for (int k = 0; k < 2; k++) {
        w[k] = malloc(n * sizeof(float));
        s1[k] = malloc(n * sizeof(float));
        s2[k] = malloc(n * sizeof(float));
    }
    for (size_t t = 0; t < PD_COUNT(types); t++) {
        pd_opt_hyper h = hyper(types[t], 0.01f);
        h.momentum = 0.9f;
        h.beta1 = 0.9f;
        h.beta2 = 0.999f;
        h.epsilon = 1e-6f;
        h.rho = 0.95f;
        h.t = 3;
        for (size_t i = 0; i < n; i++) {
            g[i] = (float)(pd_rng_uniform(&rng) - 0.5);
            w[0][i] = w[1][i] = (float)(pd_rng_uniform(&rng) - 0.5);
            s1[0][i] = s1[1][i] = (float)pd_rng_uniform(&rng);
            s2[0][i] = s2[1][i] = (float)pd_rng_uniform(&rng);
        }
        pd_blas_threads(3); /* cut in three */
        pd_backend_cpu.opt_update(&h, w[0], g, s1[0], s2[0], n);
        pd_blas_threads(1); /* whole */
        pd_backend_cpu.opt_update(&h, w[1], g, s1[1], s2[1], n);
        CHECK(memcmp(w[0], w[1], n * sizeof(float)) == 0);
        CHECK(memcmp(s1[0], s1[1], n * sizeof(float)) == 0);
        CHECK(memcmp(s2[0], s2[1], n * sizeof(float)) == 0);
    }
    free(g);
    for (int k = 0; k < 2; k++) {
        free(w[k]);
        free(s1[k]);
        free(s2[k]);
    }
}

/* What each of two threads in pool_driven_by_one_thread_at_a_time works on. */
typedef struct pool_user {
    size_t n;
    float *w, *g, *want;             /* want: w after the updates, from one thread alone */
    float *a, *b, *c, *c_want;       /* a product of 256 x 256 matrices */
    int ok;
} pool_user;

enum { POOL_DIM = 256, POOL_ROUNDS = 40 };

static void *pool_user_run(void *arg)
{
    pool_user *u = arg;
    pd_opt_hyper h = hyper(PD_OPT_SGD, 0.01f);
    u->ok = 1;
    for (int r = 0; r < POOL_ROUNDS; r++) {
        pd_backend_cpu.opt_update(&h, u->w, u->g, NULL, NULL, u->n);
        pd_backend_cpu.gemm(0, 0, POOL_DIM, POOL_DIM, POOL_DIM, 1, u->a, POOL_DIM, u->b, POOL_DIM, 0, u->c, POOL_DIM);
        for (int i = 0; i < POOL_DIM * POOL_DIM; i++)
            if (fabsf(u->c[i] - u->c_want[i]) > 1e-4f * (1 + fabsf(u->c_want[i]))) u->ok = 0;
    }
    return NULL;
}

/* Two threads that use the product threads at once (two trainers in one
 * process): one hands its work to the workers, the other runs its own
 * whole meanwhile, and both get what one thread alone gets. */
PD_TEST(pool_driven_by_one_thread_at_a_time)
{
    pool_user u[2];
    uint64_t rng = 9;
    pd_opt_hyper h = hyper(PD_OPT_SGD, 0.01f);
    size_t mat = (size_t)POOL_DIM * POOL_DIM;
    pd_blas_threads(1);
    for (int k = 0; k < 2; k++) {
        u[k].n = 300007 + (size_t)k * 16; /* over the split size */
        u[k].w = malloc(u[k].n * sizeof(float));
        u[k].g = malloc(u[k].n * sizeof(float));
        u[k].want = malloc(u[k].n * sizeof(float));
        u[k].a = malloc(mat * sizeof(float));
        u[k].b = malloc(mat * sizeof(float));
        u[k].c = malloc(mat * sizeof(float));
        u[k].c_want = malloc(mat * sizeof(float));
        for (size_t i = 0; i < u[k].n; i++) {
            u[k].g[i] = (float)(pd_rng_uniform(&rng) - 0.5);
            u[k].w[i] = u[k].want[i] = (float)(pd_rng_uniform(&rng) - 0.5);
        }
        for (size_t i = 0; i < mat; i++) {
            u[k].a[i] = (float)(pd_rng_uniform(&rng) - 0.5);
            u[k].b[i] = (float)(pd_rng_uniform(&rng) - 0.5);
        }
        for (int r = 0; r < POOL_ROUNDS; r++) pd_backend_cpu.opt_update(&h, u[k].want, u[k].g, NULL, NULL, u[k].n);
        pd_backend_cpu.gemm(0, 0, POOL_DIM, POOL_DIM, POOL_DIM, 1, u[k].a, POOL_DIM, u[k].b, POOL_DIM, 0,
                            u[k].c_want, POOL_DIM);
    }
    pd_blas_threads(3);
    pthread_t t[2];
    for (int k = 0; k < 2; k++) CHECK(pthread_create(&t[k], NULL, pool_user_run, &u[k]) == 0);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    pd_blas_threads(1);
    for (int k = 0; k < 2; k++) {
        CHECK(u[k].ok);
        CHECK(memcmp(u[k].w, u[k].want, u[k].n * sizeof(float)) == 0);
        free(u[k].w);
        free(u[k].g);
        free(u[k].want);
        free(u[k].a);
        free(u[k].b);
        free(u[k].c);
        free(u[k].c_want);
    }
}

static int count_ready(void *ctx, pd_net *net, pd_param *p)
{
    (void)net;
    (void)p;
    ++*(int *)ctx;
    return 0;
}

/* Plain SGD applied by the fc layer's product in the backward (local
 * training): the weight moves in the backward, as pd_net_update would move
 * it, and the layers below get the gradient of the weight as it was. Not
 * where a hook wants the gradient (a trainer sends it). */
PD_TEST(net_sgd_applied_in_the_backward_as_the_update_would)
{
    small_net s;
    small_net_init(&s);
    pd_optimizer_desc o;
    memset(&o, 0, sizeof o);
    snprintf(o.type, sizeof o.type, "sgd");
    o.learning_rate = 0.1;
    o.weight_decay = 0.01;
    pd_net fused, plain;
    CHECK(pd_net_build(&fused, &s.r, &pd_backend_cpu, 5) == 0);
    CHECK(pd_net_build(&plain, &s.r, &pd_backend_cpu, 5) == 0);
    fused.sgd_in_place = 1;
    fused.sgd_lr = (float)o.learning_rate;
    fused.sgd_decay = (float)o.weight_decay;
    pd_param *fw = pd_net_param(&fused, "out.w"), *pw = pd_net_param(&plain, "out.w");
    CHECK_EQ_INT(fw->users, 1);
    static const int32_t ids[3][3] = {{1, 4, 1}, {2, 2, 5}, {0, 1, 3}};
    for (int step = 1; step <= 3; step++) {
        pd_batch b;
        small_batch(&b, &s, ids[step - 1], 3);
        CHECK(pd_net_bind(&fused, &b) == 0 && pd_net_bind(&plain, &b) == 0);
        fwd(&fused);
        fwd(&plain);
        float before[6];
        memcpy(before, fw->w, sizeof before);
        CHECK(pd_net_backward(&fused) == 0 && pd_net_backward(&plain) == 0);
        CHECK_EQ_INT(fw->applied, 1);
        CHECK_EQ_INT(pw->applied, 0);
        for (int i = 0; i < 6; i++) CHECK(fw->w[i] != before[i]); /* moved already */
        /* the embedding's rows got the gradient of the weight as it was:
         * the same bits while both weights are the same (step 1) */
        pd_param *fe = pd_net_param(&fused, "emb.w"), *pe = pd_net_param(&plain, "emb.w");
        if (step == 1) CHECK(memcmp(fe->g, pe->g, 18 * sizeof(float)) == 0);
        for (int i = 0; i < 18; i++) CHECK_NEAR(fe->g[i], pe->g[i], 1e-5);
        CHECK(pd_net_update(&fused, &o, step) == 0 && pd_net_update(&plain, &o, step) == 0);
        CHECK_EQ_INT(fw->applied, 0);
        for (int i = 0; i < 6; i++) CHECK_NEAR(fw->w[i], pw->w[i], 1e-6);
        for (int i = 0; i < 18; i++) CHECK_NEAR(fe->w[i], pe->w[i], 1e-6);
        pd_batch_free(&b);
    }
    /* a weight with a second user (here a layer the cost does not read):
     * its gradient would be a sum of shares, so the update is left to
     * pd_net_update */
    {
        small_net s2;
        small_net_init(&s2);
        pd_layer_desc l6[6];
        memcpy(l6, s2.l, sizeof s2.l);
        l6[5] = l6[3];
        l6[5].name = (char *)"out2";
        s2.r.layers = l6;
        s2.r.nlayers = 6;
        pd_net shared;
        CHECK(pd_net_build(&shared, &s2.r, &pd_backend_cpu, 5) == 0);
        shared.sgd_in_place = 1;
        shared.sgd_lr = (float)o.learning_rate;
        shared.sgd_decay = (float)o.weight_decay;
        pd_param *sw = pd_net_param(&shared, "out.w");
        CHECK_EQ_INT(sw->users, 2);
        pd_batch b2;
        small_batch(&b2, &s2, ids[0], 3);
        CHECK(pd_net_bind(&shared, &b2) == 0);
        fwd(&shared);
        float sb[6];
        memcpy(sb, sw->w, sizeof sb);
        CHECK(pd_net_backward(&shared) == 0);
        CHECK_EQ_INT(sw->applied, 0);
        CHECK(memcmp(sb, sw->w, sizeof sb) == 0);
        CHECK(pd_net_update(&shared, &o, 1) == 0);
        for (int i = 0; i < 6; i++)
            CHECK_NEAR(sw->w[i], sb[i] - o.learning_rate * (sw->g[i] + o.weight_decay * sb[i]), 1e-6);
        pd_batch_free(&b2);
        pd_net_free(&shared);
    }
    /* a hook that wants the gradient: the update is left to pd_net_update */
    int ready = 0;
    fused.grad_ready = count_ready;
    fused.grad_ctx = &ready;
    pd_batch b;
    small_batch(&b, &s, ids[0], 3);
    CHECK(pd_net_bind(&fused, &b) == 0);
    fwd(&fused);
    float before[6];
    memcpy(before, fw->w, sizeof before);
    CHECK(pd_net_backward(&fused) == 0);
    CHECK_EQ_INT(fw->applied, 0);
    CHECK(ready > 0);
    CHECK(memcmp(before, fw->w, sizeof before) == 0);
    pd_batch_free(&b);
    pd_net_free(&fused);
    pd_net_free(&plain);
}

/* Adam, vectorized (8 floats wide where the CPU has AVX2), gives bit for bit
 * what the plain loop gives: the same float operations per element, in the
 * same order, and no fused multiply-add. Lengths around the vector widths,
 * so that the tails are covered too. */
PD_TEST(opt_adam_is_the_plain_loop_bit_for_bit)
{
    static const size_t lens[] = {1, 7, 8, 9, 31, 33, 1003};
    uint64_t rng = 11;
    for (size_t t = 0; t < PD_COUNT(lens); t++) {
        size_t n = lens[t];
        float *w = malloc(n * sizeof *w), *g = malloc(n * sizeof *g), *s1 = malloc(n * sizeof *s1),
              *s2 = malloc(n * sizeof *s2), *rw = malloc(n * sizeof *rw), *r1 = malloc(n * sizeof *r1),
              *r2 = malloc(n * sizeof *r2);
        for (size_t i = 0; i < n; i++) {
            rw[i] = w[i] = (float)(pd_rng_uniform(&rng) - 0.5);
            g[i] = (float)(pd_rng_uniform(&rng) - 0.5) * 3;
            r1[i] = s1[i] = (float)(pd_rng_uniform(&rng) - 0.5);
            r2[i] = s2[i] = (float)pd_rng_uniform(&rng);
        }
        pd_opt_hyper h = hyper(PD_OPT_ADAM, 0.01f);
        h.beta1 = 0.9f;
        h.beta2 = 0.999f;
        h.epsilon = 1e-8f;
        h.weight_decay = 0.001f;
        h.t = 5;
        pd_backend_cpu.opt_update(&h, w, g, s1, s2, n);
        /* the plain loop, with the step's learning rate as the backend
         * computes it */
        float lr_t = (float)(h.lr * sqrt(1 - pow(h.beta2, 5.0)) / (1 - pow(h.beta1, 5.0)));
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + h.weight_decay * rw[i];
            float m = h.beta1 * r1[i] + (1 - h.beta1) * gi;
            float v = h.beta2 * r2[i] + (1 - h.beta2) * gi * gi;
            r1[i] = m;
            r2[i] = v;
            rw[i] -= lr_t * m / (sqrtf(v) + h.epsilon);
        }
        CHECK(memcmp(w, rw, n * sizeof *w) == 0);
        CHECK(memcmp(s1, r1, n * sizeof *s1) == 0);
        CHECK(memcmp(s2, r2, n * sizeof *s2) == 0);
        free(w), free(g), free(s1), free(s2), free(rw), free(r1), free(r2);
    }
}
