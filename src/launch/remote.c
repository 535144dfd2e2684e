/* remote.c - deploy over SSH, one node agent per host, stream, end. */
#include "remote.h"
#include "plan.h"
#include "secret.h"
#include "shell.h"
#include "ssh.h"
#include "supervisor.h"
#include "../core/buf.h"
#include "../core/pd.h"
#include "../core/term.h"
#include "../nn/progress.h"
#include "../ps/proto.h"
#include "../core/crypto.h"
#include "../core/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RECONNECT_WAIT 30.0 /* seconds a restart retries a node it cannot reach */
#define BACKOFF_MAX 8.0      /* seconds between two tries, doubling from 1 */

typedef struct wfile {
    char *rel;              /* path inside the workspace */
    char *local;
    char hash[65];
    int mode;
} wfile;

typedef struct deploy deploy;

typedef struct node {
    int index;
    const pd_host *h;
    deploy *d;
    pd_ssh *ssh;
    pd_ssh_chan *chan;      /* the agent's, until the supervisor takes it */
    char *first;            /* what the agent said before the supervisor took it */
    size_t first_len;
    char *err;              /* what failed while deploying */
    int copied_binary, files_sent, files_cached;
    double t_ready;
    char *pending_model;    /* node 0: the newest output/pass-N not copied yet */
    char *root, *job;       /* root_dir and the job directory, as absolute paths on the node */
    double last_fetch;
} node;

struct deploy {
    const pd_recipe *r;
    const pd_remote_opts *o;
    const pd_plan *plan;
    const char *exe;
    char exe_hash[65];
    const char *root;       /* root_dir on the nodes ("." = home) */
    char *q_root, *q_job;   /* root_dir and the job directory as node shell text (shell.h) */
    char *q_ldpath;         /* cluster.ld_library_path as node shell text, or NULL */
    char *job_dir;          /* absolute or home-relative */
    char *recipe_rel;       /* the recipe's path inside the job dir */
    char *cluster_rel;
    wfile *files;
    int nfiles;
    const char *endpoints;
    uint8_t secret[PD_SECRET];
    pd_ssh_opts sopts;
    int resume;             /* the roles start from the last checkpoint (--resume) */
    double reconnect_until; /* a restart: retry a node that cannot be reached until then */
};

/* --- the workspace ------------------------------------------------------- */

static deploy *walk_d;
static const char *walk_base;
static int walk_cap;

static int walk_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type != FTW_F || !S_ISREG(st->st_mode)) return 0;
    const char *rel = path + strlen(walk_base);
    while (*rel == '/') rel++;
    /* never dispatch what a previous job left behind */
    if (!strncmp(rel, "output/", 7) || !strncmp(rel, "log/", 4) || strstr(rel, "/.git/") || !strncmp(rel, ".git/", 5) ||
        !strncmp(rel, ".paddle/", 8))
        return 0;
    PD_GROW(&walk_d->files, &walk_cap, walk_d->nfiles + 1);
    wfile *f = &walk_d->files[walk_d->nfiles++];
    f->rel = pd_xstrdup(rel);
    f->local = pd_xstrdup(path);
    f->mode = st->st_mode & 0777;
    return pd_sha256_file(path, f->hash) < 0 ? -1 : 0;
}

static int list_workspace(deploy *d, const char *dir)
{
    walk_d = d;
    walk_base = dir;
    walk_cap = 0;
    if (nftw(dir, walk_one, 32, FTW_PHYS) != 0)
        return pd_err_wrap(PD_EIO, "workspace %s", dir);
    return 0;
}

/* --- per host: connect and deploy (one thread each) ------------------------ */

/* Shell text that links files[a..b) from the cache under root (shell
 * text: a path or "$R") into the current directory. */
static char *link_cmd(const char *root, deploy *d, int a, int b)
{
    size_t cap = 256;
    for (int i = a; i < b; i++) cap += 3 * strlen(d->files[i].rel) + strlen(root) + 160;
    char *cmd = pd_xmalloc(cap);
    int len = snprintf(cmd, cap, "true");
    for (int i = a; i < b; i++) {
        char *q = pd_sh_quote(d->files[i].rel);
        len += snprintf(cmd + len, cap - (size_t)len, " && mkdir -p \"$(dirname %s)\" && ln -f \"%s/.paddle/cache/%s\" %s && chmod %o %s",
                        q, root, d->files[i].hash, q, d->files[i].mode, q);
        free(q);
    }
    return cmd;
}

/* Send the files whose hashes appear in `missing` to the node's cache. */
static int send_missing(node *n, deploy *d, int a, int b, const char *missing)
{
    for (int i = a; i < b; i++) {
        if (!strstr(missing, d->files[i].hash)) {
            n->files_cached++;
            continue;
        }
        char *remote = pd_xasprintf("%s/.paddle/cache/%s", n->root, d->files[i].hash);
        int rc = pd_ssh_upload(n->ssh, d->files[i].local, remote, 0644);
        free(remote);
        if (rc < 0) return rc;
        n->files_sent++;
    }
    return 0;
}

/* The agent's command line (after `exec`), for node n: every value quoted
 * (shell.h); the binary is "$R/$B" (set by the node script). */
static void put_word(pd_buf *b, const char *prefix, const char *value)
{
    char *w = pd_xasprintf("%s%s", prefix, value), *q = pd_sh_quote(w);
    pd_buf_printf(b, " %s", q);
    free(w);
    free(q);
}

static char *agent_cmd(node *n, deploy *d)
{
    const pd_recipe *r = d->r;
    pd_buf t = {0};
    pd_buf_put(&t, "exec \"$R/$B\" node");
    put_word(&t, "", d->recipe_rel);
    char *roles = pd_plan_roles_spec(d->plan, n->index);
    pd_buf_printf(&t, " --roles=%s", roles);
    free(roles);
    put_word(&t, "--endpoints=", d->endpoints);
    pd_buf_printf(&t, " --node=%d", n->index);
    if (d->cluster_rel) put_word(&t, "--cluster=", d->cluster_rel);
    /* pservers listen on the address the others reach this host by, unless
     * cluster.nic names the interface */
    if (!r->nic) put_word(&t, "--bind=", n->h->host);
    if (d->o->init_model && n->index == 0) put_word(&t, "--init_model=", d->o->init_model);
    if (d->resume) pd_buf_put(&t, " --resume");
    for (int i = 0; i < r->noverrides; i++) {
        char *kv = pd_xasprintf("--%s=%s", r->overrides[i].key, r->overrides[i].value);
        put_word(&t, "", kv);
        free(kv);
    }
    return t.s;
}

/* Read the start script's answer: lines up to "ready" (the agent is being
 * started), or to the end of its output. Fills *text (stdout) and *errtext.
 * Returns 1 when ready, 0 at the end without it, < 0 on failure. */
static int read_answer(node *n, deploy *d, char **text, char **errtext)
{
    size_t len = 0, elen = 0;
    *text = pd_xcalloc(1, 1);
    *errtext = pd_xcalloc(1, 1);
    double deadline = pd_now() + PD_MAX(d->sopts.timeout, 5) * 3;
    int eof = 0, eeof = 0;
    char buf[8192];
    while (pd_now() < deadline) {
        ssize_t k = pd_ssh_read(n->chan, buf, sizeof buf, &eof);
        if (k < 0) return (int)k;
        if (k > 0) {
            *text = pd_xrealloc(*text, len + (size_t)k + 1);
            memcpy(*text + len, buf, (size_t)k);
            len += (size_t)k;
            (*text)[len] = '\0';
            char *ready = strstr(*text, "\nready\n");
            if (ready || !strncmp(*text, "ready\n", 6)) {
                char *rest = ready ? ready + 7 : *text + 6;
                n->first_len = len - (size_t)(rest - *text); /* the agent's first words */
                n->first = pd_xmalloc(n->first_len + 1);
                memcpy(n->first, rest, n->first_len + 1);
                return 1;
            }
            continue;
        }
        ssize_t e = pd_ssh_read_err(n->chan, buf, sizeof buf, &eeof);
        if (e > 0 && elen < 65536) {
            *errtext = pd_xrealloc(*errtext, elen + (size_t)e + 1);
            memcpy(*errtext + elen, buf, (size_t)e);
            elen += (size_t)e;
            (*errtext)[elen] = '\0';
            continue;
        }
        if (eof && (eeof || e < 0)) return 0;
        struct pollfd p = {.fd = pd_ssh_fd(n->ssh), .events = (short)pd_ssh_events(n->ssh)};
        poll(&p, 1, 100);
    }
    return pd_err_set(PD_ETIMEDOUT, "%s: no answer while starting the node agent", n->h->host);
}

/*
 * The script one exec channel runs on a node. root_dir and the job directory
 * are resolved by the node's shell (a leading ~ and $NAME only: shell.h).
 * The cache under root_dir/.paddle must be the user's own and not writable
 * by others; the binary and every cached file are run or linked only after
 * their SHA-256 matched (a file that does not match is removed and sent
 * again). When something is missing the script says "need: ..." and exits
 * 3; otherwise it links the workspace into the job directory, writes
 * nodefile, says "ready" and becomes the agent.
 */
static char *node_script(node *n, deploy *d, const char *links, const char *agent)
{
    pd_buf b = {0};
    pd_buf_printf(&b, "command -v sha256sum >/dev/null || { echo 'paddle needs sha256sum on the node "
                      "(GNU coreutils or BusyBox)' >&2; exit 5; } && "
                      "R0=%s && mkdir -p -- \"$R0\" && cd -- \"$R0\" && R=$PWD && "
                      "mkdir -p .paddle/bin .paddle/cache && "
                      "for c in .paddle .paddle/bin .paddle/cache; do "
                      "[ -O \"$c\" ] && [ ! -L \"$c\" ] || { echo \"$R/$c is not a directory of $(id -un 2>/dev/null): "
                      "refusing to use it as the paddle cache\" >&2; exit 4; }; chmod go-w \"$c\" || exit 4; done && ",
                  d->q_root);
    pd_buf_printf(&b, "J0=%s && mkdir -p -- \"$J0/log\" \"$J0/output\" && J=$(cd -- \"$J0\" && pwd) && "
                      "echo \"root=$R\" && echo \"job=$J\" && need= && B=.paddle/bin/paddle-%.16s && "
                      "{ { [ -f \"$B\" ] && [ \"$(sha256sum < \"$B\")\" = '%s  -' ]; } || "
                      "{ rm -f \"$B\"; need=\"$need binary\"; }; } && for h in",
                  d->q_job, d->exe_hash, d->exe_hash);
    for (int i = 0; i < d->nfiles; i++) pd_buf_printf(&b, " %s", d->files[i].hash);
    pd_buf_put(&b, "; do f=.paddle/cache/$h; { [ -f \"$f\" ] && [ \"$(sha256sum < \"$f\")\" = \"$h  -\" ]; } || "
                   "{ rm -f \"$f\"; need=\"$need $h\"; }; done && "
                   "if [ -n \"$need\" ]; then echo \"need:$need\"; exit 3; fi && ");
    pd_buf_printf(&b, "cd \"$J\" && %s && echo %d > nodefile && ", links, n->index);
    if (d->q_ldpath) pd_buf_printf(&b, "export LD_LIBRARY_PATH=%s && ", d->q_ldpath);
    pd_buf_printf(&b, "echo ready && %s", agent);
    return b.s;
}

/* Connect to node n: a new session (a restart drops the old one first).
 * During a restart, a node that cannot be reached is tried again, 1 s after
 * the first try and doubling, until d->reconnect_until. */
static int connect_node(node *n, deploy *d)
{
    if (n->ssh) pd_ssh_free(n->ssh);
    n->ssh = NULL;
    free(n->first);
    n->first = NULL;
    n->copied_binary = n->files_sent = n->files_cached = 0;
    double wait = 1;
    for (;;) {
        int rc = pd_ssh_connect(&n->ssh, n->h, &d->sopts);
        if (rc == 0 || rc == PD_EAUTH || d->reconnect_until <= 0) return rc;
        if (pd_now() + wait > d->reconnect_until || pd_sup_signalled())
            return pd_err_wrap(rc, "%s still not reachable after %.0f s", n->h->host, RECONNECT_WAIT);
        fprintf(stderr, "paddle: %s is not reachable (%s); trying again in %.0f s\n", n->h->host, pd_err_msg(), wait);
        for (double until = pd_now() + wait; pd_now() < until && !pd_sup_signalled();) usleep(100000);
        wait = PD_MIN(wait * 2, BACKOFF_MAX);
    }
}

/*
 * Deploy one node with as few remote commands as possible: each one costs a
 * shell start on the node. One exec channel runs a script that makes the
 * directories, checks that the binary and every workspace file are there
 * (by hash), links the workspace into the job directory, writes nodefile
 * and becomes the agent. Only when something is missing does it stop and
 * say what: the launcher sends that and runs it again.
 */
static void *deploy_node(void *arg)
{
    node *n = ((void **)arg)[0];
    deploy *d = ((void **)arg)[1];
    int rc;
    char *text = NULL, *errtext = NULL, *script = NULL, *agent = NULL, *links = NULL;
    if ((rc = connect_node(n, d)) < 0) goto out;
    links = link_cmd("$R", d, 0, d->nfiles);
    agent = agent_cmd(n, d);
    script = node_script(n, d, links, agent);
    char hex[2 * PD_SECRET + 2];
    pd_hex(d->secret, PD_SECRET, hex);
    strcat(hex, "\n");
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((rc = pd_ssh_exec(n->ssh, script, &n->chan)) < 0) goto out;
        /* the secret, over stdin: the agent reads it first */
        size_t sent = 0;
        double deadline = pd_now() + 10;
        while (sent < strlen(hex) && pd_now() < deadline) {
            ssize_t w = pd_ssh_write(n->chan, hex + sent, strlen(hex) - sent);
            if (w < 0) {
                rc = (int)w;
                goto out;
            }
            if (w == 0) {
                struct pollfd p = {.fd = pd_ssh_fd(n->ssh), .events = (short)pd_ssh_events(n->ssh)};
                poll(&p, 1, 50);
            }
            sent += (size_t)w;
        }
        free(text);
        free(errtext);
        rc = read_answer(n, d, &text, &errtext);
        if (rc < 0) goto out;
        char *rl = strstr(text, "root="), *jl = strstr(text, "job=");
        if (rl && jl && !n->root) {
            n->root = pd_xasprintf("%.*s", (int)strcspn(rl + 5, "\n"), rl + 5);
            n->job = pd_xasprintf("%.*s", (int)strcspn(jl + 4, "\n"), jl + 4);
        }
        if (rc == 1) {
            rc = 0;
            n->files_cached = d->nfiles - n->files_sent;
            n->t_ready = pd_now();
            goto out;
        }
        int status = 0;
        pd_ssh_close_chan(n->chan, &status, NULL);
        n->chan = NULL;
        char *need = strstr(text, "need:");
        if (!n->root || !need || attempt == 1) {
            size_t el = strlen(errtext);
            while (el && (errtext[el - 1] == '\n' || errtext[el - 1] == ' ')) errtext[--el] = '\0';
            const char *last = strrchr(errtext, '\n');
            rc = pd_err_set(PD_ESSH, "%s: cannot prepare the job directory %s under root_dir %s (exit %d): %s",
                            pd_ssh_name(n->ssh), d->job_dir, d->root, status,
                            el ? (last ? last + 1 : errtext) : "is root_dir writable, the disk full?");
            goto out;
        }
        /* send what the node lacks, then start again */
        need[strcspn(need, "\n")] = '\0';
        if (strstr(need, " binary")) {
            char *dst = pd_xasprintf("%s/.paddle/bin/paddle-%.16s", n->root, d->exe_hash);
            rc = pd_ssh_upload(n->ssh, d->exe, dst, 0755);
            if (rc < 0) pd_err_wrap(rc, "copying paddle to %s (disk full?)", dst);
            free(dst);
            if (rc < 0) goto out;
            n->copied_binary = 1;
        }
        if ((rc = send_missing(n, d, 0, d->nfiles, need)) < 0) {
            pd_err_wrap(rc, "dispatching the workspace");
            goto out;
        }
    }
out:
    free(text);
    free(errtext);
    free(script);
    free(agent);
    free(links);
    if (rc < 0) n->err = pd_xstrdup(pd_err_msg());
    return NULL;
}

/* --- output of the agents ------------------------------------------------- */

/* A line from node n: "[pserver 0] text" becomes "[host pserver 0] text". */
static void emit(node *n, const char *line, int is_err)
{
    const char *host = n->h->host;
    char buf[PD_LINE_MAX + 256];
    int k = line[0] == '[' ? snprintf(buf, sizeof buf, "[%s %s\n", host, line + 1)
                           : snprintf(buf, sizeof buf, "[%s] %s\n", host, line);
    (void)is_err;
    fflush(stdout);
    pd_term_write(1, buf, (size_t)PD_MIN(k, (int)sizeof buf - 1)); /* above the status block */
}

/* Copy node 0's output/pass-N back when trainer 0 saved it. */
static void fetch_model(node *n, deploy *d, const char *dir)
{
    char *remote = pd_xasprintf("%s/%s/manifest.json", n->job, dir), *local_dir = pd_xasprintf("%s.part", dir);
    char *local = pd_xasprintf("%s/manifest.json", local_dir);
    mkdir(d->r->save_dir, 0755);
    mkdir(local_dir, 0755);
    int rc = pd_ssh_download(n->ssh, remote, local);
    FILE *f = rc == 0 ? fopen(local, "r") : NULL;
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        char *p = strstr(line, "\"file\": \"");
        if (!p) continue;
        p += 9;
        char *e = strchr(p, '"');
        if (!e || e - p > 400 || memchr(p, '/', (size_t)(e - p))) continue;
        *e = '\0';
        char *rf = pd_xasprintf("%s/%s/%s", n->job, dir, p), *lf = pd_xasprintf("%s/%s", local_dir, p);
        if (pd_ssh_download(n->ssh, rf, lf) < 0) rc = -1;
        free(rf);
        free(lf);
    }
    if (f) fclose(f);
    if (rc == 0) {
        /* replace an older copy: its files, then the directory */
        DIR *old = opendir(dir);
        struct dirent *e;
        while (old && (e = readdir(old))) {
            if (e->d_name[0] == '.') continue;
            char *f2 = pd_xasprintf("%s/%s", dir, e->d_name);
            unlink(f2);
            free(f2);
        }
        if (old) closedir(old);
        rmdir(dir);
        if (rename(local_dir, dir) < 0) rc = pd_err_set(PD_EIO, "cannot rename %s: %s", local_dir, strerror(errno));
    }
    if (rc < 0) fprintf(stderr, "paddle: could not copy %s back from %s: %s\n", dir, n->h->host, pd_err_msg());
    free(remote);
    free(local);
    free(local_dir);
}

/* A line from node n's agent (the supervisor's callback). */
static void take_line(void *ctx, char *line, int is_err)
{
    node *n = ctx;
    deploy *d = n->d;
    emit(n, line, is_err);
    /* trainer 0's "model saved to output/pass-00003" */
    const char *p = strstr(line, "] model saved to ");
    if (p && strncmp(line, "[trainer 0]", 11) == 0 && strcmp(d->r->copy_output ? d->r->copy_output : "pass", "pass") == 0) {
        p += strlen("] model saved to ");
        if (strncmp(p, d->r->save_dir, strlen(d->r->save_dir)) == 0 && !strstr(p, "..")) {
            /* copy at most every 2 s (passes can be milliseconds); the last
             * one is copied when the job ends */
            free(n->pending_model);
            n->pending_model = pd_xstrdup(p);
            if (pd_now() - n->last_fetch > 2) {
                fetch_model(n, d, n->pending_model);
                n->last_fetch = pd_now();
                free(n->pending_model);
                n->pending_model = NULL;
            }
        }
    }
}

/* Add a file outside the workspace (the recipe, the cluster file) to what is
 * dispatched, as rel. */
static int add_file(deploy *d, const char *rel, const char *local)
{
    PD_GROW(&d->files, &walk_cap, d->nfiles + 1);
    wfile *f = &d->files[d->nfiles++];
    f->rel = pd_xstrdup(rel);
    f->local = pd_xstrdup(local);
    f->mode = 0644;
    return pd_sha256_file(local, f->hash);
}

/* The job directory (a new JOB<timestamp> under root_dir, or the deployed
 * one), the files to dispatch, and where the recipe and the cluster file are
 * inside the job directory. */
static int prepare_files(deploy *d, const pd_recipe *r, const pd_remote_opts *o)
{
    char stamp[32];
    time_t now = time(NULL);
    strftime(stamp, sizeof stamp, "%Y%m%d%H%M%S", localtime(&now));
    const char *base = strrchr(r->path, '/');
    if (r->deployed) {
        d->job_dir = pd_xstrdup(r->deployed);
        d->recipe_rel = pd_xstrdup(base ? base + 1 : r->path);
    } else {
        d->job_dir = pd_xasprintf("JOB%s-%d", stamp, (int)getpid()); /* under root_dir */
        const char *ws = r->workspace ? r->workspace : r->dir;
        char *wsdir = r->workspace && r->workspace[0] != '/' && strcmp(r->dir, ".")
                          ? pd_xasprintf("%s/%s", r->dir, r->workspace) : pd_xstrdup(ws);
        int rc = list_workspace(d, wsdir);
        /* the recipe must travel too: inside the workspace, or beside it */
        size_t wl = strlen(wsdir);
        if (rc == 0 && strncmp(r->path, wsdir, wl) == 0 && r->path[wl] == '/') {
            d->recipe_rel = pd_xstrdup(r->path + wl + 1);
        } else if (rc == 0 && !strcmp(wsdir, ".")) {
            d->recipe_rel = pd_xstrdup(r->path);
        } else if (rc == 0) {
            d->recipe_rel = pd_xstrdup(base ? base + 1 : r->path);
            rc = add_file(d, d->recipe_rel, r->path);
        }
        free(wsdir);
        if (rc < 0) return rc;
    }
    if (o->cluster) {
        const char *cbase = strrchr(o->cluster, '/');
        d->cluster_rel = pd_xstrdup(cbase ? cbase + 1 : o->cluster);
        if (!r->deployed) return add_file(d, d->cluster_rel, o->cluster);
    }
    return 0;
}

/* --- the last job, for --resume ------------------------------------------ */

/* Where the launcher records the job directory of the last job started from
 * a recipe: .paddle/RECIPE.last_job beside the recipe, two lines:
 * "job=DIR" and "hosts=SPEC SPEC ...". */
static char *last_job_path(const pd_recipe *r)
{
    const char *base = strrchr(r->path, '/');
    return pd_xasprintf("%s/.paddle/%s.last_job", r->dir, base ? base + 1 : r->path);
}

static char *hosts_line(const pd_recipe *r)
{
    pd_buf b = {0};
    pd_buf_put(&b, "");
    for (int i = 0; i < r->nhosts; i++) pd_buf_printf(&b, "%s%s", i ? " " : "", r->hosts[i].spec);
    return b.s;
}

/* Record job_dir as the last job of r (atomically); a failure is a warning. */
static void record_job(const pd_recipe *r, const char *job_dir)
{
    char *path = last_job_path(r), *tmp = pd_xasprintf("%s.tmp", path), *dir = pd_xasprintf("%s/.paddle", r->dir);
    char *hosts = hosts_line(r);
    FILE *f = pd_mkdir_p(dir) == 0 ? fopen(tmp, "w") : NULL;
    int ok = f && fprintf(f, "job=%s\nhosts=%s\n", job_dir, hosts) > 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) < 0)
        fprintf(stderr, "paddle: warning: cannot record the job directory in %s (paddle run --resume will not "
                        "find this job): %s\n", path, strerror(errno));
    free(path);
    free(tmp);
    free(dir);
    free(hosts);
}

/* --resume: the job directory of the last job started from r, which must
 * have run on the hosts r names now. */
static int recorded_job(const pd_recipe *r, char **job_dir)
{
    char *path = last_job_path(r), *hosts = hosts_line(r), line[4096], *job = NULL, *was = NULL;
    FILE *f = fopen(path, "r");
    int rc = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "job=", 4) && !job && line[4]) job = pd_xstrdup(line + 4);
        else if (!strncmp(line, "hosts=", 6) && !was) was = pd_xstrdup(line + 6);
    }
    if (!f)
        rc = pd_err_set(PD_ENOENT, "nothing to resume: no job of %s was started from here (%s: %s); run it "
                        "without --resume to start a new job", r->path, path, strerror(errno));
    else if (!job || !was)
        rc = pd_err_set(PD_EINVAL, "cannot resume: %s does not name a job directory and its hosts", path);
    else if (strcmp(was, hosts))
        rc = pd_err_set(PD_EINVAL, "cannot resume: the last job of %s ran on %s; the recipe now names %s", r->path,
                        was, hosts);
    if (f) fclose(f);
    if (rc == 0) *job_dir = job;
    else free(job);
    free(was);
    free(path);
    free(hosts);
    return rc;
}

/* Pserver endpoints: each host's address and its planned port. */
static char *plan_endpoints(const pd_recipe *r, const pd_plan *plan)
{
    char *eps = pd_xstrdup("");
    for (int i = 0; i < plan->nroles; i++) {
        if (plan->roles[i].kind != PD_ROLE_PSERVER) continue;
        char *e = pd_xasprintf("%s%s%s:%d", eps, eps[0] ? "," : "", r->hosts[plan->roles[i].host].host,
                               plan->roles[i].port);
        free(eps);
        eps = e;
    }
    return eps;
}

/* Deploy every node in parallel and hand each agent's channel to the
 * supervisor. Returns 0, or 1 after stopping what started (said). */
static int deploy_all(deploy *d, node *nodes, int nn, pd_sup *sup, double t0)
{
    pthread_t *th = pd_xcalloc((size_t)nn, sizeof *th);
    void **args = pd_xcalloc((size_t)nn * 2, sizeof *args);
    for (int i = 0; i < nn; i++) {
        nodes[i].index = i;
        nodes[i].h = &d->r->hosts[i];
        nodes[i].d = d;
        args[2 * i] = &nodes[i];
        args[2 * i + 1] = d;
        pthread_create(&th[i], NULL, deploy_node, &args[2 * i]);
    }
    for (int i = 0; i < nn; i++) pthread_join(th[i], NULL);
    free(th);
    free(args);
    int bad = 0, copied = 0, sent = 0, cached = 0;
    for (int i = 0; i < nn; i++) {
        node *n = &nodes[i];
        if (n->err) fprintf(stderr, "paddle: %s\n", n->err);
        bad |= n->err != NULL;
        if (!n->chan) continue;
        int m = pd_sup_add_node(sup, n->h->host, n->ssh, n->chan, take_line, n);
        n->chan = NULL;
        if (n->first) pd_sup_feed(sup, m, n->first, n->first_len);
        copied += n->copied_binary;
        sent += n->files_sent;
        cached += n->files_cached;
    }
    if (bad) {
        pd_sup_stop_all(sup);
        fprintf(stderr, "paddle: deployment failed; nothing is left running\n");
        return 1;
    }
    for (int i = 0; i < nn; i++) printf("paddle: node %d %s: job directory %s\n", i, nodes[i].h->spec, nodes[i].job);
    printf("paddle: every node started in %.2f s (binary copied to %d of %d nodes; workspace: %d files sent, "
           "%d already there)\n", pd_now() - t0, copied, nn, sent, cached);
    fflush(stdout);
    return 0;
}

/* The job finished: copy the model back from trainer 0's node, say so. */
static void finish(deploy *d, node *nodes, int nn, double t0)
{
    const pd_recipe *r = d->r;
    /* the model comes from the node of trainer 0 (node 0 unless placed elsewhere) */
    int t0node = 0;
    for (int i = 0; i < d->plan->nroles; i++)
        if (d->plan->roles[i].kind == PD_ROLE_TRAINER && d->plan->roles[i].id == 0) t0node = d->plan->roles[i].host;
    for (int i = 0; i < nn; i++)
        if (nodes[i].pending_model) fetch_model(&nodes[i], d, nodes[i].pending_model);
    int fetched = !r->copy_output || strcmp(r->copy_output, "never") != 0;
    if (r->copy_output && !strcmp(r->copy_output, "end")) {
        char *last = pd_xasprintf("%s/pass-%05d", r->save_dir, r->passes - 1);
        fetch_model(&nodes[t0node], d, last);
        free(last);
    }
    if (fetched)
        printf("paddle: job done in %.1f s on %d node%s; model in %s/\n", pd_now() - t0, nn, nn > 1 ? "s" : "",
               r->save_dir);
    else
        printf("paddle: job done in %.1f s on %d node%s; model on %s in %s/%s/ (copy_output = \"never\")\n",
               pd_now() - t0, nn, nn > 1 ? "s" : "", nodes[t0node].h->host, nodes[t0node].job, r->save_dir);
}

/* The job's progress: every role of the plan, starting. */
static void start_progress(pd_progress *board, const pd_recipe *r, const pd_plan *plan)
{
    char title[160], name[48];
    snprintf(title, sizeof title, "paddle run %s", r->path);
    pd_progress_init(board, title, r->passes, 1);
    for (int i = 0; i < plan->nroles; i++) {
        snprintf(name, sizeof name, "%s %d", pd_role_name(plan->roles[i].kind), plan->roles[i].id);
        pd_progress_state(board, name, r->hosts[plan->roles[i].host].host, PD_ST_STARTING);
    }
}

/* Deploy, then supervise the agents: Ctrl+C, a failed node and the end are
 * the supervisor's (pd_sup_run), as in local mode. */
int pd_remote_run(const pd_recipe *r, const pd_remote_opts *o)
{
    deploy d_, *d = &d_;
    pd_progress board = {0};
    memset(d, 0, sizeof *d);
    d->r = r;
    d->o = o;
    int status = 1, nn = r->nhosts;
    pd_plan plan;
    if (pd_plan_make(&plan, r) < 0) {
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        return 2;
    }
    d->plan = &plan;
    char *exe = pd_self_exe();
    pd_sup *sup = exe ? pd_sup_new() : NULL;
    node *nodes = pd_xcalloc((size_t)nn, sizeof *nodes);
    double t0 = pd_now();
    d->exe = exe;
    d->root = r->root_dir ? r->root_dir : ".";
    if (!sup || pd_sha256_file(exe, d->exe_hash) < 0 || pd_secret_new(d->secret) < 0 || prepare_files(d, r, o) < 0) {
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        goto out;
    }
    if (o->resume) {
        free(d->job_dir);
        d->job_dir = NULL;
        if (recorded_job(r, &d->job_dir) < 0) {
            fprintf(stderr, "paddle: %s\n", pd_err_msg());
            status = 2;
            goto out;
        }
    }
    d->endpoints = plan_endpoints(r, &plan);
    /* what the nodes' shells resolve: checked here, before any connection */
    if (pd_sh_path(d->root, "cluster.root_dir", &d->q_root) < 0 ||
        pd_sh_path(d->job_dir, r->deployed ? "job.deployed" : "the job directory", &d->q_job) < 0 ||
        (r->ld_library_path && pd_sh_path(r->ld_library_path, "cluster.ld_library_path", &d->q_ldpath) < 0)) {
        fprintf(stderr, "paddle: %s: %s\n", r->path, pd_err_msg());
        status = 2;
        goto out;
    }
    d->sopts.identity_files = (const char *const *)r->identity_files;
    d->sopts.nidentity = r->nidentity;
    d->sopts.use_agent = r->use_agent;
    d->sopts.known_hosts = r->known_hosts;
    d->sopts.accept_new = o->accept_new;
    d->sopts.timeout = r->connect_timeout;
    printf("paddle: job %s on %d host%s: %d pserver%s, %d trainer%s; job directory %s%s\n", r->path, nn,
           nn > 1 ? "s" : "", r->pservers, r->pservers > 1 ? "s" : "", r->trainers, r->trainers > 1 ? "s" : "",
           d->job_dir, o->resume ? " (resumed from its last checkpoint)" : "");
    fflush(stdout);
    if (!o->resume) record_job(r, d->job_dir);
    d->resume = o->resume;
    pd_sup_set_restarts(sup, r->restarts);
    pd_sup_set_heartbeat(sup, r->heartbeat_timeout);
    if (pd_sup_serve_metrics(sup, r, NULL) < 0) { /* every interface: Prometheus scrapes from elsewhere */
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        goto out;
    }
    start_progress(&board, r, &plan);
    pd_sup_set_progress(sup, &board);
    /* a restart (PD_SUP_RESTART): every node again, in the same job
     * directory, its roles from the last checkpoint */
    while (deploy_all(d, nodes, nn, sup, t0) == 0) {
        if ((status = pd_sup_run(sup)) != PD_SUP_RESTART)
            pd_progress_end(&board, !board.live ? NULL : status == 0 ? "job done" : status == 130 ? "stopped" : "failed");
        if (status == 0) finish(d, nodes, nn, t0);
        if (status != PD_SUP_RESTART) break;
        status = 1;
        pd_sup_clear(sup);
        d->resume = 1;
        d->reconnect_until = pd_now() + RECONNECT_WAIT;
    }
out:
    pd_progress_end(&board, NULL);
    pd_progress_free(&board);
    pd_sup_free(sup); /* closes the channels, before their sessions */
    for (int i = 0; i < nn; i++) {
        if (nodes[i].chan) pd_ssh_close_chan(nodes[i].chan, NULL, NULL);
        if (nodes[i].ssh) pd_ssh_free(nodes[i].ssh);
        free(nodes[i].err);
        free(nodes[i].first);
        free(nodes[i].pending_model);
        free(nodes[i].root);
        free(nodes[i].job);
    }
    free(nodes);
    for (int i = 0; i < d->nfiles; i++) {
        free(d->files[i].rel);
        free(d->files[i].local);
    }
    free(d->files);
    free(d->job_dir);
    free(d->q_root);
    free(d->q_job);
    free(d->q_ldpath);
    free(d->recipe_rel);
    free(d->cluster_rel);
    free((char *)d->endpoints);
    free(exe);
    pd_plan_free(&plan);
    return status;
}
