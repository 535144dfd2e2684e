/* train.c - local training: the driver with the optimizer applied here. */
#include "train.h"
#include "npy.h"
#include "../core/fs.h"
#include "../core/log.h"
#include "../core/pd.h"

static int local_update(void *ctx, pd_net *net, long step)
{
    (void)ctx;
    return pd_net_update(net, &net->r->optimizer, step);
}

/* Growing tables at a pass end: rows not updated for ttl passes go. */
static int local_pass_end(void *ctx, pd_net *net, int pass)
{
    (void)ctx;
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (p->hash) pd_hash_pass_log(p->tab, pass, pd_hashtab_pass_end(p->tab));
    }
    return 0;
}

static const pd_step_ops local_ops = {.step = local_update, .pass_end = local_pass_end};

int pd_train_local(const pd_recipe *r, const pd_train_opts *o)
{
    int rc;
    pd_net net;
    pd_reader *train = NULL, *test = NULL;
    const pd_backend *be = pd_backend_get(r->device);
    if (!be) return pd_backend_missing(r->device);
    /* where the passes go: before anything is said or built (pd_drive checks it again) */
    if ((rc = pd_dir_writable(r->save_dir, "settings.save_dir")) < 0) return rc;
    if (r->threads > 0) pd_blas_threads(r->threads);
    if ((rc = pd_net_build(&net, r, be, (uint64_t)r->seed)) < 0) return rc;
    if (pd_opt_from_name(r->optimizer.type) == PD_OPT_SGD) {
        /* plain SGD needs no gradient kept: a layer may apply it as it
         * computes one (pd_param_sgd_in_place) */
        net.sgd_in_place = 1;
        net.sgd_lr = (float)r->optimizer.learning_rate;
        net.sgd_decay = (float)r->optimizer.weight_decay;
    }
    if (o->init_model) {
        if ((rc = pd_model_load_saved(&net, o->init_model)) < 0) {
            rc = pd_err_wrap(rc, "option --init_model");
            goto out;
        }
        PD_INFO("parameters loaded from %s (--init_model)", o->init_model);
    }
    if ((rc = pd_open_reader(&train, r, PD_PART_TRAIN, 0, 1, r->batch_size)) < 0) goto out;
    if (r->test && (rc = pd_open_reader(&test, r, PD_PART_TEST, 0, 1, r->batch_size)) < 0) goto out;

    PD_INFO("training %s: %d passes, batch %d, %s on %s, %ld parameters", r->path, r->passes, r->batch_size,
            r->optimizer.type, be->name, pd_recipe_params(r));
    pd_driver d = {.r = r, .net = &net, .train = train, .test = test, .save = 1, .early_stop = 1, .stop = o->stop,
                   .ops = &local_ops};
    rc = pd_drive(&d);
    test = d.test;
out:
    pd_reader_close(train);
    pd_reader_close(test);
    pd_net_free(&net);
    return rc;
}
