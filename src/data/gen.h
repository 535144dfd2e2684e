/*
 * gen.h - synthetic data sets with a planted structure (`paddle gen`).
 *
 *     pd_gen_opts o = {.seed = 1, .ratings = PD_ML1M_RATINGS};
 *     pd_gen_movielens_sizes(o.ratings, &o.users, &o.movies);
 *     if (pd_gen_movielens("data/ml", &o) < 0) fprintf(stderr, "%s\n", pd_err_msg());
 */
#ifndef PD_GEN_H
#define PD_GEN_H

#include <stdint.h>

/* MovieLens-1M's sizes, the defaults */
#define PD_ML1M_USERS 6040
#define PD_ML1M_MOVIES 3883
#define PD_ML1M_RATINGS 1000209L
#define PD_GEN_MIN_RATINGS 20
#define PD_GEN_MIN_MOVIES 40

typedef struct pd_gen_opts {
    uint64_t seed;
    long ratings, users, movies;
} pd_gen_opts;

/* The users and movies that go with a number of ratings (ML-1M's shape,
 * scaled down: users with the ratings, movies with their square root). */
void pd_gen_movielens_sizes(long ratings, long *users, long *movies);
/* Write users.dat, movies.dat and ratings.dat under dir and print what was
 * written with the baselines' test RMSE. 0, or PD_EINVAL (sizes that do not
 * fit together) / PD_EIO with a message. */
int pd_gen_movielens(const char *dir, const pd_gen_opts *o);

/* criteo (gen_criteo.c): train.txt and test.txt in the Criteo format with
 * a planted click model. */
#define PD_GEN_CRITEO_MIN_ROWS 100
#define PD_GEN_CRITEO_MAX_ROWS 1000000000L

typedef struct pd_gen_criteo_opts {
    uint64_t seed;
    long rows;
} pd_gen_criteo_opts;

/* Write dir/train.txt (90% of the rows) and dir/test.txt, and print the
 * test AUC of the planted model and of a constant. 0, or PD_EINVAL / PD_EIO
 * with a message. */
int pd_gen_criteo(const char *dir, const pd_gen_criteo_opts *o);

#endif
