/*
 * hashtab_bench.c - memory of a growing table (src/nn/hashtab.c) per stored
 * row against the row's raw size (its floats and the optimizer's state),
 * with 10 million rows of dim 9 under Adam (27 floats), as a pserver holds
 * them: target <= 1.5 x raw + 32 bytes. Also the process's resident memory
 * per row (what malloc adds) and updates per second. Not a test.
 *
 *     build/musl/hashtab_bench [rows [dim]]
 */
#include "../src/core/log.h"
#include "../src/core/pd.h"
#include "../src/nn/hashtab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long rows = argc > 1 ? atol(argv[1]) : 10000000;
    int dim = argc > 2 ? atoi(argv[2]) : 9, width = dim * 3; /* Adam: values + 2 states */
    pd_hashtab t;
    pd_hashtab_init(&t, "bench", width, NULL);
    long before = rss_kb();
    double t0 = now();
    int created;
    for (long i = 0; i < rows; i++) {
        float *r = pd_hashtab_update(&t, pd_hash_id((uint64_t)i) ^ 0x5bd1e995u, &created);
        r[0] = (float)i; /* touch the row as an update would */
    }
    double secs = now() - t0;
    t0 = now();
    long found = 0;
    for (long i = 0; i < rows; i++) found += pd_hashtab_find(&t, pd_hash_id((uint64_t)i) ^ 0x5bd1e995u) != NULL;
    double find_secs = now() - t0;
    double raw = width * 4.0, per = (double)pd_hashtab_bytes(&t) / (double)rows;
    double rss_per = (double)(rss_kb() - before) * 1024 / (double)rows;
    printf("growing table: %ld rows of %d floats (dim %d, Adam): raw %.0f B a row\n", rows, width, dim, raw);
    printf("  held %.1f B a row = %.3f x raw + %.1f B; target <= 1.5 x raw + 32 = %.0f B: %s\n", per, per / raw,
           per - raw, 1.5 * raw + 32, per <= 1.5 * raw + 32 ? "met" : "NOT met");
    printf("  resident memory grew %.1f B a row (%.3f x raw)\n", rss_per, rss_per / raw);
    printf("  %.2f M inserts/s, %.2f M lookups/s (%ld found)\n", rows / secs / 1e6, rows / find_secs / 1e6, found);
    pd_hashtab_free(&t);
    return found == rows ? 0 : 1;
}
