/*
 * progress.h - a job's progress as people watch it: every role with its
 * host and state, the pass, how much of it is done, the job's samples/s,
 * the last train and test costs, elapsed time and ETA.
 *
 * On a terminal (core/term.h) it is the status block at the bottom of the
 * screen; elsewhere it prints one summary line per pass. `paddle run`'s
 * supervisor fills it from the lines its roles write (a trainer started
 * with --status_lines also writes a progress line, PD_PROGRESS, that the
 * supervisor consumes and never shows); `paddle train`'s loop fills it
 * itself.
 *
 *     pd_progress p;
 *     pd_progress_init(&p, "paddle run fit_a_line.lua", r->passes, 1);
 *     pd_progress_state(&p, "trainer 0", "localhost", PD_ST_STARTING);
 *     if (pd_progress_line(&p, "trainer 0", "localhost", line)) ... // consumed
 *     pd_progress_show(&p);        // often: draws when due
 *     pd_progress_end(&p, "done"); // the block erased, a last line printed
 */
#ifndef PD_PROGRESS_H
#define PD_PROGRESS_H

#include <stddef.h>

#define PD_PROGRESS "#paddle-progress " /* a trainer's progress line */

enum {
    PD_ST_STARTING, PD_ST_WAITING, PD_ST_TRAINING, PD_ST_SERVING, PD_ST_RESTARTING,
    PD_ST_STOPPING, PD_ST_DONE, PD_ST_FAILED, PD_ST_STOPPED,
};

typedef struct pd_prog_role {
    char name[32];          /* "trainer 0" */
    char host[64];
    int state;              /* PD_ST_* */
    int pass, batch;        /* trainers: where it is */
    int reported;           /* ... known from its own lines (in this life of the job) */
    int batches;            /* batches of its previous pass (0: not known yet) */
    long samples;           /* of this pass so far, in secs seconds */
    double secs, cost;      /* cost: mean train cost of this pass so far */
    double rate;            /* its last samples/s */
} pd_prog_role;

typedef struct pd_progress {
    char title[160];
    int passes;             /* the recipe's */
    double t0;              /* the job started */
    double t_first, f_first; /* first progress seen and the fraction done then: for the ETA */
    pd_prog_role *roles;
    int nroles, cap;
    int pass_done;          /* trainer 0's last pass done, -1: none */
    double train_cost;      /* ... its train cost */
    char test[160];         /* ... its test cost and metrics ("test cost 23.5, test rmse 4.85") */
    int live;               /* the block on a terminal */
    int summary;            /* not live: print a summary line per pass */
} pd_progress;

/* live when stderr is a terminal (pd_term_start); summary: print a line per
 * pass when it is not. */
void pd_progress_init(pd_progress *p, const char *title, int passes, int summary);
/* The summary line of pass `pass` (0-based), done by trainer 0, at rate
 * samples/s; its elapsed time and ETA as of now. */
int pd_progress_summary(const pd_progress *p, int pass, double rate, char *buf, size_t len);
/* The role called name on host (added when new). */
pd_prog_role *pd_progress_role(pd_progress *p, const char *name, const char *host);
void pd_progress_state(pd_progress *p, const char *name, const char *host, int state);
/* Every role's state (restarting, stopping). Roles done or failed keep theirs
 * unless all is set. Restarting: the ETA is measured again from the next
 * progress line. */
void pd_progress_all(pd_progress *p, int state, int all);
/* A line role name on host wrote (a glog line, or a PD_PROGRESS line).
 * Returns 1 for a PD_PROGRESS line: consumed, not to be shown or logged. */
int pd_progress_line(pd_progress *p, const char *name, const char *host, const char *line);
/* Draw the block when due. */
void pd_progress_show(pd_progress *p);
/* Erase the block for good and print the job's last state on one line,
 * "paddle: <how>: 3 of 10 passes done, train cost ..." (how NULL: nothing
 * printed). */
void pd_progress_end(pd_progress *p, const char *how);
void pd_progress_free(pd_progress *p);

/* A trainer's PD_PROGRESS line (with its newline) into buf. */
int pd_progress_format(char *buf, size_t len, int pass, int batch, int batches, long samples, double secs,
                       double cost);
/* "1h02m", "3m05s", "12s" */
void pd_progress_duration(double secs, char *buf, size_t len);

#endif
