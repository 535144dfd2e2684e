/*
 * main.c - paddle's subcommands.
 *
 * Every subcommand is a function taking its arguments; they return an exit
 * status. Usage errors exit 2, bad recipes exit 2, failures of the world
 * (files, network, children) exit 1.
 */
#include "core/buf.h"
#include "core/log.h"
#include "core/pd.h"
#include "core/relay.h"
#include "core/version.h"
#include "data/gen.h"
#include "backend/backend.h"
#include "launch/cli.h"
#include "launch/plan.h"
#include "launch/ssh.h"
#include "lua/recipe.h"
#include "nn/net.h"
#include "nn/predict.h"
#include "nn/train.h"
#include "launch/env.h"
#include "launch/k8s.h"
#include "launch/remote.h"
#include "launch/rendezvous.h"
#include "launch/secret.h"
#include "launch/supervisor.h"
#include "ps/layout.h"
#include "ps/server.h"
#include "ps/trainer.h"
#include "core/crypto.h"
#include "core/fs.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage;
    const char *summary;
    const char *help;
} command;

static const command *find_command(const char *name);
static void print_commands(FILE *f);


/* --- version ------------------------------------------------------------- */

/* CUDA runtime, driver and cuBLAS versions: src/backend/cuda.cu, paddle-cuda only. */
const char *pd_cuda_version(void) __attribute__((weak));

static int cmd_version(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "paddle version: unexpected argument '%s'\n", argv[1]);
        return 2;
    }
    printf("paddle %s (git %s, %s)\n", PD_VERSION, pd_build_rev(), pd_build_flavour());
    printf("  lua      %s\n", pd_lua_version());
    printf("  libssh2  %s\n", pd_ssh_version());
    printf("  crypto   %s\n", pd_ssh_crypto_version());
    printf("  blas     %s\n", pd_blas_version());
    printf("  blas core on this cpu: %s\n", pd_blas_core());
    if (pd_cuda_version) printf("  cuda     %s\n", pd_cuda_version());
    const pd_backend *cuda = pd_cuda_version ? pd_backend_get("cuda") : NULL;
    if (cuda)
        printf("  cuda     available\n");
    else if (pd_cuda_version)
        printf("  cuda     %s\n", pd_err_msg());
    else
        printf("  cuda     not in this build (make cuda builds paddle-cuda)\n");
    return 0;
}

/* --- help ---------------------------------------------------------------- */

static int cmd_help(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--help") != 0 && strcmp(argv[1], "-h") != 0) {
        const command *c = find_command(argv[1]);
        if (!c) {
            fprintf(stderr, "paddle help: unknown command '%s'\n", argv[1]);
            print_commands(stderr);
            return 2;
        }
        printf("usage: paddle %s %s\n\n%s\n\n%s", c->name, c->usage, c->summary, c->help);
        return 0;
    }
    printf("paddle %s - distributed training in the parameter-server style\n\n", PD_VERSION);
    printf("usage: paddle <command> [arguments]\n\n");
    print_commands(stdout);
    printf("\n'paddle help <command>' tells more about one.\n");
    return 0;
}

/* --- check --------------------------------------------------------------- */

static void print_recipe(const pd_recipe *r, const pd_plan *plan)
{
    printf("recipe   %s\n", r->path);
    if (r->nhosts == 0) {
        printf("cluster  local simulated cluster on this machine (no hosts)\n");
    } else {
        printf("cluster  %d host%s, root_dir %s%s%s\n", r->nhosts, r->nhosts > 1 ? "s" : "",
               r->root_dir ? r->root_dir : "(home)", r->nic ? ", nic " : "", r->nic ? r->nic : "");
        for (int i = 0; i < r->nhosts; i++)
            printf("  node %d  %s (user %s, ssh port %d)\n", i, r->hosts[i].host,
                   r->hosts[i].user ? r->hosts[i].user : "(current)", r->hosts[i].port);
    }
    printf("job      %d pserver%s, %d trainer%s, mode %s", r->pservers, r->pservers == 1 ? "" : "s",
           r->trainers, r->trainers == 1 ? "" : "s", r->mode);
    if (r->workspace) printf(", workspace %s (dispatched)", r->workspace);
    if (r->deployed) printf(", deployed %s", r->deployed);
    if (r->restarts > 0)
        printf(", restarts %d (%s)", r->restarts,
               r->checkpoint_dir ? "from the last checkpoint" : "from the first pass: no checkpoint_dir");
    printf("\n");
    for (int i = 0; i < plan->nroles; i++) {
        const pd_role *ro = &plan->roles[i];
        const char *where = ro->host < 0 ? "this machine" : r->hosts[ro->host].spec;
        if (ro->kind == PD_ROLE_PSERVER) {
            if (ro->port)
                printf("  pserver %d  on %s, ports %d-%d (%d dense, %d sparse)\n", ro->id, where, ro->port,
                       ro->port + ro->nports - 1, r->ports_num, r->ports_num_for_sparse);
            else
                printf("  pserver %d  on %s, %d ports picked free at start (%d dense, %d sparse)\n", ro->id,
                       where, ro->nports, r->ports_num, r->ports_num_for_sparse);
        } else {
            printf("  trainer %d  on %s\n", ro->id, where);
        }
    }
    printf("data     train %s", r->train);
    if (r->test) printf(", test %s", r->test);
    printf(", format %s\n", r->format);
    printf("settings batch_size %d per trainer, passes %d, seed %d, device %s", r->batch_size, r->passes, r->seed,
           r->device);
    if (r->checkpoint_dir)
        printf(", checkpoints in %s every %d steps (keep %d)", r->checkpoint_dir, r->checkpoint_period,
               r->checkpoint_keep);
    printf("\n");
    const pd_optimizer_desc *o = &r->optimizer;
    printf("optimizer %s, learning_rate %g", o->type, o->learning_rate);
    if (!strcmp(o->type, "momentum")) printf(", momentum %g", o->momentum);
    if (!strcmp(o->type, "adam")) printf(", beta1 %g, beta2 %g, epsilon %g", o->beta1, o->beta2, o->epsilon);
    if (!strcmp(o->type, "adagrad")) printf(", epsilon %g", o->epsilon);
    if (!strcmp(o->type, "rmsprop")) printf(", rho %g, epsilon %g", o->rho, o->epsilon);
    if (o->weight_decay) printf(", weight_decay %g", o->weight_decay);
    printf("\n");
    printf("model    %d layers, %ld parameters\n", r->nlayers, pd_recipe_params(r));
    for (int i = 0; i < r->nlayers; i++) {
        const pd_layer_desc *d = &r->layers[i];
        char inputs[256] = "";
        for (int j = 0; j < d->ninputs; j++) {
            size_t len = strlen(inputs);
            snprintf(inputs + len, sizeof inputs - len, "%s%s", j ? ", " : "", r->layers[d->inputs[j]].name);
        }
        printf("  %-22s %-22s size %-6d", d->name, d->type, d->size);
        if (!strcmp(d->type, "data"))
            printf(" %s%s", d->kind, d->range || !strcmp(d->kind, "dense") ? "" : " 64-bit ids");
        if (d->range) printf(" ids < %d", d->range);
        if (d->act && strcmp(d->act, "linear")) printf(" act %s", d->act);
        if (d->pool) printf(" pool %s", d->pool);
        if (!strcmp(d->type, "cos_sim")) printf(" scale %g", d->scale);
        if (d->ninputs) printf(" <- %s", inputs);
        if (i == r->cost) printf("  [cost]");
        printf("\n");
        for (int j = 0; j < d->nparams; j++) {
            const pd_param_desc *p = &d->params[j];
            if (p->hash) printf("  %24s %s [growing, %d] hash table\n", "", p->name, p->cols);
            else printf("  %24s %s [%d, %d]%s %ld\n", "", p->name, p->rows, p->cols, p->sparse ? " sparse" : "",
                        (long)p->rows * p->cols);
        }
    }
    for (int i = 0; i < r->nmetrics; i++)
        printf("metric   %s <- %s\n", r->metrics[i].name, r->layers[r->metrics[i].layer].name);
}

/* bytes as "520 B", "1.5 KiB", "2.3 MiB", "4.0 GiB" */
static const char *human(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    if (u == 0) snprintf(buf, len, "%.0f B", bytes);
    else snprintf(buf, len, "%.1f %s", bytes, units[u]);
    return buf;
}

/* The ids an id_list sample is counted with when sizing activations. */
#define SEQ_IDS_GUESS 8

/* A trainer's activation memory at batch n: every layer's output and (but
 * data layers) its gradient, rows x width x 4 bytes; id data layers hold 4
 * bytes an id. A sequence has SEQ_IDS_GUESS rows a sample. */
static double activation_bytes(const pd_recipe *r, long n)
{
    double total = 0;
    for (int i = 0; i < r->nlayers; i++) {
        const pd_layer_desc *d = &r->layers[i];
        double rows = d->seq ? (double)n * SEQ_IDS_GUESS : (double)n;
        if (strcmp(d->type, "data") != 0) total += rows * d->size * 4.0 * 2;
        else if (!strcmp(d->kind, "dense")) total += rows * d->size * 4.0;
        else total += rows * 4.0 + (d->seq ? (n + 1) * 4.0 : 0);
    }
    return total;
}

/* Per pserver: the dense blocks and table rows pd_layout_make places there,
 * each float with its gradient and the optimizer's state. */
static void print_shards(const pd_recipe *r, int kstate)
{
    pd_layout lay;
    char a[32], b[32], c[32];
    if (pd_layout_make(&lay, r, r->pservers) < 0) {
        printf("  (no shard sizes: %s)\n", pd_err_msg());
        return;
    }
    for (int s = 0; s < r->pservers; s++) {
        double dense = 0, sparse = 0;
        int nblocks = 0;
        for (int k = 0; k < lay.nblocks; k++)
            if (pd_block_owner(&lay, k) == s) {
                dense += lay.blocks[k].len * 4.0;
                nblocks++;
            }
        long rows = 0;
        for (int t = 0; t < lay.ntables; t++) {
            const pd_lparam *p = &lay.params[lay.tables[t]];
            rows += pd_rows_on(&lay, p->rows, s);
            sparse += (double)pd_rows_on(&lay, p->rows, s) * p->cols * 4.0;
        }
        printf("  pserver %d  %d dense block%s %s, %ld table rows %s; with gradients and optimizer state %s\n", s,
               nblocks, nblocks == 1 ? "" : "s", human(dense, a, sizeof a), rows, human(sparse, b, sizeof b),
               human((dense + sparse) * (2 + kstate), c, sizeof c));
    }
    pd_layout_free(&lay);
}

/* Bytes a row of each sparse table (a shared one once): what a table that
 * grows costs per row on its pserver. */
/* Growing tables: what a stored row costs on its pserver (or in paddle
 * train): its floats and optimizer state, its id, last pass and reference
 * bit (16 B), and its share of the index (4 B slots at 37-75% load). */
static void print_growing(const pd_recipe *r, int kstate)
{
    for (int i = 0; i < r->nlayers; i++)
        for (int j = 0; j < r->layers[i].nparams; j++) {
            const pd_param_desc *p = &r->layers[i].params[j];
            int first = 1;
            for (int k = 0; k < i; k++)
                for (int m = 0; m < r->layers[k].nparams; m++) first &= strcmp(r->layers[k].params[m].name, p->name) != 0;
            if (!p->hash || !first) continue;
            int raw = p->cols * 4 * (1 + kstate);
            printf("  growing    %s: %d to %d bytes per row (%d floats + %s state %d B, id and pass 16 B, index "
                   "5-11 B); min_count %ld, ttl %d, max_rows %ld", p->name, raw + 21, raw + 27, p->cols,
                   r->optimizer.type, p->cols * 4 * kstate, p->min_count, p->ttl, p->max_rows);
            if (p->max_rows > 0) {
                char a[32];
                printf(" (at most %s a pserver)", human((double)p->max_rows * (raw + 27), a, sizeof a));
            }
            printf("\n");
        }
}

static void print_tables(const pd_recipe *r, int kstate)
{
    int n = 0;
    for (int i = 0; i < r->nlayers; i++)
        for (int j = 0; j < r->layers[i].nparams; j++) {
            const pd_param_desc *p = &r->layers[i].params[j];
            int seen = 0;
            for (int k = 0; k <= i && !seen; k++)
                for (int m = 0; m < r->layers[k].nparams && !(k == i && m >= j); m++)
                    seen |= !strcmp(r->layers[k].params[m].name, p->name);
            if (!p->sparse || seen || p->hash) continue;
            printf("%s%s %d B", n++ ? ", " : "  tables     a row of ", p->name, p->cols * 4);
        }
    if (n) printf(" (x%d with its gradient and optimizer state)\n", 2 + kstate);
    print_growing(r, kstate);
}

/* What the job needs in memory, computed from the shapes alone. */
static void print_sizes(const pd_recipe *r)
{
    char a[32], b[32], c[32];
    double params = pd_recipe_params(r) * 4.0, act = activation_bytes(r, r->batch_size);
    int kstate = pd_opt_state_floats(pd_opt_from_name(r->optimizer.type));
    printf("memory   parameters %s, gradients %s, %s state %s (%d cop%s)\n", human(params, a, sizeof a),
           human(params, b, sizeof b), r->optimizer.type, human(params * kstate, c, sizeof c), kstate,
           kstate == 1 ? "y" : "ies");
    print_shards(r, kstate);
    print_tables(r, kstate);
    printf("  trainer    parameters and gradients %s, activations %s at batch %d", human(params * 2, a, sizeof a),
           human(act, b, sizeof b), r->batch_size);
    int seq = 0;
    for (int i = 0; i < r->nlayers; i++) seq |= r->layers[i].seq;
    if (seq) printf(" (sequences counted at %d ids a sample)", SEQ_IDS_GUESS);
    printf("\n  train      one process (paddle train): %s\n", human(params * (2 + kstate) + act, c, sizeof c));
}

static int load_recipe(pd_recipe *r, pd_cli *cli);
static int config_error(int rc);

/* Set by SIGINT and SIGTERM where a command stops on them. */
static volatile int stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

#define CHECK_DATA_S 10 /* after this long without a first batch, check says what it waits for */

static char check_wait_msg[700];

static void on_check_alarm(int sig)
{
    (void)sig;
    if (write(2, check_wait_msg, strlen(check_wait_msg)) < 0) {}
}

/* Open a part and read its first batch. Data that takes long (a large
 * shuffle buffer) is waited for; after CHECK_DATA_S seconds check says what
 * it waits on (a FIFO no one writes to, a network filesystem that does not
 * answer), and Ctrl+C stops it as ever. */
static int first_batch(const pd_recipe *r, int part)
{
    const char *file = part == PD_PART_TEST ? r->test : r->train;
    snprintf(check_wait_msg, sizeof check_wait_msg,
             "paddle: still reading the first batch of %.500s after %d s (a FIFO no one writes to, or a filesystem "
             "that does not answer?): Ctrl+C stops\n", file ? file : "the data", CHECK_DATA_S);
    struct sigaction al = {.sa_handler = on_check_alarm, .sa_flags = SA_RESTART}, old;
    sigaction(SIGALRM, &al, &old);
    alarm(CHECK_DATA_S);
    pd_reader *rd = NULL;
    pd_batch *b = NULL;
    int rc = pd_open_reader(&rd, r, part, 0, 1, r->batch_size);
    if (rc == 0) rc = pd_reader_next(rd, &b);
    if (rc == 1) pd_reader_release(rd, b);
    if (rd) pd_reader_close(rd);
    alarm(0);
    sigaction(SIGALRM, &old, NULL);
    return rc;
}

/* The data as `paddle train` would read it: the first batch of the train
 * part and of the test part, where the files are here. Returns 0 with the
 * "data" lines to print in *said (what was read, and what could not be
 * because it is not here: *absent), or the exit status of an error (said):
 * 2 for a mistake (the recipe's, a data line that does not parse), 1 for a
 * fault. */
static int check_data(const pd_recipe *r, pd_buf *said, int *absent)
{
    static const int parts[] = {PD_PART_TRAIN, PD_PART_TEST};
    static const char *const names[] = {"train", "test"};
    for (int i = 0; i < 2; i++) {
        if (parts[i] == PD_PART_TEST && !r->test) continue;
        int rc = first_batch(r, parts[i]);
        if (rc == PD_ENOENT) { /* not here: on the nodes, or not made yet */
            pd_buf_printf(said, "data     %s part not read: %s%s\n", names[i], pd_err_msg(),
                          r->nhosts ? " (fine if the nodes have it)" : "; paddle train and run would stop there");
            *absent = 1;
        } else if (rc < 0) {
            fprintf(stderr, "paddle: %s\n", pd_err_msg());
            return config_error(rc) ? 2 : 1;
        } else {
            pd_buf_printf(said, "data     %s part: a first batch read\n", names[i]);
        }
    }
    return 0;
}

static int cmd_check(int argc, char **argv)
{
    pd_cli cli;
    int rc = pd_cli_parse(&cli, "check", argc, argv, 1, 1, NULL);
    if (rc) return rc;
    pd_recipe r;
    pd_plan plan;
    if ((rc = load_recipe(&r, &cli)) != 0) {
        pd_cli_free(&cli);
        return rc;
    }
    if (pd_plan_make(&plan, &r) < 0) {
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        pd_recipe_free(&r);
        pd_cli_free(&cli);
        return 2;
    }
    /* The network's shapes too (what the Lua side cannot check), without
     * allocating it: a model of any size checks in no memory. */
    rc = 0;
    int absent = 0;
    pd_buf said = {0};
    pd_buf_put(&said, "");
    if (pd_net_check(&r, &pd_backend_cpu) < 0) {
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        rc = 2;
    } else if ((rc = check_data(&r, &said, &absent)) == 0) {
        print_recipe(&r, &plan);
        print_sizes(&r);
        printf("%s%s\n", said.s, absent ? "ok, but the data is not all here" : "ok");
    }
    free(said.s);
    pd_plan_free(&plan);
    pd_recipe_free(&r);
    pd_cli_free(&cli);
    return rc;
}

/* --- train ---------------------------------------------------------------- */

/* The last resort against a recipe that never ends: the sandbox's limits
 * (src/lua/sandbox.c) stop Lua code, the work inside Lua's C library and the
 * CPU time, but they are checked between instructions, and one instruction
 * may run long (a comparison of huge strings). Loading a recipe has this long,
 * by the wall clock (PADDLE_RECIPE_TIMEOUT seconds overrides it); then the
 * process ends, saying so. */
#define RECIPE_DEADLINE_S 60

static char deadline_msg[512], starved_msg[512];
static int deadline_s;

/* At the deadline: a recipe that ran a quarter of that time or more is
 * endless (exit 2, which the launcher does not restart); one that got less
 * waited, on a machine too busy or a file that does not answer: a fault
 * (exit 1). Only async-signal-safe calls here. */
static void on_deadline(int sig)
{
    (void)sig;
    struct timespec ts;
    int busy = clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0 ||
               ts.tv_sec * 1000 + ts.tv_nsec / 1000000 >= deadline_s * 250L;
    const char *msg = busy ? deadline_msg : starved_msg;
    if (write(pd_relay_fatal_fd(), msg, strlen(msg)) < 0) {}
    _exit(busy ? 2 : 1);
}

/* Load the recipe a command names; prints the error and returns the exit status
 * on failure: 2 for the recipe's mistakes, 1 where the machine failed to give it. */
static int load_recipe(pd_recipe *r, pd_cli *cli)
{
    const char *env = getenv("PADDLE_RECIPE_TIMEOUT");
    int limit = env && atoi(env) > 0 ? atoi(env) : RECIPE_DEADLINE_S;
    deadline_s = limit;
    snprintf(deadline_msg, sizeof deadline_msg,
             "paddle: %.400s: still loading after %d s: an endless loop in the recipe? (stopped)\n", cli->pos[0],
             limit);
    snprintf(starved_msg, sizeof starved_msg,
             "paddle: %.300s: still loading after %d s, having run under a quarter of it: this machine is too busy or a "
             "file the recipe reads does not answer (stopped)\n", cli->pos[0], limit);
    struct sigaction sa = {.sa_handler = on_deadline}, old;
    sigaction(SIGALRM, &sa, &old);
    unsigned left = alarm((unsigned)limit);
    int rc = pd_recipe_load(r, cli->pos[0], cli->cluster, cli->overrides, cli->noverrides);
    alarm(left);
    sigaction(SIGALRM, &old, NULL);
    if (rc < 0) {
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        return rc == PD_ERECIPE ? 2 : 1; /* else the disk's or the machine's fault: a restart may help */
    }
    return 0;
}

/* The settings of a job across processes on paddle train's command line
 * (lua/schema.lua marks them) are said, not silently dropped. */
static void warn_job_only(const pd_cli *cli, const pd_recipe *r)
{
    static const char tail[] = "is a setting of a job across processes (paddle run); "
                               "paddle train trains in this one process without it";
    if (cli->cluster) fprintf(stderr, "paddle train: warning: --cluster %s\n", tail);
    for (int i = 0; i < r->njob_options; i++)
        fprintf(stderr, "paddle train: warning: --%s %s\n", r->job_options[i], tail);
}

static int cmd_train(int argc, char **argv)
{
    pd_relay_start(); /* training never waits for a reader of its output */
    static const char *const known[] = {"init_model", NULL};
    pd_cli cli;
    pd_recipe r;
    int rc = pd_cli_parse(&cli, "train", argc, argv, 1, 1, known);
    if (rc) return rc;
    if ((rc = load_recipe(&r, &cli)) == 0) {
        warn_job_only(&cli, &r);
        struct sigaction sa = {.sa_handler = on_signal};
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        pd_train_opts o = {.init_model = pd_cli_opt(&cli, "init_model"), .stop = &stop_flag};
        int err = (rc = pd_job_lock(&r, "train", PD_LOCK_SAVE)) != 0 ? 0 : pd_train_local(&r, &o);
        if (err < 0 && stop_flag) { /* what it was doing then is no error */
            fprintf(stderr, "paddle: interrupted by a signal: stopped\n");
            rc = 130;
        } else if (err < 0) {
            fprintf(stderr, "paddle: %s\n", pd_err_msg());
            rc = config_error(err) ? 2 : 1;
        }
        pd_recipe_free(&r);
    }
    pd_cli_free(&cli);
    return rc;
}

/* --- predict --------------------------------------------------------------- */

/* "test cost C, NAME M, ..., test rmse R": the pass line's test part. */
static void print_metrics(const pd_recipe *r, const pd_predict_opts *o)
{
    fprintf(stderr, "%ld samples, test cost %.6g", o->samples, o->cost);
    for (int i = 0; i < r->nmetrics; i++) fprintf(stderr, ", %s %.6g", r->metrics[i].name, o->metrics[i]);
    const pd_layer_desc *c = &r->layers[r->cost];
    if (!strcmp(c->type, "square_error_cost") && r->layers[c->inputs[0]].size == 1)
        fprintf(stderr, ", test rmse %.4f", sqrt(o->cost));
    fprintf(stderr, "\n");
}

/* An --input not here is looked for beside the recipe: where it is not
 * there either, both places are named. Returns whether it is missing. */
static int input_missing(const pd_recipe *r, const char *input)
{
    if (input[0] == '/' || access(input, F_OK) == 0 || !r->dir || !r->dir[0] || strcmp(r->dir, ".") == 0) return 0;
    char *beside = pd_xasprintf("%s/%s", r->dir, input);
    int missing = access(beside, F_OK) != 0;
    if (missing)
        fprintf(stderr, "paddle predict: option --input: cannot open data file %s: %s (nor %s here)\n", beside,
                strerror(errno), input);
    free(beside);
    return missing;
}

/* --part train or test where the format holds no test part out of the
 * file (csv, libsvm, criteo: data.test is a file of its own): refused, as it
 * would predict every sample. Returns 0, or 2 with the message said. */
static int part_refused(const pd_recipe *r, int part, const char *name)
{
    const char *fmt = r->format ? r->format : "csv";
    if (part == PD_PART_ALL || !strcmp(fmt, "uci_housing") || !strcmp(fmt, "movielens")) return 0;
    fprintf(stderr, "paddle predict: --part %s applies to uci_housing and movielens data, which hold a test part "
                    "out of one file; %s data is predicted whole (its test part is a file of its own, data.test: "
                    "give that as --input)\n", name, fmt);
    return 2;
}

static int cmd_predict(int argc, char **argv)
{
    static const char *const known[] = {"model", "input", "output", "part", NULL};
    static const char *const parts[] = {"all", "train", "test"};
    static const int part_ids[] = {PD_PART_ALL, PD_PART_TRAIN, PD_PART_TEST};
    pd_cli cli;
    pd_recipe r;
    int rc = pd_cli_parse(&cli, "predict", argc, argv, 1, 1, known);
    if (rc) return rc;
    pd_predict_opts o = {.model = pd_cli_opt(&cli, "model"), .input = pd_cli_opt(&cli, "input"), .part = -1};
    const char *part = pd_cli_opt(&cli, "part"), *output = pd_cli_opt(&cli, "output");
    for (size_t i = 0; i < PD_COUNT(parts); i++)
        if (!strcmp(part ? part : "all", parts[i])) o.part = part_ids[i];
    if (!o.model || !o.input) {
        fprintf(stderr, "paddle predict: --model DIR and --input FILE are required\n");
        rc = 2;
    } else if (o.part < 0) {
        fprintf(stderr, "paddle predict: --part must be all, train or test, got '%s'\n", part);
        rc = 2;
    } else if ((rc = load_recipe(&r, &cli)) == 0 && (rc = part_refused(&r, o.part, part)) != 0) {
        pd_recipe_free(&r);
    } else if (rc == 0) {
        /* --input as the shell names it, from here; one that is not here
         * is looked for beside the recipe, as its data files are */
        char *here = NULL, cwd[4096];
        if (o.input[0] != '/' && access(o.input, F_OK) == 0 && getcwd(cwd, sizeof cwd))
            o.input = here = pd_xasprintf("%s/%s", cwd, o.input);
        pd_out out = {0};
        int missing = input_missing(&r, o.input), out_rc = 0;
        if (!missing && output) {
            pd_out_remove_on_signal();
            out_rc = pd_out_open(&out, output);
        }
        int out_errno = errno;
        o.out = missing ? NULL : output ? out.f : stdout;
        o.metrics = pd_xcalloc((size_t)r.nmetrics + 1, sizeof *o.metrics);
        if (missing) {
            rc = 1; /* not there (yet), as a data file */
        } else if (out_rc < 0) {
            /* a directory not there, or not writable: what it was given */
            fprintf(stderr, "paddle predict: option --output: %s\n", pd_err_msg());
            rc = pd_path_errno(out_errno) ? 2 : 1;
        } else if ((rc = pd_predict(&r, &o)) < 0) {
            fprintf(stderr, "paddle predict: %s\n", pd_err_msg());
            rc = config_error(rc) ? 2 : 1;
        } else if (o.labelled) {
            print_metrics(&r, &o);
        } else {
            fprintf(stderr, "%ld samples, without labels: no test cost\n", o.samples);
        }
        if (out.f && pd_out_close(&out, rc == 0) < 0) {
            fprintf(stderr, "paddle predict: option --output: %s\n", pd_err_msg());
            rc = 1;
        }
        free(o.metrics);
        free(here);
        pd_recipe_free(&r);
    }
    pd_cli_free(&cli);
    return rc;
}

/* --- roles ----------------------------------------------------------------- */

/* The IPv4 address of network interface nic. */
static int nic_addr(const char *nic, char *buf, size_t len)
{
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs) < 0) return pd_err_set(PD_EIO, "cannot list network interfaces");
    int rc = pd_err_set(PD_ENOENT, "network interface '%s' (cluster.nic) has no IPv4 address here", nic);
    for (i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && strcmp(i->ifa_name, nic) == 0) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf, (socklen_t)len);
            rc = 0;
            break;
        }
    freeifaddrs(ifs);
    return rc;
}

/* What the launcher's processes share: the command line, the recipe, the
 * job secret. */
typedef struct role_cmd {
    pd_cli cli;
    pd_recipe r;
    int loaded;
    uint8_t secret[PD_SECRET];
} role_cmd;

/* Parse the command line and load the recipe. Returns 0 or the exit status
 * (said); role_close() either way. */
static int role_open(role_cmd *c, const char *cmd, int argc, char **argv, const char *const *known)
{
    memset(c, 0, sizeof *c);
    int rc = pd_cli_parse(&c->cli, cmd, argc, argv, 1, 1, known);
    if (rc) return rc;
    if ((rc = load_recipe(&c->r, &c->cli)) == 0) c->loaded = 1;
    return rc;
}

/* Ready to run role `log_role` ("pserver", "trainer"): its log opened under
 * --log_dir, the secret read from --secret_fd (or the environment), SIGINT
 * and SIGTERM set the stop flag. log_role NULL (the node agent): the secret
 * is the first line of stdin, which stays open after it. Returns 0 or the
 * exit status (said). */
static int role_ready(role_cmd *c, const char *log_role)
{
    int rc, fd;
    if (!log_role) {
        char line[2 * PD_SECRET + 2];
        size_t got = 0;
        while (got < sizeof line - 1) { /* one byte at a time: stdin stays ours after */
            ssize_t n = read(0, line + got, 1);
            if (n <= 0 || line[got] == '\n') break;
            got++;
        }
        line[got] = '\0';
        if (pd_unhex(line, c->secret, PD_SECRET) < 0) {
            fprintf(stderr, "paddle node: internal command of the launcher (needs --endpoints and the secret on stdin)\n");
            return 2;
        }
        return 0;
    }
    if ((rc = pd_cli_int(&c->cli, log_role, "secret_fd", -1, 0, 1 << 20, &fd))) return rc;
    const char *dir = pd_cli_opt(&c->cli, "log_dir");
    if (dir) {
        char *path = pd_xasprintf("%s/paddle_%s.INFO", dir, log_role);
        rc = pd_log_open(path);
        free(path);
        if (rc < 0) {
            fprintf(stderr, "paddle: %s\n", pd_err_msg());
            return 1;
        }
    }
    if (pd_secret_read(fd, c->secret) < 0) { /* how the role was started: one line, exit 2 */
        fprintf(stderr, "paddle %s: %s\n", log_role, pd_err_msg());
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static void role_close(role_cmd *c)
{
    if (c->loaded) pd_recipe_free(&c->r);
    pd_cli_free(&c->cli);
}

/* A role that ended on what it was given (the recipe, its options, a data
 * line or a model to start from that does not fit it (PD_EINPUT), a
 * checkpoint of another job, a device this binary does not have), not on a
 * fault: exit status 2, which the launcher does not restart
 * (docs/faults.md). */
static int config_error(int rc)
{
    return rc == PD_EINVAL || rc == PD_ERECIPE || rc == PD_EINPUT;
}

static int cmd_pserver(int argc, char **argv)
{
    pd_relay_start(); /* training never waits for a reader of its output */
    static const char *const known[] = {"pserver_id", "port", "bind", "init_shard", "secret_fd", "ready_fd",
                                        "log_dir", "idle_timeout", "resume!", NULL};
    role_cmd c;
    pd_server_opts o = {0};
    char addr[64];
    int idle = 0, rc = role_open(&c, "pserver", argc, argv, known);
    if (rc == 0 && ((rc = pd_cli_int(&c.cli, "pserver", "pserver_id", 0, 0, c.r.pservers - 1, &o.id)) ||
                    (rc = pd_cli_int(&c.cli, "pserver", "port", c.r.port, 0, 65535, &o.port)) ||
                    (rc = pd_cli_int(&c.cli, "pserver", "ready_fd", -1, 0, 1 << 20, &o.ready_fd)) ||
                    (rc = pd_cli_int(&c.cli, "pserver", "idle_timeout", 0, 0, 1 << 30, &idle))))
        goto out;
    if (rc == 0) {
        o.idle_timeout = idle;
        o.init_shard = pd_cli_opt(&c.cli, "init_shard");
        o.resume = pd_cli_opt(&c.cli, "resume") != NULL;
        o.bind_addr = pd_cli_opt(&c.cli, "bind");
        if (!o.bind_addr && c.r.nic) {
            if (nic_addr(c.r.nic, addr, sizeof addr) < 0) {
                PD_ERROR("%s", pd_err_msg());
                rc = 1;
                goto out;
            }
            o.bind_addr = addr;
        }
        rc = role_ready(&c, "pserver");
    }
    if (rc == 0) {
        o.npservers = c.r.pservers;
        o.ntrainers = c.r.trainers;
        o.metrics_port = c.r.metrics_port ? c.r.metrics_port + 1 + o.id : 0;
        memcpy(o.secret, c.secret, PD_SECRET);
        pd_job_id(o.secret, o.job);
        o.stop = &stop_flag;
        int err = pd_server_run(&c.r, &o);
        if (err < 0) {
            PD_ERROR("pserver %d: %s", o.id, pd_err_msg());
            rc = config_error(err) ? 2 : 1;
        }
        if (stop_flag) rc = 130; /* stopped on a signal: no job that ended well */
    }
out:
    role_close(&c);
    return rc;
}

static int cmd_trainer(int argc, char **argv)
{
    pd_relay_start(); /* training never waits for a reader of its output */
    static const char *const known[] = {"trainer_id", "pservers", "secret_fd", "log_dir", "init_model",
                                        "resume!", "status_lines!", NULL};
    role_cmd c;
    pd_trainer_opts o = {0};
    int rc = role_open(&c, "trainer", argc, argv, known);
    const char *eps = rc ? NULL : pd_cli_opt(&c.cli, "pservers");
    if (rc == 0 && !eps) {
        fprintf(stderr, "paddle trainer: --pservers=HOST:PORT,... is required\n");
        rc = 2;
    } else if (rc == 0 && pd_endpoints_parse(eps, c.r.port, &o.pservers, &o.npservers) < 0) {
        /* paddle pserver and paddle run take a count of pservers under the same name */
        fprintf(stderr, "paddle trainer: option --pservers: %s (paddle trainer takes the pservers' endpoints: "
                        "--pservers=HOST:PORT,...)\n", pd_err_msg());
        rc = 2;
    }
    if (rc == 0 && !(rc = pd_cli_int(&c.cli, "trainer", "trainer_id", 0, 0, c.r.trainers - 1, &o.id)))
        rc = role_ready(&c, "trainer");
    if (rc == 0) {
        o.ntrainers = c.r.trainers;
        o.init_model = pd_cli_opt(&c.cli, "init_model");
        o.resume = pd_cli_opt(&c.cli, "resume") != NULL;
        o.status_lines = pd_cli_opt(&c.cli, "status_lines") != NULL;
        memcpy(o.secret, c.secret, PD_SECRET);
        pd_job_id(o.secret, o.job);
        o.stop = &stop_flag;
        int err = pd_trainer_run(&c.r, &o);
        if (err < 0) {
            /* stopped with the job (Ctrl+C): what it saw then is no error */
            if (stop_flag) PD_INFO("trainer %d: stopped on a signal (%s)", o.id, pd_err_msg());
            else PD_ERROR("trainer %d: %s", o.id, pd_err_msg());
            rc = stop_flag ? 130 : config_error(err) ? 2 : 1;
        }
    }
    free(o.pservers);
    role_close(&c);
    return rc;
}

/* `paddle run`: without hosts, one agent in this process over every role of
 * the plan; with hosts, the SSH launcher (one agent per node). */
static int cmd_run(int argc, char **argv)
{
    pd_relay_start(); /* training never waits for a reader of its output */
    static const char *const known[] = {"init_model", "accept-new-host-keys!", "resume!", NULL};
    role_cmd c;
    pd_plan plan = {0};
    int rc = role_open(&c, "run", argc, argv, known);
    if (rc == 0 && c.r.nhosts > 0) {
        pd_remote_opts o = {.init_model = pd_cli_opt(&c.cli, "init_model"), .cluster = c.cli.cluster,
                            .accept_new = pd_cli_opt(&c.cli, "accept-new-host-keys") != NULL,
                            .resume = pd_cli_opt(&c.cli, "resume") != NULL};
        rc = pd_remote_run(&c.r, &o);
    } else if (rc == 0 && pd_plan_make(&plan, &c.r) < 0) {
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        rc = 2;
    } else if (rc == 0 && pd_cli_opt(&c.cli, "resume") && !c.r.checkpoint_dir) {
        fprintf(stderr, "paddle: %s: nothing to resume: the recipe sets no settings.checkpoint_dir, so no run of "
                        "it left a checkpoint; run it without --resume to start a new job\n", c.r.path);
        rc = 2;
    } else if (rc == 0) {
        pd_agent_opts o = {.roles = plan.roles, .nroles = plan.nroles, .upstream_fd = -1,
                           .init_model = pd_cli_opt(&c.cli, "init_model"), .cluster = c.cli.cluster,
                           .resume = pd_cli_opt(&c.cli, "resume") != NULL};
        rc = pd_agent_run(&c.r, &o);
    }
    pd_plan_free(&plan);
    role_close(&c);
    return rc;
}

/* `paddle node` (internal): the agent the launcher starts on each node over
 * SSH. The secret arrives as the first line of stdin; stdin then stays open
 * for the whole job, and its end (the launcher went away) ends every role. */
static int cmd_node(int argc, char **argv)
{
    static const char *const known[] = {"roles", "endpoints", "node", "init_model", "bind", "resume!", NULL};
    role_cmd c;
    pd_role *roles = NULL;
    int nroles = 0, rc = role_open(&c, "node", argc, argv, known);
    const char *eps = rc ? NULL : pd_cli_opt(&c.cli, "endpoints");
    if (rc == 0 && pd_plan_parse_roles(pd_cli_opt(&c.cli, "roles"), &roles, &nroles) < 0) {
        fprintf(stderr, "paddle node: %s\n", pd_err_msg());
        rc = 2;
    } else if (rc == 0 && !eps) {
        fprintf(stderr, "paddle node: internal command of the launcher (needs --endpoints and the secret on stdin)\n");
        rc = 2;
    }
    if (rc == 0 && (rc = role_ready(&c, NULL)) == 0) {
        pd_agent_opts o = {.roles = roles, .nroles = nroles, .endpoints = eps, .secret = c.secret,
                           .upstream_fd = 0, .bind = pd_cli_opt(&c.cli, "bind"),
                           .init_model = pd_cli_opt(&c.cli, "init_model"), .cluster = c.cli.cluster,
                           .resume = pd_cli_opt(&c.cli, "resume") != NULL};
        rc = pd_agent_run(&c.r, &o);
    }
    free(roles);
    role_close(&c);
    return rc;
}

/* `paddle start` without a pserver list: load the recipe for the counts and
 * ports, then the rendezvous (src/launch/rendezvous.h) gives this rank its
 * role and the pserver table. Returns 0 or the exit status (said). */
static int start_rendezvous(pd_env_role *e, int argc, char **argv, double timeout, pd_rdv_result *res)
{
    /* the roles' own, passed on (the Kubernetes manifests add --resume) */
    static const char *const known[] = {"resume!", "init_model", NULL};
    pd_cli cli;
    pd_recipe r;
    uint8_t secret[PD_SECRET];
    int rc = pd_cli_parse(&cli, "start", argc, argv, 1, 1, known), p_given = 0;
    if (rc) return rc;
    for (int i = 0; i < cli.noverrides; i++) p_given |= strcmp(cli.overrides[i].key, "pservers") == 0;
    if ((rc = load_recipe(&r, &cli))) {
        pd_cli_free(&cli);
        return rc;
    }
    if (pd_env_counts(e, r.pservers, r.trainers, p_given) < 0) {
        fprintf(stderr, "paddle start: %s\n", pd_err_msg());
        rc = 2;
    } else if (pd_secret_read(-1, secret) < 0) {
        fprintf(stderr, "paddle start: %s\n", pd_err_msg());
        rc = 1;
    } else {
        pd_rdv_opts o = {.master_host = e->master, .master_port = e->master_port, .master_from = e->master_from,
                         .master = e->master_self, .rank = e->rank, .rank_var = e->rank_var, .size = e->size,
                         .size_var = e->size_var, .kind = e->kind_req, .npservers = e->npservers,
                         .ntrainers = e->ntrainers, .base_port = r.port, .nports = r.ports_num + r.ports_num_for_sparse,
                         .host = e->host[0] ? e->host : NULL, .secret = secret,
                         .timeout = timeout > 0 ? timeout : r.server_timeout > 0 ? r.server_timeout : 60};
        if (pd_rdv_run(&o, res) < 0) {
            if (e->rank >= 0) fprintf(stderr, "paddle start: rank %d: %s\n", e->rank, pd_err_msg());
            else fprintf(stderr, "paddle start: %s\n", pd_err_msg());
            rc = 1;
        } else {
            e->kind = res->kind, e->id = res->id, e->port = res->port;
            snprintf(e->endpoints, sizeof e->endpoints, "%s", res->endpoints);
            snprintf(e->bind, sizeof e->bind, "%s", r.nic ? "" : "0.0.0.0");
        }
    }
    pd_recipe_free(&r);
    pd_cli_free(&cli);
    return rc;
}

/* `paddle start`: the role from the environment (or the rendezvous), then
 * that role's command. */
static int cmd_start(int argc, char **argv)
{
    pd_relay_start(); /* training never waits for a reader of its output */
    pd_env_role e;
    pd_rdv_result res = {0};
    const char *master = NULL;
    double timeout = 0;
    if (argc < 2 || strncmp(argv[1], "--", 2) == 0) {
        fprintf(stderr, "paddle start: missing argument (the recipe)\n'paddle help start' shows the usage.\n");
        return 2;
    }
    /* ours, not the role's: --master, --rendezvous_timeout; under the
     * rendezvous, --pservers=P and --trainers=T are counts we pass on */
    char **a = pd_xcalloc((size_t)argc + 8, sizeof *a), **own = pd_xcalloc((size_t)argc + 1, sizeof *own);
    int n = 1, nown = 0, rc = 0;
    own[nown++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--master=", 9) == 0) master = argv[i] + 9;
        else if (strncmp(argv[i], "--rendezvous_timeout=", 21) == 0) timeout = atof(argv[i] + 21);
        else own[nown++] = argv[i];
    }
    if (pd_env_role_get(&e, master) < 0) {
        fprintf(stderr, "paddle start: %s\n", pd_err_msg());
        rc = 2;
    } else if (e.rendezvous) {
        rc = start_rendezvous(&e, nown, own, timeout, &res);
    }
    for (int i = 1; rc == 0 && i < nown; i++) {
        if (e.rendezvous && (!strncmp(own[i], "--pservers=", 11) || !strncmp(own[i], "--trainers=", 11))) continue;
        /* a model to start from is trainer 0's to load: a pserver takes none */
        if (e.kind == PD_ROLE_PSERVER && !strncmp(own[i], "--init_model", 12) &&
            (own[i][12] == '=' || own[i][12] == '\0')) {
            i += own[i][12] == '\0' && i + 1 < nown && strncmp(own[i + 1], "--", 2) != 0; /* --init_model DIR */
            continue;
        }
        a[n++] = pd_xstrdup(own[i]);
    }
    if (rc == 0) {
        a[0] = pd_xstrdup(e.kind == PD_ROLE_PSERVER ? "pserver" : "trainer");
        a[n++] = pd_xasprintf("--trainers=%d", e.ntrainers);
        if (e.kind == PD_ROLE_PSERVER) {
            a[n++] = pd_xasprintf("--pservers=%d", e.npservers);
            a[n++] = pd_xasprintf("--pserver_id=%d", e.id);
            a[n++] = pd_xasprintf("--port=%d", e.port);
            if (e.bind[0]) a[n++] = pd_xasprintf("--bind=%s", e.bind);
        } else {
            a[n++] = pd_xasprintf("--pservers=%s", e.endpoints);
            a[n++] = pd_xasprintf("--trainer_id=%d", e.id);
        }
        fprintf(stderr, "paddle start: %s %d of %s (%s%s)\n", pd_role_name(e.kind), e.id,
                e.kind == PD_ROLE_PSERVER ? e.endpoints : "the job", e.scheme,
                e.rendezvous ? ", rendezvous" : " variables");
        pd_rdv_release(&res);
        rc = e.kind == PD_ROLE_PSERVER ? cmd_pserver(n, a) : cmd_trainer(n, a);
    }
    for (int i = 0; i < n; i++) free(a[i]);
    free(a);
    free(own);
    return rc;
}

/* --- k8s ------------------------------------------------------------------ */

/* `paddle k8s`: the job's Kubernetes manifests on stdout. */
static int cmd_k8s(int argc, char **argv)
{
    pd_k8s_opts o = {.image = "paddle:latest"};
    char **rest = pd_xcalloc((size_t)argc + 1, sizeof *rest);
    const char **extra = pd_xcalloc((size_t)argc + 1, sizeof *extra);
    int n = 0, rc = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc && rc == 0; i++) {
        const char **slot = !strcmp(argv[i], "--image") ? &o.image : !strcmp(argv[i], "--name") ? &o.name
                          : !strcmp(argv[i], "--namespace") ? &o.namespace_
                          : !strcmp(argv[i], "--checkpoint_claim") ? &o.checkpoint_claim : NULL;
        if (slot && i + 1 < argc) *slot = argv[++i];
        else if (slot) rc = 2, fprintf(stderr, "paddle k8s: %s needs a value\n", argv[i]);
        else if (!strcmp(argv[i], "--kubeflow")) o.kubeflow = 1;
        else if (!strcmp(argv[i], "--pod")) o.pod = 1;
        else rest[n++] = argv[i];
    }
    for (int i = 1; i < n; i++)
        if (!strncmp(rest[i], "--", 2) && strncmp(rest[i], "--cluster", 9)) extra[o.nargs++] = rest[i];
    o.args = extra;
    pd_cli cli;
    pd_recipe r;
    static const char *const known[] = {NULL};
    if (rc == 0 && (rc = pd_cli_parse(&cli, "k8s", n, rest, 1, 1, known)) == 0) {
        if ((rc = load_recipe(&r, &cli)) == 0) {
            if (pd_k8s_print(stdout, &r, &o) < 0) {
                fprintf(stderr, "paddle k8s: %s\n", pd_err_msg());
                rc = 1;
            }
            pd_recipe_free(&r);
        }
        pd_cli_free(&cli);
    }
    free(rest);
    free(extra);
    return rc;
}

/* --- gen ------------------------------------------------------------------- */

static int gen_criteo(pd_cli *cli, const char *out)
{
    long seed = 0;
    pd_gen_criteo_opts o = {0};
    int rc;
    if ((rc = pd_cli_long(cli, "gen", "seed", 1, 0, 2147483647L, &seed)) ||
        (rc = pd_cli_long(cli, "gen", "rows", 1000000, PD_GEN_CRITEO_MIN_ROWS, PD_GEN_CRITEO_MAX_ROWS, &o.rows)))
        return rc;
    if (pd_cli_opt(cli, "ratings") || pd_cli_opt(cli, "users") || pd_cli_opt(cli, "movies")) {
        fprintf(stderr, "paddle gen criteo: --ratings, --users and --movies are for movielens; criteo takes --rows\n");
        return 2;
    }
    o.seed = (uint64_t)seed;
    pd_out_remove_on_signal();
    if ((rc = pd_gen_criteo(out, &o)) < 0) {
        fprintf(stderr, "paddle gen: %s\n", pd_err_msg());
        return rc == PD_EINVAL ? 2 : 1;
    }
    return 0;
}

static int cmd_gen(int argc, char **argv)
{
    static const char *const known[] = {"out", "seed", "ratings", "users", "movies", "rows", NULL};
    pd_cli cli;
    int rc = pd_cli_parse(&cli, "gen", argc, argv, 1, 1, known);
    if (rc) return rc;
    long seed = 0;
    const char *out = pd_cli_opt(&cli, "out");
    pd_gen_opts o = {0};
    if (cli.noverrides > 0) {
        fprintf(stderr, "paddle gen: unknown option --%s\n", cli.overrides[0].key);
        rc = 2;
    } else if (strcmp(cli.pos[0], "movielens") != 0 && strcmp(cli.pos[0], "criteo") != 0) {
        fprintf(stderr, "paddle gen: unknown data set '%s' (there are: movielens, criteo)\n", cli.pos[0]);
        rc = 2;
    } else if (!out || !out[0]) {
        fprintf(stderr, "paddle gen: --out DIR is required\n");
        rc = 2;
    } else if (strcmp(cli.pos[0], "criteo") == 0) {
        rc = gen_criteo(&cli, out);
        goto done;
    } else if (pd_cli_opt(&cli, "rows")) {
        fprintf(stderr, "paddle gen movielens: --rows is for criteo; movielens takes --ratings\n");
        rc = 2;
    }
    if (rc || (rc = pd_cli_long(&cli, "gen", "seed", 1, 0, 2147483647L, &seed)) ||
        (rc = pd_cli_long(&cli, "gen", "ratings", PD_ML1M_RATINGS, PD_GEN_MIN_RATINGS, 100000000L, &o.ratings)))
        goto done;
    long users, movies;
    pd_gen_movielens_sizes(o.ratings, &users, &movies);
    if ((rc = pd_cli_long(&cli, "gen", "users", users, 1, 1000000, &o.users)) ||
        (rc = pd_cli_long(&cli, "gen", "movies", movies, PD_GEN_MIN_MOVIES, 1000000, &o.movies)))
        goto done;
    o.seed = (uint64_t)seed;
    pd_out_remove_on_signal();
    if ((rc = pd_gen_movielens(out, &o)) < 0) {
        fprintf(stderr, "paddle gen: %s\n", pd_err_msg());
        rc = rc == PD_EINVAL ? 2 : 1;
    }
done:
    pd_cli_free(&cli);
    return rc;
}

/* --- the table ------------------------------------------------------------ */


static const command commands[] = {
    {"check", cmd_check, "RECIPE [--cluster FILE] [--key=value ...]",
     "Load and validate a recipe; print the resolved job.",
     "Prints the hosts, where each pserver and trainer will run and on which ports,\n"
     "the data, the settings, the optimizer and every layer with its parameter\n"
     "shapes and counts, and reads a first batch of the train and test data as\n"
     "`paddle train` would (data that is not here is named, not read). A mistake\n"
     "in the recipe, or data the model cannot read, is one line naming where it\n"
     "is and exit status 2. --key=value overrides the recipe setting of that\n"
     "name.\n"},
    {"train", cmd_train, "RECIPE [--init_model DIR] [--key=value ...]",
     "Train in this one process, without pservers (local training).",
     "Reads the recipe's data, trains for its passes with its batch size and\n"
     "optimizer, logs the cost every log_period batches and after each pass (with\n"
     "the test cost when data.test is set), and writes the model after each pass to\n"
     "SAVE_DIR/pass-NNNNN/ (one .npy per parameter and manifest.json; save_dir is\n"
     "\"output\" by default). --init_model DIR starts from a saved model.\n"},
    {"predict", cmd_predict, "RECIPE --model DIR --input FILE [--output FILE] [--part all|train|test]",
     "Write a saved model's predictions over a data file, one CSV line per sample.",
     "Builds the recipe's model, loads DIR (SAVE_DIR/pass-NNNNN or SAVE_DIR/best),\n"
     "reads FILE (from here, or else beside the recipe) with the recipe's data\n"
     "format and runs the layers its `predict` layer depends on. Each line holds\n"
     "the sample's ids where the format has them (movielens: user_id, movie_id),\n"
     "then the prediction's values; to --output or stdout. Labels are optional\n"
     "(csv rows may lack the label columns); when every sample has them, the test\n"
     "cost and metrics over FILE go to stderr. --part: all of FILE (default), or\n"
     "the part the recipe trains or tests on (uci_housing and movielens hold a\n"
     "test part out of one file; other formats refuse train and test). --output\n"
     "FILE is replaced only when every prediction is written (until then\n"
     "FILE.partial-PID-N beside it): a predict that fails or is stopped leaves an\n"
     "earlier FILE as it was (a link such as /dev/stdout, a FIFO or a device is\n"
     "written directly).\n"},
    {"run", cmd_run, "RECIPE [--cluster FILE] [--init_model DIR] [--resume] [--accept-new-host-keys] [--key=value ...]",
     "Run the job: pservers and trainers (a local simulated cluster without hosts).",
     "Without hosts in the recipe, every pserver and trainer is a child process on\n"
     "this machine on free ports. Output comes back prefixed [pserver 0], [trainer 1];\n"
     "log/ holds server.log, train.log, paddle_pserver.INFO and paddle_trainer.INFO.\n"
     "The job ends when the trainers finish (exit 0), when a role dies (non-zero,\n"
     "naming it; with job.restarts or --restarts=N the whole job restarts from its\n"
     "last checkpoint, up to N times, unless the role ended on what it was given,\n"
     "exit status 2), or on Ctrl+C (every role is ended). --init_model DIR starts\n"
     "trainer 0 from a saved model, which the pservers take.\n"
     "--resume continues a stopped job from its last checkpoint (over SSH: in the\n"
     "job directory of the last job started from here). --accept-new-host-keys\n"
     "records the key of a host not yet in known_hosts (the first contact; a key\n"
     "that changed is refused as ever). --key=value overrides the recipe and is\n"
     "passed on to every role. See docs/faults.md and docs/cluster.md.\n"},
    {"node", cmd_node, "RECIPE --roles=... --endpoints=...",
     "(internal) The agent the launcher runs on each node over SSH.",
     "Starts the roles placed on this node, streams their output, and ends them\n"
     "all when its stdin closes (the launcher went away or the connection dropped).\n"},
    {"pserver", cmd_pserver, "RECIPE --pserver_id=N [--port=P] [--bind=ADDR] [--init_shard=DIR] [--resume] [--key=value ...]",
     "Run one parameter server (what the launcher starts).",
     "Listens on port .. port + ports_num + ports_num_for_sparse - 1 (--port=0: a free\n"
     "range, reported on --ready_fd), bound to the address of cluster.nic when set.\n"
     "The job secret comes from --secret_fd, PADDLE_JOB_SECRET_FILE or\n"
     "PADDLE_JOB_SECRET. --pservers=N and --trainers=N override the recipe's counts.\n"},
    {"trainer", cmd_trainer, "RECIPE --pservers=HOST:PORT,... --trainer_id=N [--resume] [--key=value ...]",
     "Run one trainer (what the launcher starts).",
     "Connects to every pserver (printing which are not ready while it waits, up to\n"
     "settings.server_timeout seconds), trains on its share of the data, and, as\n"
     "trainer 0, initialises the pservers, tests after each pass and writes the model.\n"},
    {"start", cmd_start, "RECIPE [--master=HOST:PORT] [--pservers=P] [--rendezvous_timeout=S] [--init_model=DIR] [--resume] [--key=value ...]",
     "Run the role the environment names (mpirun, Slurm, Kubernetes, Volcano).",
     "Reads PaddlePaddle's variables, either scheme:\n"
     "  PADDLE_TRAINING_ROLE | TRAINING_ROLE            PSERVER or TRAINER\n"
     "  PADDLE_PSERVER_IPS + PADDLE_PSERVER_PORT | PADDLE_PSERVERS_IP_PORT_LIST\n"
     "  PADDLE_TRAINERS | PADDLE_TRAINERS_NUM           number of trainers\n"
     "  PADDLE_CURRENT_IP | POD_IP + PADDLE_PORT        this pserver's address\n"
     "  PADDLE_TRAINER_ID                               this trainer's index\n"
     "(and Volcano's VC_* and PaddleFlow's: docs/engines.md). Without a pserver list,\n"
     "under mpirun or srun or with --master / PADDLE_MASTER (Kubeflow), the job forms\n"
     "by a rendezvous: rank 0 listens, every rank registers, and ranks 0..P-1 become\n"
     "the pservers (P: --pservers, else the recipe), the rest trainers. The job\n"
     "secret comes from PADDLE_JOB_SECRET (64 hex digits) or PADDLE_JOB_SECRET_FILE,\n"
     "the same for every role. A missing or contradictory variable is an error\n"
     "naming it.\n"},
    {"k8s", cmd_k8s, "RECIPE [--image IMAGE] [--name JOB] [--namespace NS] [--kubeflow | --pod] "
                     "[--checkpoint_claim CLAIM] [--key=value ...]",
     "Print Kubernetes manifests that run the job (kubectl apply -f -).",
     "A Secret with a new job secret, a ConfigMap with the recipe and the small files\n"
     "it reads, a headless Service and a StatefulSet for the pservers, and the\n"
     "trainers as an Indexed Job (restarts from job.restarts); every role runs\n"
     "`paddle start` with the Fleet variables. --kubeflow: a Kubeflow PaddleJob\n"
     "instead (the rendezvous forms the job). --pod: one Pod with every role as a\n"
     "container on localhost, for `podman kube play`. --key=value is passed on to\n"
     "every role. The model lands in /output of trainer 0 (an emptyDir: mount a\n"
     "volume there to keep it). A recipe with settings.checkpoint_dir needs\n"
     "--checkpoint_claim CLAIM (a ReadWriteMany PersistentVolumeClaim, mounted at\n"
     "/checkpoint in every pod; --pod shares an emptyDir); every role then runs\n"
     "with --resume, so a role Kubernetes restarts continues from the last complete\n"
     "checkpoint. docs/engines.md has the details.\n"},
    {"gen", cmd_gen, "movielens|criteo --out DIR [--seed N] [--ratings N] [--users N] [--movies N] [--rows N]",
     "Write a synthetic data set shaped like a real one, with a planted structure.",
     "movielens: users.dat, movies.dat and ratings.dat as MovieLens-1M (Latin-1,\n"
     "'::'-separated; 6040 users, 3883 movies, 1,000,209 ratings by default; fewer\n"
     "--ratings scale users and movies down). Ratings follow planted user and movie\n"
     "biases and latent factors (from demographics and genres) plus noise. Prints the\n"
     "test RMSE of predicting the mean and of the planted truth.\n"
     "criteo: train.txt and test.txt in the Criteo format (label, I1..I13, C1..C26;\n"
     "--rows 1000000 by default, 10% test) with Criteo's missing rates, heavy-tailed\n"
     "integers and Zipf-like categorical values; clicks (about 25%) follow a planted\n"
     "model. Prints the test AUC of a constant and of the planted model.\n"
     "Same seed, same bytes.\n"},
    {"version", cmd_version, "", "Print the version and what this binary is built with.",
     "Version, git revision, build flavour, and the versions of Lua, libssh2, its\n"
     "crypto library and OpenBLAS, with the BLAS core chosen for this CPU.\n"},
    {"help", cmd_help, "[COMMAND]", "Show the commands, or one command's help.", ""},
};

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < PD_COUNT(commands); i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void print_commands(FILE *f)
{
    fprintf(f, "commands:\n");
    for (size_t i = 0; i < PD_COUNT(commands); i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    pd_blas_quiet();
    pd_cli_set_settings(pd_recipe_value_form);
    if (argc < 2) {
        cmd_help(1, argv);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h")) name = "help";
    if (!strcmp(name, "--version")) name = "version";
    const command *c = find_command(name);
    if (!c) {
        fprintf(stderr, "paddle: unknown command '%s'\n", argv[1]);
        print_commands(stderr);
        return 2;
    }
    /* paddle COMMAND ... --help: that command's help, whatever else is there */
    for (int i = 2; i < argc && c->run != cmd_help; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            char *help[] = {"help", (char *)c->name, NULL};
            return cmd_help(2, help);
        }
    return c->run(argc - 1, argv + 1);
}
