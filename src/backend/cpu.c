/*
 * cpu.c - the CPU backend: OpenBLAS for GEMM, plain loops for the rest.
 */
#include "backend.h"
#include "../core/pd.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS extensions (declared in its cblas.h, repeated for clarity) */
char *openblas_get_corename(void);
char *openblas_get_config(void);
void openblas_set_num_threads(int);

static void *cpu_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    return p;
}

static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t n) { if (n) memmove(dst, src, n); }
static void cpu_zero(void *p, size_t n) { if (n) memset(p, 0, n); }
static void cpu_sync(void) {}

/* tanh from one expf: libm's tanhf is several times slower, and a
 * recommender spends a third of its time there. |error| < 1e-6. */
static inline float fast_tanh(float x)
{
    if (x > 9.f) return 1.f;
    if (x < -9.f) return -1.f;
    if (x > -0.01f && x < 0.01f) return x * (1.f - x * x * (1.f / 3.f)); /* cancellation near 0 */
    float t = expf(2.f * x);
    return (t - 1.f) / (t + 1.f);
}

/* Products this small cost less as plain loops than as a BLAS call. */
#define SMALL_GEMM 4096

static void small_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                       int ldb, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            for (int p = 0; p < k; p++)
                s += (ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) *
                     (tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
            float *cij = c + (size_t)i * ldc + j;
            *cij = alpha * s + (beta == 0 ? 0 : beta * *cij);
        }
}

static void cpu_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m == 0 || n == 0) return;
    if ((long)m * n * k <= SMALL_GEMM) {
        small_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static void cpu_axpy(size_t n, float alpha, const float *x, float *y)
{
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

static void cpu_scale(size_t n, float alpha, float *x)
{
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

static void cpu_add_bias(float *y, const float *b, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        float *row = y + (size_t)r * cols;
        for (int c = 0; c < cols; c++) row[c] += b[c];
    }
}

static void cpu_bias_grad(float *db, const float *dy, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        const float *row = dy + (size_t)r * cols;
        for (int c = 0; c < cols; c++) db[c] += row[c];
    }
}

static void cpu_act_forward(int act, float *y, const float *x, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    switch (act) {
    case PD_ACT_LINEAR:
        if (y != x) memmove(y, x, n * sizeof *y);
        break;
    case PD_ACT_RELU:
        for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
        break;
    case PD_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++) y[i] = 1.f / (1.f + expf(-x[i]));
        break;
    case PD_ACT_TANH:
        for (size_t i = 0; i < n; i++) y[i] = fast_tanh(x[i]);
        break;
    case PD_ACT_SOFTMAX:
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * cols;
            float *yr = y + (size_t)r * cols;
            float mx = -FLT_MAX, sum = 0;
            for (int c = 0; c < cols; c++) mx = xr[c] > mx ? xr[c] : mx;
            for (int c = 0; c < cols; c++) sum += (yr[c] = expf(xr[c] - mx));
            for (int c = 0; c < cols; c++) yr[c] /= sum;
        }
        break;
    default: PD_ASSERT(!"unknown activation");
    }
}

static void cpu_act_backward(int act, float *dx, const float *y, const float *dy, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    switch (act) {
    case PD_ACT_LINEAR:
        if (dx != dy) memmove(dx, dy, n * sizeof *dx);
        break;
    case PD_ACT_RELU:
        for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0 ? dy[i] : 0;
        break;
    case PD_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1 - y[i]);
        break;
    case PD_ACT_TANH:
        for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (1 - y[i] * y[i]);
        break;
    case PD_ACT_SOFTMAX:
        for (int r = 0; r < rows; r++) {
            const float *yr = y + (size_t)r * cols, *dyr = dy + (size_t)r * cols;
            float *dxr = dx + (size_t)r * cols;
            float dot = 0;
            for (int c = 0; c < cols; c++) dot += yr[c] * dyr[c];
            for (int c = 0; c < cols; c++) dxr[c] = yr[c] * (dyr[c] - dot);
        }
        break;
    default: PD_ASSERT(!"unknown activation");
    }
}

/* Rows are done one at a time, so that the bias add, the activation and
 * (backward) the bias gradient read the row while it is in cache. */
static void cpu_bias_act_forward(int act, float *y, const float *b, int rows, int cols)
{
    if (!b) {
        cpu_act_forward(act, y, y, rows, cols);
        return;
    }
    for (int r = 0; r < rows; r++) {
        float *restrict yr = y + (size_t)r * cols;
        switch (act) {
        case PD_ACT_LINEAR:
            for (int c = 0; c < cols; c++) yr[c] += b[c];
            break;
        case PD_ACT_RELU:
            for (int c = 0; c < cols; c++) {
                float v = yr[c] + b[c];
                yr[c] = v > 0 ? v : 0;
            }
            break;
        case PD_ACT_SIGMOID:
            for (int c = 0; c < cols; c++) yr[c] = 1.f / (1.f + expf(-(yr[c] + b[c])));
            break;
        case PD_ACT_TANH:
            for (int c = 0; c < cols; c++) yr[c] = fast_tanh(yr[c] + b[c]);
            break;
        case PD_ACT_SOFTMAX:
            for (int c = 0; c < cols; c++) yr[c] += b[c];
            cpu_act_forward(act, yr, yr, 1, cols);
            break;
        default: PD_ASSERT(!"unknown activation");
        }
    }
}

static void cpu_act_bias_backward(int act, float *dy, const float *y, float *db, int acc, int rows, int cols)
{
    if (!db) {
        cpu_act_backward(act, dy, y, dy, rows, cols);
        return;
    }
    if (!acc) memset(db, 0, (size_t)cols * sizeof *db);
    for (int r = 0; r < rows; r++) {
        float *restrict d = dy + (size_t)r * cols;
        const float *restrict yr = y + (size_t)r * cols;
        float *restrict g = db;
        switch (act) {
        case PD_ACT_LINEAR:
            break;
        case PD_ACT_RELU:
            for (int c = 0; c < cols; c++) d[c] = yr[c] > 0 ? d[c] : 0;
            break;
        case PD_ACT_SIGMOID:
            for (int c = 0; c < cols; c++) d[c] = d[c] * yr[c] * (1 - yr[c]);
            break;
        case PD_ACT_TANH:
            for (int c = 0; c < cols; c++) d[c] = d[c] * (1 - yr[c] * yr[c]);
            break;
        case PD_ACT_SOFTMAX:
            cpu_act_backward(act, d, yr, d, 1, cols);
            break;
        default: PD_ASSERT(!"unknown activation");
        }
        for (int c = 0; c < cols; c++) g[c] += d[c];
    }
}

static void cpu_gather(float *out, const float *table, const int32_t *ids, int n, int dim)
{
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * dim, table + (size_t)ids[i] * dim, (size_t)dim * sizeof *out);
}

static void cpu_scatter_add(float *g, const float *dout, const int32_t *ids, int n, int dim)
{
    for (int i = 0; i < n; i++) {
        float *row = g + (size_t)ids[i] * dim;
        const float *d = dout + (size_t)i * dim;
        for (int c = 0; c < dim; c++) row[c] += d[c];
    }
}

static void cpu_seq_pool_forward(int pool, float *out, const float *in, const int32_t *off, int n,
                                 int dim, int32_t *argmax)
{
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * dim;
        int len = off[i + 1] - off[i];
        if (len == 0) {
            memset(o, 0, (size_t)dim * sizeof *o);
            if (pool == PD_POOL_MAX)
                for (int c = 0; c < dim; c++) argmax[(size_t)i * dim + c] = -1;
            continue;
        }
        const float *first = in + (size_t)off[i] * dim;
        memcpy(o, first, (size_t)dim * sizeof *o);
        if (pool == PD_POOL_MAX)
            for (int c = 0; c < dim; c++) argmax[(size_t)i * dim + c] = off[i];
        for (int r = off[i] + 1; r < off[i + 1]; r++) {
            const float *x = in + (size_t)r * dim;
            if (pool == PD_POOL_MAX) {
                for (int c = 0; c < dim; c++)
                    if (x[c] > o[c]) {
                        o[c] = x[c];
                        argmax[(size_t)i * dim + c] = r;
                    }
            } else {
                for (int c = 0; c < dim; c++) o[c] += x[c];
            }
        }
        if (pool == PD_POOL_AVERAGE)
            for (int c = 0; c < dim; c++) o[c] /= (float)len;
    }
}

static void cpu_seq_pool_backward(int pool, float *din, const float *dout, const int32_t *off, int n,
                                  int dim, const int32_t *argmax)
{
    for (int i = 0; i < n; i++) {
        const float *d = dout + (size_t)i * dim;
        int len = off[i + 1] - off[i];
        if (len == 0) continue;
        if (pool == PD_POOL_MAX) {
            for (int c = 0; c < dim; c++) {
                int r = argmax[(size_t)i * dim + c];
                if (r >= 0) din[(size_t)r * dim + c] += d[c];
            }
            continue;
        }
        float k = pool == PD_POOL_AVERAGE ? 1.f / (float)len : 1.f;
        for (int r = off[i]; r < off[i + 1]; r++) {
            float *x = din + (size_t)r * dim;
            for (int c = 0; c < dim; c++) x[c] += k * d[c];
        }
    }
}

static void cpu_copy_cols(float *dst, int ldd, const float *src, int lds, int rows, int cols, int acc)
{
    for (int r = 0; r < rows; r++) {
        float *d = dst + (size_t)r * ldd;
        const float *s = src + (size_t)r * lds;
        if (acc)
            for (int c = 0; c < cols; c++) d[c] += s[c];
        else
            memcpy(d, s, (size_t)cols * sizeof *d);
    }
}

#define COS_EPS 1e-8f

static void cpu_cos_sim_forward(float *out, const float *a, const float *b, int rows, int dim, float scale)
{
    for (int r = 0; r < rows; r++) {
        const float *x = a + (size_t)r * dim, *y = b + (size_t)r * dim;
        float xy = 0, xx = 0, yy = 0;
        for (int c = 0; c < dim; c++) {
            xy += x[c] * y[c];
            xx += x[c] * x[c];
            yy += y[c] * y[c];
        }
        out[r] = scale * xy / (sqrtf(xx) * sqrtf(yy) + COS_EPS);
    }
}

static void cpu_cos_sim_backward(float *da, float *db, const float *a, const float *b, const float *out,
                                 const float *dout, int rows, int dim, float scale)
{
    (void)out;
    for (int r = 0; r < rows; r++) {
        const float *x = a + (size_t)r * dim, *y = b + (size_t)r * dim;
        float xy = 0, xx = 0, yy = 0;
        for (int c = 0; c < dim; c++) {
            xy += x[c] * y[c];
            xx += x[c] * x[c];
            yy += y[c] * y[c];
        }
        float nx = sqrtf(xx), ny = sqrtf(yy), den = nx * ny + COS_EPS;
        float g = dout[r] * scale;
        /* d/dx [xy / (|x||y| + e)] = y/den - xy * (|y| x / |x|) / den^2 */
        float kx = nx > 0 ? xy * ny / (nx * den * den) : 0;
        float ky = ny > 0 ? xy * nx / (ny * den * den) : 0;
        for (int c = 0; c < dim; c++) {
            if (da) da[(size_t)r * dim + c] += g * (y[c] / den - kx * x[c]);
            if (db) db[(size_t)r * dim + c] += g * (x[c] / den - ky * y[c]);
        }
    }
}

static void cpu_square_error_forward(float *out, const float *pred, const float *label, int rows, int dim)
{
    for (int r = 0; r < rows; r++) {
        float s = 0;
        for (int c = 0; c < dim; c++) {
            float d = pred[(size_t)r * dim + c] - label[(size_t)r * dim + c];
            s += d * d;
        }
        out[r] = s;
    }
}

static void cpu_square_error_backward(float *dpred, const float *pred, const float *label, int rows, int dim)
{
    float k = 2.f / (float)rows;
    for (size_t i = 0; i < (size_t)rows * dim; i++) dpred[i] += k * (pred[i] - label[i]);
}

static void cpu_sigmoid_xent_forward(float *out, const float *x, const float *y, int rows, int dim)
{
    for (int r = 0; r < rows; r++) {
        float s = 0;
        for (int c = 0; c < dim; c++) {
            float v = x[(size_t)r * dim + c];
            s += fmaxf(v, 0.f) - v * y[(size_t)r * dim + c] + log1pf(expf(-fabsf(v)));
        }
        out[r] = s;
    }
}

static void cpu_sigmoid_xent_backward(float *dx, const float *x, const float *y, int rows, int dim)
{
    float k = 1.f / (float)rows;
    for (size_t i = 0; i < (size_t)rows * dim; i++) {
        /* sigmoid without overflow: exp of a non-positive number only */
        float e = expf(-fabsf(x[i])), p = x[i] >= 0 ? 1.f / (1.f + e) : e / (1.f + e);
        dx[i] += k * (p - y[i]);
    }
}

#define PROB_EPS 1e-20f

static void cpu_cross_entropy_forward(float *out, const float *prob, const int32_t *label, int rows, int k)
{
    for (int r = 0; r < rows; r++) out[r] = -logf(prob[(size_t)r * k + label[r]] + PROB_EPS);
}

static void cpu_cross_entropy_backward(float *dprob, const float *prob, const int32_t *label, int rows, int k)
{
    for (int r = 0; r < rows; r++) {
        size_t i = (size_t)r * k + label[r];
        dprob[i] += -1.f / ((prob[i] + PROB_EPS) * (float)rows);
    }
}

static void cpu_softmax_xent_forward(float *out, float *prob, const float *logits, const int32_t *label,
                                     int rows, int k)
{
    cpu_act_forward(PD_ACT_SOFTMAX, prob, logits, rows, k);
    for (int r = 0; r < rows; r++) {
        const float *x = logits + (size_t)r * k;
        float mx = -FLT_MAX, sum = 0;
        for (int c = 0; c < k; c++) mx = x[c] > mx ? x[c] : mx;
        for (int c = 0; c < k; c++) sum += expf(x[c] - mx);
        out[r] = logf(sum) + mx - x[label[r]];
    }
}

static void cpu_softmax_xent_backward(float *dlogits, const float *prob, const int32_t *label, int rows, int k)
{
    float inv = 1.f / (float)rows;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < k; c++) {
            size_t i = (size_t)r * k + c;
            dlogits[i] += inv * (prob[i] - (c == label[r] ? 1.f : 0.f));
        }
}

static void cpu_class_error(float *out, const float *pred, const int32_t *label, int rows, int k)
{
    for (int r = 0; r < rows; r++) {
        const float *p = pred + (size_t)r * k;
        int best = 0;
        for (int c = 1; c < k; c++)
            if (p[c] > p[best]) best = c;
        out[r] = best != label[r];
    }
}

static void cpu_opt_update(const pd_opt_hyper *h, float *w, const float *g, float *s1, float *s2, size_t n)
{
    const float lr = h->lr, wd = h->weight_decay;
    switch (h->type) {
    case PD_OPT_SGD:
        for (size_t i = 0; i < n; i++) w[i] -= lr * (g[i] + wd * w[i]);
        break;
    case PD_OPT_MOMENTUM:
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            s1[i] = h->momentum * s1[i] + gi;
            w[i] -= lr * (h->nesterov ? gi + h->momentum * s1[i] : s1[i]);
        }
        break;
    case PD_OPT_ADAGRAD:
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            s1[i] += gi * gi;
            w[i] -= lr * gi / (sqrtf(s1[i]) + h->epsilon);
        }
        break;
    case PD_OPT_ADAM: {
        /* the bias correction depends on the step only: cached across the
         * calls of one step (sparse tables call once per row) */
        static _Thread_local double c_lr, c_b1, c_b2;
        static _Thread_local long c_t = -1;
        static _Thread_local float c_val;
        if (c_t != h->t || c_lr != lr || c_b1 != h->beta1 || c_b2 != h->beta2) {
            double t = (double)h->t;
            c_val = (float)(lr * sqrt(1 - pow(h->beta2, t)) / (1 - pow(h->beta1, t)));
            c_t = h->t;
            c_lr = lr;
            c_b1 = h->beta1;
            c_b2 = h->beta2;
        }
        float lr_t = c_val;
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            s1[i] = h->beta1 * s1[i] + (1 - h->beta1) * gi;
            s2[i] = h->beta2 * s2[i] + (1 - h->beta2) * gi * gi;
            w[i] -= lr_t * s1[i] / (sqrtf(s2[i]) + h->epsilon);
        }
        break;
    }
    case PD_OPT_RMSPROP:
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            s1[i] = h->rho * s1[i] + (1 - h->rho) * gi * gi;
            float step = lr * gi / sqrtf(s1[i] + h->epsilon);
            if (s2) {
                s2[i] = h->momentum * s2[i] + step;
                w[i] -= s2[i];
            } else {
                w[i] -= step;
            }
        }
        break;
    default: PD_ASSERT(!"unknown optimizer");
    }
}

int pd_opt_state_floats(int type)
{
    switch (type) {
    case PD_OPT_SGD: return 0;
    case PD_OPT_MOMENTUM: return 1;
    case PD_OPT_ADAGRAD: return 1;
    case PD_OPT_ADAM: return 2;
    case PD_OPT_RMSPROP: return 2;
    }
    return 0;
}

const char *pd_blas_version(void)
{
    static char buf[128];
    /* "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64" */
    snprintf(buf, sizeof buf, "%s", openblas_get_config());
    return buf;
}

const char *pd_blas_core(void) { return openblas_get_corename(); }
void pd_blas_threads(int n) { openblas_set_num_threads(n); }

const pd_backend pd_backend_cpu = {
    .name = "cpu",
    .host_memory = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .gemm = cpu_gemm,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .add_bias = cpu_add_bias,
    .bias_grad = cpu_bias_grad,
    .act_forward = cpu_act_forward,
    .act_backward = cpu_act_backward,
    .bias_act_forward = cpu_bias_act_forward,
    .act_bias_backward = cpu_act_bias_backward,
    .gather = cpu_gather,
    .scatter_add = cpu_scatter_add,
    .seq_pool_forward = cpu_seq_pool_forward,
    .seq_pool_backward = cpu_seq_pool_backward,
    .copy_cols = cpu_copy_cols,
    .cos_sim_forward = cpu_cos_sim_forward,
    .cos_sim_backward = cpu_cos_sim_backward,
    .square_error_forward = cpu_square_error_forward,
    .square_error_backward = cpu_square_error_backward,
    .cross_entropy_forward = cpu_cross_entropy_forward,
    .cross_entropy_backward = cpu_cross_entropy_backward,
    .softmax_xent_forward = cpu_softmax_xent_forward,
    .softmax_xent_backward = cpu_softmax_xent_backward,
    .sigmoid_xent_forward = cpu_sigmoid_xent_forward,
    .sigmoid_xent_backward = cpu_sigmoid_xent_backward,
    .class_error = cpu_class_error,
    .opt_update = cpu_opt_update,
};
