/*
 * jobstats.h - what the launcher knows of a running job from the lines its
 * trainers print (pass, batch, costs, test metrics, checkpoints), for
 * Prometheus' /metrics on settings.metrics_port.
 *
 *     pd_jobstats *j = pd_jobstats_new(recipe);
 *     pd_jobstats_line(j, PD_ROLE_TRAINER, 0, "I1123 ... driver.c:199] pass 0, batch 10, cost 670.4, ...");
 *     pd_jobstats_node_line(j, "[trainer 1] I1123 ... pass 0 done: 202 samples ...");
 *     pd_jobstats_write(j, &buf);    // the text format's lines
 *     pd_jobstats_free(j);
 */
#ifndef PD_JOBSTATS_H
#define PD_JOBSTATS_H

#include "../core/buf.h"
#include "../core/recipe.h"

typedef struct pd_jobstats pd_jobstats;

pd_jobstats *pd_jobstats_new(const pd_recipe *r);
/* A line a role printed (its text after the launcher's "[role id] "). */
void pd_jobstats_line(pd_jobstats *j, int role, int id, const char *line);
/* A line as a node's agent forwards it: "[trainer 1] text"; others are ignored. */
void pd_jobstats_node_line(pd_jobstats *j, const char *line);
/* Append the job's metrics (HELP, TYPE and samples). */
void pd_jobstats_write(const pd_jobstats *j, pd_buf *b);
void pd_jobstats_free(pd_jobstats *j);

#endif
