/*
 * sgemm_bench.c - OpenBLAS sgemm speed on this machine, the baseline the
 * MLP benchmark is measured against.
 *
 *     build/musl/sgemm_bench [n]     prints "sgemm N GFLOP/s" for an n^3 product
 */
#include "../src/core/pd.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1024;
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    for (long i = 0; i < (long)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
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
