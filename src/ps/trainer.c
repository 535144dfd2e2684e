/* trainer.c - the distributed training loop of one trainer. */
#include "trainer.h"
#include "../core/log.h"
#include "../core/pd.h"
#include "../nn/npy.h"
#include "../nn/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pd_trainer_run(const pd_recipe *r, const pd_trainer_opts *o)
{
    int rc;
    pd_net net;
    pd_layout lay;
    pd_client cl;
    pd_reader *train = NULL, *test = NULL;
    int have_client = 0;
    const pd_backend *be = pd_backend_get(r->device);
    if (!be) return PD_ENODEV;
    if (r->threads > 0) pd_blas_threads(r->threads);
    if ((rc = pd_layout_make(&lay, r, o->npservers)) < 0) return rc;
    if ((rc = pd_net_build(&net, r, be, (uint64_t)r->seed)) < 0) {
        pd_layout_free(&lay);
        return rc;
    }
    if (o->id == 0 && o->init_model && (rc = pd_model_load(&net, o->init_model)) < 0) goto out;
    if ((rc = pd_open_reader(&train, r, PD_PART_TRAIN, o->id, o->ntrainers, r->batch_size)) < 0) goto out;
    if (o->id == 0 && r->test && (rc = pd_open_reader(&test, r, PD_PART_TEST, 0, 1, r->batch_size)) < 0) goto out;

    PD_INFO("trainer %d of %d: connecting to %d pserver%s", o->id, o->ntrainers, o->npservers,
            o->npservers > 1 ? "s" : "");
    if ((rc = pd_client_connect(&cl, &lay, o->pservers, o->npservers, o->id, o->secret, o->job,
                                r->server_timeout)) < 0)
        goto out;
    have_client = 1;
    if ((rc = pd_client_init(&cl, &net)) < 0) goto out;
    PD_INFO("trainer %d: parameters ready; training %d passes, batch %d, %s mode", o->id, r->passes, r->batch_size,
            r->mode);

    double *tm = pd_xcalloc((size_t)r->nmetrics + 1, sizeof *tm);
    long step = 0;
    for (int pass = 0; pass < r->passes && rc == 0; pass++) {
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
            if ((rc = pd_net_bind(&net, b)) < 0 || (rc = pd_client_pull_rows(&cl, &net)) < 0) {
                pd_reader_release(train, b);
                break;
            }
            double cost = pd_net_forward(&net);
            pd_net_backward(&net);
            if ((rc = pd_client_step(&cl, &net)) < 0) {
                pd_reader_release(train, b);
                break;
            }
            step++;
            if (!isfinite(cost)) {
                pd_reader_release(train, b);
                rc = pd_err_set(PD_EINVAL, "pass %d, batch %d: the cost is %g; lower the learning rate", pass,
                                batch_id, cost);
                break;
            }
            sum += cost * b->n;
            period_sum += cost * b->n;
            samples += b->n;
            period_n += b->n;
            pd_reader_release(train, b);
            batch_id++;
            if (batch_id % r->log_period == 0) {
                PD_INFO("pass %d, batch %d, cost %.6g, %.0f samples/s", pass, batch_id, period_sum / period_n,
                        samples / (pd_now() - t0));
                period_sum = 0;
                period_n = 0;
            }
            if (o->id == 0 && test && pass == 0 && step == 10) {
                /* the seeds' check line: test cost after 10 steps */
                double tc = NAN;
                if ((rc = pd_client_fetch_all(&cl, &net)) < 0) break;
                long n = pd_evaluate(&net, test, &tc, tm);
                if (n < 0) {
                    rc = (int)n;
                    break;
                }
                PD_INFO("step 10, loss: [%.9g]", tc);
                /* the evaluation used up one pass of the test reader */
                pd_reader_close(test);
                test = NULL;
                if ((rc = pd_open_reader(&test, r, PD_PART_TEST, 0, 1, r->batch_size)) < 0) break;
            }
            if (r->max_batches && batch_id >= r->max_batches) {
                while ((rc = pd_reader_next(train, &b)) == 1) pd_reader_release(train, b);
                break;
            }
        }
        if (rc < 0) break;
        if ((rc = pd_client_pass_end(&cl, pass)) < 0) break;
        double secs = pd_now() - t0;
        if (o->id != 0) {
            PD_INFO("pass %d done: %ld samples in %.2f s (%.0f samples/s), train cost %.6g", pass, samples, secs,
                    samples / secs, samples ? sum / samples : NAN);
            continue;
        }
        /* trainer 0: the model after the pass, its test cost, its files */
        if ((rc = pd_client_fetch_all(&cl, &net)) < 0) break;
        rc = pd_pass_end(&net, test, pass, samples, secs, sum);
        if (rc == 0 && r->checkpoint_dir) {
            char *cdir = pd_xasprintf("%s/pass-%05d", r->checkpoint_dir, pass);
            rc = pd_client_checkpoint(&cl, cdir);
            if (rc == 0) PD_INFO("pservers saved their shards to %s/pserver-N", cdir);
            free(cdir);
        }
    }
    free(tm);
    if (rc == 0) {
        pd_client_finish(&cl);
        PD_INFO("trainer %d finished: %ld steps, %.1f MB sent, %.1f MB received", o->id, step, cl.bytes_out / 1e6,
                cl.bytes_in / 1e6);
    }
out:
    if (have_client) pd_client_free(&cl);
    pd_reader_close(train);
    pd_reader_close(test);
    pd_net_free(&net);
    pd_layout_free(&lay);
    return rc;
}
