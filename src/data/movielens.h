/*
 * movielens.h - the MovieLens-1M files read into memory, with the features
 * PaddlePaddle's movielens reader made of them.
 *
 * A dataset is a directory holding the three files of ml-1m, unchanged:
 * ISO-8859-1 (Latin-1) text, fields separated by "::".
 *
 *     users.dat    UserID::Gender::Age::Occupation::Zip-code
 *     movies.dat   MovieID::Title (Year)::Genre|Genre|...
 *     ratings.dat  UserID::MovieID::Rating::Timestamp
 *
 * A sample is one line of ratings.dat joined with its user and its movie:
 *
 *     user_id      the UserID (1 and up)
 *     gender       0 for M, 1 for F
 *     age          index of Age in 1, 18, 25, 35, 45, 50, 56 (0..6)
 *     occupation   the Occupation, 0..20
 *     movie_id     the MovieID (1 and up)
 *     genres       ids of the movie's genres, in the order of pd_ml_genres
 *     title        ids of the title's words: the title without its "(Year)",
 *                  split at white space, lower-cased; ids number the words
 *                  of every title in movies.dat in byte order
 *     rating       the rating in stars, 1..5 (PaddlePaddle's reader gave
 *                  2 * stars - 5; stars keep the RMSE in stars)
 *
 * The test split holds out the ratings whose (user, movie) pair hashes
 * below the test fraction (pd_movielens_is_test): about 10%, the same on
 * every machine, for any file order and any number of trainers.
 *
 *     pd_movielens ml;
 *     if (pd_movielens_load(&ml, "data/ml-1m", 0) < 0)
 *         fprintf(stderr, "%s\n", pd_err_msg());   // "…/ratings.dat:12: …"
 *     for (long i = 0; i < ml.nratings; i++)
 *         if (!pd_movielens_is_test(ml.ratings[i].user, ml.ratings[i].movie, 0.1)) ...
 *     pd_movielens_free(&ml);
 */
#ifndef PD_MOVIELENS_H
#define PD_MOVIELENS_H

#include "batch.h"

#include <stdint.h>

#define PD_ML_NAGES 7
#define PD_ML_NOCCUPATIONS 21
#define PD_ML_NGENRES 18

/* Limits on what a file may hold; a file over one is malformed. */
#define PD_ML_MAX_ID 4194304        /* user and movie ids */
#define PD_ML_MAX_LINE 65536        /* bytes per line */
#define PD_ML_MAX_TITLE_WORDS 256
#define PD_ML_MAX_RATINGS 200000000L

extern const int pd_ml_ages[PD_ML_NAGES];
extern const char *const pd_ml_genres[PD_ML_NGENRES];

/* The sample fields, in the order above. */
enum {
    PD_ML_USER_ID, PD_ML_GENDER, PD_ML_AGE, PD_ML_OCCUPATION,
    PD_ML_MOVIE_ID, PD_ML_GENRES, PD_ML_TITLE, PD_ML_RATING, PD_ML_NFIELDS
};

typedef struct pd_ml_user {
    uint8_t present, gender, age, occupation;
} pd_ml_user;

typedef struct pd_ml_movie {
    int32_t genres, title;      /* offsets into pd_movielens.ids */
    uint16_t ngenres, ntitle;
    uint8_t present;
} pd_ml_movie;

typedef struct pd_ml_rating {
    int32_t user, movie;
    float stars;
} pd_ml_rating;

typedef struct pd_movielens {
    char *dir;
    int max_user, max_movie;    /* largest ids in users.dat, movies.dat */
    int nusers, nmovies;
    pd_ml_user *users;          /* [max_user + 1], by id */
    pd_ml_movie *movies;        /* [max_movie + 1], by id */
    int32_t *ids;               /* the genre and title-word id lists */
    long nids;
    int nwords;                 /* the title dictionary: id -> word */
    char **words;               /* (Latin-1, lower case, byte order) */
    long nratings;
    pd_ml_rating *ratings;      /* in file order */
    long skipped;               /* malformed lines skipped (skip_bad) */
} pd_movielens;

/* Read dir/users.dat, dir/movies.dat and dir/ratings.dat. A malformed line
 * fails the load with PD_EDATA and "file:line: what"; with skip_bad it is
 * logged (the first 10), counted in ml->skipped and left out, as are the
 * ratings of a user or movie left out. On error *ml is empty. */
int pd_movielens_load(pd_movielens *ml, const char *dir, int skip_bad);
void pd_movielens_free(pd_movielens *ml);

/* Is the rating of user for movie in the test part? */
int pd_movielens_is_test(int32_t user, int32_t movie, double fraction);

/* The sample field a slot name stands for (also the names of the
 * PaddlePaddle book: gender_id, age_id, job_id, category_id, movie_title,
 * score), or -1. */
int pd_movielens_field(const char *slot);

/* Map the model's data layers to fields (fields[i] for layout[i]) and check
 * each slot's kind and id range against the data. recipe names the recipe
 * in messages. Returns 0 or PD_ERECIPE. */
int pd_movielens_bind(const pd_movielens *ml, const pd_slot *layout, int nslots, int *fields,
                      const char *recipe);

/* Make rating i the one sample of stage (a batch of the bound layout). */
void pd_movielens_stage(const pd_movielens *ml, long i, const int *fields, pd_batch *stage);

#endif
