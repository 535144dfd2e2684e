/* auc.c - the exact area under the ROC curve of scores and labels. See auc.h. */
#include "auc.h"
#include "pd.h"

#include <math.h>
#include <stdlib.h>

typedef struct pair {
    float s;
    int pos;
} pair;

static int by_score(const void *x, const void *y)
{
    float a = ((const pair *)x)->s, b = ((const pair *)y)->s;
    return (a > b) - (a < b);
}

double pd_auc_compute(const float *score, const float *label, long n)
{
    if (n <= 0) return NAN;
    pair *v = pd_xmalloc((size_t)n * sizeof *v);
    for (long i = 0; i < n; i++) {
        /* NaN scores sort first (below every number), all tied */
        v[i].s = isnan(score[i]) ? -INFINITY : score[i];
        v[i].pos = label[i] > 0.5f;
    }
    qsort(v, (size_t)n, sizeof *v, by_score);
    /* sum of the positives' ranks, ties at their average rank (ranks from 1) */
    double rank_sum = 0, npos = 0;
    for (long i = 0; i < n;) {
        long j = i;
        int pos = 0;
        while (j < n && v[j].s == v[i].s) pos += v[j++].pos;
        rank_sum += pos * ((double)(i + 1) + (double)j) / 2;
        npos += pos;
        i = j;
    }
    free(v);
    double nneg = (double)n - npos;
    if (npos == 0 || nneg == 0) return NAN;
    return (rank_sum - npos * (npos + 1) / 2) / (npos * nneg);
}
