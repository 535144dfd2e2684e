/*
 * keep.h - which models a training run keeps: early stopping on the test
 * cost (or a metric), SAVE_DIR/best, save_period and keep_models.
 *
 * The driver asks after each pass's test evaluation whether to save, and
 * tells it what it saved:
 *
 *     pd_keep k;
 *     pd_keep_init(&k, recipe);
 *     if (pd_keep_pass(&k, pass, test_cost, metrics)) {   // save this pass?
 *         save SAVE_DIR/pass-NNNNN;
 *         pd_keep_saved(&k, pass);      // SAVE_DIR/best, old passes removed
 *     }
 *     if (k.stop) ...                   // no improvement for early_stop passes
 *     pd_keep_free(&k);
 */
#ifndef PD_KEEP_H
#define PD_KEEP_H

#include "../core/recipe.h"

typedef struct pd_keep {
    const pd_recipe *r;
    int metric;         /* -1: the test cost; else r->metrics[metric] */
    int maximize;       /* the value should go up (auc) */
    int best_pass;      /* -1: none yet */
    double best;
    int improved;       /* the last pass is the best so far */
    int stop;           /* no improvement for r->early_stop passes */
    int *saved;         /* passes saved and still on disk, oldest first */
    int nsaved, cap_saved;
} pd_keep;

void pd_keep_init(pd_keep *k, const pd_recipe *r);
void pd_keep_free(pd_keep *k);
/* After pass's test evaluation (test_cost NAN without a test set; metrics:
 * r->nmetrics values or NULL): updates the best and k->stop, and returns
 * whether to save the pass: every save_period passes, the best, the last
 * (passes - 1, or the one early stopping ends at). */
int pd_keep_pass(pd_keep *k, int pass, double test_cost, const double *metrics);
/* pass was saved: SAVE_DIR/best links the best pass, and passes beyond the
 * last keep_models (other than the best) are removed. 0 or PD_EIO. */
int pd_keep_saved(pd_keep *k, int pass);
/* Resuming at start_pass: the passes before it as the last life tested them
 * (nrows rows of width doubles: step, pass, test cost, r->nmetrics
 * metrics, as pd_curves holds them) and kept them (SAVE_DIR/pass-NNNNN):
 * early stopping counts on from the best of them, SAVE_DIR/best links it,
 * and keep_models goes on removing the oldest. 0 or PD_EIO. */
int pd_keep_resume(pd_keep *k, const double *rows, int nrows, int width, int start_pass);
/* The value early stopping watches, named ("test cost", "auc"...). */
const char *pd_keep_what(const pd_keep *k);

#endif
