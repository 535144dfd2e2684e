/* plan.c - placement of pservers and trainers on hosts. */
#include "plan.h"
#include "../core/pd.h"

#include <stdlib.h>
#include <string.h>

const char *pd_role_name(int kind)
{
    return kind == PD_ROLE_PSERVER ? "pserver" : "trainer";
}

/* Index of the host whose spec or host name is name, or -1. */
static int find_host(const pd_recipe *r, const char *name)
{
    for (int i = 0; i < r->nhosts; i++)
        if (strcmp(r->hosts[i].spec, name) == 0 || strcmp(r->hosts[i].host, name) == 0)
            return i;
    return -1;
}

static int place(const pd_recipe *r, char **names, int nnames, int k, int *host)
{
    if (r->nhosts == 0) {
        *host = -1;
        return 0;
    }
    if (nnames == 0) {
        *host = k % r->nhosts;
        return 0;
    }
    const char *name = names[k % nnames];
    if ((*host = find_host(r, name)) < 0)
        return pd_err_set(PD_ERECIPE, "%s: placement names host '%s', which is not in cluster.hosts",
                          r->path, name);
    return 0;
}

int pd_plan_make(pd_plan *p, const pd_recipe *r)
{
    int rc;
    memset(p, 0, sizeof *p);
    p->local = r->nhosts == 0;
    p->nroles = r->pservers + r->trainers;
    p->roles = pd_xcalloc((size_t)p->nroles + 1, sizeof *p->roles);
    int per_host_ps[4096] = {0};
    int nports = r->ports_num + r->ports_num_for_sparse;
    for (int i = 0; i < r->pservers; i++) {
        pd_role *ro = &p->roles[i];
        ro->kind = PD_ROLE_PSERVER;
        ro->id = i;
        ro->nports = nports;
        if ((rc = place(r, r->pserver_hosts, r->npserver_hosts, i, &ro->host)) < 0) goto err;
        if (ro->host >= 0) {
            int j = ro->host < 4096 ? per_host_ps[ro->host]++ : 0;
            ro->port = r->port + j * nports;
            if (ro->port + nports - 1 > 65535) {
                rc = pd_err_set(PD_ERECIPE, "%s: too many pservers on host %s for port %d: ports run past 65535",
                                r->path, r->hosts[ro->host].spec, r->port);
                goto err;
            }
        }
    }
    for (int i = 0; i < r->trainers; i++) {
        pd_role *ro = &p->roles[r->pservers + i];
        ro->kind = PD_ROLE_TRAINER;
        ro->id = i;
        if ((rc = place(r, r->trainer_hosts, r->ntrainer_hosts, i, &ro->host)) < 0) goto err;
    }
    return 0;
err:
    pd_plan_free(p);
    return rc;
}

void pd_plan_free(pd_plan *p)
{
    free(p->roles);
    memset(p, 0, sizeof *p);
}
