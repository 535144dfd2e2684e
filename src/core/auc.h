/*
 * auc.h - the exact area under the ROC curve of n scores against 0/1 labels
 * (a label above 0.5 is a positive). Tied scores count half: the
 * Mann-Whitney statistic with average ranks, as sklearn's roc_auc_score.
 * NaN scores rank below every number. NaN when one class is absent.
 *
 *     double auc = pd_auc_compute(scores, labels, n);
 */
#ifndef PD_CORE_AUC_H
#define PD_CORE_AUC_H

double pd_auc_compute(const float *score, const float *label, long n);

#endif
