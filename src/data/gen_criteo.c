/*
 * gen_criteo.c - `paddle gen criteo`: click logs in the Criteo format with
 * a planted model (the command line is read in main.c).
 *
 * Shape, after the Kaggle Display Advertising data: each integer column has
 * Criteo's missing rate and a log-normal, heavy-tailed value (I2 is
 * sometimes negative); each categorical column has Criteo's missing rate
 * and values drawn by a Zipf-like law (exponent 1.1) over its Criteo
 * cardinality, capped at a quarter of the rows (so from 3 values to many
 * thousands, hundreds of thousands for millions of rows); a value is 8 hex
 * digits, a fixed hash of (column, rank).
 *
 * The planted model: the logit of a click is
 *
 *     b + sum_j w_j (log1p(I_j) - m_j) + sum_k v_k(C_k) + sum_pairs u(C_a, C_b)
 *
 * with per-column weights, per-value weights v_k drawn from the value's
 * hash (larger for the columns with fewer values), a weight per missing
 * value, and four pairwise interactions; b is set from a pilot sample so
 * that about 25% of the rows are clicks. Labels are drawn from the logit.
 * train.txt holds 90% of the rows, test.txt the rest (with labels). The
 * command prints the test AUC of the planted probabilities (the best a
 * model can expect) and of a constant predictor (0.5). Same seed, same bytes.
 */
#include "gen.h"
#include "criteo.h"
#include "../core/auc.h"
#include "../core/fs.h"
#include "../core/pd.h"
#include "../core/rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NI PD_CRITEO_NDENSE
#define NC PD_CRITEO_NCAT
#define PILOT 20000
#define CLICK_RATE 0.25
#define ZIPF_S 1.1

/* Criteo (Kaggle train) per column: missing rate, median, spread, weight */
static const double int_missing[NI] = {0.454, 0, 0.215, 0.223, 0.026, 0.224, 0.043,
                                       0.0005, 0.043, 0.454, 0.043, 0.766, 0.223};
static const double int_median[NI] = {1, 2, 6, 4, 2000, 30, 3, 7, 40, 0.5, 1, 0.3, 4};
static const double int_spread[NI] = {1.2, 1.5, 1.3, 1.0, 1.6, 1.4, 1.3, 1.0, 1.2, 0.8, 1.0, 1.0, 1.1};
static const double int_weight[NI] = {0.30, -0.10, -0.12, 0.10, -0.15, -0.05, 0.25,
                                      0.05, 0.08, 0.35, 0.30, 0.10, -0.10};
static const long cat_card[NC] = {1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145,
                                  5683, 8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4,
                                  7046547, 18, 15, 286181, 105, 142572};
static const double cat_missing[NC] = {0, 0, 0.034, 0.034, 0, 0.121, 0, 0, 0, 0, 0, 0.034, 0,
                                       0, 0, 0.034, 0, 0, 0.44, 0.44, 0.034, 0.76, 0, 0.034, 0.44, 0.44};
/* pairwise interactions between categorical columns (0-based) */
static const int pairs[][2] = {{5, 8}, {13, 16}, {0, 22}, {19, 21}};
#define NPAIRS ((int)(sizeof pairs / sizeof pairs[0]))
static const double PAIR_SIGMA = 0.35;

typedef struct crow {
    int label;
    int ipresent[NI];
    long ival[NI];
    long rank[NC];  /* -1: missing */
} crow;

typedef struct cgen {
    uint64_t seed;
    long card[NC];
    double sigma[NC];
    double bias;
} cgen;

static uint64_t mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A standard-normal-like weight fixed by a hash: the sum of four uniforms
 * of 16 bits, centred and scaled to variance 1. */
static double hashed_normal(uint64_t h)
{
    double s = 0;
    for (int i = 0; i < 4; i++) s += (double)((h >> (16 * i)) & 0xFFFF) / 65536.0;
    return (s - 2.0) * 1.7320508;
}

static double gauss(uint64_t *rng)
{
    double u1 = pd_rng_uniform(rng), u2 = pd_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

/* rank in [0, n) with P(r) about proportional to (r + 1)^-s */
static long zipf(uint64_t *rng, long n)
{
    double u = pd_rng_uniform(rng), a = 1 - ZIPF_S;
    double x = pow(1 + u * (pow((double)n + 1, a) - 1), 1 / a);
    long r = (long)x - 1;
    return r < 0 ? 0 : r >= n ? n - 1 : r;
}

static void draw_row(const cgen *g, uint64_t *rng, crow *row)
{
    for (int j = 0; j < NI; j++) {
        row->ipresent[j] = pd_rng_uniform(rng) >= int_missing[j];
        double z = gauss(rng);
        long v = (long)floor(exp(log(int_median[j] + 1) + int_spread[j] * z)) - 1;
        if (v < 0) v = 0;
        if (j == 1 && pd_rng_uniform(rng) < 0.05) v = -1 - (long)(pd_rng_next(rng) % 3);
        row->ival[j] = row->ipresent[j] ? v : 0;
    }
    for (int k = 0; k < NC; k++) {
        int present = pd_rng_uniform(rng) >= cat_missing[k];
        long r = zipf(rng, g->card[k]);
        row->rank[k] = present ? r : -1;
    }
}

static double logit_of(const cgen *g, const crow *row)
{
    double z = g->bias;
    for (int j = 0; j < NI; j++) {
        if (!row->ipresent[j]) {
            z += 0.1 * int_weight[j];
            continue;
        }
        double x = log1p(row->ival[j] > 0 ? (double)row->ival[j] : 0);
        z += int_weight[j] * (x - log1p(int_median[j]));
    }
    for (int k = 0; k < NC; k++)
        z += g->sigma[k] * hashed_normal(mix(g->seed ^ mix((uint64_t)k << 40 ^ (uint64_t)(row->rank[k] + 1))));
    for (int p = 0; p < NPAIRS; p++) {
        uint64_t a = (uint64_t)(row->rank[pairs[p][0]] + 1), b = (uint64_t)(row->rank[pairs[p][1]] + 1);
        z += PAIR_SIGMA * hashed_normal(mix(g->seed * 31 + mix((uint64_t)p << 56 ^ a << 28 ^ b)));
    }
    return z;
}

static double sigmoid(double z) { return 1 / (1 + exp(-z)); }

/* The bias that gives a click rate of CLICK_RATE on a pilot sample. */
static void calibrate(cgen *g)
{
    uint64_t rng = mix(g->seed ^ 0x5A5A5A5Aull);
    double *z = pd_xmalloc(PILOT * sizeof *z);
    crow row;
    g->bias = 0;
    for (int i = 0; i < PILOT; i++) {
        draw_row(g, &rng, &row);
        z[i] = logit_of(g, &row);
    }
    double lo = -20, hi = 20;
    for (int it = 0; it < 60; it++) {
        double mid = (lo + hi) / 2, s = 0;
        for (int i = 0; i < PILOT; i++) s += sigmoid(z[i] + mid);
        if (s / PILOT < CLICK_RATE) lo = mid;
        else hi = mid;
    }
    g->bias = (lo + hi) / 2;
    free(z);
}

/* One line, in Criteo's layout, into buf (large enough); its length. */
static size_t format_row(const crow *row, char *buf)
{
    static const char hex[] = "0123456789abcdef";
    char *p = buf;
    *p++ = (char)('0' + row->label);
    for (int j = 0; j < NI; j++) {
        *p++ = '\t';
        if (row->ipresent[j]) p += sprintf(p, "%ld", row->ival[j]);
    }
    for (int k = 0; k < NC; k++) {
        *p++ = '\t';
        if (row->rank[k] < 0) continue;
        uint32_t v = (uint32_t)mix((uint64_t)(k + 1) << 40 ^ (uint64_t)row->rank[k]);
        for (int s = 28; s >= 0; s -= 4) *p++ = hex[(v >> s) & 15];
    }
    *p++ = '\n';
    return (size_t)(p - buf);
}

/* Write train.txt and test.txt; the test rows' planted probabilities and
 * labels go to prob[] and label[]. */
static int write_files(const cgen *g, const char *dir, long rows, long ntrain, float *prob, float *label,
                       long *clicks)
{
    uint64_t rng = mix(g->seed);
    char line[1024];
    pd_out o[2] = {{0}};
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        char *path = pd_xasprintf("%s/%s", dir, k ? "test.txt" : "train.txt");
        if ((rc = pd_out_open(&o[k], path)) == 0) setvbuf(o[k].f, NULL, _IOFBF, 1 << 20);
        free(path);
    }
    crow row;
    for (long i = 0; i < rows && rc == 0; i++) {
        draw_row(g, &rng, &row);
        double pr = sigmoid(logit_of(g, &row));
        row.label = pd_rng_uniform(&rng) < pr;
        *clicks += row.label;
        if (i >= ntrain) {
            prob[i - ntrain] = (float)pr;
            label[i - ntrain] = (float)row.label;
        }
        size_t n = format_row(&row, line);
        if (fwrite(line, 1, n, o[i >= ntrain].f) != n)
            rc = pd_err_set(PD_EIO, "cannot write %s: %s", o[i >= ntrain].path, strerror(errno));
    }
    /* both on disk before either is renamed: a full disk replaces neither */
    for (int k = 0; k < 2 && rc == 0; k++) rc = pd_out_flush(&o[k]);
    for (int k = 0; k < 2; k++) {
        int crc = o[k].f ? pd_out_close(&o[k], rc == 0) : 0;
        if (rc == 0) rc = crc;
    }
    return rc;
}

int pd_gen_criteo(const char *dir, const pd_gen_criteo_opts *o)
{
    if (o->rows < PD_GEN_CRITEO_MIN_ROWS || o->rows > PD_GEN_CRITEO_MAX_ROWS)
        return pd_err_set(PD_EINVAL, "--rows must be from %d to %ld, got %ld", PD_GEN_CRITEO_MIN_ROWS,
                          PD_GEN_CRITEO_MAX_ROWS, o->rows);
    cgen g = {.seed = o->seed};
    long maxcard = 0;
    for (int k = 0; k < NC; k++) {
        long cap = o->rows / 4 > 3 ? o->rows / 4 : 3;
        g.card[k] = cat_card[k] < cap ? cat_card[k] : cap;
        /* columns of few values carry more of the signal: learnable from few rows */
        g.sigma[k] = g.card[k] <= 30 ? 0.4 : g.card[k] <= 2000 ? 0.3 : g.card[k] <= 20000 ? 0.22 : 0.15;
        maxcard = g.card[k] > maxcard ? g.card[k] : maxcard;
    }
    calibrate(&g);
    int rc = pd_dir_ready(dir, "--out"); /* PD_EINVAL: a path that cannot be one */
    if (rc < 0) return rc;
    long ntest = o->rows / 10, ntrain = o->rows - ntest, clicks = 0;
    float *prob = pd_xmalloc((size_t)ntest * sizeof *prob), *label = pd_xmalloc((size_t)ntest * sizeof *label);
    if ((rc = write_files(&g, dir, o->rows, ntrain, prob, label, &clicks)) == 0) {
        float *flat = pd_xcalloc((size_t)ntest, sizeof *flat);
        printf("paddle gen criteo: wrote %s/train.txt (%ld rows) and test.txt (%ld rows), Criteo format; seed %llu\n",
               dir, ntrain, ntest, (unsigned long long)o->seed);
        printf("  13 integer and 26 categorical columns, 3 to %ld values a column; click rate %.1f%%\n", maxcard,
               100.0 * clicks / o->rows);
        printf("test AUC of a constant predictor: %.4f\n", pd_auc_compute(flat, label, ntest));
        printf("test AUC of the planted model: %.4f\n", pd_auc_compute(prob, label, ntest));
        free(flat);
    }
    free(prob);
    free(label);
    return rc;
}
