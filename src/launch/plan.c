/* plan.c - placement of pservers and trainers on hosts. */
#include "plan.h"
#include "../core/pd.h"

#include <stdio.h>
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

char *pd_plan_roles_spec(const pd_plan *p, int host)
{
    char *spec = pd_xstrdup("");
    for (int i = 0; i < p->nroles; i++) {
        const pd_role *ro = &p->roles[i];
        if (ro->host != host) continue;
        char *s = pd_xasprintf("%s%s%s:%d:%d", spec, spec[0] ? "," : "", ro->kind == PD_ROLE_PSERVER ? "ps" : "tr",
                               ro->id, ro->port);
        free(spec);
        spec = s;
    }
    return spec;
}

int pd_plan_parse_roles(const char *spec, pd_role **roles, int *n)
{
    int cap = 0;
    *roles = NULL;
    *n = 0;
    for (const char *p = spec; p && *p;) {
        char kind[3];
        int id, port, used = 0;
        if (sscanf(p, "%2[a-z]:%d:%d%n", kind, &id, &port, &used) != 3 || used == 0 ||
            (strcmp(kind, "ps") && strcmp(kind, "tr")) || id < 0 || port < 0 || port > 65535 ||
            (p[used] != '\0' && (p[used] != ',' || p[used + 1] == '\0'))) {
            free(*roles);
            *roles = NULL;
            *n = 0;
            return pd_err_set(PD_EINVAL, "bad --roles '%s'", spec);
        }
        PD_GROW(roles, &cap, *n + 1);
        (*roles)[(*n)++] = (pd_role){.kind = strcmp(kind, "ps") ? PD_ROLE_TRAINER : PD_ROLE_PSERVER, .id = id,
                                     .host = -1, .port = port};
        p += used;
        if (*p == ',') p++;
    }
    return 0;
}
