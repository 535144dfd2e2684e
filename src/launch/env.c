/* env.c - reading the role from PaddlePaddle's environment variables. */
#include "env.h"
#include "plan.h"
#include "rendezvous.h"
#include "secret.h"
#include "../ps/proto.h"
#include "../core/pd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

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
    if (!eps) return 1;
    if (strlen(eps) >= sizeof e->endpoints) return pd_err_set(PD_EINVAL, "the pserver list is too long");
    /* one endpoint named twice would be two pservers on one port */
    for (const char *a = eps; *a;) {
        size_t la = strcspn(a, ",");
        for (const char *b = a[la] ? a + la + 1 : a + la; *b;) {
            size_t lb = strcspn(b, ",");
            if (la == lb && !strncmp(a, b, la))
                return pd_err_set(PD_EINVAL, "the pserver list %s names %.*s twice", eps, (int)la, a);
            b += lb + (b[lb] ? 1 : 0);
        }
        a += la + (a[la] ? 1 : 0);
    }
    strcpy(e->endpoints, eps);
    e->npservers = count_list(eps);
    return 0;
}

/* The rank and size of mpirun or srun. 0, or 1 when there is none. */
static int env_rank(pd_env_role *e)
{
    static const char *const vars[][3] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpi"},
                                          {"PMI_RANK", "PMI_SIZE", "mpi"},
                                          {"SLURM_PROCID", "SLURM_NTASKS", "slurm"}};
    int rc;
    e->rank = -1;
    for (size_t k = 0; k < PD_COUNT(vars); k++) {
        const char *rank = var(vars[k][0]), *size = var(vars[k][1]);
        if (!rank) continue;
        strcpy(e->rank_var, vars[k][0]);
        strcpy(e->size_var, vars[k][1]);
        strcpy(e->scheme, vars[k][2]);
        if ((rc = to_int(vars[k][0], rank, 0, 1 << 20, &e->rank)) < 0) return rc;
        if (size && (rc = to_int(vars[k][1], size, 1, 1 << 20, &e->size)) < 0) return rc;
        if (e->size && e->rank >= e->size)
            return pd_err_set(PD_EINVAL, "%s=%d is beyond %s=%d", vars[k][0], e->rank, vars[k][1], e->size);
        return 0;
    }
    return 1;
}

/* No role variable, a pserver list: the rank of mpirun or srun decides. */
static int env_rank_role(pd_env_role *e)
{
    int rc = env_rank(e), n = e->npservers + e->ntrainers;
    if (rc < 0) return rc;
    if (rc == 1)
        return pd_err_set(PD_EINVAL, "the role is not given: set PADDLE_TRAINING_ROLE (or TRAINING_ROLE) to "
                                     "PSERVER or TRAINER, or run under mpirun or srun");
    if (e->size && e->size != n)
        return pd_err_set(PD_EINVAL, "%s=%d but the job has %d pservers + %d trainers = %d processes",
                          e->size_var, e->size, e->npservers, e->ntrainers, n);
    if (e->rank >= n) return pd_err_set(PD_EINVAL, "%s=%d is beyond the job's %d processes", e->rank_var, e->rank, n);
    e->kind = e->rank < e->npservers ? PD_ROLE_PSERVER : PD_ROLE_TRAINER;
    e->id = e->rank < e->npservers ? e->rank : e->rank - e->npservers;
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

/* Volcano's svc plugin: VC_PS_HOSTS (names, ports from PADDLE_PORT or the
 * default) becomes the pserver list. 0, or 1 when it is not set. */
static int env_volcano(pd_env_role *e)
{
    const char *hosts = var("VC_PS_HOSTS"), *port = var("PADDLE_PORT");
    int rc, p = 7164;
    if (!hosts) return 1;
    if (port && (rc = to_int("PADDLE_PORT", port, 1, 65535, &p)) < 0) return rc;
    size_t l = 0;
    for (const char *h = hosts; *h;) {
        const char *end = strchr(h, ',');
        int len = end ? (int)(end - h) : (int)strlen(h);
        int n = snprintf(e->endpoints + l, sizeof e->endpoints - l, "%s%.*s%s", l ? "," : "", len, h, "");
        if (len == 0 || n < 0 || l + (size_t)n + 8 >= sizeof e->endpoints)
            return pd_err_set(PD_EINVAL, "VC_PS_HOSTS=%s is malformed or too long", hosts);
        l += (size_t)n;
        if (!memchr(h, ':', (size_t)len)) l += (size_t)snprintf(e->endpoints + l, sizeof e->endpoints - l, ":%d", p);
        h = end ? end + 1 : h + len;
    }
    e->npservers = count_list(e->endpoints);
    const char *num = var("VC_PS_NUM");
    int np;
    if (num && ((rc = to_int("VC_PS_NUM", num, 1, 4096, &np)) < 0 || np != e->npservers))
        return rc < 0 ? rc : pd_err_set(PD_EINVAL, "VC_PS_NUM=%s but VC_PS_HOSTS names %d hosts", num, e->npservers);
    strcpy(e->scheme, "volcano");
    return 0;
}

/* Volcano: this pod's role from TRAINING_ROLE, else from its host name in
 * VC_PS_HOSTS / VC_WORKER_HOSTS; its index is VC_TASK_INDEX. */
static int env_volcano_role(pd_env_role *e, const char *role)
{
    const char *idx = var("VC_TASK_INDEX"), *ps = var("VC_PS_HOSTS");
    char me[256] = "";
    int rc;
    if (!idx) return pd_err_set(PD_EINVAL, "VC_PS_HOSTS is set but VC_TASK_INDEX (this pod's index) is missing");
    if (!role) {
        gethostname(me, sizeof me - 1);
        size_t ml = strlen(me);
        const char *hit = ml ? strstr(ps, me) : NULL;
        int in_ps = hit && (hit == ps || hit[-1] == ',') && (hit[ml] == '\0' || strchr(",.:", hit[ml]));
        role = in_ps ? "PSERVER" : "TRAINER";
    }
    e->kind = strcasecmp(role, "PSERVER") == 0 ? PD_ROLE_PSERVER : PD_ROLE_TRAINER;
    int n = e->kind == PD_ROLE_PSERVER ? e->npservers : e->ntrainers;
    if ((rc = to_int("VC_TASK_INDEX", idx, 0, n - 1, &e->id)) < 0) return rc;
    return 0;
}

/* The number of trainers: the Fluid/Fleet count, PaddleFlow's endpoint list,
 * Volcano's, or Kubeflow's PADDLE_TRAINER_NUM. 0 when none says. */
static int env_trainers(pd_env_role *e)
{
    static const char *const nums[] = {"PADDLE_TRAINERS_NUM", "VC_WORKER_NUM", "PADDLE_TRAINER_NUM"};
    const char *tr, *tr_var;
    int rc;
    if ((rc = pick("PADDLE_TRAINERS", "PADDLE_TRAINERS_NUM", &tr, &tr_var)) < 0) return rc;
    for (size_t k = 1; !tr && k < PD_COUNT(nums); k++) tr = var(nums[k]), tr_var = nums[k];
    const char *list = var("PADDLE_TRAINER_ENDPOINTS");
    if (!list) list = var("VC_WORKER_HOSTS");
    if (tr) {
        if ((rc = to_int(tr_var, tr, 1, 4096, &e->ntrainers)) < 0) return rc;
        snprintf(e->nt_var, sizeof e->nt_var, "%s", tr_var);
        if (list && count_list(list) != e->ntrainers)
            return pd_err_set(PD_EINVAL, "%s=%s but the trainer list (%s) names %d", tr_var, tr,
                              var("PADDLE_TRAINER_ENDPOINTS") ? "PADDLE_TRAINER_ENDPOINTS" : "VC_WORKER_HOSTS",
                              count_list(list));
    } else if (list) {
        e->ntrainers = count_list(list);
        strcpy(e->nt_var, var("PADDLE_TRAINER_ENDPOINTS") ? "PADDLE_TRAINER_ENDPOINTS" : "VC_WORKER_HOSTS");
    }
    return 0;
}

/* The master: --master, PADDLE_MASTER, the first node of the Slurm step,
 * or this host under a one-host mpirun. */
static int env_master(pd_env_role *e, const char *opt)
{
    const char *m = opt ? opt : var("PADDLE_MASTER");
    const char *nodes = var("SLURM_STEP_NODELIST") ? var("SLURM_STEP_NODELIST") : var("SLURM_JOB_NODELIST");
    int rc;
    e->master_self = e->rank >= 0 ? e->rank == 0 : -1;
    if (m) {
        strcpy(e->master_from, opt ? "--master" : "PADDLE_MASTER");
        if (strlen(m) >= sizeof e->master) return pd_err_set(PD_EINVAL, "%s=%s is too long", e->master_from, m);
        strcpy(e->master, m);
        char *colon = strrchr(e->master, ':');
        if (colon) {
            *colon = '\0';
            if ((rc = to_int(e->master_from, colon + 1, 1, 65535, &e->master_port)) < 0) return rc;
        }
        if (!e->master[0]) return pd_err_set(PD_EINVAL, "%s=%s names no host", e->master_from, m);
    } else if (e->rank >= 0 && strcmp(e->scheme, "slurm") == 0 && nodes) {
        if ((rc = pd_hostlist_first(nodes, e->master, sizeof e->master)) < 0) return rc;
        strcpy(e->master_from, "the first node of SLURM_STEP_NODELIST");
    } else if (e->rank >= 0 && strcmp(e->scheme, "mpi") == 0) {
        const char *local = var("OMPI_COMM_WORLD_LOCAL_SIZE");
        if (local && e->size && atoi(local) != e->size)
            return pd_err_set(PD_EINVAL, "mpirun spans several hosts (OMPI_COMM_WORLD_LOCAL_SIZE=%s of %s=%d): "
                              "set --master=HOST:PORT (or PADDLE_MASTER) to rank 0's host", local, e->size_var, e->size);
        strcpy(e->master, "127.0.0.1");
        strcpy(e->master_from, "this host, under mpirun");
    } else {
        return pd_err_set(PD_EINVAL, "the pservers are not given: set PADDLE_PSERVER_IPS and PADDLE_PSERVER_PORT "
                                     "(or PADDLE_PSERVERS_IP_PORT_LIST), or PADDLE_MASTER, or run under mpirun or srun");
    }
    return 0;
}

/* No pserver list: the job forms by the rendezvous. */
static int env_rendezvous(pd_env_role *e, const char *role, const char *master)
{
    int rc = env_rank(e);
    if (rc < 0 || (rc = env_master(e, master)) < 0) return rc;
    e->rendezvous = 1;
    if (!e->size) {
        const char *nn = var("PADDLE_NNODES");
        if (!nn)
            return pd_err_set(PD_EINVAL, "the number of processes is not given: set PADDLE_NNODES (with %s)",
                              e->master_from);
        if ((rc = to_int("PADDLE_NNODES", nn, 1, 1 << 20, &e->size)) < 0) return rc;
        strcpy(e->size_var, "PADDLE_NNODES");
    }
    if (!e->rank_var[0]) strcpy(e->rank_var, "rank");
    if (strcmp(e->master_from, "PADDLE_MASTER") == 0) strcpy(e->scheme, "kubeflow");
    const char *ns = var("PADDLE_SERVER_NUM");
    if (ns) {
        if ((rc = to_int("PADDLE_SERVER_NUM", ns, 0, 4096, &e->npservers)) < 0) return rc;
        strcpy(e->np_var, "PADDLE_SERVER_NUM");
    }
    e->kind_req = !role ? -1 : strcasecmp(role, "PSERVER") == 0 ? PD_ROLE_PSERVER : PD_ROLE_TRAINER;
    const char *h = var("PADDLE_CURRENT_IP") ? var("PADDLE_CURRENT_IP") : var("POD_IP");
    if (h && strlen(h) < sizeof e->host) strcpy(e->host, h);
    return 0;
}

int pd_env_counts(pd_env_role *e, int recipe_p, int recipe_t, int p_given)
{
    const char *from = e->np_var[0] || e->nt_var[0] ? "the environment" : "the recipe";
    if (!e->np_var[0]) e->npservers = recipe_p;
    if (!e->nt_var[0]) e->ntrainers = (e->np_var[0] || p_given) ? e->size - e->npservers : recipe_t;
    if (p_given && !e->nt_var[0]) from = "--pservers";
    if (e->ntrainers < 1 || e->npservers + e->ntrainers != e->size)
        return pd_err_set(PD_EINVAL, "%s=%d processes, but %s makes the job %d pservers + %d trainers "
                          "(--pservers=P makes ranks 0..P-1 the pservers and the rest trainers)",
                          e->size_var, e->size, from, e->npservers, e->ntrainers);
    if (!e->master_port) {
        uint8_t s[PD_SECRET], job[PD_JOB_ID];
        if (pd_secret_read(-1, s) < 0) return PD_EAUTH;
        pd_job_id(s, job);
        e->master_port = 20000 + ((job[0] << 8) | job[1]) % 10000;
    }
    return 0;
}

int pd_env_role_get(pd_env_role *e, const char *master)
{
    int rc;
    memset(e, 0, sizeof *e);
    const char *role, *role_var, *pport;
    if ((rc = pick("PADDLE_TRAINING_ROLE", "TRAINING_ROLE", &role, &role_var)) < 0) return rc;
    if (role && strcasecmp(role, "PSERVER") != 0 && strcasecmp(role, "TRAINER") != 0)
        return pd_err_set(PD_EINVAL, "%s=%s: must be PSERVER or TRAINER", role_var, role);
    strcpy(e->scheme, var("PADDLE_TRAINING_ROLE") ? "fluid" : "fleet");
    if ((rc = env_pservers(e, &pport)) < 0) return rc;
    int volcano = rc == 1 ? env_volcano(e) : 1;
    if (volcano < 0) return volcano;
    if ((rc == 1 && volcano == 1) || master) return env_rendezvous(e, role, master) < 0 ? PD_EINVAL : env_trainers(e);
    if ((rc = env_trainers(e)) < 0) return rc;
    if (!e->ntrainers) return pd_err_set(PD_EINVAL, "the number of trainers is not given: set PADDLE_TRAINERS (or "
                                                    "PADDLE_TRAINERS_NUM)");
    if (volcano == 0) {
        if ((rc = env_volcano_role(e, role)) < 0) return rc;
    } else if (!role) {
        if ((rc = env_rank_role(e)) < 0) return rc;
    } else if (strcasecmp(role, "PSERVER") == 0) {
        e->kind = PD_ROLE_PSERVER;
        if ((rc = env_pserver_id(e, pport)) < 0) return rc;
    } else {
        e->kind = PD_ROLE_TRAINER;
        const char *id = var("PADDLE_TRAINER_ID");
        if (!id) return pd_err_set(PD_EINVAL, "PADDLE_TRAINER_ID is missing (this trainer's index, 0 to %d)",
                                   e->ntrainers - 1);
        if ((rc = to_int("PADDLE_TRAINER_ID", id, 0, e->ntrainers - 1, &e->id)) < 0) return rc;
    }
    return e->kind == PD_ROLE_PSERVER ? env_bind(e) : 0;
}
