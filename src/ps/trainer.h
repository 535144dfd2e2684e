/*
 * trainer.h - a trainer of a distributed job: computes gradients on its
 * share of the data, the pservers apply them (docs/protocol.md).
 */
#ifndef PD_TRAINER_H
#define PD_TRAINER_H

#include "client.h"
#include "../core/recipe.h"

typedef struct pd_trainer_opts {
    int id, ntrainers;
    pd_endpoint *pservers;
    int npservers;
    uint8_t secret[PD_SECRET];
    uint8_t job[PD_JOB_ID];
    const char *init_model;     /* trainer 0: start from this model */
    int resume;                 /* --resume: say so when there is nothing to resume */
    volatile int *stop;
    int status_lines;           /* --status_lines: progress lines for the launcher (nn/progress.h) */
} pd_trainer_opts;

int pd_trainer_run(const pd_recipe *r, const pd_trainer_opts *o);

#endif
