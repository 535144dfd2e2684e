/*
 * plan.h - where each role of a job runs: host, ports.
 *
 * Default placement is the seeds': one pserver and one trainer per host,
 * spread round-robin when the recipe asks for other counts; the recipe may
 * name pserver_hosts / trainer_hosts instead. A recipe without hosts is a
 * local simulated cluster: every role on this machine (host -1), ports
 * picked free when the job starts.
 */
#ifndef PD_PLAN_H
#define PD_PLAN_H

#include "../core/recipe.h"

enum { PD_ROLE_PSERVER = 0, PD_ROLE_TRAINER = 1 };

typedef struct pd_role {
    int kind;   /* PD_ROLE_PSERVER or PD_ROLE_TRAINER */
    int id;     /* index among roles of its kind */
    int host;   /* index into recipe hosts, or -1 for this machine */
    int port;   /* pservers: first port (0: pick a free one at start) */
    int nports; /* pservers: ports_num + ports_num_for_sparse */
} pd_role;

typedef struct pd_plan {
    int local;  /* no hosts: everything on this machine */
    int nroles;
    pd_role *roles;  /* pservers first, then trainers */
} pd_plan;

int pd_plan_make(pd_plan *p, const pd_recipe *r);
void pd_plan_free(pd_plan *p);

/* The roles placed on host `host` as text for `paddle node --roles`:
 * "ps:0:7164,tr:0:0" (kind:id:port). malloc'd. */
char *pd_plan_roles_spec(const pd_plan *p, int host);
/* Parse that text into *roles (malloc'd, *n of them). PD_EINVAL when bad. */
int pd_plan_parse_roles(const char *spec, pd_role **roles, int *n);
const char *pd_role_name(int kind);

#endif
