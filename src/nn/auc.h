/*
 * auc.h - the area under the ROC curve, exact, over a whole evaluation.
 *
 * nn.auc(pred, label) is a metric layer of one column: pred is a score (a
 * logit or a probability: AUC depends on their order only), label a dense
 * 0/1 (a label above 0.5 is a positive). Its per-batch output is 0; the
 * evaluation (pd_evaluate in driver.c) collects every sample's score and
 * label with pd_auc_add_layer and reports pd_auc_value at the end:
 *
 *     pd_auc a = {0};
 *     for each test batch: bind, forward, pd_auc_add_layer(&a, net, layer);
 *     double v = pd_auc_value(&a);      // NaN when one class is absent
 *     pd_auc_free(&a);
 *
 * The value is pd_auc_compute (core/auc.h): exact, ties counted half.
 */
#ifndef PD_AUC_H
#define PD_AUC_H

#include "net.h"

typedef struct pd_auc {
    float *score, *label;
    long n, cap;
} pd_auc;

/* Append the scores and labels of the metric layer's inputs for the batch
 * the net has just run forward. */
void pd_auc_add_layer(pd_auc *a, pd_net *net, int layer);
void pd_auc_add(pd_auc *a, const float *score, const float *label, long n);
double pd_auc_value(const pd_auc *a);
void pd_auc_free(pd_auc *a);

#endif
