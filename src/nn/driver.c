/* driver.c - the training loop shared by local and distributed training. */
#include "driver.h"
#include "auc.h"
#include "curves.h"
#include "keep.h"
#include "npy.h"
#include "progress.h"
#include "../core/fs.h"
#include "../core/log.h"
#include "../core/pd.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pd_reader_opts reader_opts(const pd_recipe *r, int part, int share, int nshares, int batch_size)
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
    return o;
}

int pd_open_reader(pd_reader **rd, const pd_recipe *r, int part, int share, int nshares, int batch_size)
{
    return pd_open_reader_at(rd, r, part, share, nshares, batch_size, 0);
}

int pd_open_reader_at(pd_reader **rd, const pd_recipe *r, int part, int share, int nshares, int batch_size,
                      int first_pass)
{
    pd_reader_opts o = reader_opts(r, part, share, nshares, batch_size);
    o.first_pass = first_pass;
    return pd_reader_open(rd, r, &o);
}

/* An AUC metric is exact over the whole pass: its layer's inputs are
 * collected, not its per-batch means averaged. */
static int is_auc(const pd_recipe *r, int i) { return strcmp(r->layers[r->metrics[i].layer].type, "auc") == 0; }

long pd_evaluate(pd_net *net, pd_reader *rd, double *cost, double *metrics)
{
    const pd_recipe *r = net->r;
    double sum = 0, *msum = pd_xcalloc((size_t)r->nmetrics + 1, sizeof *msum);
    pd_auc *auc = pd_xcalloc((size_t)r->nmetrics + 1, sizeof *auc);
    long n = 0;
    pd_batch *b;
    int rc;
    while ((rc = pd_reader_next(rd, &b)) == 1) {
        double c;
        if ((rc = pd_net_bind(net, b)) < 0 || (rc = pd_net_forward(net, &c)) < 0) {
            pd_reader_release(rd, b);
            break;
        }
        sum += c * b->n;
        for (int i = 0; i < r->nmetrics && metrics; i++) {
            if (is_auc(r, i)) pd_auc_add_layer(&auc[i], net, r->metrics[i].layer);
            else msum[i] += pd_net_mean(net, r->metrics[i].layer) * b->n;
        }
        n += b->n;
        pd_reader_release(rd, b);
        if (net->tick && (rc = net->tick(net->tick_ctx)) < 0) break;
    }
    for (int i = 0; i < r->nmetrics && metrics && rc >= 0; i++)
        metrics[i] = is_auc(r, i) ? pd_auc_value(&auc[i]) : n ? msum[i] / n : NAN;
    for (int i = 0; i < r->nmetrics; i++) pd_auc_free(&auc[i]);
    free(auc);
    free(msum);
    if (rc < 0) return rc;
    *cost = n ? sum / n : NAN;
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

/* ", test cost C, metric M..., test rmse R" of the model on the test set */
static int test_text(pd_net *net, pd_reader *test, double *test_cost, double *tm, char *buf, size_t len)
{
    const pd_recipe *r = net->r;
    long n = pd_evaluate(net, test, test_cost, tm);
    if (n < 0) return (int)n;
    snprintf(buf, len, ", test cost %.6g", *test_cost);
    metrics_text(r, tm, buf + strlen(buf), len - strlen(buf));
    /* a square error on one output: its root is the error in the label's units (stars) */
    const pd_layer_desc *costl = &r->layers[r->cost];
    if (!strcmp(costl->type, "square_error_cost") && r->layers[costl->inputs[0]].size == 1)
        snprintf(buf + strlen(buf), len - strlen(buf), ", test rmse %.4f", sqrt(*test_cost));
    return 0;
}

/* The status block of this process's training (paddle train on a terminal). */
static pd_progress *board;

/* Whether pass is saved (keep NULL: every pass), and early stopping's word. */
static int keep_pass(pd_keep *keep, int pass, double test_cost, const double *tm)
{
    if (!keep) return 1;
    int save = pd_keep_pass(keep, pass, test_cost, tm);
    if (keep->stop)
        PD_INFO("early stop: %s has not improved for %d passes; the best is pass %d (%.6g)", pd_keep_what(keep),
                keep->r->early_stop, keep->best_pass, keep->best);
    return save;
}

int pd_pass_end(pd_net *net, pd_reader *test, pd_keep *keep, int save, int pass, const pd_pass_counts *n,
                double *tested)
{
    long samples = n->samples;
    double secs = n->secs, sum = n->sum;
    const pd_recipe *r = net->r;
    double test_cost = NAN, *tm = pd_xcalloc((size_t)r->nmetrics + 1, sizeof *tm);
    char ttext[320] = "";
    int rc = test ? test_text(net, test, &test_cost, tm, ttext, sizeof ttext) : 0;
    if (rc == 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "pass %d done: %ld samples in %.2f s (%.0f samples/s), train cost %.6g%s", pass,
                 samples, secs, samples / secs, samples ? sum / samples : NAN, ttext);
        PD_INFO("%s", msg);
        if (board) pd_progress_line(board, "trainer", "localhost", msg);
        if (save) save = keep_pass(keep, pass, test ? test_cost : NAN, tm);
    }
    for (int i = 0; tested && i <= r->nmetrics; i++) tested[i] = !test || rc < 0 ? NAN : i ? tm[i - 1] : test_cost;
    free(tm);
    if (rc < 0 || !save) return rc;
    char *dir = pd_xasprintf("%s/pass-%05d", r->save_dir, pass);
    pd_model_info info = {.pass = pass, .train_cost = samples ? sum / samples : NAN, .test_cost = test_cost,
                          .samples = samples + n->before};
    rc = pd_model_save(net, dir, &info);
    if (rc == 0) PD_INFO("model saved to %s", dir);
    if (rc == 0 && keep) rc = pd_keep_saved(keep, pass);
    free(dir);
    return rc;
}

/* --- the loop ---------------------------------------------------------------- */

typedef struct pass_state {
    int pass, batch, skip;
    double t0, sum, period_sum;
    long samples, period_n;
    long before;            /* samples of the batches trained before a restart (skip) */
    double last_progress;
    int of;                 /* batches of the previous pass (0: not known) */
    pd_curves *curves;      /* SAVE_DIR/curves.svg, or NULL */
} pass_state;

/* One batch: bind, forward, backward, the caller's step; the cost summed.
 * next: the batch after it in the pass, or NULL. */
static int one_batch(pd_driver *d, pass_state *s, const pd_batch *b, const pd_batch *next)
{
    pd_net *net = d->net;
    const pd_step_ops *ops = d->ops;
    double cost;
    int rc;
    if ((rc = pd_net_bind(net, b)) < 0) return rc;
    if (ops->before_forward && (rc = ops->before_forward(d->ctx, net)) < 0) return rc;
    if (next && ops->prefetch && (rc = ops->prefetch(d->ctx, net, next)) < 0) return rc;
    if ((rc = pd_net_forward(net, &cost)) < 0) return rc;
    if (!isfinite(cost))
        return pd_err_set(PD_EINVAL, "pass %d, batch %d: the cost is %g; lower the learning rate (now %g)",
                          s->pass, s->batch, cost, d->r->optimizer.learning_rate);
    if ((rc = pd_net_backward(net)) < 0) return rc;
    d->pass = s->pass;
    d->batch = s->batch + 1;
    if ((rc = ops->step(d->ctx, net, d->steps + 1)) < 0) return rc;
    d->steps++;
    s->sum += cost * b->n;
    s->period_sum += cost * b->n;
    s->samples += b->n;
    s->period_n += b->n;
    s->batch++;
    return 0;
}

/* The test reader, after an evaluation used up its pass: opened again, with
 * the trainer's tick (see pd_drive). */
static int reopen_test(pd_driver *d)
{
    pd_reader_close(d->test);
    d->test = NULL;
    pd_reader_opts o = reader_opts(d->r, PD_PART_TEST, 0, 1, d->r->batch_size);
    o.quiet = 1; /* its malformed lines were logged in the pass before */
    int rc = pd_reader_open(&d->test, d->r, &o);
    if (rc < 0) return rc;
    pd_reader_set_tick(d->test, d->net->tick, d->net->tick_ctx);
    return 0;
}

/* The seeds' check line: the test cost after 10 steps. The evaluation uses
 * up one pass of the test reader, so it is opened again. */
static int check_line(pd_driver *d)
{
    double tc = NAN;
    int rc;
    if (d->ops->sync_model && (rc = d->ops->sync_model(d->ctx, d->net)) < 0) return rc;
    long n = pd_evaluate(d->net, d->test, &tc, NULL);
    if (n < 0) return (int)n;
    PD_INFO("step 10, loss: [%.9g]", tc);
    return reopen_test(d);
}

/* The display after a batch: the PD_PROGRESS line for the launcher
 * (status_lines) or the status block of `paddle train`, a few times a second. */
static void show_progress(pd_driver *d, pass_state *s)
{
    double now = pd_now();
    if (now - s->last_progress < 0.25) return;
    s->last_progress = now;
    if (d->status_lines) {
        char buf[256];
        int n = pd_progress_format(buf, sizeof buf, s->pass, s->batch, s->of, s->samples, now - s->t0,
                                   s->sum / s->samples);
        fflush(stdout);
        if (write(1, buf, (size_t)PD_MIN(n, (int)sizeof buf - 1)) < 0) {}
    } else if (board) {
        char buf[256];
        pd_progress_format(buf, sizeof buf, s->pass, s->batch, s->of, s->samples, now - s->t0, s->sum / s->samples);
        pd_progress_line(board, "trainer", "localhost", buf);
        pd_progress_show(board);
    }
}

/* settings.test_period: the test cost (and metrics) every test_period
 * batches, on trainer 0's model as it is then (a cluster's: fetched from
 * the pservers). The evaluation uses up one pass of the test reader, so it
 * is opened again. */
static int test_in_pass(pd_driver *d, const pass_state *s)
{
    double tc = NAN, *tm = pd_xcalloc((size_t)d->r->nmetrics + 1, sizeof *tm);
    char text[600];
    int rc = 0;
    if (d->ops->sync_model) rc = d->ops->sync_model(d->ctx, d->net);
    if (rc == 0) rc = test_text(d->net, d->test, &tc, tm, text, sizeof text);
    free(tm);
    if (rc < 0) return rc;
    PD_INFO("pass %d, batch %d%s", s->pass, s->batch, text);
    return reopen_test(d);
}

/* After a batch: the progress, the log line every log_period batches, the
 * test line every test_period batches, the check line at step 10. */
static int after_batch(pd_driver *d, pass_state *s)
{
    const pd_recipe *r = d->r;
    show_progress(d, s);
    if (s->batch % r->log_period == 0) {
        PD_INFO("pass %d, batch %d, cost %.6g, %.0f samples/s", s->pass, s->batch, s->period_sum / s->period_n,
                s->samples / (pd_now() - s->t0));
        if (s->curves) pd_curves_train(s->curves, d->step0 + d->steps, s->period_sum / s->period_n);
        s->period_sum = 0;
        s->period_n = 0;
    }
    if (d->save && d->test && r->test_period > 0 && s->batch % r->test_period == 0) {
        int rc = test_in_pass(d, s);
        if (rc < 0) return rc;
    }
    if (d->save && d->test && s->pass == 0 && d->steps == 10) return check_line(d);
    return 0;
}

/* One pass over the training data (or its first max_batches batches); one
 * batch ahead when the ops prefetch. */
static int run_pass(pd_driver *d, pass_state *s)
{
    pd_batch *b, *next = NULL;
    int rc = 1, ended = 0;
    /* resumed inside this pass: read the batches already trained, unused */
    while (s->batch < s->skip && (rc = pd_reader_next(d->train, &b)) == 1) {
        s->before += b->n;
        pd_reader_release(d->train, b);
        s->batch++;
    }
    if (rc != 1) return rc;
    int max = d->r->max_batches;
    while (!(max && s->batch >= max)) {
        if (next) {
            b = next;
            next = NULL;
        } else if ((rc = pd_reader_next(d->train, &b)) != 1) {
            break;
        }
        if (d->ops->prefetch && !(max && s->batch + 1 >= max)) {
            int more = pd_reader_next(d->train, &next);
            if (more < 0) {
                pd_reader_release(d->train, b);
                rc = more;
                break;
            }
            if (more == 0) {
                next = NULL;
                ended = 1; /* b is the pass's last */
            }
        }
        if (d->stop && *d->stop)
            rc = pd_err_set(PD_EINTR, "interrupted");
        else
            rc = one_batch(d, s, b, next);
        pd_reader_release(d->train, b);
        if (rc < 0 || (rc = after_batch(d, s)) < 0 || ended) break;
    }
    if (next) pd_reader_release(d->train, next);
    if (rc >= 0 && !ended && max && s->batch >= max) {
        /* drain the rest of the pass */
        while ((rc = pd_reader_next(d->train, &b)) == 1) pd_reader_release(d->train, b);
    }
    return rc;
}

/* After a pass: its test point on the curves, and SAVE_DIR/curves.svg
 * rewritten (a failure is a warning: training goes on). */
static void draw_curves(pd_driver *d, pass_state *s, const double *tested)
{
    pd_curves_test(s->curves, d->step0 + d->steps, s->pass, tested[0], tested + 1);
    if (pd_mkdir_p(d->r->save_dir) < 0 || pd_curves_write(s->curves, d->r->save_dir) < 0)
        PD_WARN("loss curves not written: %s", pd_err_msg());
}

static int end_pass(pd_driver *d, pass_state *s, pd_keep *keep)
{
    const pd_step_ops *ops = d->ops;
    int rc;
    d->pass = s->pass;
    d->batch = s->batch;
    if (ops->pass_end && (rc = ops->pass_end(d->ctx, d->net, s->pass)) < 0) return rc;
    double secs = pd_now() - s->t0;
    if (d->save && ops->sync_model && (rc = ops->sync_model(d->ctx, d->net)) < 0) return rc;
    if (ops->release && s->pass + 1 >= d->r->passes) ops->release(d->ctx);
    if (s->skip > 0 && s->batch > s->skip)
        PD_INFO("pass %d was resumed after its batch %d: the train cost below is of batches %d to %d, trained since "
                "the restart", s->pass, s->skip, s->skip + 1, s->batch);
    else if (s->skip > 0)
        PD_INFO("pass %d: its batches were all trained before the restart, so it has no train cost here", s->pass);
    double *tested = pd_xcalloc((size_t)d->r->nmetrics + 1, sizeof *tested);
    pd_pass_counts n = {.samples = s->samples, .before = s->before, .secs = secs, .sum = s->sum};
    rc = pd_pass_end(d->net, d->save ? d->test : NULL, keep, d->save, s->pass, &n, tested);
    if (rc == 0 && s->curves) draw_curves(d, s, tested);
    free(tested);
    if (rc < 0) return rc;
    if (ops->pass_done && (rc = ops->pass_done(d->ctx, d->net, s->pass)) < 0) return rc;
    long skipped = pd_reader_skipped(d->train); /* of the first pass read: said once */
    if (skipped > d->skipped)
        PD_WARN("%ld malformed line%s skipped in each pass (data.on_error = \"skip\")", skipped,
                skipped > 1 ? "s" : "");
    d->skipped = skipped;
    /* the test part of one file (uci_housing, data.test the same file)
     * skips the lines said above */
    int own_file = d->r->test && d->r->train && strcmp(d->r->test, d->r->train) != 0;
    long tskipped = d->save && d->test && own_file ? pd_reader_skipped(d->test) : 0;
    if (tskipped > d->test_skipped)
        PD_WARN("%ld malformed line%s skipped in the test data each time it is read (data.on_error = \"skip\")",
                tskipped, tskipped > 1 ? "s" : "");
    if (tskipped > d->test_skipped) d->test_skipped = tskipped;
    return 0;
}

/* Whether training ends after this pass because of early stopping: local
 * training when keep says so; in a distributed job every trainer asks
 * (ops->decide) what the one that evaluates the test set decided. Returns
 * 1 (stop), 0 or an error. */
static int early_stop(pd_driver *d, pd_keep *keep, int pass)
{
    if (d->r->early_stop <= 0 || pass + 1 >= d->r->passes) return 0;
    if (!d->ops->decide) return d->early_stop && keep->stop;
    int stop = 0, rc = d->ops->decide(d->ctx, pass, d->save && keep->stop, &stop);
    if (rc < 0) return rc;
    if (stop && !d->save) PD_INFO("early stopping: trainer 0 ended the job after pass %d", pass);
    return stop;
}

/* The passes, from start_pass on. */
static int passes(pd_driver *d, pd_keep *keep, pd_curves *curves)
{
    int rc = 0, of = 0;
    double last_progress = 0; /* the first batch shows (the launcher: the job has trained) */
    for (int pass = d->start_pass; pass < d->r->passes && rc == 0; pass++) {
        pass_state s = {.pass = pass, .t0 = pd_now(), .last_progress = last_progress, .of = of,
                        .skip = pass == d->start_pass ? d->start_batch : 0, .curves = d->save ? curves : NULL};
        if ((rc = run_pass(d, &s)) < 0) break;
        if (d->stop && *d->stop) rc = pd_err_set(PD_EINTR, "interrupted");
        else rc = end_pass(d, &s, keep);
        last_progress = s.last_progress;
        of = s.batch;
        if (board) pd_progress_show(board);
        if (rc == 0 && (rc = early_stop(d, keep, pass)) != 0) {
            if (rc > 0) rc = 0;
            break;
        }
    }
    return rc;
}

/* A fresh run whose save_dir holds the passes of an earlier one: said, as
 * those it does not write over stay, and `best` will link this run's. */
static void earlier_passes(const pd_recipe *r)
{
    DIR *dir = opendir(r->save_dir);
    if (!dir) return;
    int n = 0, lo = INT_MAX, hi = -1, pass;
    char tail;
    for (struct dirent *e; (e = readdir(dir));)
        if (sscanf(e->d_name, "pass-%d%c", &pass, &tail) == 1 && pass >= 0) {
            n++;
            lo = PD_MIN(lo, pass);
            hi = PD_MAX(hi, pass);
        }
    closedir(dir);
    if (n)
        PD_WARN("%s/ already holds %d pass%s of an earlier run (pass-%05d to pass-%05d): this run writes over those "
                "of its own pass numbers, leaves the others, and %s/best will link this run's best", r->save_dir, n,
                n > 1 ? "es" : "", lo, hi, r->save_dir);
}

int pd_drive(pd_driver *d)
{
    pd_progress p;
    int rc0;
    /* where the passes go, checked now, not after the first pass */
    if (d->save && (rc0 = pd_dir_writable(d->r->save_dir, "settings.save_dir")) < 0) return rc0;
    if (d->save && !d->start_pass && !d->start_batch) earlier_passes(d->r);
    /* a signal stops training even while it waits on the reader, and a
     * slow file (a network disk) is no hang: a trainer heartbeats meanwhile */
    pd_reader_set_stop(d->train, d->stop);
    pd_reader_set_tick(d->train, d->net->tick, d->net->tick_ctx);
    pd_reader_set_tick(d->test, d->net->tick, d->net->tick_ctx);
    pd_keep keep;
    pd_keep_init(&keep, d->r);
    pd_curves curves;
    pd_curves_init(&curves, d->r);
    /* resumed: the run so far, as the last life drew it up to the checkpoint */
    int rc = 0;
    if (d->save && (d->start_pass || d->start_batch)) {
        pd_curves_load(&curves, d->r->save_dir, d->step0);
        rc = pd_keep_resume(&keep, curves.test, curves.ntest, 3 + curves.nm, d->start_pass);
    }
    if (!d->status_lines) {
        char title[160];
        snprintf(title, sizeof title, "%s %s", d->early_stop ? "paddle train" : "paddle trainer", d->r->path);
        pd_progress_init(&p, title, d->r->passes, 0);
        pd_progress_state(&p, "trainer", "localhost", PD_ST_TRAINING);
        board = p.live ? &p : NULL;
    }
    if (rc == 0) rc = passes(d, &keep, &curves);
    if (board) {
        pd_progress_state(&p, "trainer", "localhost",
                          rc == 0 ? PD_ST_DONE : rc == PD_EINTR ? PD_ST_STOPPED : PD_ST_FAILED);
        pd_progress_end(&p, rc == 0 ? "trained" : rc == PD_EINTR ? "stopped" : "failed");
        board = NULL;
    }
    if (!d->status_lines) pd_progress_free(&p);
    pd_keep_free(&keep);
    pd_curves_free(&curves);
    return rc;
}
