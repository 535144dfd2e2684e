/*
 * predict.h - `paddle predict`: a saved model's predictions over a data file.
 *
 * Runs the layers the recipe's `predict` layer depends on (not the cost, so
 * the labels may be missing), one CSV line per sample: the sample's ids
 * where the format has them (movielens: user_id, movie_id), then the
 * prediction's values. When every sample had its labels, the cost and
 * metrics of the model over the same data follow, as a pass line's test
 * part reports them.
 *
 *     pd_predict_opts o = {.model = "output/best", .input = "x.csv", .out = stdout, .part = PD_PART_ALL};
 *     rc = pd_predict(&recipe, &o);
 */
#ifndef PD_PREDICT_H
#define PD_PREDICT_H

#include "net.h"
#include "../data/reader.h"

#include <stdio.h>

typedef struct pd_predict_opts {
    const char *model;  /* a model directory (SAVE_DIR/pass-NNNNN) */
    const char *input;  /* read with the recipe's data format */
    FILE *out;          /* the predictions */
    int part;           /* PD_PART_ALL, or the recipe's train / test part of input */
    /* out: samples predicted, labelled (0 when any lacked its labels),
     * and the cost and metrics (nmetrics values, caller's array or NULL)
     * when labelled */
    long samples;
    int labelled;
    double cost;
    double *metrics;
} pd_predict_opts;

/* 0, or PD_E* with a one-line message: no predict layer, a bad model
 * directory, a model of another recipe, an input that lacks a slot the
 * prediction reads. */
int pd_predict(const pd_recipe *r, pd_predict_opts *o);

#endif
