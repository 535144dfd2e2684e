/*
 * local.h - the launcher's local mode and the supervisor of role processes.
 *
 * pd_local_run() runs a whole job on this machine: every pserver and trainer a
 * child process, output streamed back prefixed "[pserver 0]", logs in log/.
 * It returns the launcher's exit status: 0 when the trainers finished, 1 when
 * a role failed, 130 when interrupted.
 *
 * Children never outlive the launcher: each gets PR_SET_PDEATHSIG(SIGKILL)
 * and its own process group, which the launcher ends on any failure or
 * signal.
 */
#ifndef PD_LOCAL_H
#define PD_LOCAL_H

#include "../core/recipe.h"

#include "plan.h"
#include <stdint.h>

typedef struct pd_local_opts {
    const char *init_model; /* trainer 0 starts from this model */
    const char *cluster;    /* --cluster file, passed on to the roles */
    /* node agent mode (`paddle node`, on a cluster node): run only these
     * roles, with the launcher's secret, pservers on their planned ports,
     * trainers given the job's endpoints; stop when watch_fd reaches EOF
     * (the launcher went away) */
    int agent;
    int nroles;
    const pd_role *roles;
    const char *endpoints;
    const uint8_t *secret;
    int watch_fd;
    const char *bind;        /* agent: pservers listen on this address */
} pd_local_opts;

int pd_local_run(const pd_recipe *r, const pd_local_opts *o);

#endif
