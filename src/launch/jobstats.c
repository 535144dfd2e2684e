/*
 * jobstats.c - the launcher's view of a job, read from its trainers' lines
 * (jobstats.h). Nothing here is asked of the roles: what the driver prints
 * (src/nn/driver.c, src/ps/trainer.c) is what the metrics say, as of the
 * last line of each kind.
 */
#include "jobstats.h"
#include "plan.h"
#include "../core/pd.h"
#include "../ps/http.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_NEW, T_TRAINING, T_FINISHED };

typedef struct tstat {
    int state;
    int pass, batch;        /* as of its last progress line */
    long done_batches;      /* batches of the passes it finished */
    long done_samples;      /* samples of the passes it finished */
    double cost;            /* the last log period's mean train cost */
} tstat;

struct pd_jobstats {
    const pd_recipe *r;
    int ntrainers;
    tstat *t;
    double test_cost;       /* trainer 0's last pass line (NaN: none yet) */
    double *test_metric;
    long ckpt_step;         /* the last complete checkpoint (-1: none) */
    double ckpt_wall;
};

pd_jobstats *pd_jobstats_new(const pd_recipe *r)
{
    pd_jobstats *j = pd_xcalloc(1, sizeof *j);
    j->r = r;
    j->ntrainers = r->trainers > 0 ? r->trainers : 1;
    j->t = pd_xcalloc((size_t)j->ntrainers, sizeof *j->t);
    for (int i = 0; i < j->ntrainers; i++) j->t[i].cost = NAN;
    j->test_metric = pd_xcalloc((size_t)r->nmetrics + 1, sizeof *j->test_metric);
    for (int i = 0; i < r->nmetrics; i++) j->test_metric[i] = NAN;
    j->test_cost = NAN;
    j->ckpt_step = -1;
    return j;
}

void pd_jobstats_free(pd_jobstats *j)
{
    if (!j) return;
    free(j->t);
    free(j->test_metric);
    free(j);
}

/* The number after key in s, or NAN. */
static double after(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    if (!p) return NAN;
    char *end;
    double v = strtod(p + strlen(key), &end);
    return end == p + strlen(key) ? NAN : v;
}

/* "pass P done: N samples in ..., train cost C[, test cost T, NAME V..., test rmse R]" */
static void pass_line(pd_jobstats *j, tstat *t, int id, int pass, long samples, const char *msg)
{
    t->pass = pass + 1;
    t->batch = 0;
    t->done_samples += samples;
    int bs = j->r->batch_size > 0 ? j->r->batch_size : 1;
    t->done_batches += (samples + bs - 1) / bs;
    if (id != 0 || !strstr(msg, ", test cost ")) return;
    j->test_cost = after(msg, ", test cost ");
    for (int i = 0; i < j->r->nmetrics; i++) {
        char key[160];
        snprintf(key, sizeof key, ", %s ", j->r->metrics[i].name);
        j->test_metric[i] = after(msg, key);
    }
}

void pd_jobstats_line(pd_jobstats *j, int role, int id, const char *line)
{
    if (role != PD_ROLE_TRAINER || id < 0 || id >= j->ntrainers) return;
    tstat *t = &j->t[id];
    /* the message after a glog header "I1123 22:52:27.024050 31931 driver.c:199] " */
    const char *msg = strstr(line, "] ");
    msg = msg ? msg + 2 : line;
    int pass, batch;
    long n;
    double cost;
    if (sscanf(msg, "pass %d, batch %d, cost %lf", &pass, &batch, &cost) == 3) {
        t->state = T_TRAINING;
        t->pass = pass;
        t->batch = batch;
        t->cost = cost;
    } else if (sscanf(msg, "pass %d done: %ld samples", &pass, &n) == 2) {
        pass_line(j, t, id, pass, n, msg);
    } else if (strstr(msg, ": parameters ready;")) {
        t->state = T_TRAINING;
    } else if (sscanf(msg, "trainer %*d finished: %ld steps", &n) == 1) {
        t->state = T_FINISHED;
    } else if (sscanf(msg, "checkpoint of step %ld complete", &n) == 1) {
        j->ckpt_step = n;
        j->ckpt_wall = pd_wall();
    }
}

void pd_jobstats_node_line(pd_jobstats *j, const char *line)
{
    int id, len = 0;
    if (sscanf(line, "[trainer %d]%n", &id, &len) == 1 && len > 0)
        pd_jobstats_line(j, PD_ROLE_TRAINER, id, line[len] == ' ' ? line + len + 1 : line + len);
}

static void per_trainer(const pd_jobstats *j, pd_buf *b, const char *name, const char *type, const char *help,
                        int what)
{
    pd_prom_head(b, name, type, help);
    for (int i = 0; i < j->ntrainers; i++) {
        const tstat *t = &j->t[i];
        char label[32];
        snprintf(label, sizeof label, "trainer=\"%d\"", i);
        double v = what == 0   ? t->pass
                   : what == 1 ? (double)(t->done_batches + t->batch)
                   : what == 2 ? (double)t->done_samples
                               : t->cost;
        pd_prom_val(b, name, label, v);
    }
}

void pd_jobstats_write(const pd_jobstats *j, pd_buf *b)
{
    int training = 0, finished = 0;
    double samples = 0, step = 0;
    for (int i = 0; i < j->ntrainers; i++) {
        training += j->t[i].state == T_TRAINING;
        finished += j->t[i].state == T_FINISHED;
        samples += (double)j->t[i].done_samples;
        step = PD_MAX(step, (double)(j->t[i].done_batches + j->t[i].batch));
    }
    pd_prom_head(b, "paddle_job_passes", "gauge", "Passes the job trains at most (settings.passes).");
    pd_prom_val(b, "paddle_job_passes", NULL, j->r->passes);
    pd_prom_head(b, "paddle_job_trainers_training", "gauge", "Trainers training now.");
    pd_prom_val(b, "paddle_job_trainers_training", NULL, training);
    pd_prom_head(b, "paddle_job_trainers_finished", "gauge", "Trainers that finished.");
    pd_prom_val(b, "paddle_job_trainers_finished", NULL, finished);
    pd_prom_head(b, "paddle_job_step", "gauge", "Steps (batches) of the furthest trainer, as of its last line.");
    pd_prom_val(b, "paddle_job_step", NULL, step);
    pd_prom_head(b, "paddle_job_samples_total", "counter", "Samples of the passes the trainers finished.");
    pd_prom_val(b, "paddle_job_samples_total", NULL, samples);
    per_trainer(j, b, "paddle_trainer_pass", "gauge", "The pass a trainer is in.", 0);
    per_trainer(j, b, "paddle_trainer_step", "gauge", "Batches a trainer trained, as of its last progress line.", 1);
    per_trainer(j, b, "paddle_trainer_samples_total", "counter", "Samples of the passes a trainer finished.", 2);
    per_trainer(j, b, "paddle_trainer_train_cost", "gauge", "Mean train cost of a trainer's last log period.", 3);
    pd_prom_head(b, "paddle_job_test_cost", "gauge", "Test cost after the last pass (trainer 0).");
    pd_prom_val(b, "paddle_job_test_cost", NULL, j->test_cost);
    if (j->r->nmetrics) pd_prom_head(b, "paddle_job_test_metric", "gauge", "Test metrics after the last pass.");
    for (int i = 0; i < j->r->nmetrics; i++) {
        char name[128], label[160];
        pd_prom_escape(name, sizeof name, j->r->metrics[i].name);
        snprintf(label, sizeof label, "metric=\"%s\"", name);
        pd_prom_val(b, "paddle_job_test_metric", label, j->test_metric[i]);
    }
    if (j->ckpt_step < 0) return;
    pd_prom_head(b, "paddle_job_checkpoint_step", "gauge", "Step of the last complete checkpoint.");
    pd_prom_val(b, "paddle_job_checkpoint_step", NULL, (double)j->ckpt_step);
    pd_prom_head(b, "paddle_job_checkpoint_age_seconds", "gauge", "Seconds since the last complete checkpoint.");
    pd_prom_val(b, "paddle_job_checkpoint_age_seconds", NULL, PD_MAX(0.0, pd_wall() - j->ckpt_wall));
}
