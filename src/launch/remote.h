/*
 * remote.h - running a job on a cluster over SSH.
 *
 * For each host, in parallel: connect (host key checked, key or agent
 * authentication), copy this very executable to ROOT/.paddle/bin/ unless the
 * same bytes are there already, dispatch the workspace into the job
 * directory ROOT/JOB<timestamp> (files cached on the node by hash, so an
 * unchanged file is never sent twice), write nodefile, then start one node
 * agent (`paddle node`) over one exec channel that stays open for the whole
 * job. The agent starts the roles placed on its node; their output comes
 * back prefixed [host role id]. Closing the channel (the launcher ended, or
 * the connection was lost) ends the agent and its roles.
 */
#ifndef PD_REMOTE_H
#define PD_REMOTE_H

#include "../core/recipe.h"

typedef struct pd_remote_opts {
    const char *cluster;     /* --cluster file: dispatched and passed on */
    const char *init_model;
    int accept_new;          /* --accept-new-host-keys */
    int resume;              /* --resume: the last job started from here, from its checkpoint */
} pd_remote_opts;

int pd_remote_run(const pd_recipe *r, const pd_remote_opts *o);

#endif
