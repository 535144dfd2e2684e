/*
 * supervisor.h - THE job supervisor: it starts the roles of a job, streams
 * their output, notices how each ends, and stops them.
 *
 * What it watches are its members: role processes (children of this
 * process, each in its own process group) and node agents (one SSH exec
 * channel per node, run by the launcher). The same code runs in three
 * places:
 *
 *   paddle run, no hosts   one agent in this process over every role of the
 *                          plan (its channel to the launcher is in-process)
 *   paddle node            the agent on a cluster node over the roles placed
 *                          there; its channel to the launcher is stdin
 *   paddle run, hosts      the launcher: one member per node (remote.c
 *                          deploys, then hands the channels over)
 *
 *     pd_agent_opts o = {.roles = plan.roles, .nroles = plan.nroles};
 *     int status = pd_agent_run(recipe, &o);    // 0, 1 or 130
 *
 * Ctrl+C, a member that ends badly, or the end of the launcher's channel
 * stops every member: SIGTERM to a role's process group (EOF to a node's
 * channel), SIGKILL (closing the channel) after PD_STOP_GRACE seconds.
 */
#ifndef PD_SUPERVISOR_H
#define PD_SUPERVISOR_H

#include "../core/recipe.h"

#include "plan.h"
#include "ssh.h"
#include <stddef.h>
#include <stdint.h>

#define PD_STOP_GRACE 4.0  /* seconds from SIGTERM (channel EOF) to SIGKILL */
#define PD_KILL_WAIT 1.0   /* seconds for what SIGKILL ended to be reaped */
#define PD_LINE_MAX 4096   /* a longer output line is cut into pieces this long */

/* --- lines: the one splitter of output streams into lines ------------------ */

typedef void (*pd_line_fn)(void *ctx, char *line);

typedef struct pd_lines {
    char buf[PD_LINE_MAX];
    size_t len;
} pd_lines;

/* Call fn for every complete line in buf[0..n) (without its '\n'). */
void pd_lines_feed(pd_lines *l, const char *buf, size_t n, pd_line_fn fn, void *ctx);
/* At the end of the stream: call fn for an unfinished last line. */
void pd_lines_flush(pd_lines *l, pd_line_fn fn, void *ctx);

/* --- the supervisor ---------------------------------------------------------- */

typedef struct pd_sup pd_sup;

/* A line a node's agent wrote (is_err: on its stderr). */
typedef void (*pd_node_line_fn)(void *ctx, char *line, int is_err);

/* A supervisor with no members. It takes SIGINT, SIGTERM, SIGHUP and SIGCHLD
 * (and ignores SIGPIPE) for as long as it lives. NULL on failure. */
pd_sup *pd_sup_new(void);
/* Add a node's agent on its exec channel, running `trainers` trainers; the
 * supervisor owns the channel (not the session). Once every node's agent
 * said its trainers finished, each node still running hears so (a node's
 * pservers serve the trainers elsewhere until then). Returns the member's
 * index. */
int pd_sup_add_node(pd_sup *s, const char *host, pd_ssh *ssh, pd_ssh_chan *chan, int trainers, pd_node_line_fn fn,
                    void *ctx);
/* Output of member m that arrived before it was added. */
void pd_sup_feed(pd_sup *s, int m, const char *buf, size_t n);
/* The job's restarts so far. */
int pd_sup_restarts_done(const pd_sup *s);
/* Whether the connection to node member m broke (or m is no node member). */
int pd_sup_node_lost(const pd_sup *s, int m);
/* Run until every member ended well (0), one ended badly (1: the job is
 * stopped, the failure reported), a signal came (130: stopped), or one
 * ended badly with a restart left (PD_SUP_RESTART: said, every member
 * stopped, the backoff waited: pd_sup_clear(), add the members again and
 * start them from the last checkpoint). */
int pd_sup_run(pd_sup *s);
#define PD_SUP_RESTART 3
/* Restart the job this many times (job.restarts) before a failure ends it;
 * checkpoints: the recipe sets settings.checkpoint_dir (a restart goes on
 * from the last one; without, from the first pass); resumed: the job was
 * started with --resume. */
void pd_sup_set_restarts(pd_sup *s, int restarts, int checkpoints, int resumed);
/* Whether a restart starts the roles with --resume: the job was started
 * with it, or has trained (a fresh job restarted before it trained a batch
 * starts fresh again, not from an earlier job's checkpoint). */
int pd_sup_restart_resumes(const pd_sup *s);
/* The launcher: a node whose agent wrote nothing (not even its heartbeat)
 * for this many seconds is dead (settings.heartbeat_timeout; 0: never). */
void pd_sup_set_heartbeat(pd_sup *s, double timeout);
/* Serve GET /metrics on bind:r->metrics_port (bind NULL: every interface)
 * while the supervisor lives, from the trainers' lines it reads; 0 when
 * metrics_port is 0. 0 or PD_EIO (message set). */
int pd_sup_serve_metrics(pd_sup *s, const pd_recipe *r, const char *bind);
/* Show the job's progress on board (the launcher's; not owned): every line
 * of the roles goes to it, and their states. */
struct pd_progress;
void pd_sup_set_progress(pd_sup *s, struct pd_progress *board);
/* Forget every member, each of them ended; restarts done are kept. */
void pd_sup_clear(pd_sup *s);
/* The last signal that ends a job (SIGINT, SIGTERM, SIGHUP) that arrived, or
 * 0: for waits outside pd_sup_run (reconnecting to a node). */
int pd_sup_signalled(void);
/* Stop every member still running; see supervisor.c. */
void pd_sup_stop_all(pd_sup *s);
void pd_sup_free(pd_sup *s);

/* --- the agent ------------------------------------------------------------------ */

typedef struct pd_agent_opts {
    const pd_role *roles;    /* the roles to run here, pservers first */
    int nroles;
    const char *init_model;  /* trainer 0 starts from this model */
    const char *cluster;     /* --cluster file, passed on to the roles */
    /* on a node (`paddle node`): NULL / -1 in local mode */
    const char *endpoints;   /* the job's pserver endpoints, for trainers */
    const uint8_t *secret;   /* the launcher's secret (local: a new one) */
    int upstream_fd;         /* the launcher's channel: EOF ends the job */
    const char *bind;        /* pservers listen on this address */
    int resume;              /* roles start from the last complete checkpoint (--resume) */
} pd_agent_opts;

/* Run the roles to their end. Returns the exit status: 0 when the trainers
 * finished, 1 when a role failed, 2 for a job without pservers, 130 when
 * interrupted. Local mode (upstream_fd < 0) prints the job's first and last
 * lines. */
int pd_agent_run(const pd_recipe *r, const pd_agent_opts *o);

/* The directories a job started here writes, locked against a second job
 * started in the same place while it runs (pd_dir_lock): log/
 * (PD_LOCK_LOG), settings.save_dir (PD_LOCK_SAVE), settings.checkpoint_dir
 * (PD_LOCK_CKPT, where set). 0, or 2 with the message said on stderr. */
enum { PD_LOCK_LOG = 1, PD_LOCK_SAVE = 2, PD_LOCK_CKPT = 4 };
int pd_job_lock(const pd_recipe *r, const char *cmd, int which);

#endif
