/*
 * sgemm_bench.c - OpenBLAS sgemm speed on this machine, the baselines the
 * MLP benchmark is measured against.
 *
 *     build/musl/sgemm_bench [n]
 *         prints "sgemm N GFLOP/s" for an n^3 product
 *     build/musl/sgemm_bench mlp BATCH IN H1 ... OUT
 *         the roofline of one training step of that MLP: exactly the
 *         products its fc layers run (forward X*W, weight gradient X^T*dY
 *         accumulated, input gradient dY*W^T accumulated except for the
 *         first layer, whose input is data), same shapes, transposes and
 *         beta, with nothing between them, run two ways: cblas_sgemm with
 *         OpenBLAS's own threads, and paddle's CPU backend (each product cut
 *         across its own threads, OpenBLAS single-threaded in each); the
 *         faster is the roofline. Prints
 *         "mlp-roofline SAMPLES/s GFLOP/s (openblas-threads S1, split S2)"
 *     build/musl/sgemm_bench ctr BATCH IN H1 ... OUT
 *         the same for a net whose first layer's input is embeddings
 *         (CTR-DNN): that layer's input gradient is computed too; prints
 *         "ctr-roofline ..."
 */
#include "../src/backend/backend.h"
#include "../src/core/pd.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *filled(long n)
{
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) {
        fprintf(stderr, "sgemm_bench: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < n; i++) p[i] = (float)(i % 7) * 0.01f;
    return p;
}

static int square(int n)
{
    float *a = filled((long)n * n), *b = filled((long)n * n), *c = filled((long)n * n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = pd_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        double g = 2.0 * n * n * n / (pd_now() - t0) / 1e9;
        if (g > best) best = g;
    }
    printf("sgemm %.1f GFLOP/s\n", best);
    free(a);
    free(b);
    free(c);
    return 0;
}

typedef void (*gemm_fn)(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                        int ldb, float beta, float *c, int ldc);

static void openblas_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                          int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda,
                b, ldb, beta, c, ldc);
}

/* One step's products of an MLP with nl+1 layer widths w[0..nl] (with
 * first_dx, the first layer's input gradient too). */
static double mlp_step(gemm_fn gemm, int batch, const int *w, int nl, int first_dx, float **x, float **dy, float **wt,
                       float **dw, float **dx)
{
    double flops = 0;
    for (int l = 0; l < nl; l++) { /* forward */
        gemm(0, 0, batch, w[l + 1], w[l], 1, x[l], w[l], wt[l], w[l + 1], 0, dy[l], w[l + 1]);
        flops += 2.0 * batch * w[l] * w[l + 1];
    }
    for (int l = nl - 1; l >= 0; l--) { /* backward */
        gemm(1, 0, w[l], w[l + 1], batch, 1, x[l], w[l], dy[l], w[l + 1], 1, dw[l], w[l + 1]);
        flops += 2.0 * batch * w[l] * w[l + 1];
        if (l == 0 && !first_dx) continue;
        gemm(0, 1, batch, w[l], w[l + 1], 1, dy[l], w[l + 1], wt[l], w[l + 1], 1, dx[l], w[l]);
        flops += 2.0 * batch * w[l] * w[l + 1];
    }
    return flops;
}

static int mlp(int argc, char **argv)
{
    int batch = atoi(argv[2]), nl = argc - 4, first_dx = !strcmp(argv[1], "ctr");
    if (batch <= 0 || nl < 1 || nl > 16) {
        fprintf(stderr, "usage: sgemm_bench mlp|ctr BATCH IN H1 ... OUT\n");
        return 2;
    }
    int w[17];
    for (int l = 0; l <= nl; l++) {
        w[l] = atoi(argv[3 + l]);
        if (w[l] <= 0 || w[l] > 65536) {
            fprintf(stderr, "sgemm_bench: bad width '%s'\n", argv[3 + l]);
            return 2;
        }
    }
    float *x[16], *dy[16], *wt[16], *dw[16], *dx[16];
    for (int l = 0; l < nl; l++) {
        x[l] = filled((long)batch * w[l]);
        dy[l] = filled((long)batch * w[l + 1]);
        wt[l] = filled((long)w[l] * w[l + 1]);
        dw[l] = filled((long)w[l] * w[l + 1]);
        dx[l] = filled((long)batch * w[l]);
    }
    /* OpenBLAS's threads first: the backend makes OpenBLAS single-threaded */
    gemm_fn ways[2] = {openblas_gemm, pd_backend_cpu.gemm};
    double best[2] = {1e30, 1e30}, flops = 0;
    for (int way = 0; way < 2; way++) {
        for (int i = 0; i < 5; i++) mlp_step(ways[way], batch, w, nl, first_dx, x, dy, wt, dw, dx);
        for (int rep = 0; rep < 5; rep++) {
            double t0 = pd_now();
            for (int i = 0; i < 20; i++) flops = mlp_step(ways[way], batch, w, nl, first_dx, x, dy, wt, dw, dx);
            double t = (pd_now() - t0) / 20;
            if (t < best[way]) best[way] = t;
        }
    }
    double t = PD_MIN(best[0], best[1]);
    printf("%s-roofline %.0f samples/s %.1f GFLOP/s (openblas-threads %.0f, split %.0f samples/s)\n", argv[1],
           batch / t, flops / t / 1e9, batch / best[0], batch / best[1]);
    for (int l = 0; l < nl; l++) {
        free(x[l]);
        free(dy[l]);
        free(wt[l]);
        free(dw[l]);
        free(dx[l]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "mlp") || !strcmp(argv[1], "ctr"))) return mlp(argc, argv);
    return square(argc > 1 ? atoi(argv[1]) : 1024);
}
