/*
 * backend.h - the table of math operations layers are written against.
 *
 * Every numeric operation of the engine goes through a pd_backend, so that
 * layer code has no #ifdef and the CUDA backend (src/backend/cuda.cu) is the
 * same table filled with kernels. Pointers passed to an op live on that
 * backend's device; ids and offsets are int32 on the device as well.
 * Matrices are row-major; `ld` is the row stride in elements.
 *
 *     const pd_backend *be = pd_backend_get("cpu");
 *     float *y = be->alloc(n * sizeof(float));
 *     be->gemm(0, 0, m, n, k, 1.f, a, k, b, n, 0.f, y, n);
 */
#ifndef PD_BACKEND_H
#define PD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

enum { PD_ACT_LINEAR, PD_ACT_RELU, PD_ACT_SIGMOID, PD_ACT_TANH, PD_ACT_SOFTMAX };
enum { PD_POOL_SUM, PD_POOL_AVERAGE, PD_POOL_MAX };
enum { PD_OPT_SGD, PD_OPT_MOMENTUM, PD_OPT_ADAGRAD, PD_OPT_ADAM, PD_OPT_RMSPROP };

/* Hyper-parameters of one optimizer step; t counts steps from 1 (Adam). */
typedef struct pd_opt_hyper {
    int type;
    float lr, momentum, beta1, beta2, epsilon, rho, weight_decay;
    int nesterov;
    long t;
} pd_opt_hyper;

typedef struct pd_backend {
    const char *name;
    int host_memory;    /* device pointers are host pointers (no copies needed) */

    /* memory: returns NULL on failure */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);
    void (*zero)(void *p, size_t bytes);
    void (*sync)(void);

    /* C = alpha * op(A) * op(B) + beta * C, row-major, op = transpose if t* */
    void (*gemm)(int ta, int tb, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta,
                 float *c, int ldc);
    /* y += alpha * x */
    void (*axpy)(size_t n, float alpha, const float *x, float *y);
    /* x *= alpha */
    void (*scale)(size_t n, float alpha, float *x);

    /* y[r][c] += b[c] */
    void (*add_bias)(float *y, const float *b, int rows, int cols);
    /* db[c] += sum_r dy[r][c] */
    void (*bias_grad)(float *db, const float *dy, int rows, int cols);
    /* y = act(x), in place allowed; softmax is per row */
    void (*act_forward)(int act, float *y, const float *x, int rows, int cols);
    /* dx = dy * act'(from y), in place allowed (dx == dy) */
    void (*act_backward)(int act, float *dx, const float *y, const float *dy,
                         int rows, int cols);
    /* The fc layer's tail in one pass over its output: y = act(y + b), in
     * place; b (cols floats) may be NULL for no bias */
    void (*bias_act_forward)(int act, float *y, const float *b, int rows, int cols);
    /* and its backward: dy = dy * act'(from y) in place, then db = (acc:
     * db +) the column sums of that dy; db may be NULL for no bias */
    void (*act_bias_backward)(int act, float *dy, const float *y, float *db, int acc,
                              int rows, int cols);

    /* out[i] = table[ids[i]] (n rows of dim) */
    void (*gather)(float *out, const float *table, const int32_t *ids, int n, int dim);
    /* gtable[ids[i]] += dout[i] */
    void (*scatter_add)(float *gtable, const float *dout, const int32_t *ids, int n, int dim);
    /* table[ids[i]] = src[i]; the ids are distinct */
    void (*set_rows)(float *table, const float *src, const int32_t *ids, int n, int dim);
    /* table[ids[i]] = 0; the ids are distinct */
    void (*zero_rows)(float *table, const int32_t *ids, int n, int dim);

    /* sequences: rows offsets[i] .. offsets[i+1]-1 of in belong to sample i;
     * out[i] = pool(those rows); argmax (max pooling) records the chosen row */
    void (*seq_pool_forward)(int pool, float *out, const float *in,
                             const int32_t *offsets, int n, int dim, int32_t *argmax);
    /* din = (acc: +=) d out / d in * dout; each of in's rows belongs to one
     * sample, so acc 0 writes every row, except with max pooling, which
     * adds into the rows it picked whatever acc is */
    void (*seq_pool_backward)(int pool, float *din, const float *dout,
                              const int32_t *offsets, int n, int dim, const int32_t *argmax, int acc);

    /* copy a block of columns: dst[r][0..cols) (stride ldd) = / += src[r] (stride lds) */
    void (*copy_cols)(float *dst, int ldd, const float *src, int lds, int rows, int cols, int accumulate);

    /* out[r] = scale * cos(a[r], b[r]) */
    void (*cos_sim_forward)(float *out, const float *a, const float *b, int rows, int dim, float scale);
    /* da[r] = (acc_a: +=) dout[r] * d out[r] / d a[r], likewise db (da first:
     * they may be one buffer); either may be NULL */
    void (*cos_sim_backward)(float *da, float *db, const float *a, const float *b,
                             const float *out, const float *dout, int rows, int dim, float scale,
                             int acc_a, int acc_b);

    /* costs: out[r] = per-sample cost; backward writes d(mean cost)/d input,
     * i.e. scaled by 1/rows, accumulating into dpred */
    void (*square_error_forward)(float *out, const float *pred, const float *label, int rows, int dim);
    void (*square_error_backward)(float *dpred, const float *pred, const float *label, int rows, int dim);
    void (*cross_entropy_forward)(float *out, const float *prob, const int32_t *label, int rows, int classes);
    void (*cross_entropy_backward)(float *dprob, const float *prob, const int32_t *label, int rows, int classes);
    /* softmax_xent: prob receives the softmax of logits (kept for backward) */
    void (*softmax_xent_forward)(float *out, float *prob, const float *logits, const int32_t *label,
                                 int rows, int classes);
    void (*softmax_xent_backward)(float *dlogits, const float *prob, const int32_t *label, int rows, int classes);
    /* sigmoid_xent: out[r] = sum_c of the logistic loss of logit x against a
     * target y in [0, 1], max(x, 0) - x y + log(1 + exp(-|x|)) (stable);
     * backward adds (sigmoid(x) - y) / rows into dlogits */
    void (*sigmoid_xent_forward)(float *out, const float *logits, const float *label, int rows, int dim);
    void (*sigmoid_xent_backward)(float *dlogits, const float *logits, const float *label, int rows, int dim);
    /* out[r] = 1 if argmax(pred[r]) != label[r] else 0 */
    void (*class_error)(float *out, const float *pred, const int32_t *label, int rows, int classes);

    /* one optimizer step on n weights; s1, s2 hold the optimizer's state
     * (NULL when the optimizer needs fewer) */
    void (*opt_update)(const pd_opt_hyper *h, float *w, const float *g, float *s1, float *s2, size_t n);
    /* the same on rows ids[0..n) of [rows, dim] arrays (a sparse table's
     * touched rows: distinct ids, one launch on a GPU, not one a row) */
    void (*opt_update_rows)(const pd_opt_hyper *h, float *w, const float *g, float *s1, float *s2,
                            const int32_t *ids, int n, int dim);
} pd_backend;

/* The backend called name ("cpu", "cuda"), or NULL with a message in
 * pd_err_msg() when this build has none or the device is missing. */
const pd_backend *pd_backend_get(const char *name);
/* Why name has no backend: PD_EINVAL where this build has none (what the
 * recipe asks is wrong here: no restart helps), PD_ENODEV where the device
 * failed to start (no GPU, a busy one: a fault). */
int pd_backend_missing(const char *name);

extern const pd_backend pd_backend_cpu;

/* Floats of optimizer state per weight for an optimizer (0, 1 or 2). */
int pd_opt_state_floats(int type);

/* BLAS facts for `paddle version`: library version, the core chosen for
 * this CPU, threads. */
const char *pd_blas_version(void);
const char *pd_blas_core(void);
void pd_blas_threads(int n);
/* Stop OpenBLAS's own threads (the products are cut between threads of the
 * backend's): first thing in main, before they spin for nothing. */
void pd_blas_quiet(void);
/* The threads a product is cut among (the recipe's, or OpenBLAS's default). */
int pd_blas_threads_get(void);
/* Whether a machine is crowded for the product threads: threads wait for
 * a core a fifth of the time or more (/proc/pressure/cpu, smoothed; where
 * the kernel has no pressure figures, more threads running than the cores
 * this process may use, and one, from /proc/loadavg). A worker waits for
 * the next product on its core, yielding it, only where it is not. What
 * the backend keeps between looks: */
typedef struct pd_crowd {
    double ema;      /* the smoothed share of time stalled, or threads running (< 0: none yet) */
    double total;    /* the pressure's total stall at the last look, µs */
    double at;       /* when that was, µs (0: not yet) */
    int crowded;
} pd_crowd;

/* One look: the text of /proc/pressure/cpu (or NULL) at time at_us, else
 * that of /proc/loadavg (or NULL) with the process's cpus; returns
 * whether crowded (also in c->crowded). Nothing readable: crowded. */
int pd_crowd_update(pd_crowd *c, const char *pressure, const char *loadavg, int cpus, double at_us);

#endif
