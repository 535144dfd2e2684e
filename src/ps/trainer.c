/* trainer.c - one trainer of a distributed job: the driver's loop
 * (src/nn/driver.c) with the step exchanged with the pservers. */
#include "trainer.h"
#include "../core/log.h"
#include "../core/pd.h"
#include "../nn/npy.h"
#include "../nn/train.h"
#include "ckpt.h"

#include <stdio.h>
#include <string.h>

#include <stdlib.h>
#include <unistd.h>

typedef struct ps_step {
    pd_client *cl;
    const pd_recipe *r;
    const pd_trainer_opts *o;
    pd_driver *d;
    int sync;
} ps_step;

static int ps_pull(void *ctx, pd_net *net) { return pd_client_pull_rows(((ps_step *)ctx)->cl, net); }

/* async: the next batch's rows come while this one computes (only in the
 * ops where pd_client_prefetch_from turned it on: the driver reads ahead
 * for it) */
static int ps_prefetch(void *ctx, pd_net *net, const pd_batch *next)
{
    return pd_client_prefetch_rows(((ps_step *)ctx)->cl, net, next);
}

/* A checkpoint of step: every pserver saves its shard with this trainer's
 * position; the trainer the pservers name writes the complete marker. */
static int checkpoint(ps_step *s, long step, int pass, int batch)
{
    int writer = -1;
    double t0 = pd_now();
    int rc = pd_client_save(s->cl, step, pass, batch, &writer);
    if (rc < 0) return pd_err_wrap(rc, "checkpoint of step %ld", step);
    if (writer != s->o->id) return 0;
    rc = pd_ckpt_mark(s->r->checkpoint_dir, step, s->o->npservers, s->o->ntrainers);
    if (rc < 0) return pd_err_wrap(rc, "checkpoint of step %ld", step);
    pd_client_commit(s->cl, step); /* each pserver marks it on its host too */
    pd_ckpt_prune(s->r->checkpoint_dir, step, s->r->checkpoint_keep, 1);
    PD_INFO("checkpoint of step %ld complete (pass %d, batch %d) in %.4f s", step, pass, batch, pd_now() - t0);
    return 0;
}

/* async: the step is posted and the next batch computes while the pservers
 * apply it; sync: the step waits for every trainer's, and after every
 * checkpoint_period-th step of the pservers comes a checkpoint of every
 * trainer that took part in the step */
static int ps_exchange(void *ctx, pd_net *net, long step)
{
    ps_step *s = ctx;
    (void)step;
    if (!s->sync) return pd_client_defer_step(s->cl, net);
    /* sync: held for the next batch's pull, but in a job with checkpoints
     * (whether one comes after this step is known from its replies only:
     * the count this trainer last heard can be behind, after a pass that
     * other trainers went on with) */
    if (!s->r->checkpoint_dir || s->r->checkpoint_period < 1) {
        int held = pd_client_hold_step(s->cl, net);
        if (held != 0) return held < 0 ? held : 0;
    }
    int rc = pd_client_step(s->cl, net);
    if (rc < 0 || !s->sync || !s->r->checkpoint_dir || s->r->checkpoint_period < 1) return rc;
    if (s->cl->step % s->r->checkpoint_period != 0) return 0;
    return checkpoint(s, s->cl->step, s->d->pass, s->d->batch);
}

static int ps_fetch(void *ctx, pd_net *net) { return pd_client_fetch_all(((ps_step *)ctx)->cl, net); }

/* async: a checkpoint after every pass but the last, once every trainer
 * ended it (named by the pservers' count of every trainer's batches) */
static int ps_pass_end(void *ctx, pd_net *net, int pass)
{
    ps_step *s = ctx;
    long total = 0;
    (void)net;
    int rc = pd_client_pass_end(s->cl, pass, s->d->batch, &total);
    if (rc < 0 || s->sync || !s->r->checkpoint_dir || pass + 1 >= s->r->passes) return rc;
    return checkpoint(s, total, pass + 1, 0);
}

/* After the last pass's fetch of the model: FINISH to the pservers now,
 * so that they end while trainer 0 tests and saves, whatever time that
 * takes; but a growing table's rows live on the pservers only, and trainer
 * 0's test and save read them there */
static void ps_release(void *ctx)
{
    ps_step *s = ctx;
    const pd_net *net = s->d->net;
    for (int i = 0; s->d->save && i < net->nparams; i++)
        if (net->params[i].hash) return;
    pd_client_finish(s->cl);
}

static int ps_decide(void *ctx, int pass, int want, int *stop)
{
    return pd_client_decide(((ps_step *)ctx)->cl, pass, want, stop);
}

static const pd_step_ops ps_ops = {
    .before_forward = ps_pull,
    .step = ps_exchange,
    .sync_model = ps_fetch,
    .pass_end = ps_pass_end,
    .decide = ps_decide,
    .release = ps_release,
};

/* After init: where the pservers' checkpoint puts this trainer. */
static int resume_at(const pd_recipe *r, const pd_trainer_opts *o, pd_client *cl, pd_driver *d)
{
    if (cl->resume_step < 0) {
        if (o->resume) PD_INFO("trainer %d: no complete checkpoint: starting fresh", o->id);
        else pd_ckpt_forget_earlier(r->checkpoint_dir); /* the pservers did the same on theirs */
        return 0;
    }
    if (cl->resume_pass >= r->passes) return pd_err_set(PD_EDATA, "the checkpoint's pass %d is past settings.passes",
                                                        cl->resume_pass);
    PD_INFO("trainer %d: resuming from the checkpoint of step %ld at pass %d, batch %d", o->id, cl->resume_step,
            cl->resume_pass, cl->resume_batch);
    d->start_pass = cl->resume_pass;
    d->start_batch = cl->resume_batch;
    /* sync: the checkpoint's step is every trainer's; async: all trainers' batches */
    d->step0 = !r->mode || strcmp(r->mode, "async") != 0 ? cl->resume_step : cl->resume_step / o->ntrainers;
    if (cl->resume_pass == 0) return 0;
    pd_reader_close(d->train);
    d->train = NULL;
    return pd_open_reader_at(&d->train, r, PD_PART_TRAIN, o->id, o->ntrainers, r->batch_size, cl->resume_pass);
}

/* The host's online CPUs, whatever this process's affinity (musl's
 * sysconf counts those it may run on). */
static long host_cpus(void)
{
    FILE *f = fopen("/sys/devices/system/cpu/online", "r");
    long n = 0, a, b;
    char sep;
    while (f && fscanf(f, "%ld", &a) == 1) {
        b = a;
        if ((sep = (char)fgetc(f)) == '-') {
            if (fscanf(f, "%ld", &b) != 1) break;
            sep = (char)fgetc(f);
        }
        if (b >= a) n += b - a + 1;
        if (sep != ',') break;
    }
    if (f) fclose(f);
    return n > 0 ? n : sysconf(_SC_NPROCESSORS_ONLN);
}

/* Connect, train with the driver, say goodbye. */
static int train(const pd_recipe *r, const pd_trainer_opts *o, const pd_layout *lay, pd_net *net,
                 pd_reader **train, pd_reader **test)
{
    pd_client cl;
    int rc;
    PD_INFO("trainer %d of %d: connecting to %d pserver%s", o->id, o->ntrainers, o->npservers,
            o->npservers > 1 ? "s" : "");
    if ((rc = pd_client_connect(&cl, lay, o->pservers, o->npservers, o->id, o->secret, o->job,
                                r->server_timeout, o->stop)) < 0)
        return rc;
    if (r->heartbeat_timeout > 0) cl.hb_timeout = r->heartbeat_timeout;
    cl.ckpt_dir = r->checkpoint_dir;
    int local = pd_client_unix_count(&cl);
    if (local > 0)
        PD_INFO("trainer %d: %d of %d pservers on this host, reached over their Unix sockets (%d with shared memory)",
                o->id, local, o->npservers, pd_client_ring_count(&cl));
    if ((rc = pd_client_init(&cl, net)) < 0) goto out;
    ps_step ctx = {.cl = &cl, .r = r, .o = o, .sync = !r->mode || strcmp(r->mode, "async") != 0};
    pd_step_ops ops = ps_ops;
    /* what the pservers do while this trainer computes, where they have
     * cores to do it on (a GPU computes: the host's cores are theirs) */
    int cores_left = !net->be->host_memory || pd_blas_threads_get() < host_cpus();
    if (ctx.sync) {
        /* sync: a step held for the next pull (unless checkpoints may
         * follow steps: ps_exchange) is read as the forward goes */
        if (!r->checkpoint_dir || r->checkpoint_period < 1) {
            if ((rc = pd_client_values_in_forward(&cl, net)) < 0) goto out;
            if (rc > 0)
                PD_INFO("trainer %d: a step's new values are read as the next batch's forward reaches the layers "
                        "that use them", o->id);
        }
        /* a step waits for the pservers' update, so what they can apply
         * while the backward goes on leaves at once */
        int n = pd_client_send_early(&cl, net, cores_left);
        PD_INFO("trainer %d: gradients go to %d of %d pservers as the backward finishes them%s", o->id, n,
                o->npservers, n < o->npservers ? " (the others share this host's cores with it: with the step)" : "");
    } else if (pd_client_prefetch_from(&cl, cores_left)) {
        ops.prefetch = ps_prefetch;
        PD_INFO("trainer %d: the next batch's rows are asked for while a batch computes", o->id);
    } else {
        PD_INFO("trainer %d: a batch's rows are asked for at its turn (the pservers share this host's cores with it)",
                o->id);
    }
    pd_driver d = {.r = r, .net = net, .train = *train, .test = *test, .save = o->id == 0, .stop = o->stop,
                   .status_lines = o->status_lines,
                   .ops = &ops, .ctx = &ctx};
    ctx.d = &d;
    rc = resume_at(r, o, &cl, &d);
    *train = d.train;
    if (rc < 0) goto out;
    PD_INFO("trainer %d: parameters ready; training %d passes, batch %d, %s mode, on %s", o->id, r->passes,
            r->batch_size, r->mode, net->be->name);
    rc = pd_drive(&d);
    *test = d.test;
    if (rc == 0) {
        pd_client_finish(&cl);
        PD_INFO("trainer %d finished: %ld steps, %.1f MB sent, %.1f MB received", o->id, d.steps,
                cl.bytes_out / 1e6, cl.bytes_in / 1e6);
    }
out:
    pd_client_free(&cl);
    return rc;
}

int pd_trainer_run(const pd_recipe *r, const pd_trainer_opts *o)
{
    int rc;
    pd_net net;
    pd_layout lay;
    pd_reader *train_rd = NULL, *test = NULL;
    const pd_backend *be = pd_backend_get(r->device);
    if (!be) return pd_backend_missing(r->device);
    if (r->threads > 0) pd_blas_threads(r->threads);
    if (r->checkpoint_dir && (rc = pd_ckpt_dir_ready(r->checkpoint_dir)) < 0) return rc;
    if ((rc = pd_layout_make(&lay, r, o->npservers)) < 0) return rc;
    if ((rc = pd_net_build(&net, r, be, (uint64_t)r->seed)) < 0) {
        pd_layout_free(&lay);
        return rc;
    }
    if (o->id == 0 && o->init_model) {
        if ((rc = pd_model_load_saved(&net, o->init_model)) < 0) {
            rc = pd_err_wrap(rc, "option --init_model");
            goto out;
        }
        PD_INFO("trainer 0: parameters loaded from %s (--init_model), for the pservers to start from", o->init_model);
    }
    if ((rc = pd_open_reader(&train_rd, r, PD_PART_TRAIN, o->id, o->ntrainers, r->batch_size)) < 0) goto out;
    if (o->id == 0 && r->test && (rc = pd_open_reader(&test, r, PD_PART_TEST, 0, 1, r->batch_size)) < 0) goto out;
    rc = train(r, o, &lay, &net, &train_rd, &test);
    pd_ckpt_wait_removals();
out:
    pd_reader_close(train_rd);
    pd_reader_close(test);
    pd_net_free(&net);
    pd_layout_free(&lay);
    return rc;
}
