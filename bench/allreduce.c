/*
 * allreduce.c - the OpenMPI baseline of the pserver capacity bench: the
 * median time of one MPI_Allreduce (sum of floats) among the ranks, for each
 * size given (default 1M and 10M floats). Built by bench/run.sh with
 * Debian's mpicc (glibc, dynamic): it is no part of paddle.
 *
 *     mpicc -O2 -o allreduce bench/allreduce.c
 *     mpirun --allow-run-as-root --oversubscribe -np 4 ./allreduce [floats ...]
 *
 * Rank 0 prints one line per size:
 *     allreduce ranks 4 floats 1000000 median_ms 3.215 reps 20
 * An allreduce's time is the slowest rank's, the ranks starting together
 * after a barrier.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ms of reps allreduces of n floats (rank 0's answer). */
static double time_allreduce(long n, int reps)
{
    float *in = malloc((size_t)n * sizeof *in), *out = malloc((size_t)n * sizeof *out);
    double *ms = malloc((size_t)reps * sizeof *ms);
    if (!in || !out || !ms) {
        fprintf(stderr, "allreduce: cannot allocate %ld floats\n", n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long i = 0; i < n; i++) in[i] = (float)(i % 1000) * 1e-3f;
    for (int r = -2; r < reps; r++) { /* two warm-up rounds */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double mine = (MPI_Wtime() - t0) * 1e3, slowest = 0;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (r >= 0) ms[r] = slowest;
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
    double median = reps % 2 ? ms[reps / 2] : (ms[reps / 2 - 1] + ms[reps / 2]) / 2;
    free(in);
    free(out);
    free(ms);
    return median;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long def[] = {1000000, 10000000};
    int nsizes = argc > 1 ? argc - 1 : 2;
    for (int i = 0; i < nsizes; i++) {
        long n = argc > 1 ? atol(argv[i + 1]) : def[i];
        if (n <= 0 || n > 1L << 30) {
            if (rank == 0) fprintf(stderr, "allreduce: bad size '%s'\n", argv[i + 1]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        /* about half a second of allreduces at a few GB/s, at least 5 */
        int reps = n >= 5000000 ? 7 : 21;
        double ms = time_allreduce(n, reps);
        if (rank == 0) printf("allreduce ranks %d floats %ld median_ms %.3f reps %d\n", size, n, ms, reps);
    }
    MPI_Finalize();
    return 0;
}
