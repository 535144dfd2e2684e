/* trainer.c - one trainer of a distributed job: the driver's loop
 * (src/nn/driver.c) with the step exchanged with the pservers. */
#include "trainer.h"
#include "../core/log.h"
#include "../core/pd.h"
#include "../nn/npy.h"
#include "../nn/train.h"

#include <stdlib.h>

typedef struct ps_step {
    pd_client *cl;
    const pd_recipe *r;
    int id;
} ps_step;

static int ps_pull(void *ctx, pd_net *net) { return pd_client_pull_rows(((ps_step *)ctx)->cl, net); }

static int ps_exchange(void *ctx, pd_net *net, long step)
{
    (void)step;
    return pd_client_step(((ps_step *)ctx)->cl, net);
}

static int ps_fetch(void *ctx, pd_net *net) { return pd_client_fetch_all(((ps_step *)ctx)->cl, net); }

static int ps_pass_end(void *ctx, pd_net *net, int pass)
{
    (void)net;
    return pd_client_pass_end(((ps_step *)ctx)->cl, pass);
}

/* trainer 0, after the model's save: the pservers save their shards */
static int ps_checkpoint(void *ctx, pd_net *net, int pass)
{
    ps_step *s = ctx;
    (void)net;
    if (s->id != 0 || !s->r->checkpoint_dir) return 0;
    char *cdir = pd_xasprintf("%s/pass-%05d", s->r->checkpoint_dir, pass);
    int rc = pd_client_checkpoint(s->cl, cdir);
    if (rc == 0) PD_INFO("pservers saved their shards to %s/pserver-N", cdir);
    free(cdir);
    return rc;
}

static const pd_step_ops ps_ops = {
    .before_forward = ps_pull,
    .step = ps_exchange,
    .sync_model = ps_fetch,
    .pass_end = ps_pass_end,
    .pass_done = ps_checkpoint,
};

/* Connect, train with the driver, say goodbye. */
static int train(const pd_recipe *r, const pd_trainer_opts *o, const pd_layout *lay, pd_net *net,
                 pd_reader *train, pd_reader **test)
{
    pd_client cl;
    int rc;
    PD_INFO("trainer %d of %d: connecting to %d pserver%s", o->id, o->ntrainers, o->npservers,
            o->npservers > 1 ? "s" : "");
    if ((rc = pd_client_connect(&cl, lay, o->pservers, o->npservers, o->id, o->secret, o->job,
                                r->server_timeout)) < 0)
        return rc;
    if ((rc = pd_client_init(&cl, net)) < 0) goto out;
    PD_INFO("trainer %d: parameters ready; training %d passes, batch %d, %s mode", o->id, r->passes, r->batch_size,
            r->mode);
    ps_step ctx = {.cl = &cl, .r = r, .id = o->id};
    pd_driver d = {.r = r, .net = net, .train = train, .test = *test, .save = o->id == 0, .stop = o->stop,
                   .ops = &ps_ops, .ctx = &ctx};
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
    if (!be) return PD_ENODEV;
    if (r->threads > 0) pd_blas_threads(r->threads);
    if ((rc = pd_layout_make(&lay, r, o->npservers)) < 0) return rc;
    if ((rc = pd_net_build(&net, r, be, (uint64_t)r->seed)) < 0) {
        pd_layout_free(&lay);
        return rc;
    }
    if (o->id == 0 && o->init_model && (rc = pd_model_load(&net, o->init_model)) < 0) goto out;
    if ((rc = pd_open_reader(&train_rd, r, PD_PART_TRAIN, o->id, o->ntrainers, r->batch_size)) < 0) goto out;
    if (o->id == 0 && r->test && (rc = pd_open_reader(&test, r, PD_PART_TEST, 0, 1, r->batch_size)) < 0) goto out;
    rc = train(r, o, &lay, &net, train_rd, &test);
out:
    pd_reader_close(train_rd);
    pd_reader_close(test);
    pd_net_free(&net);
    pd_layout_free(&lay);
    return rc;
}
