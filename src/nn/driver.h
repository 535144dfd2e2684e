/*
 * driver.h - THE training loop: passes, batches, logging, the progress line,
 * NaN detection, test evaluation and the pass end, shared by local training
 * and the trainers of a distributed job. What happens to the gradients is
 * the caller's: a table of callbacks with a context pointer.
 *
 *     static int update(void *ctx, pd_net *net, long step) { ... }
 *     static const pd_step_ops local = {.step = update};
 *     pd_driver d = {.r = r, .net = &net, .train = train, .test = test,
 *                    .save = 1, .stop = stop, .ops = &local, .ctx = NULL};
 *     rc = pd_drive(&d);
 */
#ifndef PD_DRIVER_H
#define PD_DRIVER_H

#include "keep.h"
#include "net.h"
#include "../data/reader.h"

/* Callbacks of one training step; every one returns 0 or PD_E*, and any but
 * step may be NULL. */
typedef struct pd_step_ops {
    /* the batch is bound; before forward (pull the rows it uses) */
    int (*before_forward)(void *ctx, pd_net *net);
    /* after before_forward, when the pass has a batch after this one: next,
     * which the reader gave already (ask for its rows while this computes);
     * with this callback the driver reads one batch ahead */
    int (*prefetch)(void *ctx, pd_net *net, const pd_batch *next);
    /* after backward: apply the gradients or exchange them; step counts from 1 */
    int (*step)(void *ctx, pd_net *net, long step);
    /* make net hold the current model before it is evaluated or saved */
    int (*sync_model)(void *ctx, pd_net *net);
    /* a pass of the training data is over, before its pass line */
    int (*pass_end)(void *ctx, pd_net *net, int pass);
    /* after the pass line (and the model's save when d->save) */
    int (*pass_done)(void *ctx, pd_net *net, int pass);
    /* the last pass ended and net holds the final model (sync_model): what
     * this trainer needs of others is over, before the last test and save */
    void (*release)(void *ctx);
    /* early stopping in a distributed job: the trainer that evaluates (save)
     * says whether to stop after `pass` (want); every trainer learns the
     * decision in *stop */
    int (*decide)(void *ctx, int pass, int want, int *stop);
} pd_step_ops;

typedef struct pd_driver {
    const pd_recipe *r;
    pd_net *net;
    pd_reader *train;
    pd_reader *test;        /* NULL: no test cost; owned by the driver */
    int save;               /* evaluate test and save the model after each pass */
    int early_stop;         /* end training when settings.early_stop says so */
    volatile int *stop;     /* set by a signal handler: stop cleanly */
    int status_lines;       /* write PD_PROGRESS lines on stdout for the launcher
                             * (else: the status block on a terminal) */
    const pd_step_ops *ops;
    void *ctx;
    long steps;             /* out: steps done */
    long skipped;           /* malformed lines said skipped in each pass (data.on_error = "skip") */
    long test_skipped;      /* the same of the test data */
    int start_pass;         /* resume: the first pass, and the batches of it */
    int start_batch;        /* already trained (read and skipped) */
    long step0;             /* resume: the steps before start_pass (the curves' x) */
    int pass, batch;        /* for the callbacks: the pass, and its batches done
                             * (the current one included, in step) */
} pd_driver;

/* Train r->passes passes. Returns 0, PD_EINTR when *stop was set, or the
 * first error. d->test may be replaced (reopened) on the way. */
int pd_drive(pd_driver *d);

/* Mean cost and metrics of the net over one pass of rd (the test set).
 * metrics[i] for r->metrics[i]. Returns samples seen, or < 0. */
long pd_evaluate(pd_net *net, pd_reader *rd, double *cost, double *metrics);

/* What a pass trained: samples in secs, their costs summing to sum; before:
 * the samples of its batches trained before a restart (a resumed pass),
 * counted in the saved model's manifest, not in the pass line's rate. */
typedef struct pd_pass_counts {
    long samples, before;
    double secs, sum;
} pd_pass_counts;

/* After a pass: the test cost (when test is not NULL) and metrics, the pass
 * line in the log, and, when save, the model saved to SAVE_DIR/pass-NNNNN
 * (keep NULL: every pass; else as keep says, which also tracks the best).
 * tested, when not NULL, gets the test cost then the metrics (NaN: none). */
int pd_pass_end(pd_net *net, pd_reader *test, pd_keep *keep, int save, int pass, const pd_pass_counts *n,
                double *tested);

/* Open the training / test reader of a recipe for share/nshares. stop may
 * be NULL. */
int pd_open_reader(pd_reader **rd, const pd_recipe *r, int part, int share, int nshares, int batch_size);
/* The same, producing passes first_pass .. r->passes - 1. */
int pd_open_reader_at(pd_reader **rd, const pd_recipe *r, int part, int share, int nshares, int batch_size,
                      int first_pass);

#endif
