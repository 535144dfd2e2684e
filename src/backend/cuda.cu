/*
 * cuda.cu - the CUDA backend: the table of backend.h filled with CUDA
 * kernels, and cuBLAS for the matrix products. Built only into the GPU
 * binary (`make cuda` -> ./paddle-cuda, glibc; see docs/cuda.md).
 *
 *     const pd_backend *be = pd_backend_get("cuda");  // NULL + message: no GPU
 *     float *w = be->alloc(n * sizeof(float));        // device memory
 *     be->upload(w, host, n * sizeof(float));
 *
 * Every op has the semantics of its twin in cpu.c; tests/unit/test_cuda.c
 * checks each against the CPU. Conventions:
 *
 *   - Everything runs in order on the legacy default stream (cuBLAS too), so
 *     ops need no synchronisation between them; download() waits for the
 *     work before it, and sync() for all of it.
 *   - Element-wise ops use one thread per element; ops that reduce a row
 *     (softmax, cos_sim, costs, argmax) use one warp per row. Every kernel
 *     loops grid-stride, so any size runs with a bounded grid.
 *   - Kernels that compute each output in one thread keep cpu.c's order of
 *     operations (element-wise ops, seq_pool); warp reductions and cuBLAS
 *     sum in another order, and nvcc fuses multiply-adds, so results match
 *     the CPU to float rounding, not bit for bit.
 *   - scatter_add uses atomicAdd (ids may repeat).
 *   - A CUDA or cuBLAS failure inside an op (device lost, bad address) is
 *     not recoverable: it is logged with the op and the CUDA error, and the
 *     process aborts, like an allocation failure of pd_xmalloc.
 *
 * With -DPD_CUDA_EMU the file compiles as plain C++ against cuda_emu.h, a
 * CPU emulation of the few CUDA and cuBLAS calls used here, so that the
 * kernels' indexing and reductions run in the unit tests on machines
 * without a GPU (`make cuda-emu-check`).
 */
#ifdef PD_CUDA_EMU
#include "cuda_emu.h"
#define LAUNCH(kernel, grid, block, ...) emu_launch(#kernel, grid, block, kernel, __VA_ARGS__)
#define GRID_MAX 3 /* small grids: the grid-stride loops get exercised */
#else
#include <cublas_v2.h>
#include <cuda_runtime.h>
#define LAUNCH(kernel, grid, block, ...) kernel<<<grid, block>>>(__VA_ARGS__)
#define GRID_MAX 65535
#endif

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "../core/log.h"
#include "../core/pd.h"
#include "backend.h"
}

#define BLOCK 256         /* threads per block */
#define FULL 0xffffffffu  /* all lanes of a warp */

static cublasHandle_t blas;

/* --- errors ---------------------------------------------------------------- */

static void die(const char *what, const char *detail, const char *file, int line)
{
    PD_ERROR("CUDA backend: %s failed at %s:%d: %s", what, file, line, detail);
    abort();
}

static void check_cuda(cudaError_t e, const char *what, const char *file, int line)
{
    if (e != cudaSuccess) die(what, cudaGetErrorString(e), file, line);
}

static void check_blas(cublasStatus_t s, const char *what, const char *file, int line)
{
    if (s != CUBLAS_STATUS_SUCCESS) die(what, cublasGetStatusString(s), file, line);
}

#define CK(call) check_cuda((call), #call, __FILE__, __LINE__)
#define CKB(call) check_blas((call), #call, __FILE__, __LINE__)
/* after a kernel launch: a bad configuration shows up here */
#define CK_LAUNCH(name) check_cuda(cudaGetLastError(), "launch of " name, __FILE__, __LINE__)

/* Blocks for one thread per item (per_thread = 1) or one warp per item
 * (per_thread = 32), capped: the kernels loop over the rest. */
static unsigned grid_for(size_t items, unsigned per_thread)
{
    size_t threads_per_block = BLOCK / per_thread;
    size_t g = (items + threads_per_block - 1) / threads_per_block;
    return (unsigned)(g < 1 ? 1 : g > GRID_MAX ? GRID_MAX : g);
}

/* --- device helpers ---------------------------------------------------------- */

/* i over [0, n), one thread per element */
#define FOR_EACH(i, n)                                                              \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n); \
         i += (size_t)blockDim.x * gridDim.x)

/* r over [0, rows), one warp per row: every lane of a warp has the same r,
 * so warp shuffles inside the loop see all 32 lanes */
#define FOR_EACH_ROW(r, rows)                                                         \
    for (int r = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32); r < (rows);     \
         r += (int)((blockDim.x * gridDim.x) / 32))

#define LANE ((int)(threadIdx.x & 31))

static __device__ __forceinline__ float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
    return v;
}

static __device__ __forceinline__ float warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, off));
    return v;
}

/* --- memory -------------------------------------------------------------------- */

static void *cu_alloc(size_t bytes)
{
    void *p = NULL;
    /* never NULL for 0 bytes (callers take NULL for failure); 256 keeps
     * every allocation aligned for any access */
    if (cudaMalloc(&p, bytes ? bytes : 256) != cudaSuccess) {
        cudaGetLastError(); /* out of memory is not sticky: clear it */
        return NULL;
    }
    return p;
}

static void cu_free(void *p)
{
    if (p) CK(cudaFree(p));
}

static void cu_upload(void *dst, const void *src, size_t n)
{
    if (n) CK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
}

static void cu_download(void *dst, const void *src, size_t n)
{
    if (n) CK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
}

/* The regions must not overlap (cpu.c allows it; no caller needs it). */
static void cu_copy(void *dst, const void *src, size_t n)
{
    if (n && dst != src) CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, 0));
}

static void cu_zero(void *p, size_t n)
{
    if (n) CK(cudaMemsetAsync(p, 0, n, 0));
}

static void cu_sync(void)
{
    CK(cudaDeviceSynchronize());
}

/* --- BLAS ------------------------------------------------------------------------ */

static __global__ void k_scale_matrix(float *c, int ldc, int m, int n, float beta)
{
    FOR_EACH(i, (size_t)m * n) {
        float *x = c + (i / n) * ldc + i % n;
        *x = beta == 0.f ? 0.f : beta * *x;
    }
}

/* Row-major C = alpha op(A) op(B) + beta C through column-major cuBLAS: a
 * row-major matrix is its transpose in column-major, so compute
 * C^T = op(B)^T op(A)^T, i.e. swap the operands and m with n. */
static void cu_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                    const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m == 0 || n == 0) return;
    if (k == 0) { /* C = beta C (cuBLAS would refuse lda = 0) */
        LAUNCH(k_scale_matrix, grid_for((size_t)m * n, 1), BLOCK, c, ldc, m, n, beta);
        CK_LAUNCH("k_scale_matrix");
        return;
    }
    CKB(cublasSgemm(blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                    ldb, a, lda, &beta, c, ldc));
}

static __global__ void k_axpy(size_t n, float alpha, const float *x, float *y)
{
    FOR_EACH(i, n) y[i] += alpha * x[i];
}

static void cu_axpy(size_t n, float alpha, const float *x, float *y)
{
    if (n == 0) return;
    LAUNCH(k_axpy, grid_for(n, 1), BLOCK, n, alpha, x, y);
    CK_LAUNCH("k_axpy");
}

static __global__ void k_scale(size_t n, float alpha, float *x)
{
    FOR_EACH(i, n) x[i] *= alpha;
}

static void cu_scale(size_t n, float alpha, float *x)
{
    if (n == 0) return;
    LAUNCH(k_scale, grid_for(n, 1), BLOCK, n, alpha, x);
    CK_LAUNCH("k_scale");
}

static __global__ void k_add_bias(float *y, const float *b, int rows, int cols)
{
    FOR_EACH(i, (size_t)rows * cols) y[i] += b[i % cols];
}

static void cu_add_bias(float *y, const float *b, int rows, int cols)
{
    if (rows == 0 || cols == 0) return;
    LAUNCH(k_add_bias, grid_for((size_t)rows * cols, 1), BLOCK, y, b, rows, cols);
    CK_LAUNCH("k_add_bias");
}

/* A vector of ones on the device for column sums by sgemv; grows, never
 * shrinks. Ops are driven from one thread (the trainer's). */
static float *ones;
static size_t nones;

static __global__ void k_fill(float *x, size_t n, float v)
{
    FOR_EACH(i, n) x[i] = v;
}

static const float *ones_of(size_t n)
{
    if (n > nones) {
        size_t cap = nones ? nones : 1024;
        while (cap < n) cap *= 2;
        cu_free(ones);
        ones = (float *)cu_alloc(cap * sizeof(float));
        if (!ones) die("allocating the ones vector of bias_grad", "out of device memory", __FILE__, __LINE__);
        LAUNCH(k_fill, grid_for(cap, 1), BLOCK, ones, cap, 1.f);
        CK_LAUNCH("k_fill");
        nones = cap;
    }
    return ones;
}

/* db += dy^T 1: dy, row-major rows x cols, is column-major cols x rows. */
static void cu_bias_grad(float *db, const float *dy, int rows, int cols)
{
    if (rows == 0 || cols == 0) return;
    const float one = 1.f;
    CKB(cublasSgemv(blas, CUBLAS_OP_N, cols, rows, &one, dy, cols, ones_of((size_t)rows), 1, &one, db, 1));
}

/* --- activations -------------------------------------------------------------------- */

static __global__ void k_act_forward(int act, float *y, const float *x, size_t n)
{
    FOR_EACH(i, n) {
        float v = x[i];
        switch (act) {
        case PD_ACT_RELU: v = v > 0 ? v : 0; break;
        case PD_ACT_SIGMOID: v = 1.f / (1.f + expf(-v)); break;
        case PD_ACT_TANH: v = tanhf(v); break;
        }
        y[i] = v;
    }
}

static __global__ void k_softmax(float *y, const float *x, int rows, int cols)
{
    FOR_EACH_ROW(r, rows) {
        const float *xr = x + (size_t)r * cols;
        float *yr = y + (size_t)r * cols;
        float mx = -FLT_MAX, sum = 0;
        for (int c = LANE; c < cols; c += 32) mx = fmaxf(mx, xr[c]);
        mx = warp_max(mx);
        for (int c = LANE; c < cols; c += 32) sum += (yr[c] = expf(xr[c] - mx));
        sum = warp_sum(sum);
        for (int c = LANE; c < cols; c += 32) yr[c] /= sum;
    }
}

static void cu_act_forward(int act, float *y, const float *x, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    if (n == 0) return;
    switch (act) {
    case PD_ACT_LINEAR:
        cu_copy(y, x, n * sizeof *y);
        return;
    case PD_ACT_RELU:
    case PD_ACT_SIGMOID:
    case PD_ACT_TANH:
        LAUNCH(k_act_forward, grid_for(n, 1), BLOCK, act, y, x, n);
        CK_LAUNCH("k_act_forward");
        return;
    case PD_ACT_SOFTMAX:
        LAUNCH(k_softmax, grid_for((size_t)rows, 32), BLOCK, y, x, rows, cols);
        CK_LAUNCH("k_softmax");
        return;
    }
    PD_ASSERT(!"unknown activation");
}

static __global__ void k_act_backward(int act, float *dx, const float *y, const float *dy, size_t n)
{
    FOR_EACH(i, n) {
        float d = dy[i], v = y[i];
        switch (act) {
        case PD_ACT_RELU: d = v > 0 ? d : 0; break;
        case PD_ACT_SIGMOID: d = d * v * (1 - v); break;
        case PD_ACT_TANH: d = d * (1 - v * v); break;
        }
        dx[i] = d;
    }
}

static __global__ void k_softmax_backward(float *dx, const float *y, const float *dy, int rows, int cols)
{
    FOR_EACH_ROW(r, rows) {
        const float *yr = y + (size_t)r * cols, *dyr = dy + (size_t)r * cols;
        float *dxr = dx + (size_t)r * cols;
        float dot = 0;
        for (int c = LANE; c < cols; c += 32) dot += yr[c] * dyr[c];
        dot = warp_sum(dot);
        for (int c = LANE; c < cols; c += 32) dxr[c] = yr[c] * (dyr[c] - dot);
    }
}

static void cu_act_backward(int act, float *dx, const float *y, const float *dy, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    if (n == 0) return;
    switch (act) {
    case PD_ACT_LINEAR:
        cu_copy(dx, dy, n * sizeof *dx);
        return;
    case PD_ACT_RELU:
    case PD_ACT_SIGMOID:
    case PD_ACT_TANH:
        LAUNCH(k_act_backward, grid_for(n, 1), BLOCK, act, dx, y, dy, n);
        CK_LAUNCH("k_act_backward");
        return;
    case PD_ACT_SOFTMAX:
        LAUNCH(k_softmax_backward, grid_for((size_t)rows, 32), BLOCK, dx, y, dy, rows, cols);
        CK_LAUNCH("k_softmax_backward");
        return;
    }
    PD_ASSERT(!"unknown activation");
}

/* The fc layer's tail: the bias, then the activation, in place. */
static void cu_bias_act_forward(int act, float *y, const float *b, int rows, int cols)
{
    if (b) cu_add_bias(y, b, rows, cols);
    if (act != PD_ACT_LINEAR) cu_act_forward(act, y, y, rows, cols);
}

/* dy = dy * act'(y), then db = (acc: db +) dy^T 1 by one sgemv. */
static void cu_act_bias_backward(int act, float *dy, const float *y, float *db, int acc, int rows, int cols)
{
    if (act != PD_ACT_LINEAR) cu_act_backward(act, dy, y, dy, rows, cols);
    if (!db || cols == 0) return;
    if (rows == 0) {
        if (!acc) cu_zero(db, (size_t)cols * sizeof *db);
        return;
    }
    const float one = 1.f, beta = acc ? 1.f : 0.f;
    CKB(cublasSgemv(blas, CUBLAS_OP_N, cols, rows, &one, dy, cols, ones_of((size_t)rows), 1, &beta, db, 1));
}

/* --- embedding rows ---------------------------------------------------------------- */

static __global__ void k_gather(float *out, const float *table, const int32_t *ids, int n, int dim)
{
    FOR_EACH(i, (size_t)n * dim) out[i] = table[(size_t)ids[i / dim] * dim + i % dim];
}

static void cu_gather(float *out, const float *table, const int32_t *ids, int n, int dim)
{
    if (n == 0 || dim == 0) return;
    LAUNCH(k_gather, grid_for((size_t)n * dim, 1), BLOCK, out, table, ids, n, dim);
    CK_LAUNCH("k_gather");
}

static __global__ void k_scatter_add(float *g, const float *dout, const int32_t *ids, int n, int dim)
{
    FOR_EACH(i, (size_t)n * dim) atomicAdd(&g[(size_t)ids[i / dim] * dim + i % dim], dout[i]);
}

static void cu_scatter_add(float *g, const float *dout, const int32_t *ids, int n, int dim)
{
    if (n == 0 || dim == 0) return;
    LAUNCH(k_scatter_add, grid_for((size_t)n * dim, 1), BLOCK, g, dout, ids, n, dim);
    CK_LAUNCH("k_scatter_add");
}

static __global__ void k_set_rows(float *table, const float *src, const int32_t *ids, int n, int dim)
{
    FOR_EACH(i, (size_t)n * dim) table[(size_t)ids[i / dim] * dim + i % dim] = src[i];
}

static void cu_set_rows(float *table, const float *src, const int32_t *ids, int n, int dim)
{
    if (n == 0 || dim == 0) return;
    LAUNCH(k_set_rows, grid_for((size_t)n * dim, 1), BLOCK, table, src, ids, n, dim);
    CK_LAUNCH("k_set_rows");
}

static __global__ void k_zero_rows(float *table, const int32_t *ids, int n, int dim)
{
    FOR_EACH(i, (size_t)n * dim) table[(size_t)ids[i / dim] * dim + i % dim] = 0;
}

static void cu_zero_rows(float *table, const int32_t *ids, int n, int dim)
{
    if (n == 0 || dim == 0) return;
    LAUNCH(k_zero_rows, grid_for((size_t)n * dim, 1), BLOCK, table, ids, n, dim);
    CK_LAUNCH("k_zero_rows");
}

/* --- sequence pooling: one thread per (sample, column), rows in order ---------------- */

static __global__ void k_seq_pool_forward(int pool, float *out, const float *in, const int32_t *off, int n,
                                          int dim, int32_t *argmax)
{
    FOR_EACH(i, (size_t)n * dim) {
        int s = (int)(i / dim), c = (int)(i % dim);
        int from = off[s], to = off[s + 1];
        if (from == to) {
            out[i] = 0;
            if (pool == PD_POOL_MAX) argmax[i] = -1;
            continue;
        }
        float o = in[(size_t)from * dim + c];
        int best = from;
        for (int r = from + 1; r < to; r++) {
            float x = in[(size_t)r * dim + c];
            if (pool == PD_POOL_MAX) {
                if (x > o) {
                    o = x;
                    best = r;
                }
            } else {
                o += x;
            }
        }
        if (pool == PD_POOL_AVERAGE) o /= (float)(to - from);
        out[i] = o;
        if (pool == PD_POOL_MAX) argmax[i] = best;
    }
}

static void cu_seq_pool_forward(int pool, float *out, const float *in, const int32_t *off, int n, int dim,
                                int32_t *argmax)
{
    if (n == 0 || dim == 0) return;
    LAUNCH(k_seq_pool_forward, grid_for((size_t)n * dim, 1), BLOCK, pool, out, in, off, n, dim, argmax);
    CK_LAUNCH("k_seq_pool_forward");
}

/* Each input row belongs to one sample and max pooling picks one row per
 * (sample, column): no two threads write the same element. */
static __global__ void k_seq_pool_backward(int pool, float *din, const float *dout, const int32_t *off, int n,
                                           int dim, const int32_t *argmax, int acc)
{
    FOR_EACH(i, (size_t)n * dim) {
        int s = (int)(i / dim), c = (int)(i % dim);
        int from = off[s], to = off[s + 1];
        if (from == to) continue;
        float d = dout[i];
        if (pool == PD_POOL_MAX) {
            int r = argmax[i];
            if (r >= 0) din[(size_t)r * dim + c] += d;
            continue;
        }
        float k = pool == PD_POOL_AVERAGE ? 1.f / (float)(to - from) : 1.f;
        for (int r = from; r < to; r++) din[(size_t)r * dim + c] = acc ? din[(size_t)r * dim + c] + k * d : k * d;
    }
}

static void cu_seq_pool_backward(int pool, float *din, const float *dout, const int32_t *off, int n, int dim,
                                 const int32_t *argmax, int acc)
{
    if (n == 0 || dim == 0) return;
    LAUNCH(k_seq_pool_backward, grid_for((size_t)n * dim, 1), BLOCK, pool, din, dout, off, n, dim, argmax, acc);
    CK_LAUNCH("k_seq_pool_backward");
}

/* --- columns ------------------------------------------------------------------------------ */

static __global__ void k_copy_cols(float *dst, int ldd, const float *src, int lds, int rows, int cols, int acc)
{
    FOR_EACH(i, (size_t)rows * cols) {
        size_t r = i / cols, c = i % cols;
        float *d = dst + r * ldd + c;
        float s = src[r * lds + c];
        *d = acc ? *d + s : s;
    }
}

static void cu_copy_cols(float *dst, int ldd, const float *src, int lds, int rows, int cols, int acc)
{
    if (rows == 0 || cols == 0) return;
    LAUNCH(k_copy_cols, grid_for((size_t)rows * cols, 1), BLOCK, dst, ldd, src, lds, rows, cols, acc);
    CK_LAUNCH("k_copy_cols");
}

/* --- cos_sim: one warp per row --------------------------------------------------------------- */

#define COS_EPS 1e-8f

static __global__ void k_cos_sim_forward(float *out, const float *a, const float *b, int rows, int dim, float scale)
{
    FOR_EACH_ROW(r, rows) {
        const float *x = a + (size_t)r * dim, *y = b + (size_t)r * dim;
        float xy = 0, xx = 0, yy = 0;
        for (int c = LANE; c < dim; c += 32) {
            xy += x[c] * y[c];
            xx += x[c] * x[c];
            yy += y[c] * y[c];
        }
        xy = warp_sum(xy);
        xx = warp_sum(xx);
        yy = warp_sum(yy);
        if (LANE == 0) out[r] = scale * xy / (sqrtf(xx) * sqrtf(yy) + COS_EPS);
    }
}

static void cu_cos_sim_forward(float *out, const float *a, const float *b, int rows, int dim, float scale)
{
    if (rows == 0) return;
    LAUNCH(k_cos_sim_forward, grid_for((size_t)rows, 32), BLOCK, out, a, b, rows, dim, scale);
    CK_LAUNCH("k_cos_sim_forward");
}

static __global__ void k_cos_sim_backward(float *da, float *db, const float *a, const float *b, const float *dout,
                                          int rows, int dim, float scale, int acc_a, int acc_b)
{
    FOR_EACH_ROW(r, rows) {
        const float *x = a + (size_t)r * dim, *y = b + (size_t)r * dim;
        float xy = 0, xx = 0, yy = 0;
        for (int c = LANE; c < dim; c += 32) {
            xy += x[c] * y[c];
            xx += x[c] * x[c];
            yy += y[c] * y[c];
        }
        xy = warp_sum(xy);
        xx = warp_sum(xx);
        yy = warp_sum(yy);
        float nx = sqrtf(xx), ny = sqrtf(yy), den = nx * ny + COS_EPS;
        float g = dout[r] * scale;
        float kx = nx > 0 ? xy * ny / (nx * den * den) : 0;
        float ky = ny > 0 ? xy * nx / (ny * den * den) : 0;
        for (int c = LANE; c < dim; c += 32) {
            float ga = g * (y[c] / den - kx * x[c]), gb = g * (x[c] / den - ky * y[c]);
            if (da) da[(size_t)r * dim + c] = acc_a ? da[(size_t)r * dim + c] + ga : ga;
            if (db) db[(size_t)r * dim + c] = acc_b ? db[(size_t)r * dim + c] + gb : gb;
        }
    }
}

static void cu_cos_sim_backward(float *da, float *db, const float *a, const float *b, const float *out,
                                const float *dout, int rows, int dim, float scale, int acc_a, int acc_b)
{
    (void)out;
    if (rows == 0 || (!da && !db)) return;
    LAUNCH(k_cos_sim_backward, grid_for((size_t)rows, 32), BLOCK, da, db, a, b, dout, rows, dim, scale, acc_a,
           acc_b);
    CK_LAUNCH("k_cos_sim_backward");
}

/* --- costs ----------------------------------------------------------------------------------- */

static __global__ void k_square_error_forward(float *out, const float *pred, const float *label, int rows, int dim)
{
    FOR_EACH_ROW(r, rows) {
        float s = 0;
        for (int c = LANE; c < dim; c += 32) {
            float d = pred[(size_t)r * dim + c] - label[(size_t)r * dim + c];
            s += d * d;
        }
        s = warp_sum(s);
        if (LANE == 0) out[r] = s;
    }
}

static void cu_square_error_forward(float *out, const float *pred, const float *label, int rows, int dim)
{
    if (rows == 0) return;
    LAUNCH(k_square_error_forward, grid_for((size_t)rows, 32), BLOCK, out, pred, label, rows, dim);
    CK_LAUNCH("k_square_error_forward");
}

static __global__ void k_square_error_backward(float *dpred, const float *pred, const float *label, size_t n, float k)
{
    FOR_EACH(i, n) dpred[i] += k * (pred[i] - label[i]);
}

static void cu_square_error_backward(float *dpred, const float *pred, const float *label, int rows, int dim)
{
    size_t n = (size_t)rows * dim;
    if (n == 0) return;
    LAUNCH(k_square_error_backward, grid_for(n, 1), BLOCK, dpred, pred, label, n, 2.f / (float)rows);
    CK_LAUNCH("k_square_error_backward");
}

static __global__ void k_sigmoid_xent_forward(float *out, const float *x, const float *y, int rows, int dim)
{
    FOR_EACH_ROW(r, rows) {
        float s = 0;
        for (int c = LANE; c < dim; c += 32) {
            float v = x[(size_t)r * dim + c];
            s += fmaxf(v, 0.f) - v * y[(size_t)r * dim + c] + log1pf(expf(-fabsf(v)));
        }
        s = warp_sum(s);
        if (LANE == 0) out[r] = s;
    }
}

static void cu_sigmoid_xent_forward(float *out, const float *x, const float *y, int rows, int dim)
{
    if (rows == 0) return;
    LAUNCH(k_sigmoid_xent_forward, grid_for((size_t)rows, 32), BLOCK, out, x, y, rows, dim);
    CK_LAUNCH("k_sigmoid_xent_forward");
}

static __global__ void k_sigmoid_xent_backward(float *dx, const float *x, const float *y, size_t n, float k)
{
    FOR_EACH(i, n) {
        float e = expf(-fabsf(x[i])), p = x[i] >= 0 ? 1.f / (1.f + e) : e / (1.f + e);
        dx[i] += k * (p - y[i]);
    }
}

static void cu_sigmoid_xent_backward(float *dx, const float *x, const float *y, int rows, int dim)
{
    size_t n = (size_t)rows * dim;
    if (n == 0) return;
    LAUNCH(k_sigmoid_xent_backward, grid_for(n, 1), BLOCK, dx, x, y, n, 1.f / (float)rows);
    CK_LAUNCH("k_sigmoid_xent_backward");
}

#define PROB_EPS 1e-20f

static __global__ void k_cross_entropy_forward(float *out, const float *prob, const int32_t *label, int rows, int k)
{
    FOR_EACH(r, rows) out[r] = -logf(prob[r * k + label[r]] + PROB_EPS);
}

static void cu_cross_entropy_forward(float *out, const float *prob, const int32_t *label, int rows, int k)
{
    if (rows == 0) return;
    LAUNCH(k_cross_entropy_forward, grid_for((size_t)rows, 1), BLOCK, out, prob, label, rows, k);
    CK_LAUNCH("k_cross_entropy_forward");
}

static __global__ void k_cross_entropy_backward(float *dprob, const float *prob, const int32_t *label, int rows,
                                                int k)
{
    FOR_EACH(r, rows) {
        size_t i = r * k + label[r];
        dprob[i] += -1.f / ((prob[i] + PROB_EPS) * (float)rows);
    }
}

static void cu_cross_entropy_backward(float *dprob, const float *prob, const int32_t *label, int rows, int k)
{
    if (rows == 0) return;
    LAUNCH(k_cross_entropy_backward, grid_for((size_t)rows, 1), BLOCK, dprob, prob, label, rows, k);
    CK_LAUNCH("k_cross_entropy_backward");
}

/* prob = softmax(logits); out = log(sum exp(x - max)) + max - x[label] */
static __global__ void k_softmax_xent_forward(float *out, float *prob, const float *logits, const int32_t *label,
                                              int rows, int k)
{
    FOR_EACH_ROW(r, rows) {
        const float *x = logits + (size_t)r * k;
        float *p = prob + (size_t)r * k;
        float mx = -FLT_MAX, sum = 0;
        for (int c = LANE; c < k; c += 32) mx = fmaxf(mx, x[c]);
        mx = warp_max(mx);
        for (int c = LANE; c < k; c += 32) sum += (p[c] = expf(x[c] - mx));
        sum = warp_sum(sum);
        for (int c = LANE; c < k; c += 32) p[c] /= sum;
        if (LANE == 0) out[r] = logf(sum) + mx - x[label[r]];
    }
}

static void cu_softmax_xent_forward(float *out, float *prob, const float *logits, const int32_t *label, int rows,
                                    int k)
{
    if (rows == 0) return;
    LAUNCH(k_softmax_xent_forward, grid_for((size_t)rows, 32), BLOCK, out, prob, logits, label, rows, k);
    CK_LAUNCH("k_softmax_xent_forward");
}

static __global__ void k_softmax_xent_backward(float *dlogits, const float *prob, const int32_t *label, int rows,
                                               int k, float inv)
{
    FOR_EACH(i, (size_t)rows * k) {
        int r = (int)(i / k), c = (int)(i % k);
        dlogits[i] += inv * (prob[i] - (c == label[r] ? 1.f : 0.f));
    }
}

static void cu_softmax_xent_backward(float *dlogits, const float *prob, const int32_t *label, int rows, int k)
{
    if (rows == 0 || k == 0) return;
    LAUNCH(k_softmax_xent_backward, grid_for((size_t)rows * k, 1), BLOCK, dlogits, prob, label, rows, k,
           1.f / (float)rows);
    CK_LAUNCH("k_softmax_xent_backward");
}

/* out[r] = argmax(pred[r]) != label[r]; the first of equal maxima wins, as
 * in cpu.c: lanes keep their first maximum, the reduction the lowest index */
static __global__ void k_class_error(float *out, const float *pred, const int32_t *label, int rows, int k)
{
    FOR_EACH_ROW(r, rows) {
        const float *p = pred + (size_t)r * k;
        float best = -INFINITY;
        int at = INT_MAX;
        for (int c = LANE; c < k; c += 32)
            if (at == INT_MAX || p[c] > best) {
                best = p[c];
                at = c;
            }
        for (int off = 16; off > 0; off >>= 1) {
            float ob = __shfl_xor_sync(FULL, best, off);
            int oat = __shfl_xor_sync(FULL, at, off);
            if (ob > best || (ob == best && oat < at)) {
                best = ob;
                at = oat;
            }
        }
        if (LANE == 0) out[r] = at != label[r];
    }
}

static void cu_class_error(float *out, const float *pred, const int32_t *label, int rows, int k)
{
    if (rows == 0) return;
    LAUNCH(k_class_error, grid_for((size_t)rows, 32), BLOCK, out, pred, label, rows, k);
    CK_LAUNCH("k_class_error");
}

/* --- optimizers ---------------------------------------------------------------------------------- */

/* The hyper-parameters a kernel needs, by value; lr_t is Adam's
 * bias-corrected rate, computed on the host in double as cpu.c does. */
typedef struct opt_args {
    int type, nesterov;
    float lr, wd, momentum, beta1, beta2, epsilon, rho, lr_t;
} opt_args;

/* One element of an update; the kernels below differ in which elements. */
static __device__ void opt_one(const opt_args &h, float *w, const float *g, float *s1, float *s2, size_t i)
{
    float gi = g[i] + h.wd * w[i];
    switch (h.type) {
    case PD_OPT_SGD:
        w[i] -= h.lr * gi;
        break;
    case PD_OPT_MOMENTUM:
        s1[i] = h.momentum * s1[i] + gi;
        w[i] -= h.lr * (h.nesterov ? gi + h.momentum * s1[i] : s1[i]);
        break;
    case PD_OPT_ADAGRAD:
        s1[i] += gi * gi;
        w[i] -= h.lr * gi / (sqrtf(s1[i]) + h.epsilon);
        break;
    case PD_OPT_ADAM:
        s1[i] = h.beta1 * s1[i] + (1 - h.beta1) * gi;
        s2[i] = h.beta2 * s2[i] + (1 - h.beta2) * gi * gi;
        w[i] -= h.lr_t * s1[i] / (sqrtf(s2[i]) + h.epsilon);
        break;
    case PD_OPT_RMSPROP: {
        s1[i] = h.rho * s1[i] + (1 - h.rho) * gi * gi;
        float step = h.lr * gi / sqrtf(s1[i] + h.epsilon);
        if (s2) {
            s2[i] = h.momentum * s2[i] + step;
            w[i] -= s2[i];
        } else {
            w[i] -= step;
        }
        break;
    }
    }
}

static __global__ void k_opt_update(opt_args h, float *w, const float *g, float *s1, float *s2, size_t n)
{
    FOR_EACH(i, n) opt_one(h, w, g, s1, s2, i);
}

/* rows ids[0..n) of [rows, dim] arrays; the ids are distinct, so no two
 * threads touch the same element */
static __global__ void k_opt_update_rows(opt_args h, float *w, const float *g, float *s1, float *s2,
                                         const int32_t *ids, int n, int dim)
{
    FOR_EACH(i, (size_t)n * dim) opt_one(h, w, g, s1, s2, (size_t)ids[i / dim] * dim + i % dim);
}

static opt_args opt_args_from(const pd_opt_hyper *h)
{
    PD_ASSERT(h->type >= PD_OPT_SGD && h->type <= PD_OPT_RMSPROP);
    opt_args a;
    a.type = h->type;
    a.nesterov = h->nesterov;
    a.lr = h->lr;
    a.wd = h->weight_decay;
    a.momentum = h->momentum;
    a.beta1 = h->beta1;
    a.beta2 = h->beta2;
    a.epsilon = h->epsilon;
    a.rho = h->rho;
    a.lr_t = 0;
    if (h->type == PD_OPT_ADAM) {
        double t = (double)h->t;
        a.lr_t = (float)(h->lr * sqrt(1 - pow(h->beta2, t)) / (1 - pow(h->beta1, t)));
    }
    return a;
}

static void cu_opt_update(const pd_opt_hyper *h, float *w, const float *g, float *s1, float *s2, size_t n)
{
    opt_args a = opt_args_from(h);
    if (n == 0) return;
    LAUNCH(k_opt_update, grid_for(n, 1), BLOCK, a, w, g, s1, s2, n);
    CK_LAUNCH("k_opt_update");
}

static void cu_opt_update_rows(const pd_opt_hyper *h, float *w, const float *g, float *s1, float *s2,
                               const int32_t *ids, int n, int dim)
{
    opt_args a = opt_args_from(h);
    if (n == 0 || dim == 0) return;
    LAUNCH(k_opt_update_rows, grid_for((size_t)n * dim, 1), BLOCK, a, w, g, s1, s2, ids, n, dim);
    CK_LAUNCH("k_opt_update_rows");
}

/* --- the table ------------------------------------------------------------------------------------- */

static const pd_backend cuda_backend = {
    .name = "cuda",
    .host_memory = 0,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .zero = cu_zero,
    .sync = cu_sync,
    .gemm = cu_gemm,
    .axpy = cu_axpy,
    .scale = cu_scale,
    .add_bias = cu_add_bias,
    .bias_grad = cu_bias_grad,
    .act_forward = cu_act_forward,
    .act_backward = cu_act_backward,
    .bias_act_forward = cu_bias_act_forward,
    .act_bias_backward = cu_act_bias_backward,
    .gather = cu_gather,
    .scatter_add = cu_scatter_add,
    .set_rows = cu_set_rows,
    .zero_rows = cu_zero_rows,
    .seq_pool_forward = cu_seq_pool_forward,
    .seq_pool_backward = cu_seq_pool_backward,
    .copy_cols = cu_copy_cols,
    .cos_sim_forward = cu_cos_sim_forward,
    .cos_sim_backward = cu_cos_sim_backward,
    .square_error_forward = cu_square_error_forward,
    .square_error_backward = cu_square_error_backward,
    .cross_entropy_forward = cu_cross_entropy_forward,
    .cross_entropy_backward = cu_cross_entropy_backward,
    .softmax_xent_forward = cu_softmax_xent_forward,
    .softmax_xent_backward = cu_softmax_xent_backward,
    .sigmoid_xent_forward = cu_sigmoid_xent_forward,
    .sigmoid_xent_backward = cu_sigmoid_xent_backward,
    .class_error = cu_class_error,
    .opt_update = cu_opt_update,
    .opt_update_rows = cu_opt_update_rows,
};

/* --- initialisation: once per process ------------------------------------------------------------------ */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ready;
static char why[512];    /* when not ready: the message pd_cuda_backend sets */
static char device[sizeof(((cudaDeviceProp *)0)->name) + 64]; /* when ready: "NVIDIA H100 (sm_90, 79.1 GiB)" */

static void init_fail(const char *what, cudaError_t e)
{
    snprintf(why, sizeof why,
             "no CUDA device: %s: %s (%s, error %d); run paddle-cuda on a machine with an NVIDIA GPU and its "
             "driver, or set device = \"cpu\"",
             what, cudaGetErrorString(e), cudaGetErrorName(e), (int)e);
}

static void init(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        init_fail("cudaGetDeviceCount", e);
        return;
    }
    if (n == 0) {
        snprintf(why, sizeof why, "no CUDA device: the driver reports none; set device = \"cpu\"");
        return;
    }
    /* device 0 of those visible: pick one with CUDA_VISIBLE_DEVICES */
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess) { /* makes the context */
        init_fail("creating a context on device 0", e);
        return;
    }
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
        init_fail("cudaGetDeviceProperties", e);
        return;
    }
    cublasStatus_t s = cublasCreate(&blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, sizeof why, "no CUDA device: cuBLAS does not start: %s", cublasGetStatusString(s));
        return;
    }
    /* plain FP32 sgemm: no TF32 tensor-core rounding, so results match the CPU */
    cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH);
    snprintf(device, sizeof device, "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024));
    ready = 1;
}

/* The CUDA backend, or NULL with a message saying why there is none (no
 * driver, no device). Called through the weak reference in registry.c. */
extern "C" const pd_backend *pd_cuda_backend(void)
{
    pthread_once(&once, init);
    if (!ready) {
        pd_err_set(PD_ENODEV, "%s", why);
        return NULL;
    }
    return &cuda_backend;
}

/* For `paddle version`: "runtime 13.0, driver 12.8, cuBLAS 13.0.2, device
 * 0: NVIDIA H100 (...)" or "..., no device". */
extern "C" const char *pd_cuda_version(void)
{
    static char buf[512];
    int rt = 0, drv = 0, major = 0, minor = 0, patch = 0;
    cudaRuntimeGetVersion(&rt);
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    char dv[32] = "none";
    if (drv) snprintf(dv, sizeof dv, "%d.%d", drv / 1000, drv % 1000 / 10);
    pthread_once(&once, init);
    snprintf(buf, sizeof buf, "runtime %d.%d%s, driver %s, cuBLAS %d.%d.%d, %s%s", rt / 1000, rt % 1000 / 10,
#ifdef PD_CUDA_EMU
             " (CPU emulation, for tests)",
#else
             " (static)",
#endif
             dv, major, minor, patch, ready ? "device 0: " : "", ready ? device : "no device");
    return buf;
}
