/*
 * curves.h - the loss curves of a training run as an SVG picture: the train
 * cost of every log period and the test cost (and metrics) of every pass
 * against the step, rewritten atomically after each pass, with the points
 * in curves.tsv beside it so that a resumed run draws the whole run.
 *
 *     pd_curves c;
 *     pd_curves_init(&c, recipe);
 *     pd_curves_train(&c, step, period_cost);          // every log period
 *     pd_curves_test(&c, step, pass, test_cost, metrics); // every pass
 *     rc = pd_curves_write(&c, "output");   // output/curves.svg, output/curves.tsv
 *     pd_curves_free(&c);
 */
#ifndef PD_CURVES_H
#define PD_CURVES_H

#include "../core/recipe.h"

typedef struct pd_curves {
    const pd_recipe *r;
    int nm;                 /* metrics per test point */
    double *train;          /* (step, cost) pairs */
    int ntrain, cap_train;
    double *test;           /* (step, pass, cost, metric...) rows of 3 + nm */
    int ntest, cap_test;
} pd_curves;

void pd_curves_init(pd_curves *c, const pd_recipe *r);
void pd_curves_train(pd_curves *c, long step, double cost);
/* metrics: r->nmetrics values, or NULL */
void pd_curves_test(pd_curves *c, long step, int pass, double cost, const double *metrics);
/* Write DIR/curves.svg and DIR/curves.tsv (each to a temp file renamed
 * into place). 0 or PD_EIO. */
int pd_curves_write(const pd_curves *c, const char *dir);
/* Resuming: take the points of DIR/curves.tsv up to max_step (a missing
 * file: none). */
void pd_curves_load(pd_curves *c, const char *dir, long max_step);
void pd_curves_free(pd_curves *c);

#endif
