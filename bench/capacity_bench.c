/*
 * capacity_bench.c - what one pserver carries: K simulated trainers push
 * precomputed gradients to ONE pserver and pull the new values
 * (pd_client_step), in sync and in async mode, for dense models of 1M and
 * 10M floats and for a sparse embedding table (rows pulled and pushed per
 * step). One line per case: the trainers' steps per second together, the
 * time of one trainer's step (in sync mode: of one global step), the bytes
 * per second through the pserver (in + out) and, sparse, the rows per
 * second (pulled + pushed).
 *
 *     build/musl/capacity_bench                 every case (minutes on 2 cores)
 *     build/musl/capacity_bench quick           K = 1, 4; 1M floats and sparse
 *     build/musl/capacity_bench K=2,4 model=10M mode=sync steps=5
 *
 * Each trainer is a process of its own, connected as trainer i of K; the
 * trainers compute nothing, so what is measured is the pserver (framing,
 * checks, averaging, SGD) and the loopback between them. Per case: the
 * pserver and the trainers start, the trainers connect, initialise and take
 * one warm-up step, then all start together and take the same number of
 * steps; the time runs from that start to the last trainer's end. Every
 * child is reaped in every outcome: a case that fails or hangs kills its
 * processes by pid and says why, and the next case runs.
 */
#include "../src/core/log.h"
#include "../src/core/pd.h"
#include "../src/core/rng.h"
#include "../src/data/batch.h"
#include "../src/launch/secret.h"
#include "../src/lua/recipe.h"
#include "../src/nn/net.h"
#include "../src/ps/client.h"
#include "../src/ps/server.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TRAINERS 64
#define DENSE_COLS 10000        /* the dense model: one fc weight of rows x DENSE_COLS */
#define TABLE_ROWS 100000       /* the sparse model: one table of TABLE_ROWS x TABLE_DIM */
#define TABLE_DIM 32
#define ROWS_PER_STEP 4096      /* distinct rows each trainer pulls and pushes per step */
#define ROW_STRIDE 7919         /* a prime that does not divide TABLE_ROWS: distinct ids */
#define START_S 180.0           /* a case's trainers must be ready within this */
#define MIN_GBPS 0.05           /* slower than this through the pserver: the case has hung */

typedef struct model {
    const char *name;
    long floats;                /* dense: the weight's floats; sparse: 0 */
} model;

static const model models[] = {{"1M", 1000000}, {"10M", 10000000}, {"sparse", 0}};
static const int all_k[] = {1, 2, 4, 8, 16, 32};

/* What a trainer tells the bench, one atomic pipe write each. */
enum { REP_READY, REP_DONE, REP_FAILED };
typedef struct report {
    int trainer, phase;
    double bytes, rows;         /* REP_DONE: through the pserver in the timed steps */
    char msg[400];              /* REP_FAILED: why */
} report;

_Static_assert(sizeof(report) <= PIPE_BUF, "a report must be one atomic pipe write");

typedef struct bench_case {
    int k;
    const char *mode;
    const model *m;
    int steps;                  /* per trainer, timed */
} bench_case;

typedef struct proc {
    pid_t pid;
    int reaped;
    int status;
} proc;

static uint8_t secret[PD_SECRET], job[PD_JOB_ID];

/* --- the recipe of a case ------------------------------------------------------ */

static int load_recipe(pd_recipe *r, const bench_case *bc)
{
    char path[] = "/tmp/pd-capacity-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return pd_err_set(PD_EIO, "mkstemp: %s", strerror(errno));
    if (bc->m->floats > 0) {
        int rows = (int)(bc->m->floats / DENSE_COLS);
        dprintf(fd, "data { train = 'x' }\nmodel = function(nn)\n  local x, y = nn.data('x', %d), nn.data('y', %d)\n"
                    "  return nn.square_error_cost(nn.fc(x, %d, { bias = false }), y)\nend\n",
                rows, DENSE_COLS, DENSE_COLS);
    } else {
        dprintf(fd, "data { train = 'x' }\nmodel = function(nn)\n"
                    "  return nn.square_error_cost(nn.embedding(nn.id('ids', %d), %d), nn.data('y', %d))\nend\n",
                TABLE_ROWS, TABLE_DIM, TABLE_DIM);
    }
    /* over TCP, as trainers of other hosts reach a pserver (not through its
     * Unix socket, as roles of its own host would) */
    dprintf(fd, "optimizer = nn.sgd { learning_rate = 0.001 }\njob { pservers = 1, trainers = %d }\n"
                "settings { mode = '%s' }\ncluster { unix_sockets = false }\n", bc->k, bc->mode);
    close(fd);
    int rc = pd_recipe_load(r, path, NULL, NULL, 0);
    unlink(path);
    return rc;
}

/* --- a trainer ---------------------------------------------------------------- */

static void send_report(int fd, int trainer, int phase, double bytes, double rows, const char *msg)
{
    report rep = {.trainer = trainer, .phase = phase, .bytes = bytes, .rows = rows};
    if (msg) snprintf(rep.msg, sizeof rep.msg, "%s", msg);
    if (write(fd, &rep, sizeof rep) != (ssize_t)sizeof rep) _exit(3);
}

/* Every parameter's gradient: a small constant, computed once. */
static void fill_gradients(pd_net *net)
{
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        size_t n = (size_t)p->rows * p->cols;
        float *g = pd_xmalloc(n * sizeof *g + 1);
        for (size_t j = 0; j < n; j++) g[j] = 1e-4f * (float)(j % 7);
        net->be->upload(p->g, g, n * sizeof *g);
        free(g);
    }
}

/* The sparse model's batch: ROWS_PER_STEP samples, one id each. */
static void make_batch(pd_batch *b)
{
    pd_slot layout[2] = {{.name = "ids", .kind = PD_SLOT_ID, .width = TABLE_ROWS},
                         {.name = "y", .kind = PD_SLOT_DENSE, .width = TABLE_DIM}};
    pd_batch_init(b, layout, 2);
    for (int i = 0; i < ROWS_PER_STEP; i++) {
        pd_slot_push_id(&b->slots[0], i, 0);
        memset(pd_slot_push_dense(&b->slots[1], i), 0, TABLE_DIM * sizeof(float));
    }
    b->n = ROWS_PER_STEP;
}

/* One step of trainer `id`: sparse, pull the rows of a fresh set of distinct
 * ids, then push their gradients; dense, push every block and pull it back. */
static int one_step(pd_client *c, pd_net *net, pd_batch *b, uint64_t *rng)
{
    int rc;
    if (b->nslots == 0) return pd_client_step(c, net);
    pd_param *p = &net->params[0];
    int32_t *ids = b->slots[0].ids;
    int32_t base = (int32_t)(pd_rng_next(rng) % TABLE_ROWS);
    for (int i = 0; i < ROWS_PER_STEP; i++) ids[i] = (int32_t)((base + (int64_t)i * ROW_STRIDE) % TABLE_ROWS);
    if ((rc = pd_net_bind(net, b)) < 0 || (rc = pd_client_pull_rows(c, net)) < 0) return rc;
    pd_param_touch(p, ids, ROWS_PER_STEP);
    rc = pd_client_step(c, net);
    for (int i = 0; i < p->ntouched; i++) p->mark[p->touched[i]] = 0;
    p->ntouched = 0;
    return rc;
}

/* Block until the bench says go (the pipe closes), keeping the
 * connections alive. */
static int wait_go(pd_client *c, int go_fd)
{
    for (;;) {
        struct pollfd pf = {.fd = go_fd, .events = POLLIN};
        int r = poll(&pf, 1, 1000);
        if (r < 0 && errno != EINTR) return pd_err_set(PD_EIO, "poll: %s", strerror(errno));
        if (r > 0) return 0;
        int rc = pd_client_heartbeat(c);
        if (rc < 0) return rc;
    }
}

static int trainer_steps(pd_client *c, pd_net *net, pd_batch *b, const bench_case *bc, int id, int rep_fd,
                         int go_fd)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
    int rc = one_step(c, net, b, &rng); /* warm-up */
    if (rc < 0) return pd_err_wrap(rc, "warm-up step");
    send_report(rep_fd, id, REP_READY, 0, 0, NULL);
    if ((rc = wait_go(c, go_fd)) < 0) return rc;
    double bytes0 = (double)(c->bytes_in + c->bytes_out);
    for (int s = 0; s < bc->steps; s++)
        if ((rc = one_step(c, net, b, &rng)) < 0) return pd_err_wrap(rc, "step %d", s);
    double rows = b->nslots ? 2.0 * ROWS_PER_STEP * bc->steps : 0;
    send_report(rep_fd, id, REP_DONE, (double)(c->bytes_in + c->bytes_out) - bytes0, rows, NULL);
    return 0;
}

/* Trainer `id` of the case, in its own process: connect, initialise, one
 * warm-up step, wait for go, the timed steps, finish. */
static int trainer_run(const pd_recipe *r, const bench_case *bc, int port, int id, int rep_fd, int go_fd)
{
    pd_layout lay;
    pd_net net;
    pd_client c;
    pd_batch b = {0};
    pd_endpoint ep = {"127.0.0.1", port};
    int rc = pd_layout_make(&lay, r, 1);
    if (rc < 0) return rc;
    if ((rc = pd_net_build(&net, r, &pd_backend_cpu, 1)) < 0) {
        pd_layout_free(&lay);
        return rc;
    }
    fill_gradients(&net);
    if (bc->m->floats == 0) make_batch(&b);
    if ((rc = pd_client_connect(&c, &lay, &ep, 1, id, secret, job, 60, NULL)) == 0) {
        if ((rc = pd_client_init(&c, &net)) == 0) rc = trainer_steps(&c, &net, &b, bc, id, rep_fd, go_fd);
        if (rc == 0) pd_client_finish(&c);
        pd_client_free(&c);
    }
    pd_batch_free(&b);
    pd_net_free(&net);
    pd_layout_free(&lay);
    return rc;
}

/* --- the processes of a case ------------------------------------------------- */

static pid_t start_server(const pd_recipe *r, int k, int *port)
{
    int p[2];
    if (pipe(p) < 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(p[0]);
        pd_server_opts o = {.id = 0, .npservers = 1, .ntrainers = k, .bind_addr = "127.0.0.1", .ready_fd = p[1],
                            .idle_timeout = START_S};
        memcpy(o.secret, secret, PD_SECRET);
        memcpy(o.job, job, PD_JOB_ID);
        int rc = pd_server_run(r, &o);
        if (rc < 0) fprintf(stderr, "capacity_bench: pserver: %s\n", pd_err_msg());
        _exit(rc < 0);
    }
    close(p[1]);
    char buf[32] = "";
    ssize_t n = pid > 0 ? read(p[0], buf, sizeof buf - 1) : 0;
    close(p[0]);
    *port = n > 0 ? atoi(buf) : 0;
    return pid;
}

static pid_t start_trainer(const pd_recipe *r, const bench_case *bc, int port, int id, const int rep[2],
                           const int go[2])
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(rep[0]);
    close(go[1]);
    int rc = trainer_run(r, bc, port, id, rep[1], go[0]);
    if (rc < 0) send_report(rep[1], id, REP_FAILED, 0, 0, pd_err_msg());
    _exit(rc < 0);
}

/* Reap what has exited; a child that failed (or, before `phase` is over,
 * the pserver) makes *why say so. Returns the children still running. */
static int reap(proc *ps, int n, char *why, size_t len)
{
    int running = 0;
    for (int i = 0; i < n; i++) {
        if (ps[i].reaped) continue;
        pid_t w = waitpid(ps[i].pid, &ps[i].status, WNOHANG);
        if (w == 0 || (w < 0 && errno == EINTR)) {
            running++;
            continue;
        }
        ps[i].reaped = 1;
        int st = ps[i].status;
        if (w > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
        if (why[0]) continue;
        const char *who = i == 0 ? "the pserver" : "a trainer";
        if (w > 0 && WIFSIGNALED(st))
            snprintf(why, len, "%s (pid %d) was killed by signal %d", who, (int)ps[i].pid, WTERMSIG(st));
        else
            snprintf(why, len, "%s (pid %d) exited with status %d", who, (int)ps[i].pid,
                     w > 0 ? WEXITSTATUS(st) : -1);
    }
    return running;
}

/* Wait for a report of `phase` from each of the k trainers until deadline;
 * 0, or -1 with *why. Sums the DONE reports into *bytes, *rows. */
static int collect(int fd, proc *ps, int n, int k, int phase, double deadline, double *bytes, double *rows,
                   char *why, size_t len)
{
    int got = 0;
    while (got < k) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, 200);
        report rep;
        if (r > 0 && read(fd, &rep, sizeof rep) == (ssize_t)sizeof rep) {
            if (rep.phase == REP_FAILED) {
                snprintf(why, len, "trainer %d: %s", rep.trainer, rep.msg);
                return -1;
            }
            if (rep.phase == phase) got++;
            if (rep.phase == REP_DONE) {
                *bytes += rep.bytes;
                *rows += rep.rows;
            }
            continue;
        }
        reap(ps, n, why, len);
        if (why[0]) return -1;
        if (pd_now() > deadline) {
            snprintf(why, len, "%d of %d trainers did not report %s within the time allowed", k - got, k,
                     phase == REP_READY ? "ready" : "done");
            return -1;
        }
    }
    return 0;
}

/* End every child: wait up to grace seconds for them to exit (0: not at
 * all), then SIGKILL by pid and reap. */
static void end_all(proc *ps, int n, double grace, char *why, size_t len)
{
    double until = pd_now() + grace;
    while (reap(ps, n, why, len) > 0 && pd_now() < until) usleep(20000);
    for (int i = 0; i < n; i++)
        if (!ps[i].reaped) kill(ps[i].pid, SIGKILL);
    for (int i = 0; i < n; i++)
        if (!ps[i].reaped) {
            while (waitpid(ps[i].pid, &ps[i].status, 0) < 0 && errno == EINTR) {}
            ps[i].reaped = 1;
        }
}

/* --- one case ----------------------------------------------------------------- */

typedef struct result {
    double secs, bytes, rows;
} result;

/* Bytes one trainer's step moves through the pserver (payload, both ways). */
static double step_bytes(const model *m)
{
    return m->floats ? 8.0 * (double)m->floats : 2.0 * ROWS_PER_STEP * (4 + 4.0 * TABLE_DIM);
}

/* Memory a case needs, roughly: per trainer the values, the gradients and a
 * step's push queued; the pserver's values and gradients, and a step's reply
 * queued for every trainer. */
static double need_bytes(const model *m, int k)
{
    double f = m->floats ? 4.0 * (double)m->floats : 8.0 * TABLE_ROWS * TABLE_DIM;
    return k * 3.5 * f + (2.0 + k) * f;
}

static double mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "MemAvailable:", 13) == 0) kb = strtod(line + 13, NULL);
    if (f) fclose(f);
    return kb * 1024;
}

/* Run one case: 0 and *res, or -1 with why. Every child is reaped. */
static int run_case(const bench_case *bc, result *res, char *why, size_t len)
{
    pd_recipe r;
    proc ps[MAX_TRAINERS + 1];
    int n = 0, port = 0, ok = 0, rep[2] = {-1, -1}, go[2] = {-1, -1};
    memset(ps, 0, sizeof ps);
    why[0] = '\0';
    if (load_recipe(&r, bc) < 0) {
        snprintf(why, len, "%s", pd_err_msg());
        return -1;
    }
    if ((ps[0].pid = start_server(&r, bc->k, &port)) < 0) {
        snprintf(why, len, "fork: %s", strerror(errno));
        goto out;
    }
    n = 1;
    if (port <= 0) {
        snprintf(why, len, "the pserver did not start");
        goto out;
    }
    /* after the pserver's fork: only the trainers hold their ends */
    if (pipe(rep) < 0 || pipe(go) < 0) {
        snprintf(why, len, "pipe: %s", strerror(errno));
        goto out;
    }
    for (int i = 0; i < bc->k; i++, n++)
        if ((ps[n].pid = start_trainer(&r, bc, port, i, rep, go)) < 0) {
            snprintf(why, len, "fork: %s", strerror(errno));
            goto out;
        }
    close(rep[1]);
    close(go[0]);
    rep[1] = go[0] = -1;
    double bytes = 0, rows = 0;
    if (collect(rep[0], ps, n, bc->k, REP_READY, pd_now() + START_S, &bytes, &rows, why, len) < 0) goto out;
    double t0 = pd_now(), allowed = 60 + bc->k * step_bytes(bc->m) * bc->steps / (MIN_GBPS * 1e9);
    close(go[1]); /* go */
    go[1] = -1;
    if (collect(rep[0], ps, n, bc->k, REP_DONE, t0 + allowed, &bytes, &rows, why, len) < 0) goto out;
    *res = (result){pd_now() - t0, bytes, rows};
    ok = 1;
out:
    end_all(ps, n, ok ? 30 : 0, why, len);
    for (int i = 0; i < 2; i++) {
        if (rep[i] >= 0) close(rep[i]);
        if (go[i] >= 0) close(go[i]);
    }
    pd_recipe_free(&r);
    return ok && !why[0] ? 0 : -1;
}

/* --- what to run ----------------------------------------------------------------- */

typedef struct config {
    int nk, k[MAX_TRAINERS];
    int nmodels;
    const model *models[3];
    int nmodes;
    const char *modes[2];
    double budget;              /* bytes through the pserver per case, roughly */
    int steps;                  /* > 0: this many steps per trainer, always */
} config;

static int parse_list(const char *arg, config *cfg)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", strchr(arg, '=') + 1);
    int kind = strncmp(arg, "K=", 2) == 0 ? 0 : strncmp(arg, "model=", 6) == 0 ? 1 : 2;
    if (kind == 0) cfg->nk = 0;
    if (kind == 1) cfg->nmodels = 0;
    if (kind == 2) cfg->nmodes = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (kind == 0) {
            int k = atoi(t);
            if (k < 1 || k > MAX_TRAINERS || cfg->nk == MAX_TRAINERS) return -1;
            cfg->k[cfg->nk++] = k;
        } else if (kind == 1) {
            int i = 0;
            while (i < 3 && strcmp(models[i].name, t) != 0) i++;
            if (i == 3 || cfg->nmodels == 3) return -1;
            cfg->models[cfg->nmodels++] = &models[i];
        } else {
            if ((strcmp(t, "sync") != 0 && strcmp(t, "async") != 0) || cfg->nmodes == 2) return -1;
            cfg->modes[cfg->nmodes++] = strcmp(t, "sync") == 0 ? "sync" : "async";
        }
    }
    return cfg->nk > 0 && cfg->nmodels > 0 && cfg->nmodes > 0 ? 0 : -1;
}

static int parse_args(int argc, char **argv, config *cfg)
{
    *cfg = (config){.nk = 6, .nmodels = 3, .nmodes = 2, .budget = 1.0e9};
    memcpy(cfg->k, all_k, sizeof all_k);
    for (int i = 0; i < 3; i++) cfg->models[i] = &models[i];
    cfg->modes[0] = "sync";
    cfg->modes[1] = "async";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "quick") == 0) {
            cfg->nk = 2;
            cfg->k[0] = 1;
            cfg->k[1] = 4;
            cfg->nmodels = 2;
            cfg->models[1] = &models[2];
            cfg->budget = 0.3e9;
        } else if (strcmp(a, "full") == 0) {
            continue;
        } else if (strncmp(a, "steps=", 6) == 0) {
            if ((cfg->steps = atoi(a + 6)) < 1) return -1;
        } else if (strncmp(a, "K=", 2) == 0 || strncmp(a, "model=", 6) == 0 || strncmp(a, "mode=", 5) == 0) {
            if (parse_list(a, cfg) < 0) return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Steps per trainer: about cfg->budget bytes through the pserver, 2 to 100. */
static int pick_steps(const config *cfg, const model *m, int k)
{
    if (cfg->steps > 0) return cfg->steps;
    double s = cfg->budget / (k * step_bytes(m));
    return s < 2 ? 2 : s > 100 ? 100 : (int)s;
}

static void header(void)
{
    double load = 0;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = 0;
        fclose(f);
    }
    printf("one pserver, K trainers (processes) on this machine: %ld cores, load average %.1f at the start\n",
           sysconf(_SC_NPROCESSORS_ONLN), load);
    printf("steps/s: every trainer's steps together; ms/step: one trainer's step (sync: one global step);\n"
           "GB/s: bytes in + out of the pserver; rows/s: sparse rows pulled + pushed (a table of %d x %d,\n"
           "%d distinct rows per trainer per step); SGD on the pserver, the trainers compute nothing\n",
           TABLE_ROWS, TABLE_DIM, ROWS_PER_STEP);
    printf("%8s %-5s %-6s %6s %9s %9s %7s %10s\n", "trainers", "mode", "model", "steps", "steps/s", "ms/step",
           "GB/s", "rows/s");
}

static int one_case(const config *cfg, const model *m, const char *mode, int k)
{
    bench_case bc = {k, mode, m, pick_steps(cfg, m, k)};
    double need = need_bytes(m, k), avail = mem_available();
    if (avail > 0 && need > 0.6 * avail) {
        printf("%8d %-5s %-6s skipped: needs about %.1f GB, %.1f GB available\n", k, mode, m->name, need / 1e9,
               avail / 1e9);
        return 0;
    }
    result res;
    char why[512];
    if (run_case(&bc, &res, why, sizeof why) < 0) {
        printf("%8d %-5s %-6s failed: %s\n", k, mode, m->name, why);
        return -1;
    }
    char rows[32] = "-";
    if (res.rows > 0) snprintf(rows, sizeof rows, "%.0f", res.rows / res.secs);
    printf("%8d %-5s %-6s %6d %9.1f %9.2f %7.2f %10s\n", k, mode, m->name, bc.steps,
           (double)k * bc.steps / res.secs, res.secs / bc.steps * 1e3, res.bytes / res.secs / 1e9, rows);
    return 0;
}

int main(int argc, char **argv)
{
    config cfg;
    if (parse_args(argc, argv, &cfg) < 0) {
        fprintf(stderr, "usage: capacity_bench [quick|full] [K=1,2,...] [model=1M,10M,sparse] [mode=sync,async] "
                        "[steps=N]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    pd_log_quiet(1);
    if (pd_secret_new(secret) < 0) {
        fprintf(stderr, "capacity_bench: %s\n", pd_err_msg());
        return 1;
    }
    pd_job_id(secret, job);
    header();
    fflush(stdout);
    int failed = 0;
    for (int i = 0; i < cfg.nmodels; i++)
        for (int j = 0; j < cfg.nmodes; j++)
            for (int x = 0; x < cfg.nk; x++) {
                failed |= one_case(&cfg, cfg.models[i], cfg.modes[j], cfg.k[x]) < 0;
                fflush(stdout);
            }
    return failed;
}
