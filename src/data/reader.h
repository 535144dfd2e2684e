/*
 * reader.h - data readers: each on its own thread, filling a bounded queue
 * of batches.
 *
 * The slots a reader fills follow the model's data layers (name, dense width
 * or id range). Formats (see docs/recipes.md):
 *   uci_housing  housing.data: 14 blank-separated numbers a row, features
 *                normalised; the first 80% of rows train, the rest test
 *   csv          one sample a line, data.columns mapping columns to slots
 *   libsvm       "label index:value ...", a dense feature slot and a label
 *   movielens    a MovieLens-1M directory (users.dat, movies.dat,
 *                ratings.dat; movielens.c); the test part is held out by a
 *                hash of (user, movie) below data.test_fraction
 *   synthetic    random samples in the model's slots, data.samples a pass;
 *                nothing is read
 * A data path ending in ".list" names a file of data paths, one per line,
 * relative to the list's folder. With several trainers each reads its own
 * share: whole files when there are at least as many files as trainers,
 * else every nshares-th sample.
 *
 *     pd_reader *rd;
 *     pd_reader_open(&rd, &recipe, &opts);
 *     pd_batch *b;
 *     while ((rc = pd_reader_next(rd, &b)) == 1) {  // 0: end of the pass
 *         ... use b ...
 *         pd_reader_release(rd, b);
 *     }
 *     pd_reader_close(rd);
 */
#ifndef PD_READER_H
#define PD_READER_H

#include "batch.h"
#include "../core/recipe.h"

/* PD_PART_ALL: every sample of data.train, none held out (paddle predict) */
enum { PD_PART_TRAIN, PD_PART_TEST, PD_PART_ALL };

/* Longest line a table reader takes (csv, libsvm, uci_housing, .list):
 * a longer one is an error, found before more than this is held. */
#define PD_READER_MAX_LINE (16 << 20)

typedef struct pd_reader_opts {
    int part;           /* PD_PART_TRAIN or PD_PART_TEST */
    int share, nshares; /* this trainer's share of the data */
    int batch_size;
    int shuffle;        /* shuffle buffer size (0: file order) */
    uint64_t seed;
    int passes;         /* passes to produce (the thread stops after) */
    int first_pass;     /* the first of them (a resumed trainer): the shuffle
                         * of a pass depends only on (seed, share, pass) */
    volatile int *stop; /* set (by a signal handler): pd_reader_next returns
                         * PD_EINTR, and the thread stops, within ~0.2 s */
    /* NULL: every slot in every sample. Else need[i] for slot i of
     * pd_reader_layout(): 0 marks a slot (a label) that csv rows may lack:
     * a row with the columns of every needed slot but not of the others gets
     * zeros there and counts in pd_reader_unlabeled(). */
    const unsigned char *need;
    const char *where;  /* where the data was named, for an error opening it
                         * ("option --input"); NULL: data.train or data.test */
    int quiet;          /* malformed lines skipped are counted, not logged
                         * (a reader opened again over lines already said) */
} pd_reader_opts;

typedef struct pd_reader pd_reader;

int pd_reader_open(pd_reader **out, const pd_recipe *r, const pd_reader_opts *o);
/* 1: *b holds a batch (give it back with pd_reader_release); 0: the pass
 * ended (the next call starts the next one); < 0: an error, message set
 * (PD_EINTR once *opts.stop is set). */
int pd_reader_next(pd_reader *rd, pd_batch **b);
void pd_reader_release(pd_reader *rd, pd_batch *b);
/* Malformed lines skipped (data.on_error = "skip") in the first pass read:
 * the same lines are skipped again, unsaid, in every pass after. */
long pd_reader_skipped(const pd_reader *rd);
/* Samples delivered in the pass that ended last. */
long pd_reader_pass_samples(const pd_reader *rd);
/* Make pd_reader_next return PD_EINTR (within ~0.1 s, also while it waits
 * for the reader thread) once *stop is set: a signal handler's flag. */
void pd_reader_set_stop(pd_reader *rd, volatile int *stop);
/* Call tick(ctx) about every 0.1 s while pd_reader_next waits for the
 * thread (a trainer's heartbeat to its pservers); its error ends the wait.
 * A wait of 10 s is said (then every minute), naming the file being read. */
void pd_reader_set_tick(pd_reader *rd, int (*tick)(void *ctx), void *ctx);
/* Samples so far that lacked a slot opts.need allowed to be missing. */
long pd_reader_unlabeled(pd_reader *rd);
void pd_reader_close(pd_reader *rd);

/* The slot layout the recipe's model reads (one per data layer). */
int pd_reader_layout(const pd_recipe *r, pd_slot **slots, int *nslots);

#endif
