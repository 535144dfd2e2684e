/*
 * train.h - local training (`paddle train`): one process, no pserver; the
 * baseline distributed training is compared with.
 *
 *     pd_train_opts o = {.init_model = NULL};
 *     rc = pd_train_local(&recipe, &o);
 */
#ifndef PD_TRAIN_H
#define PD_TRAIN_H

#include "net.h"
#include "../data/reader.h"

typedef struct pd_train_opts {
    const char *init_model; /* start from this saved model */
    volatile int *stop;     /* set by a signal handler: stop cleanly */
} pd_train_opts;

int pd_train_local(const pd_recipe *r, const pd_train_opts *o);

/* Mean cost and metrics of the net over one pass of rd (the test set).
 * metrics[i] for r->metrics[i]. Returns samples seen, or < 0. */
long pd_evaluate(pd_net *net, pd_reader *rd, double *cost, double *metrics);

/* After a pass: the test cost (when test is not NULL) and metrics, the pass
 * line in the log, and the model saved to SAVE_DIR/pass-NNNNN. */
int pd_pass_end(pd_net *net, pd_reader *test, int pass, long samples, double secs, double sum);

/* Open the training / test reader of a recipe for share/nshares. */
int pd_open_reader(pd_reader **rd, const pd_recipe *r, int part, int share, int nshares, int batch_size);

#endif
