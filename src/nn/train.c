/* train.c - the local training loop and test-set evaluation. */
#include "train.h"
#include "npy.h"
#include "../core/log.h"
#include "../core/pd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pd_open_reader(pd_reader **rd, const pd_recipe *r, int part, int share, int nshares, int batch_size)
{
    pd_reader_opts o = {
        .part = part,
        .share = share,
        .nshares = nshares,
        .batch_size = batch_size,
        .shuffle = part == PD_PART_TRAIN ? r->shuffle_buffer : 0,
        .seed = (uint64_t)r->seed + (uint64_t)share * 1000003u,
        .passes = r->passes,
    };
    return pd_reader_open(rd, r, &o);
}

long pd_evaluate(pd_net *net, pd_reader *rd, double *cost, double *metrics)
{
    const pd_recipe *r = net->r;
    double sum = 0, *msum = pd_xcalloc((size_t)r->nmetrics + 1, sizeof *msum);
    long n = 0;
    pd_batch *b;
    int rc;
    while ((rc = pd_reader_next(rd, &b)) == 1) {
        if ((rc = pd_net_bind(net, b)) < 0) {
            pd_reader_release(rd, b);
            break;
        }
        sum += pd_net_forward(net) * b->n;
        for (int i = 0; i < r->nmetrics; i++) msum[i] += pd_net_mean(net, r->metrics[i].layer) * b->n;
        n += b->n;
        pd_reader_release(rd, b);
    }
    if (rc < 0) {
        free(msum);
        return rc;
    }
    *cost = n ? sum / n : NAN;
    for (int i = 0; i < r->nmetrics && metrics; i++) metrics[i] = n ? msum[i] / n : NAN;
    free(msum);
    return n;
}

static void metrics_text(const pd_recipe *r, const double *m, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < r->nmetrics; i++) {
        size_t l = strlen(buf);
        snprintf(buf + l, len - l, ", %s %.6g", r->metrics[i].name, m[i]);
    }
}

int pd_pass_end(pd_net *net, pd_reader *test, int pass, long samples, double secs, double sum)
{
    const pd_recipe *r = net->r;
    double test_cost = NAN, *tm = pd_xcalloc((size_t)r->nmetrics + 1, sizeof *tm);
    char mtext[256] = "";
    if (test) {
        long n = pd_evaluate(net, test, &test_cost, tm);
        if (n < 0) {
            free(tm);
            return (int)n;
        }
        metrics_text(r, tm, mtext, sizeof mtext);
        /* a square error on one output: its root is the error in the label's units (stars) */
        const pd_layer_desc *costl = &r->layers[r->cost];
        if (!strcmp(costl->type, "square_error_cost") && r->layers[costl->inputs[0]].size == 1)
            snprintf(mtext + strlen(mtext), sizeof mtext - strlen(mtext), ", test rmse %.4f", sqrt(test_cost));
    }
    free(tm);
    PD_INFO("pass %d done: %ld samples in %.2f s (%.0f samples/s), train cost %.6g, test cost %.6g%s", pass, samples,
            secs, samples / secs, samples ? sum / samples : NAN, test_cost, mtext);
    char *dir = pd_xasprintf("%s/pass-%05d", r->save_dir, pass);
    pd_model_info info = {.pass = pass, .train_cost = samples ? sum / samples : NAN, .test_cost = test_cost,
                          .samples = samples};
    int rc = pd_model_save(net, dir, &info);
    if (rc == 0) PD_INFO("model saved to %s", dir);
    free(dir);
    return rc;
}

int pd_train_local(const pd_recipe *r, const pd_train_opts *o)
{
    int rc;
    pd_net net;
    pd_reader *train = NULL, *test = NULL;
    const pd_backend *be = pd_backend_get(r->device);
    if (!be) return PD_ENODEV;
    if (r->threads > 0) pd_blas_threads(r->threads);
    if ((rc = pd_net_build(&net, r, be, (uint64_t)r->seed)) < 0) return rc;
    if (o->init_model && (rc = pd_model_load(&net, o->init_model)) < 0) goto out;
    if ((rc = pd_open_reader(&train, r, PD_PART_TRAIN, 0, 1, r->batch_size)) < 0) goto out;
    if (r->test && (rc = pd_open_reader(&test, r, PD_PART_TEST, 0, 1, r->batch_size)) < 0) goto out;

    PD_INFO("training %s: %d passes, batch %d, %s on %s, %ld parameters", r->path, r->passes, r->batch_size,
            r->optimizer.type, be->name, pd_recipe_params(r));
    double *tm = pd_xcalloc((size_t)r->nmetrics + 1, sizeof *tm);
    long step = 0;
    int tty = isatty(2), shown = 0;
    double last_progress = pd_now();
    for (int pass = 0; pass < r->passes; pass++) {
        double t0 = pd_now(), sum = 0, period_sum = 0;
        long samples = 0, period_n = 0;
        int batch_id = 0;
        pd_batch *b;
        while ((rc = pd_reader_next(train, &b)) == 1) {
            if (o->stop && *o->stop) {
                pd_reader_release(train, b);
                rc = pd_err_set(PD_EINTR, "interrupted");
                break;
            }
            if ((rc = pd_net_bind(&net, b)) < 0) {
                pd_reader_release(train, b);
                break;
            }
            double cost = pd_net_forward(&net);
            pd_net_backward(&net);
            pd_net_update(&net, &r->optimizer, ++step);
            if (!isfinite(cost)) {
                pd_reader_release(train, b);
                rc = pd_err_set(PD_EINVAL, "pass %d, batch %d: the cost is %g; lower the learning rate "
                                           "(now %g)", pass, batch_id, cost, r->optimizer.learning_rate);
                break;
            }
            sum += cost * b->n;
            period_sum += cost * b->n;
            samples += b->n;
            period_n += b->n;
            pd_reader_release(train, b);
            batch_id++;
            if (tty && pd_now() - last_progress > 0.5) {
                /* a progress line on a terminal, rewritten in place */
                fprintf(stderr, "\rpass %d  batch %d  cost %.5g  %.0f samples/s\033[K", pass, batch_id,
                        sum / samples, samples / (pd_now() - t0));
                last_progress = pd_now();
                shown = 1;
            }
            if (r->max_batches && batch_id >= r->max_batches) {
                /* drain the rest of the pass */
                while ((rc = pd_reader_next(train, &b)) == 1) pd_reader_release(train, b);
                break;
            }
            if (batch_id % r->log_period == 0) {
                PD_INFO("pass %d, batch %d, cost %.6g, %.0f samples/s", pass, batch_id, period_sum / period_n,
                        samples / (pd_now() - t0));
                period_sum = 0;
                period_n = 0;
            }
        }
        if (shown) {
            fprintf(stderr, "\r\033[K");
            shown = 0;
        }
        if (rc < 0) break;
        if ((rc = pd_pass_end(&net, test, pass, samples, pd_now() - t0, sum)) < 0) break;
        if (pd_reader_skipped(train))
            PD_WARN("%ld malformed lines skipped so far (data.on_error = \"skip\")", pd_reader_skipped(train));
    }
    free(tm);
out:
    pd_reader_close(train);
    pd_reader_close(test);
    pd_net_free(&net);
    return rc;
}
