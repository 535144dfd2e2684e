/* keep.c - early stopping and model retention. */
#include "keep.h"
#include "../core/fs.h"
#include "../core/log.h"
#include "../core/pd.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void pd_keep_init(pd_keep *k, const pd_recipe *r)
{
    memset(k, 0, sizeof *k);
    k->r = r;
    k->metric = -1;
    k->best_pass = -1;
    for (int i = 0; r->early_stop_metric && i < r->nmetrics; i++)
        if (!strcmp(r->metrics[i].name, r->early_stop_metric)) k->metric = i;
    /* "auto": an AUC should go up; costs and error rates down */
    if (r->early_stop_mode && !strcmp(r->early_stop_mode, "max"))
        k->maximize = 1;
    else if (k->metric >= 0 && (!r->early_stop_mode || !strcmp(r->early_stop_mode, "auto")))
        k->maximize = !strcmp(r->layers[r->metrics[k->metric].layer].type, "auc");
}

void pd_keep_free(pd_keep *k) { free(k->saved); }

const char *pd_keep_what(const pd_keep *k) { return k->metric < 0 ? "test cost" : k->r->metrics[k->metric].name; }

int pd_keep_pass(pd_keep *k, int pass, double test_cost, const double *metrics)
{
    const pd_recipe *r = k->r;
    double v = k->metric < 0 ? test_cost : metrics ? metrics[k->metric] : NAN;
    k->improved = 0;
    if (!isnan(v) && (k->best_pass < 0 || (k->maximize ? v > k->best : v < k->best))) {
        k->best = v;
        k->best_pass = pass;
        k->improved = 1;
    }
    if (r->early_stop > 0 && k->best_pass >= 0 && pass - k->best_pass >= r->early_stop) k->stop = 1;
    int period = r->save_period > 0 ? r->save_period : 1;
    return (pass + 1) % period == 0 || k->improved || k->stop || pass == r->passes - 1;
}

/* SAVE_DIR/best -> pass-NNNNN, replaced atomically. */
static int link_best(const pd_keep *k)
{
    char target[32];
    snprintf(target, sizeof target, "pass-%05d", k->best_pass);
    char *tmp = pd_xasprintf("%s/best.tmp", k->r->save_dir), *link = pd_xasprintf("%s/best", k->r->save_dir);
    int rc = 0;
    unlink(tmp);
    if (symlink(target, tmp) < 0 || rename(tmp, link) < 0)
        rc = pd_err_set(PD_EIO, "cannot link %s to %s: %s", link, target, strerror(errno));
    free(tmp);
    free(link);
    return rc;
}

int pd_keep_saved(pd_keep *k, int pass)
{
    int rc = 0;
    PD_GROW(&k->saved, &k->cap_saved, k->nsaved + 1);
    k->saved[k->nsaved++] = pass;
    if (k->improved && (rc = link_best(k)) < 0) return rc;
    int keep = k->r->keep_models;
    if (keep <= 0) return 0;
    /* the oldest beyond the last keep, except the best */
    int n = 0;
    for (int i = 0; i < k->nsaved; i++) {
        int p = k->saved[i];
        if (i >= k->nsaved - keep || p == k->best_pass) {
            k->saved[n++] = p;
            continue;
        }
        char *dir = pd_xasprintf("%s/pass-%05d", k->r->save_dir, p);
        if (rc == 0) rc = pd_remove_dir(dir);
        free(dir);
    }
    k->nsaved = n;
    return rc;
}

int pd_keep_resume(pd_keep *k, const double *rows, int nrows, int width, int start_pass)
{
    /* each pass's last row (a pass run twice, in two lives, has two) */
    int *last = pd_xmalloc(((size_t)start_pass + 1) * sizeof *last);
    for (int p = 0; p < start_pass; p++) last[p] = -1;
    for (int i = 0; i < nrows; i++) {
        double p = rows[(size_t)i * (size_t)width + 1];
        if (p >= 0 && p < start_pass) last[(int)p] = i;
    }
    /* the passes the last life saved and kept: those the replay saves whose
     * directory is still there (not another run's of other pass numbers) */
    for (int p = 0; p < start_pass; p++) {
        if (last[p] < 0) continue;
        const double *row = rows + (size_t)last[p] * (size_t)width;
        if (!pd_keep_pass(k, p, row[2], width > 3 ? row + 3 : NULL)) continue;
        char *dir = pd_xasprintf("%s/pass-%05d", k->r->save_dir, p);
        if (access(dir, F_OK) == 0) {
            PD_GROW(&k->saved, &k->cap_saved, k->nsaved + 1);
            k->saved[k->nsaved++] = p;
        }
        free(dir);
    }
    free(last);
    k->improved = k->stop = 0;
    if (k->best_pass < 0) return 0;
    PD_INFO("resumed at pass %d: the best %s so far is pass %d's (%.6g), %d pass%s ago", start_pass, pd_keep_what(k),
            k->best_pass, k->best, start_pass - k->best_pass, start_pass - k->best_pass > 1 ? "es" : "");
    char *best = pd_xasprintf("%s/pass-%05d", k->r->save_dir, k->best_pass);
    int rc = access(best, F_OK) == 0 ? link_best(k) : 0;
    free(best);
    return rc;
}
