/* env.c - reading the role from PaddlePaddle's environment variables. */
#include "env.h"
#include "plan.h"
#include "../core/pd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *var(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int to_int(const char *name, const char *v, int lo, int hi, int *out)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi)
        return pd_err_set(PD_EINVAL, "%s=%s: must be an integer from %d to %d", name, v, lo, hi);
    *out = (int)x;
    return 0;
}

/* The same meaning from both schemes: they must agree when both are set. */
static int pick(const char *a, const char *b, const char **out, const char **which)
{
    const char *va = var(a), *vb = var(b);
    if (va && vb && strcmp(va, vb) != 0)
        return pd_err_set(PD_EINVAL, "%s=%s and %s=%s contradict each other", a, va, b, vb);
    *out = va ? va : vb;
    *which = va ? a : b;
    return 0;
}

static int count_list(const char *s)
{
    int n = 1;
    for (; *s; s++) n += *s == ',';
    return n;
}

/* The pservers: Fluid's IPs + port, or Fleet's ip:port list (they must
 * agree when both are set). *pport: PADDLE_PSERVER_PORT or NULL. */
static int env_pservers(pd_env_role *e, const char **pport)
{
    int rc;
    const char *ips = var("PADDLE_PSERVER_IPS"), *list = var("PADDLE_PSERVERS_IP_PORT_LIST");
    char fluid_list[sizeof e->endpoints] = "";
    *pport = var("PADDLE_PSERVER_PORT");
    if (ips) {
        if (!*pport) return pd_err_set(PD_EINVAL, "PADDLE_PSERVER_IPS is set but PADDLE_PSERVER_PORT is missing");
        int port;
        if ((rc = to_int("PADDLE_PSERVER_PORT", *pport, 1, 65535, &port)) < 0) return rc;
        const char *p = ips;
        while (*p) {
            const char *end = strchr(p, ',');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            size_t cur = strlen(fluid_list);
            if (len == 0 || cur + len + 16 >= sizeof fluid_list)
                return pd_err_set(PD_EINVAL, "PADDLE_PSERVER_IPS=%s is malformed or too long", ips);
            snprintf(fluid_list + cur, sizeof fluid_list - cur, "%s%.*s:%d", cur ? "," : "", (int)len, p, port);
            p = end ? end + 1 : p + len;
        }
    }
    if (list && ips && strcmp(list, fluid_list) != 0)
        return pd_err_set(PD_EINVAL, "PADDLE_PSERVERS_IP_PORT_LIST=%s contradicts PADDLE_PSERVER_IPS and "
                                     "PADDLE_PSERVER_PORT (%s)", list, fluid_list);
    const char *eps = list ? list : (ips ? fluid_list : NULL);
    if (!eps)
        return pd_err_set(PD_EINVAL, "the pservers are not given: set PADDLE_PSERVER_IPS and PADDLE_PSERVER_PORT "
                                     "(or PADDLE_PSERVERS_IP_PORT_LIST)");
    if (strlen(eps) >= sizeof e->endpoints) return pd_err_set(PD_EINVAL, "the pserver list is too long");
    strcpy(e->endpoints, eps);
    e->npservers = count_list(eps);
    return 0;
}

/* No role variable: the rank of mpirun or srun decides. */
static int env_rank_role(pd_env_role *e)
{
    int rc;
    const char *rank = var("OMPI_COMM_WORLD_RANK"), *rank_var = "OMPI_COMM_WORLD_RANK";
    const char *size = var("OMPI_COMM_WORLD_SIZE"), *size_var = "OMPI_COMM_WORLD_SIZE";
    strcpy(e->scheme, "mpi");
    if (!rank && var("PMI_RANK")) rank = var("PMI_RANK"), rank_var = "PMI_RANK", size = var("PMI_SIZE"),
                                  size_var = "PMI_SIZE";
    if (!rank && var("SLURM_PROCID")) {
        rank = var("SLURM_PROCID"), rank_var = "SLURM_PROCID";
        size = var("SLURM_NTASKS"), size_var = "SLURM_NTASKS";
        strcpy(e->scheme, "slurm");
    }
    if (!rank)
        return pd_err_set(PD_EINVAL, "the role is not given: set PADDLE_TRAINING_ROLE (or TRAINING_ROLE) to "
                                     "PSERVER or TRAINER, or run under mpirun or srun");
    int r, n = e->npservers + e->ntrainers;
    if ((rc = to_int(rank_var, rank, 0, 1 << 20, &r)) < 0) return rc;
    if (size) {
        int sz;
        if ((rc = to_int(size_var, size, 1, 1 << 20, &sz)) < 0) return rc;
        if (sz != n)
            return pd_err_set(PD_EINVAL, "%s=%d but the job has %d pservers + %d trainers = %d processes",
                              size_var, sz, e->npservers, e->ntrainers, n);
    }
    if (r >= n) return pd_err_set(PD_EINVAL, "%s=%d is beyond the job's %d processes", rank_var, r, n);
    e->kind = r < e->npservers ? PD_ROLE_PSERVER : PD_ROLE_TRAINER;
    e->id = r < e->npservers ? r : r - e->npservers;
    return 0;
}

/* Which pserver am I: my address (PADDLE_CURRENT_IP, or POD_IP and a port)
 * in the list. */
static int env_pserver_id(pd_env_role *e, const char *pport)
{
    int rc;
    char me[300];
    const char *cur = var("PADDLE_CURRENT_IP"), *pod = var("POD_IP"), *port = var("PADDLE_PORT");
    if (cur && pod && strcmp(cur, pod) != 0)
        return pd_err_set(PD_EINVAL, "PADDLE_CURRENT_IP=%s and POD_IP=%s contradict each other", cur, pod);
    const char *ip = cur ? cur : pod;
    if (!ip) return pd_err_set(PD_EINVAL, "this pserver's address is missing: set PADDLE_CURRENT_IP (or "
                                          "POD_IP and PADDLE_PORT)");
    if (!cur && !port && !pport) return pd_err_set(PD_EINVAL, "POD_IP is set but PADDLE_PORT is missing");
    int p;
    if ((rc = to_int(port ? "PADDLE_PORT" : "PADDLE_PSERVER_PORT", port ? port : pport ? pport : "", 1, 65535,
                     &p)) < 0) {
        if (!port && !pport)
            return pd_err_set(PD_EINVAL, "this pserver's port is missing: set PADDLE_PORT or PADDLE_PSERVER_PORT");
        return rc;
    }
    snprintf(me, sizeof me, "%s:%d", ip, p);
    e->id = -1;
    int k = 0;
    for (const char *s = e->endpoints; s; k++) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len == strlen(me) && strncmp(s, me, len) == 0) e->id = k;
        s = end ? end + 1 : NULL;
    }
    if (e->id < 0)
        return pd_err_set(PD_EINVAL, "this pserver's address %s (%s) is not in the pserver list %s", me,
                          cur ? "PADDLE_CURRENT_IP" : "POD_IP and PADDLE_PORT", e->endpoints);
    return 0;
}

/* A pserver binds to the list's address for its id. */
static int env_bind(pd_env_role *e)
{
    char me[300];
    const char *s = e->endpoints;
    for (int k = 0; k < e->id; k++) s = strchr(s, ',') + 1;
    const char *end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    snprintf(me, sizeof me, "%.*s", (int)len, s);
    char *colon = strrchr(me, ':');
    if (!colon) return pd_err_set(PD_EINVAL, "pserver entry '%s' has no port", me);
    *colon = '\0';
    int rc = to_int("the pserver list's port", colon + 1, 1, 65535, &e->port);
    if (rc < 0) return rc;
    if (strlen(me) >= sizeof e->bind) return pd_err_set(PD_EINVAL, "pserver address '%s' is too long", me);
    memcpy(e->bind, me, strlen(me) + 1);
    return 0;
}

int pd_env_role_get(pd_env_role *e)
{
    int rc;
    memset(e, 0, sizeof *e);
    const char *role, *role_var, *pport;
    if ((rc = pick("PADDLE_TRAINING_ROLE", "TRAINING_ROLE", &role, &role_var)) < 0) return rc;
    strcpy(e->scheme, var("PADDLE_TRAINING_ROLE") ? "fluid" : "fleet");
    if ((rc = env_pservers(e, &pport)) < 0) return rc;

    const char *tr, *tr_var;
    if ((rc = pick("PADDLE_TRAINERS", "PADDLE_TRAINERS_NUM", &tr, &tr_var)) < 0) return rc;
    if (!tr) return pd_err_set(PD_EINVAL, "the number of trainers is not given: set PADDLE_TRAINERS (or "
                                          "PADDLE_TRAINERS_NUM)");
    if ((rc = to_int(tr_var, tr, 1, 4096, &e->ntrainers)) < 0) return rc;

    if (!role) {
        if ((rc = env_rank_role(e)) < 0) return rc;
    } else if (strcasecmp(role, "PSERVER") == 0) {
        e->kind = PD_ROLE_PSERVER;
        if ((rc = env_pserver_id(e, pport)) < 0) return rc;
    } else if (strcasecmp(role, "TRAINER") == 0) {
        e->kind = PD_ROLE_TRAINER;
        const char *id = var("PADDLE_TRAINER_ID");
        if (!id) return pd_err_set(PD_EINVAL, "PADDLE_TRAINER_ID is missing (this trainer's index, 0 to %d)",
                                   e->ntrainers - 1);
        if ((rc = to_int("PADDLE_TRAINER_ID", id, 0, e->ntrainers - 1, &e->id)) < 0) return rc;
    } else {
        return pd_err_set(PD_EINVAL, "%s=%s: must be PSERVER or TRAINER", role_var, role);
    }
    return e->kind == PD_ROLE_PSERVER ? env_bind(e) : 0;
}
