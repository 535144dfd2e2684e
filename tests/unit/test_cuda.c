/*
 * test_cuda.c - the CUDA backend against the CPU backend.
 *
 * Every op of backend.h runs on random inputs on both backends, forward and
 * backward, in the shapes that trip kernels up (sizes that are not
 * multiples of a warp or a block, leading dimensions wider than the matrix,
 * empty sequences, repeated ids, in-place calls); then three small networks
 * (an MLP with every activation, a recommender with embeddings, sequence
 * pooling, concat and cos_sim, a softmax classifier under each optimizer)
 * are built from Lua recipes with the same seed on both backends and trained
 * a few steps on the same batches: costs, metrics and parameters must agree.
 *
 * "Agree" is a relative error of at most TOL = 1e-4 per element:
 *
 *     |cpu - cuda| <= TOL * max(|cpu|, |cuda|, floor),
 *     floor = 1e-2 * max |cpu| over the array,
 *
 * the floor keeping elements that cancel to nearly zero (a sum of terms of
 * either sign) from demanding more than float rounding can give (column
 * sums over many rows get a floor that grows with the rows).
 *
 * The tests need the CUDA backend: in the static binary (no CUDA backend)
 * or on a machine without a GPU, each calls pd_test_skip() and is reported
 * as skipped. build/cuda/unit_tests (make cuda) runs them on a GPU;
 * build/cuda-emu/unit_tests (make cuda-emu-check) on a CPU emulation of
 * CUDA.
 */
#include "test.h"
#include "../../src/backend/backend.h"
#include "../../src/core/pd.h"
#include "../../src/data/batch.h"
#include "../../src/lua/recipe.h"
#include "../../src/nn/net.h"
#include "../../src/core/rng.h"

#include <float.h>
#include <stdint.h>

#define TOL 1e-4

/* pd_net_forward that must succeed: the mean cost */
static double fwd(pd_net *net)
{
    double c = NAN;
    if (pd_net_forward(net, &c) < 0) pd_test_fail(__FILE__, __LINE__, "pd_net_forward: %s", pd_err_msg());
    return c;
}

static const pd_backend *gpu;
static const pd_backend *const cpu = &pd_backend_cpu;
static uint64_t rng = 12345;

/* Skip the test unless this build has a CUDA backend and a device. */
static void need_cuda(void)
{
    gpu = pd_backend_get("cuda");
    if (!gpu) pd_test_skip("%s", pd_err_msg());
    CHECK(!gpu->host_memory);
}

/* --- host and device copies of the same values ------------------------------------ */

/* A float array twice: h on the host (what the CPU backend works on), d on
 * the GPU, with the same contents to begin with. */
typedef struct pair {
    float *h, *d;
    size_t n;
} pair;

typedef struct ipair {
    int32_t *h, *d;
    size_t n;
} ipair;

static float uni(float lo, float hi) { return lo + (hi - lo) * (float)pd_rng_uniform(&rng); }

static void *dev_copy(const void *h, size_t bytes)
{
    void *d = gpu->alloc(bytes);
    CHECK(d != NULL);
    gpu->upload(d, h, bytes);
    return d;
}

static pair rnd(size_t n, float lo, float hi)
{
    pair p = {pd_xmalloc((n ? n : 1) * sizeof(float)), NULL, n};
    for (size_t i = 0; i < n; i++) p.h[i] = uni(lo, hi);
    p.d = dev_copy(p.h, n * sizeof(float));
    return p;
}

/* NaN in p on both sides: what a kernel that writes (acc 0) leaves
 * unwritten then fails the comparison */
static void fill_nan(pair p)
{
    for (size_t i = 0; i < p.n; i++) p.h[i] = NAN;
    gpu->upload(p.d, p.h, p.n * sizeof(float));
}

static pair zeros(size_t n)
{
    pair p = {pd_xcalloc(n ? n : 1, sizeof(float)), NULL, n};
    p.d = dev_copy(p.h, n * sizeof(float));
    return p;
}

static ipair ids_of(const int32_t *v, size_t n)
{
    ipair p = {pd_xmalloc((n ? n : 1) * sizeof(int32_t)), NULL, n};
    memcpy(p.h, v, n * sizeof(int32_t));
    p.d = dev_copy(p.h, n * sizeof(int32_t));
    return p;
}

static ipair rnd_ids(size_t n, int range)
{
    int32_t *v = pd_xmalloc((n ? n : 1) * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) v[i] = (int32_t)(pd_rng_next(&rng) % (uint64_t)range);
    ipair p = ids_of(v, n);
    free(v);
    return p;
}

/* n distinct ids of range (n <= range), in a shuffled order */
static ipair distinct_ids(int n, int range)
{
    int32_t *v = pd_xmalloc((size_t)range * sizeof(int32_t));
    for (int i = 0; i < range; i++) v[i] = i;
    for (int i = range - 1; i > 0; i--) {
        int j = (int)(pd_rng_next(&rng) % (uint64_t)(i + 1));
        int32_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    ipair p = ids_of(v, (size_t)n);
    free(v);
    return p;
}

static void pfree(pair p)
{
    free(p.h);
    gpu->free(p.d);
}

static void ifree(ipair p)
{
    free(p.h);
    gpu->free(p.d);
}

/* The CPU values c[0..n) against the CUDA ones g[0..n), both on the host
 * (see TOL); min_floor raises the floor for sums of many terms. */
static void near_floor_at(const char *file, int line, const char *what, const float *c, const float *g, size_t n,
                          double min_floor)
{
    double big = 0;
    for (size_t i = 0; i < n; i++) big = fmax(big, fabs(c[i]));
    double floor_ = fmax(big > 0 ? 1e-2 * big : DBL_MIN, min_floor);
    for (size_t i = 0; i < n; i++) {
        double a = c[i], b = g[i];
        double allowed = TOL * fmax(fmax(fabs(a), fabs(b)), floor_);
        if (!(fabs(a - b) <= allowed))
            pd_test_fail(file, line, "%s[%zu]: cpu %.9g, cuda %.9g (relative error %.3g > %g; %zu elements)",
                         what, i, a, b, fabs(a - b) / fmax(fmax(fabs(a), fabs(b)), floor_), TOL, n);
    }
}

static void near_at(const char *file, int line, const char *what, const float *c, const float *g, size_t n)
{
    near_floor_at(file, line, what, c, g, n, 0);
}

/* The CPU values c[0..n) against the device values d[0..n). */
static void same_floor_at(const char *file, int line, const char *what, const float *c, const float *d, size_t n,
                          double min_floor)
{
    float *g = pd_xmalloc((n ? n : 1) * sizeof(float));
    gpu->download(g, d, n * sizeof(float));
    near_floor_at(file, line, what, c, g, n, min_floor);
    free(g);
}

static void same_at(const char *file, int line, const char *what, const float *c, const float *d, size_t n)
{
    same_floor_at(file, line, what, c, d, n, 0);
}

#define SAME(what, p) same_at(__FILE__, __LINE__, what, (p).h, (p).d, (p).n)
#define SAME_N(what, c, d, n) same_at(__FILE__, __LINE__, what, c, d, n)

/* An optimizer's weights and both states after step t ("NAME KIND t: w"). */
static void same_state_at(const char *file, int line, const char *name, const char *kind, long t, pair w,
                          pair s1, pair s2)
{
    char what[96];
    const pair *p[3] = {&w, &s1, &s2};
    static const char *const part[3] = {"w", "s1", "s2"};
    for (int i = 0; i < 3; i++) {
        snprintf(what, sizeof what, "%s %s %ld: %s", name, kind, t, part[i]);
        same_at(file, line, what, p[i]->h, p[i]->d, p[i]->n);
    }
}
#define SAME_STATE(name, kind, t, w, s1, s2) same_state_at(__FILE__, __LINE__, name, kind, t, w, s1, s2)

static void same_ints_at(const char *file, int line, const char *what, const int32_t *c, const int32_t *d, size_t n)
{
    int32_t *g = pd_xmalloc((n ? n : 1) * sizeof(int32_t));
    gpu->download(g, d, n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++)
        if (c[i] != g[i]) {
            long a = c[i], b = g[i];
            free(g);
            pd_test_fail(file, line, "%s[%zu]: cpu %ld, cuda %ld", what, i, a, b);
        }
    free(g);
}

#define SAME_INTS(what, p) same_ints_at(__FILE__, __LINE__, what, (p).h, (p).d, (p).n)

/* --- the ops --------------------------------------------------------------------------- */

PD_TEST(cuda_unavailable_says_why)
{
    const pd_backend *be = pd_backend_get("cuda");
    if (be) pd_test_skip("a CUDA device is present: nothing to check here");
    const char *msg = pd_err_msg();
    if (!strstr(msg, "no CUDA backend") && !strstr(msg, "no CUDA device: "))
        pd_test_fail(__FILE__, __LINE__, "unexpected message: %s", msg);
    CHECK_CONTAINS(msg, "device = \"cpu\"");
}

PD_TEST(cuda_memory)
{
    need_cuda();
    void *z = gpu->alloc(0);
    CHECK(z != NULL);
    gpu->free(z);
    gpu->free(NULL);

    pair a = rnd(1000, -1, 1), b = zeros(1000);
    float back[1000];
    gpu->download(back, a.d, sizeof back);
    CHECK(memcmp(back, a.h, sizeof back) == 0);
    gpu->copy(b.d + 10, a.d + 20, 500 * sizeof(float));
    memcpy(b.h + 10, a.h + 20, 500 * sizeof(float));
    SAME("copy", b);
    gpu->zero(a.d + 100, 333 * sizeof(float));
    memset(a.h + 100, 0, 333 * sizeof(float));
    gpu->upload(a.d + 900, b.h, 50 * sizeof(float));
    memcpy(a.h + 900, b.h, 50 * sizeof(float));
    gpu->sync();
    gpu->download(back, a.d, sizeof back);
    CHECK(memcmp(back, a.h, sizeof back) == 0);
    /* zero-byte calls are no-ops */
    gpu->copy(b.d, a.d, 0);
    gpu->zero(b.d, 0);
    gpu->upload(b.d, a.h, 0);
    gpu->download(back, b.d, 0);
    pfree(a);
    pfree(b);
}

/* one gemm: an m x n result inside a wider C, operands inside wider ones */
static void gemm_case(int ta, int tb, int m, int n, int k, float alpha, float beta)
{
    int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int lda = ac + 3, ldb = bc + 1, ldc = n + 5;
    pair a = rnd((size_t)ar * lda, -1, 1), b = rnd((size_t)br * ldb, -1, 1), c = rnd((size_t)m * ldc + 1, -1, 1);
    cpu->gemm(ta, tb, m, n, k, alpha, a.h, lda, b.h, ldb, beta, c.h, ldc);
    gpu->gemm(ta, tb, m, n, k, alpha, a.d, lda, b.d, ldb, beta, c.d, ldc);
    char what[96];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d m=%d n=%d k=%d alpha=%g beta=%g", ta, tb, m, n, k, alpha, beta);
    SAME(what, c);
    pfree(a);
    pfree(b);
    pfree(c);
}

PD_TEST(cuda_gemm)
{
    need_cuda();
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gemm_case(ta, tb, 37, 45, 29, 0.7f, 0.f);
            gemm_case(ta, tb, 37, 45, 29, 1.f, 1.3f);
            gemm_case(ta, tb, 1, 13, 20, 1.f, 1.f);   /* fc backward of fit_a_line shapes */
            gemm_case(ta, tb, 20, 1, 13, 1.f, 0.f);
            gemm_case(ta, tb, 200, 150, 300, 1.f, 1.f); /* big enough for cuBLAS's tiled kernels */
        }
    gemm_case(0, 0, 5, 7, 0, 1.f, 0.5f); /* k = 0: C = beta C */
    gemm_case(0, 0, 5, 7, 0, 1.f, 0.f);
    gemm_case(0, 0, 0, 7, 3, 1.f, 1.f);  /* empty: nothing happens */
}

PD_TEST(cuda_axpy_scale)
{
    need_cuda();
    pair x = rnd(10007, -2, 2), y = rnd(10007, -2, 2);
    cpu->axpy(x.n, -0.37f, x.h, y.h);
    gpu->axpy(x.n, -0.37f, x.d, y.d);
    SAME("axpy", y);
    cpu->scale(y.n - 3, 1.7f, y.h + 3);
    gpu->scale(y.n - 3, 1.7f, y.d + 3);
    SAME("scale", y);
    pfree(x);
    pfree(y);
}

PD_TEST(cuda_bias)
{
    need_cuda();
    static const int shapes[][2] = {{333, 17}, {1, 1}, {3000, 1}, {20, 1}, {7, 300}, {256, 512}};
    for (size_t s = 0; s < PD_COUNT(shapes); s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        pair y = rnd((size_t)rows * cols, -1, 1), b = rnd((size_t)cols, -1, 1), db = rnd((size_t)cols, -1, 1);
        cpu->add_bias(y.h, b.h, rows, cols);
        gpu->add_bias(y.d, b.d, rows, cols);
        SAME("add_bias", y);
        cpu->bias_grad(db.h, y.h, rows, cols);
        gpu->bias_grad(db.d, y.d, rows, cols);
        /* a column sum of rows terms of size ~1 that may cancel to ~0: the
         * CPU's own rounding is ~1e-7 * rows, so compare at that scale */
        same_floor_at(__FILE__, __LINE__, "bias_grad", db.h, db.d, db.n, 1e-2 * rows);
        pfree(y);
        pfree(b);
        pfree(db);
    }
}

static const char *act_names[] = {"linear", "relu", "sigmoid", "tanh", "softmax"};

PD_TEST(cuda_activations)
{
    need_cuda();
    static const int shapes[][2] = {{19, 1}, {19, 10}, {7, 33}, {5, 100}, {70, 64}, {3, 1000}};
    char what[64];
    for (int act = PD_ACT_LINEAR; act <= PD_ACT_SOFTMAX; act++)
        for (size_t s = 0; s < PD_COUNT(shapes); s++) {
            int rows = shapes[s][0], cols = shapes[s][1];
            size_t n = (size_t)rows * cols;
            /* out of place */
            pair x = rnd(n, -3, 3), y = rnd(n, -1, 1), dy = rnd(n, -1, 1), dx = rnd(n, -1, 1);
            cpu->act_forward(act, y.h, x.h, rows, cols);
            gpu->act_forward(act, y.d, x.d, rows, cols);
            snprintf(what, sizeof what, "%s forward %dx%d", act_names[act], rows, cols);
            SAME(what, y);
            cpu->act_backward(act, dx.h, y.h, dy.h, rows, cols);
            gpu->act_backward(act, dx.d, y.d, dy.d, rows, cols);
            snprintf(what, sizeof what, "%s backward %dx%d", act_names[act], rows, cols);
            SAME(what, dx);
            /* in place, as fc calls them */
            cpu->act_forward(act, x.h, x.h, rows, cols);
            gpu->act_forward(act, x.d, x.d, rows, cols);
            snprintf(what, sizeof what, "%s forward in place %dx%d", act_names[act], rows, cols);
            SAME(what, x);
            cpu->act_backward(act, dy.h, x.h, dy.h, rows, cols);
            gpu->act_backward(act, dy.d, x.d, dy.d, rows, cols);
            snprintf(what, sizeof what, "%s backward in place %dx%d", act_names[act], rows, cols);
            SAME(what, dy);
            pfree(x);
            pfree(y);
            pfree(dy);
            pfree(dx);
        }
    /* softmax of large logits stays finite */
    pair x = rnd(40, 80, 100), y = zeros(40);
    cpu->act_forward(PD_ACT_SOFTMAX, y.h, x.h, 4, 10);
    gpu->act_forward(PD_ACT_SOFTMAX, y.d, x.d, 4, 10);
    SAME("softmax of large logits", y);
    pfree(x);
    pfree(y);
}

/* the fc layer's fused tail: bias and activation, activation derivative and
 * bias gradient (written, then accumulated) */
PD_TEST(cuda_bias_act)
{
    need_cuda();
    static const int shapes[][2] = {{19, 1}, {7, 33}, {70, 64}, {3, 1000}};
    char what[64];
    for (int act = PD_ACT_LINEAR; act <= PD_ACT_SOFTMAX; act++)
        for (size_t s = 0; s < PD_COUNT(shapes); s++) {
            int rows = shapes[s][0], cols = shapes[s][1];
            size_t n = (size_t)rows * cols;
            pair y = rnd(n, -3, 3), b = rnd((size_t)cols, -1, 1), dy = rnd(n, -1, 1), db = rnd((size_t)cols, -1, 1);
            cpu->bias_act_forward(act, y.h, b.h, rows, cols);
            gpu->bias_act_forward(act, y.d, b.d, rows, cols);
            snprintf(what, sizeof what, "%s bias_act_forward %dx%d", act_names[act], rows, cols);
            SAME(what, y);
            for (int acc = 0; acc <= 1; acc++) {
                cpu->act_bias_backward(act, dy.h, y.h, db.h, acc, rows, cols);
                gpu->act_bias_backward(act, dy.d, y.d, db.d, acc, rows, cols);
                snprintf(what, sizeof what, "%s act_bias_backward %dx%d acc %d", act_names[act], rows, cols, acc);
                SAME(what, dy);
                same_floor_at(__FILE__, __LINE__, what, db.h, db.d, db.n, 1e-2 * rows);
            }
            /* no bias */
            cpu->bias_act_forward(act, y.h, NULL, rows, cols);
            gpu->bias_act_forward(act, y.d, NULL, rows, cols);
            SAME("bias_act_forward without a bias", y);
            cpu->act_bias_backward(act, dy.h, y.h, NULL, 0, rows, cols);
            gpu->act_bias_backward(act, dy.d, y.d, NULL, 0, rows, cols);
            SAME("act_bias_backward without a bias", dy);
            pfree(y);
            pfree(b);
            pfree(dy);
            pfree(db);
        }
}

PD_TEST(cuda_gather_scatter)
{
    need_cuda();
    static const int dims[] = {1, 13, 64, 100};
    for (size_t s = 0; s < PD_COUNT(dims); s++) {
        int range = 50, n = 200, dim = dims[s];
        pair table = rnd((size_t)range * dim, -1, 1), out = rnd((size_t)n * dim, -1, 1);
        pair g = rnd((size_t)range * dim, -1, 1);
        ipair ids = rnd_ids((size_t)n, range); /* 200 ids of 50: repeats */
        cpu->gather(out.h, table.h, ids.h, n, dim);
        gpu->gather(out.d, table.d, ids.d, n, dim);
        SAME("gather", out);
        cpu->scatter_add(g.h, out.h, ids.h, n, dim);
        gpu->scatter_add(g.d, out.d, ids.d, n, dim);
        SAME("scatter_add", g);
        /* the rows one step touched: distinct ids, in no order */
        ipair rows = distinct_ids(range - 7, range);
        cpu->set_rows(table.h, out.h, rows.h, range - 7, dim);
        gpu->set_rows(table.d, out.d, rows.d, range - 7, dim);
        SAME("set_rows", table);
        cpu->zero_rows(g.h, rows.h, range - 7, dim);
        gpu->zero_rows(g.d, rows.d, range - 7, dim);
        SAME("zero_rows", g);
        ifree(rows);
        pfree(table);
        pfree(out);
        pfree(g);
        ifree(ids);
    }
}

static const char *pool_names[] = {"sum", "average", "max"};

PD_TEST(cuda_seq_pool)
{
    need_cuda();
    /* 9 sequences, empty ones first, in the middle and last */
    static const int32_t off[] = {0, 0, 3, 4, 4, 11, 12, 40, 45, 45};
    int n = (int)PD_COUNT(off) - 1, rows = off[n];
    static const int dims[] = {1, 7, 40};
    char what[64];
    for (int pool = PD_POOL_SUM; pool <= PD_POOL_MAX; pool++)
        for (size_t s = 0; s < PD_COUNT(dims); s++) {
            int dim = dims[s];
            ipair o = ids_of(off, (size_t)n + 1);
            pair in = rnd((size_t)rows * dim, -1, 1), out = rnd((size_t)n * dim, -1, 1);
            pair dout = rnd((size_t)n * dim, -1, 1), din = rnd((size_t)rows * dim, -1, 1);
            ipair am = rnd_ids((size_t)n * dim, 5);
            int32_t *amh = pool == PD_POOL_MAX ? am.h : NULL, *amd = pool == PD_POOL_MAX ? am.d : NULL;
            /* a tie in every column of sequence 4: the first row must win on both */
            for (int c = 0; c < dim; c++) in.h[(size_t)5 * dim + c] = in.h[(size_t)4 * dim + c] = 2.f;
            gpu->upload(in.d, in.h, in.n * sizeof(float));
            cpu->seq_pool_forward(pool, out.h, in.h, o.h, n, dim, amh);
            gpu->seq_pool_forward(pool, out.d, in.d, o.d, n, dim, amd);
            snprintf(what, sizeof what, "seq_pool %s forward, dim %d", pool_names[pool], dim);
            SAME(what, out);
            if (pool == PD_POOL_MAX) SAME_INTS("seq_pool max argmax", am);
            for (int acc = 0; acc < 2; acc++) {
                if (!acc && pool != PD_POOL_MAX) fill_nan(din); /* max pooling adds whatever acc is */
                cpu->seq_pool_backward(pool, din.h, dout.h, o.h, n, dim, amh, acc);
                gpu->seq_pool_backward(pool, din.d, dout.d, o.d, n, dim, amd, acc);
                snprintf(what, sizeof what, "seq_pool %s backward, dim %d, acc %d", pool_names[pool], dim, acc);
                SAME(what, din);
            }
            ifree(o);
            ifree(am);
            pfree(in);
            pfree(out);
            pfree(dout);
            pfree(din);
        }
}

PD_TEST(cuda_copy_cols)
{
    need_cuda();
    int rows = 37, ldd = 20, lds = 9, cols = 6;
    for (int acc = 0; acc < 2; acc++) {
        pair dst = rnd((size_t)rows * ldd, -1, 1), src = rnd((size_t)rows * lds, -1, 1);
        cpu->copy_cols(dst.h + 5, ldd, src.h + 2, lds, rows, cols, acc);
        gpu->copy_cols(dst.d + 5, ldd, src.d + 2, lds, rows, cols, acc);
        SAME(acc ? "copy_cols accumulate" : "copy_cols", dst);
        pfree(dst);
        pfree(src);
    }
}

PD_TEST(cuda_cos_sim)
{
    need_cuda();
    static const int dims[] = {1, 31, 64, 100};
    for (size_t s = 0; s < PD_COUNT(dims); s++) {
        int rows = 23, dim = dims[s];
        size_t n = (size_t)rows * dim;
        pair a = rnd(n, -1, 1), b = rnd(n, -1, 1), out = rnd((size_t)rows, -1, 1), dout = rnd((size_t)rows, -1, 1);
        for (int c = 0; c < dim; c++) a.h[(size_t)3 * dim + c] = 0; /* a zero row: the epsilon and nx = 0 branch */
        gpu->upload(a.d, a.h, n * sizeof(float));
        cpu->cos_sim_forward(out.h, a.h, b.h, rows, dim, 2.5f);
        gpu->cos_sim_forward(out.d, a.d, b.d, rows, dim, 2.5f);
        SAME("cos_sim forward", out);
        for (int which = 0; which < 12; which++) { /* both, da only, db only; each written or added to */
            pair da = rnd(n, -1, 1), db = rnd(n, -1, 1);
            int acc_a = which / 3 & 1, acc_b = which / 6 & 1;
            if (!acc_a && which % 3 != 2) fill_nan(da);
            if (!acc_b && which % 3 != 1) fill_nan(db);
            cpu->cos_sim_backward(which % 3 == 2 ? NULL : da.h, which % 3 == 1 ? NULL : db.h, a.h, b.h, out.h, dout.h,
                                  rows, dim, 2.5f, acc_a, acc_b);
            gpu->cos_sim_backward(which % 3 == 2 ? NULL : da.d, which % 3 == 1 ? NULL : db.d, a.d, b.d, out.d, dout.d,
                                  rows, dim, 2.5f, acc_a, acc_b);
            SAME("cos_sim backward da", da);
            SAME("cos_sim backward db", db);
            pfree(da);
            pfree(db);
        }
        pair d = rnd(n, -1, 1); /* da and db one buffer: a's share written, b's added */
        fill_nan(d);
        cpu->cos_sim_backward(d.h, d.h, a.h, b.h, out.h, dout.h, rows, dim, 2.5f, 0, 1);
        gpu->cos_sim_backward(d.d, d.d, a.d, b.d, out.d, dout.d, rows, dim, 2.5f, 0, 1);
        SAME("cos_sim backward into one buffer", d);
        pfree(d);
        pfree(a);
        pfree(b);
        pfree(out);
        pfree(dout);
    }
}

PD_TEST(cuda_square_error)
{
    need_cuda();
    static const int dims[] = {1, 3, 40};
    for (size_t s = 0; s < PD_COUNT(dims); s++) {
        int rows = 29, dim = dims[s];
        size_t n = (size_t)rows * dim;
        pair p = rnd(n, -2, 2), y = rnd(n, -2, 2), out = rnd((size_t)rows, -1, 1), dp = rnd(n, -1, 1);
        cpu->square_error_forward(out.h, p.h, y.h, rows, dim);
        gpu->square_error_forward(out.d, p.d, y.d, rows, dim);
        SAME("square_error forward", out);
        cpu->square_error_backward(dp.h, p.h, y.h, rows, dim);
        gpu->square_error_backward(dp.d, p.d, y.d, rows, dim);
        SAME("square_error backward", dp);
        pfree(p);
        pfree(y);
        pfree(out);
        pfree(dp);
    }
}

/* logits far out on both sides: the stable form must agree */
PD_TEST(cuda_sigmoid_xent)
{
    need_cuda();
    static const int dims[] = {1, 3, 40};
    for (size_t s = 0; s < PD_COUNT(dims); s++) {
        int rows = 29, dim = dims[s];
        size_t n = (size_t)rows * dim;
        pair x = rnd(n, -30, 30), y = rnd(n, 0, 1), out = rnd((size_t)rows, -1, 1), dx = rnd(n, -1, 1);
        cpu->sigmoid_xent_forward(out.h, x.h, y.h, rows, dim);
        gpu->sigmoid_xent_forward(out.d, x.d, y.d, rows, dim);
        SAME("sigmoid_xent forward", out);
        cpu->sigmoid_xent_backward(dx.h, x.h, y.h, rows, dim);
        gpu->sigmoid_xent_backward(dx.d, x.d, y.d, rows, dim);
        SAME("sigmoid_xent backward", dx);
        pfree(x);
        pfree(y);
        pfree(out);
        pfree(dx);
    }
}

PD_TEST(cuda_cross_entropy)
{
    need_cuda();
    static const int classes[] = {2, 10, 77};
    for (size_t s = 0; s < PD_COUNT(classes); s++) {
        int rows = 41, k = classes[s];
        size_t n = (size_t)rows * k;
        pair logits = rnd(n, -4, 4), prob = zeros(n), out = rnd((size_t)rows, -1, 1), d = rnd(n, -1, 1);
        ipair label = rnd_ids((size_t)rows, k);
        /* cross_entropy on a probability row */
        cpu->act_forward(PD_ACT_SOFTMAX, prob.h, logits.h, rows, k);
        gpu->upload(prob.d, prob.h, n * sizeof(float));
        cpu->cross_entropy_forward(out.h, prob.h, label.h, rows, k);
        gpu->cross_entropy_forward(out.d, prob.d, label.d, rows, k);
        SAME("cross_entropy forward", out);
        cpu->cross_entropy_backward(d.h, prob.h, label.h, rows, k);
        gpu->cross_entropy_backward(d.d, prob.d, label.d, rows, k);
        SAME("cross_entropy backward", d);
        /* the fused softmax + cross_entropy on logits */
        pair prob2 = rnd(n, -1, 1), d2 = rnd(n, -1, 1);
        cpu->softmax_xent_forward(out.h, prob2.h, logits.h, label.h, rows, k);
        gpu->softmax_xent_forward(out.d, prob2.d, logits.d, label.d, rows, k);
        SAME("softmax_xent forward cost", out);
        SAME("softmax_xent forward prob", prob2);
        cpu->softmax_xent_backward(d2.h, prob2.h, label.h, rows, k);
        gpu->softmax_xent_backward(d2.d, prob2.d, label.d, rows, k);
        SAME("softmax_xent backward", d2);
        pfree(logits);
        pfree(prob);
        pfree(out);
        pfree(d);
        pfree(prob2);
        pfree(d2);
        ifree(label);
    }
}

PD_TEST(cuda_class_error)
{
    need_cuda();
    static const int classes[] = {1, 2, 10, 33, 77};
    for (size_t s = 0; s < PD_COUNT(classes); s++) {
        int rows = 50, k = classes[s];
        size_t n = (size_t)rows * k;
        pair pred = rnd(n, -1, 1), out = rnd((size_t)rows, -1, 1);
        ipair label = rnd_ids((size_t)rows, k);
        /* ties: row 0 all equal (class 0 wins), row 1 two equal maxima */
        for (int c = 0; c < k; c++) pred.h[c] = 0.5f;
        if (k > 2) pred.h[(size_t)k + 1] = pred.h[(size_t)k + k - 1] = 3.f;
        /* labels that match: the argmax of a few rows */
        for (int r = 2; r < 10; r++) {
            int best = 0;
            for (int c = 1; c < k; c++)
                if (pred.h[(size_t)r * k + c] > pred.h[(size_t)r * k + best]) best = c;
            label.h[r] = best;
        }
        gpu->upload(pred.d, pred.h, n * sizeof(float));
        gpu->upload(label.d, label.h, (size_t)rows * sizeof(int32_t));
        cpu->class_error(out.h, pred.h, label.h, rows, k);
        gpu->class_error(out.d, pred.d, label.d, rows, k);
        SAME("class_error", out);
        pfree(pred);
        pfree(out);
        ifree(label);
    }
}

PD_TEST(cuda_optimizers)
{
    need_cuda();
    static const struct {
        const char *name;
        int type, nesterov, s2;
    } opts[] = {
        {"sgd", PD_OPT_SGD, 0, 0},           {"momentum", PD_OPT_MOMENTUM, 0, 0},
        {"nesterov", PD_OPT_MOMENTUM, 1, 0}, {"adagrad", PD_OPT_ADAGRAD, 0, 0},
        {"adam", PD_OPT_ADAM, 0, 1},         {"rmsprop", PD_OPT_RMSPROP, 0, 1},
        {"rmsprop without momentum state", PD_OPT_RMSPROP, 0, 0},
    };
    for (size_t o = 0; o < PD_COUNT(opts); o++) {
        size_t n = 1003;
        pair w = rnd(n, -1, 1), s1 = zeros(n), s2 = zeros(n);
        pd_opt_hyper h = {.type = opts[o].type, .lr = 0.05f, .momentum = 0.9f, .beta1 = 0.9f, .beta2 = 0.999f,
                          .epsilon = 1e-6f, .rho = 0.95f, .weight_decay = 0.01f, .nesterov = opts[o].nesterov};
        for (long t = 1; t <= 5; t++) {
            pair g = rnd(n, -1, 1);
            h.t = t;
            cpu->opt_update(&h, w.h, g.h, s1.h, opts[o].s2 ? s2.h : NULL, n);
            gpu->opt_update(&h, w.d, g.d, s1.d, opts[o].s2 ? s2.d : NULL, n);
            SAME_STATE(opts[o].name, "step", t, w, s1, s2);
            pfree(g);
        }
        /* rows of a [59, 17] table, distinct ids in no order: the rows
         * not named must not move */
        for (long t = 6; t <= 8; t++) {
            pair g = rnd(n, -1, 1);
            ipair ids = distinct_ids(23, 59);
            h.t = t;
            cpu->opt_update_rows(&h, w.h, g.h, s1.h, opts[o].s2 ? s2.h : NULL, ids.h, 23, 17);
            gpu->opt_update_rows(&h, w.d, g.d, s1.d, opts[o].s2 ? s2.d : NULL, ids.d, 23, 17);
            SAME_STATE(opts[o].name, "rows step", t, w, s1, s2);
            pfree(g);
            ifree(ids);
        }
        pfree(w);
        pfree(s1);
        pfree(s2);
    }
}

/* --- networks --------------------------------------------------------------------------- */

/* nb batches of n samples for the data layers of r: dense values in
 * [-1, 1), ids uniform in their range, id lists of 0..5 ids (repeats
 * allowed; every fourth sample's list empty). */
static pd_batch *make_batches(const pd_recipe *r, int nb, int n)
{
    pd_slot layout[PD_MAX_INPUTS];
    int nslots = 0;
    for (int i = 0; i < r->nlayers; i++) {
        const pd_layer_desc *d = &r->layers[i];
        if (strcmp(d->type, "data") != 0) continue;
        PD_ASSERT(nslots < PD_MAX_INPUTS);
        pd_slot *s = &layout[nslots++];
        memset(s, 0, sizeof *s);
        snprintf(s->name, sizeof s->name, "%s", d->slot);
        s->kind = !strcmp(d->kind, "dense") ? PD_SLOT_DENSE : !strcmp(d->kind, "id") ? PD_SLOT_ID : PD_SLOT_ID_LIST;
        s->width = s->kind == PD_SLOT_DENSE ? d->size : d->range;
    }
    pd_batch *bs = pd_xcalloc((size_t)nb, sizeof *bs);
    for (int k = 0; k < nb; k++) {
        pd_batch *b = &bs[k];
        pd_batch_init(b, layout, nslots);
        for (int i = 0; i < n; i++) {
            for (int j = 0; j < nslots; j++) {
                pd_slot *s = &b->slots[j];
                if (s->kind == PD_SLOT_DENSE) {
                    float *v = pd_slot_push_dense(s, i);
                    for (int c = 0; c < s->width; c++) v[c] = uni(-1, 1);
                } else if (s->kind == PD_SLOT_ID) {
                    pd_slot_push_id(s, i, (int32_t)(pd_rng_next(&rng) % (uint64_t)s->width));
                } else {
                    int32_t ids[5];
                    int len = i % 4 == 3 ? 0 : 1 + (int)(pd_rng_next(&rng) % 5);
                    for (int q = 0; q < len; q++) ids[q] = (int32_t)(pd_rng_next(&rng) % (uint64_t)s->width);
                    pd_slot_push_ids(s, i, ids, len);
                }
            }
            b->n++;
        }
    }
    return bs;
}

/* Train the recipe of text on both backends from the same initial values
 * over the same batches: costs, metrics, gradients and finally every
 * parameter agree. label names the case in failures. */
static void train_both(const char *label, const char *text, int steps)
{
    need_cuda();
    char *path = pd_test_write("recipe.lua", text);
    pd_recipe r;
    if (pd_recipe_load(&r, path, NULL, NULL, 0) < 0) pd_test_fail(__FILE__, __LINE__, "recipe: %s", pd_err_msg());
    free(path);
    pd_batch *bs = make_batches(&r, steps, 32);
    pd_net nc, ng;
    if (pd_net_build(&nc, &r, cpu, 7) < 0 || pd_net_build(&ng, &r, gpu, 7) < 0)
        pd_test_fail(__FILE__, __LINE__, "pd_net_build: %s", pd_err_msg());
    CHECK_EQ_INT(nc.nparams, ng.nparams);
    for (int i = 0; i < nc.nparams; i++)
        SAME_N("initial values", nc.params[i].w, ng.params[i].w, (size_t)nc.params[i].rows * nc.params[i].cols);
    for (int s = 0; s < steps; s++) {
        if (pd_net_bind(&nc, &bs[s]) < 0 || pd_net_bind(&ng, &bs[s]) < 0)
            pd_test_fail(__FILE__, __LINE__, "pd_net_bind: %s", pd_err_msg());
        float cost[2] = {(float)fwd(&nc), (float)fwd(&ng)};
        char what[160];
        snprintf(what, sizeof what, "%s: cost at step %d", label, s);
        near_at(__FILE__, __LINE__, what, &cost[0], &cost[1], 1);
        for (int m = 0; m < r.nmetrics; m++) {
            float mv[2] = {(float)pd_net_mean(&nc, r.metrics[m].layer), (float)pd_net_mean(&ng, r.metrics[m].layer)};
            snprintf(what, sizeof what, "%s: metric %s at step %d", label, r.metrics[m].name, s);
            near_at(__FILE__, __LINE__, what, &mv[0], &mv[1], 1);
        }
        pd_net_backward(&nc);
        pd_net_backward(&ng);
        for (int i = 0; i < nc.nparams; i++) {
            pd_param *pc = &nc.params[i], *pg = &ng.params[i];
            snprintf(what, sizeof what, "%s: gradient of %s at step %d", label, pc->name, s);
            SAME_N(what, pc->g, pg->g, (size_t)pc->rows * pc->cols);
            CHECK_EQ_INT(pc->ntouched, pg->ntouched);
        }
        pd_net_update(&nc, &r.optimizer, s + 1);
        pd_net_update(&ng, &r.optimizer, s + 1);
    }
    for (int i = 0; i < nc.nparams; i++) {
        char what[160];
        snprintf(what, sizeof what, "%s: %s after %d steps", label, nc.params[i].name, steps);
        SAME_N(what, nc.params[i].w, ng.params[i].w, (size_t)nc.params[i].rows * nc.params[i].cols);
    }
    pd_net_free(&nc);
    pd_net_free(&ng);
    for (int s = 0; s < steps; s++) pd_batch_free(&bs[s]);
    free(bs);
    pd_recipe_free(&r);
}

PD_TEST(cuda_train_mlp)
{
    train_both("mlp", "data { train = 'x.csv' }\n"
               "model = function(nn)\n"
               "  local x, label = nn.data('x', 24), nn.id('label', 10)\n"
               "  local h = nn.fc(x, 64, 'relu')\n"
               "  h = nn.fc(h, 48, { act = 'tanh', bias_init = { 'uniform', -0.1, 0.1 } })\n"
               "  h = nn.fc(h, 40, 'sigmoid')\n"
               "  local p = nn.fc(h, 10, 'softmax')\n"
               "  return { cost = nn.cross_entropy(p, label), metrics = { error = nn.classification_error(p, label) } }\n"
               "end\n"
               "optimizer = nn.momentum { learning_rate = 0.1, momentum = 0.9, nesterov = true, weight_decay = 1e-4 }\n",
               8);
}

PD_TEST(cuda_train_recommender)
{
    train_both("recommender", "data { train = 'x.csv' }\n"
               "model = function(nn)\n"
               "  local user, feat = nn.id('user', 40), nn.data('feat', 6)\n"
               "  local movie, words = nn.id('movie', 30), nn.id_list('words', 60)\n"
               "  local score = nn.data('score', 1)\n"
               "  local u = nn.fc(nn.concat { nn.embedding(user, 16), feat }, 24, 'tanh')\n"
               "  local avg = nn.seq_pool(nn.embedding(words, 12, { param = 'words' }), 'average')\n"
               "  local max = nn.seq_pool(nn.embedding(words, 12, { param = 'words' }), 'max')\n"
               "  local sum = nn.seq_pool(nn.embedding(words, 8), 'sum')\n"
               "  local m = nn.fc(nn.concat { nn.embedding(movie, 16), avg, max, sum }, 24, 'relu')\n"
               "  return nn.square_error_cost(nn.cos_sim(u, m, 5), score)\n"
               "end\n"
               "optimizer = nn.adam { learning_rate = 0.01, weight_decay = 1e-3 }\n",
               8);
}

PD_TEST(cuda_train_classifier_each_optimizer)
{
    static const char *opts[] = {
        "nn.sgd { learning_rate = 0.5 }",
        "nn.adagrad { learning_rate = 0.1 }",
        "nn.rmsprop { learning_rate = 0.01, momentum = 0.5 }",
        "nn.momentum { learning_rate = 0.1 }",
    };
    for (size_t o = 0; o < PD_COUNT(opts); o++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "data { train = 'x.csv' }\n"
                 "model = function(nn)\n"
                 "  local x, label = nn.data('x', 13), nn.id('label', 3)\n"
                 "  local logits = nn.fc(nn.fc(x, 20, 'tanh'), 3)\n"
                 "  return { cost = nn.softmax_cross_entropy(logits, label),\n"
                 "           metrics = { error = nn.classification_error(logits, label) } }\n"
                 "end\n"
                 "optimizer = %s\n",
                 opts[o]);
        train_both(opts[o], text, 6);
    }
}
