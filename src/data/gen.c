/*
 * gen.c - synthetic data sets shaped like the real ones, with a planted
 * structure that a model can be shown to learn (`paddle gen`; the command
 * line is read in main.c).
 *
 * movielens writes users.dat, movies.dat and ratings.dat in the format and
 * encoding of MovieLens-1M (Latin-1, "::"; some titles with Latin-1 letters)
 * and of its size by default: 6040 users, 3883 movies with ids up to 3952,
 * 1,000,209 ratings, at least 20 per user. Fewer ratings scale the users
 * (about 166 ratings each) and the movies (with the square root) down.
 *
 * The planted truth: user u rating movie m has an expected score
 *
 *     s = mu + b_u + b_m + <p_u, q_m>
 *
 * where the user's bias b_u and factors p_u mix a part drawn for the user's
 * gender, age and occupation with a part of its own, and the movie's b_m and
 * q_m mix a part drawn for its genres with a part of its own; the stars are
 * s plus Gaussian noise, rounded and clipped to 1..5. Title words partly
 * follow the genres. Movies are picked by a popularity that leans to good
 * ones. The command reads its output back with the movielens reader and
 * prints, on the reader's test split, the RMSE of predicting the training
 * mean and of predicting the expected stars under the planted truth: the
 * floor a model can hope to reach. The same seed gives the same bytes.
 */
#include "gen.h"
#include "movielens.h"
#include "../core/fs.h"
#include "../core/pd.h"
#include "../core/rng.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define K 8                 /* planted latent factors */
#define ML1M_USERS PD_ML1M_USERS
#define ML1M_MOVIES PD_ML1M_MOVIES
#define ML1M_MAX_MOVIE 3952
#define ML1M_RATINGS PD_ML1M_RATINGS
#define MIN_PER_USER 20     /* ratings per user, at least (as ML-1M) */

/* The planted model's scales, in stars. */
static const double MU = 3.50, USER_BIAS = 0.45, MOVIE_BIAS = 0.55, TASTE = 0.75, NOISE = 0.35;
static const double DEMO_SHARE = 0.35;  /* of user bias and factors from gender, age, occupation */
static const double GENRE_SHARE = 0.45; /* of movie bias and factors from genres */

/* ML-1M's marginals: age groups, occupations, genres (as first genre). */
static const double age_w[PD_ML_NAGES] = {222, 1103, 2096, 1193, 550, 496, 380};
static const double occ_w[PD_ML_NOCCUPATIONS] = {711, 528, 267, 173, 759, 112, 236, 679, 17, 92, 195,
                                                 129, 388, 142, 302, 144, 241, 502, 70, 72, 281};
static const double genre_w[PD_ML_NGENRES] = {503, 283, 105, 251, 1200, 211, 127, 1603, 68,
                                              44,  343, 114, 106, 471, 276,  492, 143, 68};

/* Title words: common ones, some for each genre, and some with Latin-1
 * letters (written here in UTF-8, converted when used). */
static const char *const common[] = {
    "the", "of", "a", "and", "in", "to", "night", "man", "story", "last", "day", "world", "city", "girl",
    "king", "house", "time", "american", "lost", "little", "big", "black", "white", "return", "wild",
    "summer", "game", "home", "high", "river", "road", "moon", "lady", "brother", "sister", "father",
    "mother", "island", "street", "blue", "red", "golden", "last", "first", "new", "old", "great", "long",
    "north", "south", "winter", "paradise", "angel", "devil", "street", "money", "heaven", "eyes", "hand",
};
static const char *const theme[PD_ML_NGENRES][6] = {
    {"strike", "fury", "mission", "target", "force", "speed"},
    {"quest", "treasure", "journey", "voyage", "jungle", "expedition"},
    {"tale", "toon", "magic", "bunny", "adventures", "cartoon"},
    {"puppy", "friend", "kid", "pony", "christmas", "family"},
    {"crazy", "funny", "wedding", "party", "dumb", "nutty"},
    {"killer", "heist", "gang", "murder", "cop", "mob"},
    {"inside", "portrait", "truth", "voices", "making", "chronicle"},
    {"heart", "life", "silence", "letters", "promise", "remains"},
    {"dragon", "wizard", "kingdom", "sword", "spell", "legend"},
    {"shadow", "noir", "deadly", "double", "sunset", "stranger"},
    {"blood", "dead", "scream", "evil", "curse", "nightmare"},
    {"song", "dance", "music", "melody", "broadway", "ball"},
    {"secret", "clue", "vanishing", "riddle", "witness", "suspect"},
    {"love", "kiss", "forever", "bride", "romance", "sweetheart"},
    {"star", "planet", "alien", "future", "robot", "galaxy"},
    {"fear", "edge", "hunt", "prey", "panic", "obsession"},
    {"battle", "soldier", "glory", "front", "platoon", "enemy"},
    {"gun", "outlaw", "ranch", "sheriff", "rider", "canyon"},
};
static const char *const latin1_words[] = {
    "Amélie", "Café", "Château", "Garçon", "Señor", "Mañana", "Niño", "Crème", "Déjà", "Noël", "Über",
    "Fräulein", "Müller", "Été", "Ça", "Señorita", "Año", "Sueño", "Corazón", "Canción", "Leçon", "Père",
    "Mère", "Frère", "Rêve", "Fête", "Forêt", "Île", "Ménage", "Città", "Età", "Perdús", "Årets", "Øen",
};
static const char *const foreign[] = {"des", "la", "le", "les", "el", "los", "der", "die", "das", "und",
                                      "de", "du", "il", "di", "och"};
static const char *const syllables[] = {
    "ka", "lo", "mi", "ra", "ven", "tor", "sa", "bel", "dor", "an", "el", "is", "mar", "nor", "quin",
    "ro", "sil", "tha", "ur", "zen", "bra", "cor", "dal", "fen", "gar", "hol", "jas", "kel", "lum", "mo",
};

typedef struct gen {
    uint64_t rng, seed;
    int users, movies, max_movie;
    long ratings;
    /* users, by id - 1 */
    uint8_t *gender, *age, *occ;
    double *ubias, *ufac;       /* [users], [users * K] */
    /* movies, by index; ids[i] is the id */
    int *ids;
    int *ngen, (*genres)[4];
    double *mbias, *mfac, *pop; /* [movies], [movies * K], [movies] cumulative popularity */
    char **titles;              /* Latin-1 */
} gen;

static double uniform(gen *g) { return pd_rng_uniform(&g->rng); }
static long below(gen *g, long n) { return (long)(pd_rng_next(&g->rng) % (uint64_t)n); }

static double normal(gen *g)
{
    double u = uniform(g), v = uniform(g);
    return sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * M_PI * v);
}

static int pick(gen *g, const double *w, int n)
{
    double total = 0;
    for (int i = 0; i < n; i++) total += w[i];
    double x = uniform(g) * total;
    for (int i = 0; i < n; i++) {
        if (x < w[i]) return i;
        x -= w[i];
    }
    return n - 1;
}

/* UTF-8 (of the Latin-1 range) to Latin-1, appended to out. */
static void append_latin1(char *out, size_t cap, const char *utf8)
{
    size_t n = strlen(out);
    for (const unsigned char *p = (const unsigned char *)utf8; *p && n + 1 < cap; p++) {
        if ((*p == 0xc2 || *p == 0xc3) && (p[1] & 0xc0) == 0x80) {
            out[n++] = (char)(((*p & 0x1f) << 6) | (p[1] & 0x3f));
            p++;
        } else {
            out[n++] = (char)*p;
        }
    }
    out[n] = '\0';
}

static void append_word(char *out, size_t cap, const char *w, int capital)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", w);
    if (capital && buf[0] >= 'a' && buf[0] <= 'z') buf[0] = (char)(buf[0] - 32);
    if (out[0]) append_latin1(out, cap, " ");
    append_latin1(out, cap, buf);
}

/* --- the planted world ------------------------------------------------------ */

static void make_users(gen *g)
{
    int n = g->users;
    g->gender = pd_xmalloc((size_t)n);
    g->age = pd_xmalloc((size_t)n);
    g->occ = pd_xmalloc((size_t)n);
    g->ubias = pd_xmalloc((size_t)n * sizeof *g->ubias);
    g->ufac = pd_xmalloc((size_t)n * K * sizeof *g->ufac);
    /* what each gender, age group and occupation brings */
    double gb[2], ab[PD_ML_NAGES], ob[PD_ML_NOCCUPATIONS];
    double gf[2][K], af[PD_ML_NAGES][K], of[PD_ML_NOCCUPATIONS][K];
    for (int i = 0; i < 2; i++) {
        gb[i] = normal(g);
        for (int k = 0; k < K; k++) gf[i][k] = normal(g);
    }
    for (int i = 0; i < PD_ML_NAGES; i++) {
        ab[i] = normal(g);
        for (int k = 0; k < K; k++) af[i][k] = normal(g);
    }
    for (int i = 0; i < PD_ML_NOCCUPATIONS; i++) {
        ob[i] = normal(g);
        for (int k = 0; k < K; k++) of[i][k] = normal(g);
    }
    double d = sqrt(DEMO_SHARE / 3), s = sqrt(1 - DEMO_SHARE);
    for (int u = 0; u < n; u++) {
        int ge = uniform(g) < 1709.0 / 6040.0, a = pick(g, age_w, PD_ML_NAGES), o = pick(g, occ_w, PD_ML_NOCCUPATIONS);
        g->gender[u] = (uint8_t)ge;
        g->age[u] = (uint8_t)a;
        g->occ[u] = (uint8_t)o;
        g->ubias[u] = USER_BIAS * (d * (gb[ge] + ab[a] + ob[o]) + s * normal(g));
        for (int k = 0; k < K; k++) g->ufac[u * K + k] = d * (gf[ge][k] + af[a][k] + of[o][k]) + s * normal(g);
    }
}

static void make_title(gen *g, int m, char *out, size_t cap)
{
    static const double nw[] = {25, 35, 25, 15};
    int n = 1 + pick(g, nw, 4);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        double x = uniform(g);
        if (x < 0.35) {
            append_word(out, cap, theme[g->genres[m][below(g, g->ngen[m])]][below(g, 6)], 1);
        } else if (x < 0.65) {
            const char *w = common[below(g, (long)PD_COUNT(common))];
            int small = !strcmp(w, "the") || !strcmp(w, "of") || !strcmp(w, "a") || !strcmp(w, "and") ||
                        !strcmp(w, "in") || !strcmp(w, "to");
            append_word(out, cap, w, i == 0 || !small);
        } else if (x < 0.96) {
            char w[32] = "";
            int ns = 2 + (uniform(g) < 0.3);
            for (int k = 0; k < ns; k++) strcat(w, syllables[below(g, (long)PD_COUNT(syllables))]);
            append_word(out, cap, w, 1);
        } else {
            append_word(out, cap, latin1_words[below(g, (long)PD_COUNT(latin1_words))], 1);
        }
    }
    double x = uniform(g);
    if (x < 0.10) {
        append_latin1(out, cap, ", The");
    } else if (x < 0.15) {
        /* a foreign title in brackets, as MovieLens writes them */
        append_latin1(out, cap, " (");
        char alt[256] = "";
        int na = 2 + (int)below(g, 3);
        for (int k = 0; k < na; k++) {
            if (uniform(g) < 0.5)
                append_word(alt, sizeof alt, latin1_words[below(g, (long)PD_COUNT(latin1_words))], k == 0);
            else
                append_word(alt, sizeof alt, foreign[below(g, (long)PD_COUNT(foreign))], k == 0);
        }
        append_latin1(out, cap, alt);
        append_latin1(out, cap, ")");
    }
}

static void make_movies(gen *g)
{
    int n = g->movies;
    g->ids = pd_xmalloc((size_t)n * sizeof *g->ids);
    g->ngen = pd_xmalloc((size_t)n * sizeof *g->ngen);
    g->genres = pd_xmalloc((size_t)n * sizeof *g->genres);
    g->mbias = pd_xmalloc((size_t)n * sizeof *g->mbias);
    g->mfac = pd_xmalloc((size_t)n * K * sizeof *g->mfac);
    g->pop = pd_xmalloc((size_t)n * sizeof *g->pop);
    g->titles = pd_xcalloc((size_t)n, sizeof *g->titles);

    /* ids: 1..max_movie with max_movie - movies of them missing, the last kept */
    uint8_t *gone = pd_xcalloc((size_t)g->max_movie + 1, 1);
    for (int left = g->max_movie - n; left > 0;) {
        long id = 1 + below(g, g->max_movie - 1);
        if (!gone[id]) {
            gone[id] = 1;
            left--;
        }
    }
    for (int id = 1, i = 0; id <= g->max_movie; id++)
        if (!gone[id]) g->ids[i++] = id;
    free(gone);

    double gb[PD_ML_NGENRES], gf[PD_ML_NGENRES][K];
    for (int i = 0; i < PD_ML_NGENRES; i++) {
        gb[i] = normal(g);
        for (int k = 0; k < K; k++) gf[i][k] = normal(g);
    }
    static const double count_w[] = {55, 33, 10, 2};
    double total = 0;
    for (int m = 0; m < n; m++) {
        /* genres: a first one by ML-1M's frequencies, up to 3 more, in canonical order */
        int ng = 1 + pick(g, count_w, 4), have[PD_ML_NGENRES] = {0};
        for (int k = 0; k < ng;) {
            int x = pick(g, genre_w, PD_ML_NGENRES);
            if (!have[x]) {
                have[x] = 1;
                k++;
            }
        }
        g->ngen[m] = 0;
        for (int x = 0; x < PD_ML_NGENRES; x++)
            if (have[x]) g->genres[m][g->ngen[m]++] = x;
        double d = sqrt(GENRE_SHARE / ng), s = sqrt(1 - GENRE_SHARE), b = 0;
        for (int k = 0; k < ng; k++) b += gb[g->genres[m][k]];
        double own = normal(g);
        g->mbias[m] = MOVIE_BIAS * (d * b + s * own);
        for (int k = 0; k < K; k++) {
            double f = 0;
            for (int j = 0; j < ng; j++) f += gf[g->genres[m][j]][k];
            g->mfac[m * K + k] = d * f + s * normal(g);
        }
        /* popularity: heavy-tailed, leaning to better movies */
        total += exp(1.1 * normal(g) + 0.6 * g->mbias[m] / MOVIE_BIAS);
        g->pop[m] = total;

        char title[512];
        make_title(g, m, title, sizeof title - 16);
        double z = fabs(normal(g));
        int year = 2000 - (int)(z * 11);
        if (year < 1919) year = 1919 + (int)below(g, 20);
        size_t len = strlen(title);
        snprintf(title + len, sizeof title - len, " (%d)", year);
        g->titles[m] = pd_xstrdup(title);
    }
}

/* Expected stars given the planted score s: E[clip(round(s + noise), 1, 5)]. */
static double expected_stars(double s)
{
    double e = 0, below_ = 0;
    for (int k = 1; k <= 5; k++) {
        double up = k == 5 ? 1.0 : 0.5 * erfc(-((k + 0.5) - s) / (NOISE * M_SQRT2));
        e += k * (up - below_);
        below_ = up;
    }
    return e;
}

static double score(const gen *g, int u, int m)
{
    double dot = 0;
    for (int k = 0; k < K; k++) dot += g->ufac[u * K + k] * g->mfac[m * K + k];
    return MU + g->ubias[u] + g->mbias[m] + TASTE * dot / sqrt(K);
}

static int write_users(gen *g, FILE *f)
{
    for (int u = 0; u < g->users; u++) {
        char zip[16];
        snprintf(zip, sizeof zip, "%05ld", below(g, 100000));
        if (uniform(g) < 0.05) snprintf(zip + 5, sizeof zip - 5, "-%04ld", below(g, 10000));
        fprintf(f, "%d::%c::%d::%d::%s\n", u + 1, g->gender[u] ? 'F' : 'M', pd_ml_ages[g->age[u]], g->occ[u], zip);
    }
    return 0;
}

static void write_movies(gen *g, FILE *f)
{
    for (int m = 0; m < g->movies; m++) {
        fprintf(f, "%d::%s::", g->ids[m], g->titles[m]);
        for (int k = 0; k < g->ngen[m]; k++) fprintf(f, "%s%s", k ? "|" : "", pd_ml_genres[g->genres[m][k]]);
        fputc('\n', f);
    }
}

/* Ratings per user: 20 plus a heavy-tailed share of the rest, at most cap. */
static long *user_counts(gen *g, long cap)
{
    long *n = pd_xmalloc((size_t)g->users * sizeof *n);
    double *w = pd_xmalloc((size_t)g->users * sizeof *w), total = 0;
    for (int u = 0; u < g->users; u++) total += (w[u] = exp(1.0 * normal(g)));
    long extra = g->ratings - 20L * g->users, sum = 0;
    for (int u = 0; u < g->users; u++) {
        n[u] = 20 + (long)floor((double)extra * w[u] / total);
        if (n[u] > cap) n[u] = cap;
        sum += n[u];
    }
    for (long u = below(g, g->users); sum < g->ratings; u = (u + 1) % g->users)
        if (n[u] < cap) {
            n[u]++;
            sum++;
        }
    free(w);
    return n;
}

/* Write ratings.dat; truth[i] gets the expected stars of line i. */
static void write_ratings(gen *g, FILE *f, double *truth)
{
    long cap = g->movies / 2, line = 0;
    long *count = user_counts(g, cap);
    int *stamp = pd_xcalloc((size_t)g->movies, sizeof *stamp);
    double total = g->pop[g->movies - 1];
    for (int u = 0; u < g->users; u++) {
        long t = 956703932 + below(g, 1046454590 - 956703932 - 86400 * 60);
        for (long k = 0; k < count[u];) {
            double x = uniform(g) * total;
            int lo = 0, hi = g->movies - 1;
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (g->pop[mid] > x) hi = mid;
                else lo = mid + 1;
            }
            if (stamp[lo] == u + 1) continue;
            stamp[lo] = u + 1;
            k++;
            double s = score(g, u, lo);
            long stars = lround(s + NOISE * normal(g));
            stars = stars < 1 ? 1 : stars > 5 ? 5 : stars;
            truth[line++] = expected_stars(s);
            fprintf(f, "%d::%d::%ld::%ld\n", u + 1, g->ids[lo], stars, t + below(g, 86400 * 60));
        }
    }
    free(stamp);
    free(count);
}

static void gen_free(gen *g)
{
    for (int m = 0; m < g->movies && g->titles; m++) free(g->titles[m]);
    free(g->titles);
    free(g->gender);
    free(g->age);
    free(g->occ);
    free(g->ubias);
    free(g->ufac);
    free(g->ids);
    free(g->ngen);
    free(g->genres);
    free(g->mbias);
    free(g->mfac);
    free(g->pop);
}

/* --- files ---------------------------------------------------------------------- */

/* The three files, each whole or not at all: where one cannot be written,
 * none replaces an earlier one (but for a rename that fails between two). */
static int write_dat_files(gen *g, const char *dir, double *truth)
{
    static const char *const names[] = {"users.dat", "movies.dat", "ratings.dat"};
    pd_out o[3] = {{0}};
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++) {
        char *path = pd_xasprintf("%s/%s", dir, names[i]);
        rc = pd_out_open(&o[i], path);
        free(path);
    }
    if (rc == 0) {
        write_users(g, o[0].f);
        write_movies(g, o[1].f);
        write_ratings(g, o[2].f, truth);
    }
    for (int i = 0; i < 3 && rc == 0; i++) rc = pd_out_flush(&o[i]);
    for (int i = 0; i < 3; i++) {
        int crc = o[i].f ? pd_out_close(&o[i], rc == 0) : 0;
        if (rc == 0) rc = crc;
    }
    return rc;
}

static int gen_movielens(gen *g, const char *dir)
{
    int rc;
    double *truth = pd_xmalloc((size_t)g->ratings * sizeof *truth);
    pd_movielens ml;
    make_users(g);
    make_movies(g);
    if ((rc = pd_dir_ready(dir, "--out")) < 0) goto out; /* PD_EINVAL: a path that cannot be one */
    if ((rc = write_dat_files(g, dir, truth)) < 0) goto out;

    /* read it back as the trainer will, and score the baselines on its test split */
    if ((rc = pd_movielens_load(&ml, dir, 0)) < 0) {
        pd_err_wrap(rc, "reading back what was written");
        goto out;
    }
    PD_ASSERT(ml.nratings == g->ratings);
    double sum = 0, se_mean = 0, se_truth = 0;
    long ntrain = 0, ntest = 0, hist[6] = {0};
    for (long i = 0; i < ml.nratings; i++) {
        const pd_ml_rating *r = &ml.ratings[i];
        hist[(int)r->stars]++;
        if (!pd_movielens_is_test(r->user, r->movie, 0.1)) {
            sum += r->stars;
            ntrain++;
        }
    }
    double mean = ntrain ? sum / ntrain : 3;
    for (long i = 0; i < ml.nratings; i++) {
        const pd_ml_rating *r = &ml.ratings[i];
        if (!pd_movielens_is_test(r->user, r->movie, 0.1)) continue;
        se_mean += (r->stars - mean) * (r->stars - mean);
        se_truth += (r->stars - truth[i]) * (r->stars - truth[i]);
        ntest++;
    }
    int latin1 = 0;
    for (int m = 0; m < g->movies; m++)
        for (const unsigned char *p = (const unsigned char *)g->titles[m]; *p; p++)
            if (*p >= 0x80) {
                latin1++;
                break;
            }
    printf("paddle gen movielens: wrote %s/users.dat, movies.dat, ratings.dat (MovieLens-1M format, Latin-1)\n", dir);
    printf("  %d users, %d movies (ids up to %d), %ld ratings; seed %llu\n", ml.nusers, ml.nmovies, ml.max_movie,
           ml.nratings, (unsigned long long)g->seed);
    printf("  title dictionary %d words; %d titles with Latin-1 letters\n", ml.nwords, latin1);
    printf("  stars 1..5: %.1f%% %.1f%% %.1f%% %.1f%% %.1f%%, mean %.3f\n", 100.0 * hist[1] / ml.nratings,
           100.0 * hist[2] / ml.nratings, 100.0 * hist[3] / ml.nratings, 100.0 * hist[4] / ml.nratings,
           100.0 * hist[5] / ml.nratings, mean);
    printf("  test split (data.test_fraction 0.1): %ld ratings\n", ntest);
    printf("test RMSE predicting the training mean: %.4f\n", ntest ? sqrt(se_mean / ntest) : NAN);
    printf("test RMSE predicting the planted truth: %.4f\n", ntest ? sqrt(se_truth / ntest) : NAN);
    pd_movielens_free(&ml);
out:
    free(truth);
    return rc;
}

/* --- the entry points ------------------------------------------------------------ */

void pd_gen_movielens_sizes(long ratings, long *users, long *movies)
{
    double frac = (double)ratings / ML1M_RATINGS;
    long u = lround(ML1M_USERS * frac), m = lround(ML1M_MOVIES * sqrt(frac));
    u = u < 1 ? 1 : u > ratings / MIN_PER_USER ? ratings / MIN_PER_USER : u;
    m = m < PD_GEN_MIN_MOVIES ? PD_GEN_MIN_MOVIES : m;
    if (u * (m / 2) < ratings) u = (ratings + m / 2 - 1) / (m / 2);
    *users = u;
    *movies = m;
}

int pd_gen_movielens(const char *dir, const pd_gen_opts *o)
{
    if (o->ratings < MIN_PER_USER * o->users || o->ratings > o->users * (o->movies / 2))
        return pd_err_set(PD_EINVAL, "%ld ratings cannot give %ld users %d to %ld ratings each (at least %d, at "
                                     "most half of the %ld movies): change --ratings, --users or --movies",
                          o->ratings, o->users, MIN_PER_USER, o->movies / 2, MIN_PER_USER, o->movies);
    gen g = {0};
    g.seed = o->seed;
    g.rng = o->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    g.users = (int)o->users;
    g.movies = (int)o->movies;
    g.ratings = o->ratings;
    g.max_movie = o->movies == ML1M_MOVIES ? ML1M_MAX_MOVIE
                                           : (int)lround((double)o->movies * ML1M_MAX_MOVIE / ML1M_MOVIES);
    int rc = gen_movielens(&g, dir);
    gen_free(&g);
    return rc;
}
