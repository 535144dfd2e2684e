/*
 * progress.c - a job's progress: the status block on a terminal, a summary
 * line per pass elsewhere. See progress.h.
 */
#include "progress.h"
#include "../core/pd.h"
#include "../core/term.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const state_names[] = {
    "starting", "waiting for pservers", "training", "serving", "restarting",
    "stopping", "done", "failed", "stopped",
};

void pd_progress_init(pd_progress *p, const char *title, int passes, int summary)
{
    memset(p, 0, sizeof *p);
    snprintf(p->title, sizeof p->title, "%s", title);
    p->passes = passes;
    p->t0 = pd_now();
    p->pass_done = -1;
    p->train_cost = NAN;
    p->live = pd_term_start();
    p->summary = summary && !p->live;
}

void pd_progress_free(pd_progress *p)
{
    free(p->roles);
    p->roles = NULL;
    p->nroles = p->cap = 0;
}

pd_prog_role *pd_progress_role(pd_progress *p, const char *name, const char *host)
{
    for (int i = 0; i < p->nroles; i++)
        if (!strcmp(p->roles[i].name, name) && !strcmp(p->roles[i].host, host)) return &p->roles[i];
    PD_GROW(&p->roles, &p->cap, p->nroles + 1);
    pd_prog_role *r = &p->roles[p->nroles++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->host, sizeof r->host, "%s", host);
    r->cost = NAN;
    return r;
}

void pd_progress_state(pd_progress *p, const char *name, const char *host, int state)
{
    pd_progress_role(p, name, host)->state = state;
}

void pd_progress_all(pd_progress *p, int state, int all)
{
    for (int i = 0; i < p->nroles; i++) {
        int s = p->roles[i].state;
        if (all || (s != PD_ST_DONE && s != PD_ST_FAILED && s != PD_ST_STOPPED)) p->roles[i].state = state;
        if (state == PD_ST_RESTARTING) p->roles[i].reported = 0; /* where it is: from its next life's lines */
    }
    if (state == PD_ST_RESTARTING) p->t_first = 0; /* the ETA: from the restarted job's first progress */
}

void pd_progress_duration(double secs, char *buf, size_t len)
{
    long s = isfinite(secs) && secs > 0 ? (long)(secs + 0.5) : 0;
    if (s >= 3600) snprintf(buf, len, "%ldh%02ldm", s / 3600, s / 60 % 60);
    else if (s >= 60) snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, len, "%lds", s);
}

int pd_progress_format(char *buf, size_t len, int pass, int batch, int batches, long samples, double secs,
                       double cost)
{
    return snprintf(buf, len, PD_PROGRESS "pass %d batch %d of %d samples %ld secs %.3f cost %.6g\n", pass, batch,
                    batches, samples, secs, cost);
}

/* The trainer that is furthest behind (the job's pass), or NULL. */
static const pd_prog_role *slowest(const pd_progress *p)
{
    const pd_prog_role *best = NULL;
    for (int i = 0; i < p->nroles; i++) {
        const pd_prog_role *r = &p->roles[i];
        if (strncmp(r->name, "trainer", 7) || r->state != PD_ST_TRAINING || !r->reported) continue;
        if (!best || r->pass < best->pass || (r->pass == best->pass && r->batch < best->batch)) best = r;
    }
    return best;
}

/* How much of the job is done, 0..1 (NAN: not known yet). */
static double fraction(const pd_progress *p, double *of_pass)
{
    const pd_prog_role *r = slowest(p);
    *of_pass = NAN;
    if (!r || p->passes <= 0) return p->pass_done >= 0 ? (p->pass_done + 1.0) / p->passes : NAN;
    if (r->batches > 0) *of_pass = PD_MIN(1.0, (double)r->batch / r->batches);
    return (r->pass + (isnan(*of_pass) ? 0 : *of_pass)) / p->passes;
}

static double job_rate(const pd_progress *p)
{
    double rate = 0;
    for (int i = 0; i < p->nroles; i++)
        if (p->roles[i].state == PD_ST_TRAINING) rate += p->roles[i].rate;
    return rate;
}

/* "elapsed 12s, ETA 3m05s" */
static void times(const pd_progress *p, double f, char *buf, size_t len)
{
    char el[32], eta[32] = "?";
    double now = pd_now();
    /* from the first progress line: the start's time left out, and what a
     * resumed job had done before it (none yet: not known) */
    pd_progress_duration(now - p->t0, el, sizeof el);
    if (p->t_first > 0 && !isnan(f) && f > p->f_first)
        pd_progress_duration((now - p->t_first) * (1 - f) / (f - p->f_first), eta, sizeof eta);
    snprintf(buf, len, "elapsed %s, ETA %s", el, eta);
}

/* "pass 12 (13 of 1000)  43%  52000 samples/s": the pass numbered from 0 as
 * the logs and the summary lines number it, then how far into the job */
static void pass_text(const pd_progress *p, double of_pass, char *buf, size_t len)
{
    const pd_prog_role *r = slowest(p);
    int pass = r ? r->pass : p->pass_done + 1;
    pass = PD_MAX(0, PD_MIN(pass, p->passes - 1));
    int n = snprintf(buf, len, "pass %d (%d of %d)", pass, pass + 1, p->passes);
    if (!isnan(of_pass)) n += snprintf(buf + n, len - (size_t)n, "  %3.0f%%", of_pass * 100);
    if (r) snprintf(buf + n, len - (size_t)n, "  %.0f samples/s", job_rate(p));
}

static void render(pd_progress *p)
{
    char lines[PD_TERM_LINES][PD_TERM_COLS];
    const char *ptr[PD_TERM_LINES];
    int cols, rows, n = 0;
    pd_term_size(&cols, &rows);
    double of_pass, f = fraction(p, &of_pass);
    char t[64];
    times(p, f, t, sizeof t);
    snprintf(lines[n++], PD_TERM_COLS, "-- %s  %s", p->title, t);
    pass_text(p, of_pass, lines[n++], PD_TERM_COLS);
    /* trainer 0's last pass, or the current pass so far before the first ends */
    const pd_prog_role *tr = slowest(p);
    double cost = !isnan(p->train_cost) || !tr ? p->train_cost : tr->cost;
    char ctext[32] = "-";
    if (!isnan(cost)) snprintf(ctext, sizeof ctext, "%.5g", cost);
    snprintf(lines[n++], PD_TERM_COLS, "train cost %s%s%s", ctext, p->test[0] ? "  " : "", p->test);
    /* the roles: as many as fit in half the window (one line at least), then how many more */
    int room = PD_MAX(1, PD_MIN(PD_TERM_LINES, PD_MAX(2, rows / 2)) - n);
    for (int i = 0; i < p->nroles; i++) {
        const pd_prog_role *r = &p->roles[i];
        if (i == room - 1 && p->nroles > room) {
            snprintf(lines[n++], PD_TERM_COLS, "  ... and %d more roles", p->nroles - i);
            break;
        }
        int k = snprintf(lines[n], PD_TERM_COLS, "  %-10s %-12s %s", r->name, r->host, state_names[r->state]);
        if (r->state == PD_ST_TRAINING && r->reported && k > 0 && k < PD_TERM_COLS)
            snprintf(lines[n] + k, PD_TERM_COLS - (size_t)k, "  pass %d, batch %d", r->pass, r->batch);
        n++;
    }
    for (int i = 0; i < n; i++) ptr[i] = lines[i];
    pd_term_set(ptr, n);
}

void pd_progress_show(pd_progress *p)
{
    if (!p->live) return;
    render(p);
    pd_term_tick(0);
}

/* The summary line of a pass trainer 0 finished (not on a terminal), the
 * pass numbered from 0 as the roles' logs number it. Its
 * share of the job is that pass's, not the slowest trainer's: another
 * node's lines can reach the launcher later than trainer 0's. */
int pd_progress_summary(const pd_progress *p, int pass, double rate, char *buf, size_t len)
{
    char t[64];
    times(p, p->passes > 0 ? PD_MIN(1.0, (pass + 1.0) / p->passes) : NAN, t, sizeof t);
    return snprintf(buf, len, "paddle: pass %d done (%d of %d): train cost %.6g%s%s, %.0f samples/s, %s\n", pass,
                    pass + 1, p->passes, p->train_cost, p->test[0] ? ", " : "", p->test, rate, t);
}

static void summary_line(pd_progress *p, int pass, double rate)
{
    char buf[512];
    int n = pd_progress_summary(p, pass, rate, buf, sizeof buf);
    fflush(stdout);
    pd_term_write(1, buf, (size_t)PD_MIN(n, (int)sizeof buf - 1));
}

/* "pass 3 done: 202 samples in 0.01 s (27478 samples/s), train cost 664.549, test cost 260.483, ..." */
static void pass_done(pd_progress *p, pd_prog_role *r, const char *msg)
{
    int pass;
    double rate = 0;
    if (sscanf(msg, "pass %d done:", &pass) != 1) return;
    const char *s = strstr(msg, " samples/s)");
    const char *o = s ? s : msg;
    while (s && o > msg && o[-1] != '(') o--;
    if (s) rate = atof(o);
    r->pass = pass + 1;
    r->batch = 0;
    r->reported = 1;
    r->samples = 0;
    r->secs = 0;
    if (s) r->rate = rate;
    if (strcmp(r->name, "trainer 0") && strcmp(r->name, "trainer")) return;
    const char *c = strstr(msg, "train cost ");
    p->train_cost = c ? atof(c + 11) : NAN;
    const char *t = strstr(msg, ", test cost ");
    if (t) snprintf(p->test, sizeof p->test, "%s", t + 2);
    p->pass_done = pass;
    if (p->summary) {
        double job = 0;
        for (int i = 0; i < p->nroles; i++) job += !strncmp(p->roles[i].name, "trainer", 7);
        summary_line(p, pass, rate * PD_MAX(1.0, job)); /* the trainers share the pass */
    }
}

/* A PD_PROGRESS line. */
static void progress(pd_progress *p, pd_prog_role *r, const char *line)
{
    int pass, batch, of;
    long samples;
    double secs, cost;
    if (sscanf(line, PD_PROGRESS "pass %d batch %d of %d samples %ld secs %lf cost %lf", &pass, &batch, &of,
               &samples, &secs, &cost) != 6)
        return;
    r->state = PD_ST_TRAINING;
    r->pass = pass;
    r->batch = batch;
    r->reported = 1;
    r->batches = of;
    r->samples = samples;
    r->secs = secs;
    r->cost = cost;
    if (secs > 0) r->rate = samples / secs;
    if (p->t_first == 0) {
        double of_pass;
        p->t_first = pd_now();
        p->f_first = fraction(p, &of_pass);
    }
}

int pd_progress_line(pd_progress *p, const char *name, const char *host, const char *line)
{
    pd_prog_role *r = pd_progress_role(p, name, host);
    if (!strncmp(line, PD_PROGRESS, strlen(PD_PROGRESS))) {
        progress(p, r, line);
        return 1;
    }
    const char *msg = strstr(line, "] "); /* after the glog head */
    msg = msg ? msg + 2 : line;
    if (strstr(msg, "Server listening on ")) r->state = PD_ST_SERVING;
    else if (strstr(msg, ": connecting to ") || strstr(msg, "not ready endpoints")) r->state = PD_ST_WAITING;
    else if (strstr(msg, ": parameters ready;")) r->state = PD_ST_TRAINING;
    else if (!strncmp(msg, "pass ", 5) && strstr(msg, " done: ")) pass_done(p, r, msg);
    else if ((!strncmp(msg, "trainer ", 8) && strstr(msg, " finished: ")) || strstr(msg, "every trainer finished"))
        r->state = PD_ST_DONE;
    return 0;
}

void pd_progress_end(pd_progress *p, const char *how)
{
    if (p->live) pd_term_stop();
    p->live = 0;
    if (!how) return;
    double of_pass;
    char t[64], buf[600];
    times(p, fraction(p, &of_pass), t, sizeof t);
    char *eta = strstr(t, ", ETA");
    if (eta) *eta = '\0';
    int n = snprintf(buf, sizeof buf, "paddle: %s: %d of %d passes done, train cost %.6g%s%s, %s\n", how,
                     p->pass_done + 1, p->passes, p->train_cost, p->test[0] ? ", " : "", p->test, t);
    fflush(stdout);
    pd_term_write(2, buf, (size_t)PD_MIN(n, (int)sizeof buf - 1));
}
