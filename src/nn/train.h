/*
 * train.h - local training (`paddle train`): one process, no pserver; the
 * baseline distributed training is compared with.
 *
 *     pd_train_opts o = {.init_model = NULL};
 *     rc = pd_train_local(&recipe, &o);
 */
#ifndef PD_TRAIN_H
#define PD_TRAIN_H

#include "driver.h"

typedef struct pd_train_opts {
    const char *init_model; /* start from this saved model */
    volatile int *stop;     /* set by a signal handler: stop cleanly */
} pd_train_opts;

int pd_train_local(const pd_recipe *r, const pd_train_opts *o);

#endif
