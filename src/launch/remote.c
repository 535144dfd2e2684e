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
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define RECONNECT_WAIT 30.0 /* seconds a restart retries a node it cannot reach */
#define BACKOFF_MAX 8.0      /* seconds between two tries, doubling from 1 */

typedef struct wfile {
    char *rel;              /* path inside the workspace */
    char *local;
    char hash[65];
    int mode;
    long long size;         /* bytes, when it was hashed */
    int dup;                /* an earlier file has the same content: sent once */
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
    char *last_saved;       /* node 0: the last output/pass-N trainer 0 saved */
    char *root, *job;       /* root_dir and the job directory, as absolute paths on the node */
    double last_fetch;
    int member;             /* its member in the supervisor (pd_sup_add_node) */
} node;

struct deploy {
    const pd_recipe *r;
    const pd_remote_opts *o;
    const pd_plan *plan;
    const char *exe;
    char exe_hash[65];
    long long exe_size;
    pthread_mutex_t gz_lock;
    uint8_t *exe_gz;        /* the binary, gzip-compressed (exe_gzip) */
    size_t exe_gz_len;
    const char *root;       /* root_dir on the nodes ("." = home) */
    char *q_root, *q_job;   /* root_dir and the job directory as node shell text (shell.h) */
    char *q_ldpath;         /* cluster.ld_library_path as node shell text, or NULL */
    char *job_dir;          /* absolute or home-relative */
    char *recipe_rel;       /* the recipe's path inside the job dir */
    char *cluster_rel;
    wfile *files;
    int nfiles;
    char *links;            /* link_cmd's text, the same for every node */
    const char *endpoints;
    uint8_t secret[PD_SECRET];
    pd_ssh_opts sopts;
    int resume;             /* the roles start from the last checkpoint (--resume) */
    double reconnect_until; /* a restart: retry a node that cannot be reached until then */
    int deploying;          /* deploy_all's threads run: a signal cancels their SSH waits */
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
    memset(f, 0, sizeof *f);
    f->rel = pd_xstrdup(rel);
    f->local = pd_xstrdup(path);
    f->mode = st->st_mode & 0777;
    f->size = (long long)st->st_size;
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

typedef struct keyed {
    const char *key;
    int mode, i;
} keyed;

static int by_key(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

static int by_mode(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->mode != y->mode) return (x->mode > y->mode) - (x->mode < y->mode);
    return (x->i > y->i) - (x->i < y->i);
}

/* Mark each file whose content an earlier file has (by sorting on the
 * hash: a workspace may hold many files). */
static void mark_duplicates(deploy *d)
{
    keyed *k = pd_xcalloc((size_t)d->nfiles + 1, sizeof *k);
    for (int i = 0; i < d->nfiles; i++) k[i] = (keyed){d->files[i].hash, 0, i};
    qsort(k, (size_t)d->nfiles, sizeof *k, by_key);
    for (int j = 0; j < d->nfiles; j++) d->files[k[j].i].dup = j > 0 && !strcmp(k[j].key, k[j - 1].key);
    free(k);
}

/* Shell text, run in the job directory, that hard-links every workspace
 * file from the cache under "$R" into place with its mode: one mkdir for
 * all the directories and one chmod per mode, so the forks on the node
 * grow with the files only by one `ln` each. */
static char *link_cmd(deploy *d)
{
    pd_buf b = {0};
    pd_buf_put(&b, "true");
    int n = d->nfiles, nd = 0;
    keyed *k = pd_xcalloc((size_t)n + 1, sizeof *k);
    char **dirs = pd_xcalloc((size_t)n + 1, sizeof *dirs);
    for (int i = 0; i < n; i++) {
        const char *rel = d->files[i].rel, *slash = strrchr(rel, '/');
        if (slash) {
            dirs[nd] = pd_xasprintf("%.*s", (int)(slash - rel), rel);
            k[nd] = (keyed){dirs[nd], 0, i};
            nd++;
        }
    }
    qsort(k, (size_t)nd, sizeof *k, by_key);
    for (int j = 0; j < nd; j++) {
        if (j && !strcmp(k[j].key, k[j - 1].key)) continue;
        char *q = pd_sh_quote(k[j].key);
        pd_buf_printf(&b, "%s %s", j ? "" : " && mkdir -p --", q);
        free(q);
    }
    for (int j = 0; j < nd; j++) free(dirs[j]);
    free(dirs);
    for (int i = 0; i < n; i++) {
        char *q = pd_sh_quote(d->files[i].rel);
        pd_buf_printf(&b, " && ln -f -- \"$R/.paddle/cache/%s\" %s", d->files[i].hash, q);
        free(q);
    }
    /* one chmod per mode, its files in workspace order */
    for (int i = 0; i < n; i++) k[i] = (keyed){d->files[i].rel, d->files[i].mode, i};
    qsort(k, (size_t)n, sizeof *k, by_mode);
    for (int j = 0; j < n; j++) {
        if (!j || k[j].mode != k[j - 1].mode) pd_buf_printf(&b, " && chmod %o --", k[j].mode);
        char *q = pd_sh_quote(k[j].key);
        pd_buf_printf(&b, " %s", q);
        free(q);
    }
    free(k);
    return b.s;
}

/* Send `size` bytes of local over the channel, to the node script's
 * `head -c`; a file that shrank since it was hashed is an error here, one
 * that changed fails the node's hash check. */
static int send_file(node *n, const char *local, long long size)
{
    int fd = open(local, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pd_err_set(PD_EIO, "cannot send %s: %s", local, strerror(errno));
    enum { CHUNK = 256 << 10 };
    char *buf = pd_xmalloc(CHUNK);
    int rc = 0;
    for (long long left = size; left > 0 && rc == 0;) {
        ssize_t k = read(fd, buf, (size_t)PD_MIN(left, (long long)CHUNK));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            rc = pd_err_set(PD_EIO, "cannot send %s: %s", local, k < 0 ? strerror(errno) : "it shrank since it was hashed");
            break;
        }
        rc = pd_ssh_write_all(n->chan, buf, (size_t)k);
        left -= k;
    }
    free(buf);
    close(fd);
    return rc;
}

/* The binary, gzip-compressed for the nodes that have gzip: 40 % of the
 * bytes through SSH, whose ciphers cost far more per byte than deflate
 * does. Compressed once, by the first node that asks. */
static int exe_gzip(deploy *d, const uint8_t **gz, size_t *len)
{
    int rc = 0;
    pthread_mutex_lock(&d->gz_lock);
    if (!d->exe_gz) {
        size_t n = (size_t)d->exe_size;
        uint8_t *raw = pd_xmalloc(n ? n : 1);
        int fd = open(d->exe, O_RDONLY | O_CLOEXEC);
        size_t got = 0;
        while (fd >= 0 && got < n) {
            ssize_t k = read(fd, raw + got, n - got);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            got += (size_t)k;
        }
        if (fd >= 0) close(fd);
        z_stream z = {0};
        if (got != n) {
            rc = pd_err_set(PD_EIO, "cannot read %s to send it: %s", d->exe, fd < 0 ? strerror(errno) : "short read");
        } else if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            rc = pd_err_set(PD_ENOMEM, "cannot compress %s: deflateInit2 failed", d->exe);
        } else {
            size_t cap = deflateBound(&z, (uLong)n);
            d->exe_gz = pd_xmalloc(cap);
            z.next_in = raw;
            z.avail_in = (uInt)n;
            z.next_out = d->exe_gz;
            z.avail_out = (uInt)cap;
            if (deflate(&z, Z_FINISH) != Z_STREAM_END) {
                free(d->exe_gz);
                d->exe_gz = NULL;
                rc = pd_err_set(PD_EIO, "cannot compress %s: deflate failed", d->exe);
            } else {
                d->exe_gz_len = cap - z.avail_out;
            }
            deflateEnd(&z);
        }
        free(raw);
    }
    *gz = d->exe_gz;
    *len = d->exe_gz_len;
    pthread_mutex_unlock(&d->gz_lock);
    return d->exe_gz ? 0 : rc;
}

/* The compressed binary: its size on a line (the node reads it with
 * `read`), then the bytes (for `head -c SIZE | gzip -dc`). */
static int send_gz(node *n, deploy *d)
{
    const uint8_t *gz;
    size_t len;
    int rc = exe_gzip(d, &gz, &len);
    if (rc < 0) return rc;
    char head[32];
    snprintf(head, sizeof head, "%zu\n", len);
    if ((rc = pd_ssh_write_all(n->chan, head, strlen(head))) < 0) return rc;
    return pd_ssh_write_all(n->chan, gz, len);
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
    if (*roles) pd_buf_printf(&t, " --roles=%s", roles); /* none on a host the plan left idle */
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

/* Read the node script's output into a (stdout) and e (stderr) until a
 * whole line that starts with `want` (NULL: none) or is "ready" (the agent
 * is being started: what follows are the agent's first words, kept in
 * n->first). Lines are taken from *pos on, and *pos moves past them.
 * Returns 2 for `want`, 1 for ready, 0 at the end of the output, < 0 on
 * failure. */
static int read_answer(node *n, deploy *d, pd_buf *a, pd_buf *e, size_t *pos, const char *want)
{
    pd_buf_put(a, "");
    pd_buf_put(e, "");
    double deadline = pd_now() + PD_MAX(d->sopts.timeout, 5) * 3;
    int eof = 0, eeof = 0;
    char buf[8192];
    for (;;) {
        char *nl;
        while ((nl = memchr(a->s + *pos, '\n', a->len - *pos))) {
            char *line = a->s + *pos;
            size_t len = (size_t)(nl - line);
            *pos += len + 1;
            if (len == 5 && !memcmp(line, "ready", 5)) {
                n->first_len = a->len - *pos;
                n->first = pd_xmalloc(n->first_len + 1);
                memcpy(n->first, a->s + *pos, n->first_len + 1);
                return 1;
            }
            if (want && !strncmp(line, want, strlen(want))) return 2;
        }
        if (pd_now() >= deadline) break;
        if (pd_sup_signalled()) return pd_err_set(PD_EINTR, "%s: interrupted", n->h->host); /* Ctrl+C: said once */
        ssize_t k = pd_ssh_read(n->chan, buf, sizeof buf, &eof);
        if (k < 0) return (int)k;
        if (k > 0) {
            pd_buf_putn(a, buf, (size_t)k);
            continue;
        }
        ssize_t ek = pd_ssh_read_err(n->chan, buf, sizeof buf, &eeof);
        if (ek > 0) {
            if (e->len < 65536) pd_buf_putn(e, buf, (size_t)ek);
            continue;
        }
        if (eof && (eeof || ek < 0)) return 0;
        struct pollfd p = {.fd = pd_ssh_fd(n->ssh), .events = (short)pd_ssh_events(n->ssh)};
        poll(&p, 1, 100);
    }
    double waited = PD_MAX(d->sopts.timeout, 5) * 3;
    if (want && !strncmp(want, "got ", 4))
        return pd_err_set(PD_ETIMEDOUT, "%s: the node did not confirm receiving %s within %.0f s (a full disk, or a "
                          "node too busy? cluster.connect_timeout sets the wait: 3 x %.0f s)", n->h->host, want + 4,
                          waited, PD_MAX(d->sopts.timeout, 5));
    return pd_err_set(PD_ETIMEDOUT, "%s: no answer within %.0f s while starting the node agent (the login's start-up "
                      "files run first: a slow one, or a node too busy, needs a larger cluster.connect_timeout, "
                      "now %.0f s; the wait is 3 times it)", n->h->host, waited, PD_MAX(d->sopts.timeout, 5));
}

/* The rest of the first line of the node script's output that starts with
 * prefix, or NULL (whole lines only: a root_dir may contain "need:"). */
static char *line_value(const pd_buf *a, const char *prefix)
{
    size_t k = strlen(prefix);
    for (const char *p = a->s; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len >= k && !memcmp(p, prefix, k)) return pd_xasprintf("%.*s", (int)(len - k), p + k);
        p = nl ? nl + 1 : NULL;
    }
    return NULL;
}

/*
 * The script one exec channel runs on a node. root_dir and the job directory
 * are resolved by the node's shell (a leading ~ and $NAME only: shell.h).
 * The cache under root_dir/.paddle must be the user's own and not writable
 * by others; the binary and every cached file are run or linked only after
 * their SHA-256 matched (a file that does not match is removed and sent
 * again). What is missing the script names ("need: binary HASH ..."), then
 * reads each from its stdin (`head -c` of the size the launcher put here),
 * checks its hash, and says "got NAME"; the launcher sends the next only
 * then, so no `head` reads past its own file. Then it links the workspace
 * into the job directory, writes nodefile, says "ready" and becomes the
 * agent, which reads the job secret from the same stdin. One shell start
 * per node, whatever was missing.
 */
static char *node_script(node *n, deploy *d, const char *links, const char *agent)
{
    pd_buf b = {0};
    pd_buf_printf(&b, "command -v sha256sum >/dev/null || { echo 'paddle needs sha256sum on the node "
                      "(GNU coreutils or BusyBox)' >&2; exit 5; } && "
                      "R0=%s && { cd -- \"$R0\" 2>/dev/null || { mkdir -p -- \"$R0\" && cd -- \"$R0\"; }; } && R=$PWD && "
                      "{ { [ -d .paddle/bin ] && [ -d .paddle/cache ]; } || mkdir -p .paddle/bin .paddle/cache; } && "
                      "for c in .paddle .paddle/bin .paddle/cache; do "
                      "[ -O \"$c\" ] && [ ! -L \"$c\" ] || { echo \"$R/$c is not a directory of $(id -un 2>/dev/null): "
                      "refusing to use it as the paddle cache\" >&2; exit 4; }; done && "
                      "chmod go-w .paddle .paddle/bin .paddle/cache && "
                      "G= && { ! command -v gzip >/dev/null 2>&1 || G=.gz; } && ",
                  d->q_root);
    /* every hash at once: one sha256sum, whose lines are "HASH  PATH" */
    pd_buf_printf(&b, "J0=%s && mkdir -p -- \"$J0/log\" \"$J0/output\" && cd -- \"$J0\" && J=$PWD && cd -- \"$R\" && "
                      "echo \"root=$R\" && echo \"job=$J\" && B=.paddle/bin/paddle-%.16s && "
                      "S=$(sha256sum -- \"$B\"",
                  d->q_job, d->exe_hash);
    for (int i = 0; i < d->nfiles; i++)
        if (!d->files[i].dup) pd_buf_printf(&b, " .paddle/cache/%s", d->files[i].hash);
    pd_buf_printf(&b, " 2>/dev/null || :) && need= && case \"$S\" in *'%s  '\"$B\"*) ;; "
                      "*) rm -f -- \"$B\"; need=\" binary$G\";; esac && for h in",
                  d->exe_hash);
    for (int i = 0; i < d->nfiles; i++)
        if (!d->files[i].dup) pd_buf_printf(&b, " %s", d->files[i].hash);
    pd_buf_put(&b, "; do case \"$S\" in *\"$h  .paddle/cache/$h\"*) ;; *) rm -f -- \".paddle/cache/$h\"; "
                   "need=\"$need $h\";; esac; done && "
                   "if [ -n \"$need\" ]; then echo \"need:$need\" && for h in $need; do case $h in ");
    pd_buf_printf(&b, "binary|binary.gz) f=$B z=%lld s=%s m=755;; ", d->exe_size, d->exe_hash);
    for (int i = 0; i < d->nfiles; i++)
        if (!d->files[i].dup)
            pd_buf_printf(&b, "%s) f=.paddle/cache/$h z=%lld s=$h m=644;; ", d->files[i].hash, d->files[i].size);
    pd_buf_put(&b, "esac; t=\"$f.$$\" && case $h in *.gz) read -r z && head -c \"$z\" | gzip -dc > \"$t\";; "
                   "*) head -c \"$z\" > \"$t\";; esac && [ \"$(sha256sum < \"$t\")\" = \"$s  -\" ] && "
                   "chmod \"$m\" \"$t\" && mv -f -- \"$t\" \"$f\" && echo \"got $h\" || { rm -f -- \"$t\"; "
                   "echo \"$R/$f: what arrived does not match its SHA-256 (the file changed while it was sent, "
                   "or the disk is full)\" >&2; exit 3; }; done; fi && ");
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
 * and becomes the agent. What is missing it names and reads from the same
 * channel (node_script), so a fresh node costs one shell start too.
 */
static void *deploy_node(void *arg)
{
    node *n = ((void **)arg)[0];
    deploy *d = ((void **)arg)[1];
    int rc;
    pd_buf out = {0}, err = {0};
    size_t pos = 0;
    char *script = NULL, *agent = NULL;
    if ((rc = connect_node(n, d)) < 0) goto out;
    agent = agent_cmd(n, d);
    script = node_script(n, d, d->links, agent);
    if ((rc = pd_ssh_exec(n->ssh, script, &n->chan)) < 0) goto out;
    rc = read_answer(n, d, &out, &err, &pos, "need:");
    if (rc == 2) { /* send what the node lacks, one file at a time */
        char *need = line_value(&out, "need:");
        if (!need) need = pd_xstrdup("");
        for (char *save = NULL, *w = strtok_r(need, " ", &save); w && rc >= 0; w = strtok_r(NULL, " ", &save)) {
            int gz = !strcmp(w, "binary.gz"), bin = gz || !strcmp(w, "binary"), i = 0;
            while (!bin && i < d->nfiles && strcmp(d->files[i].hash, w)) i++;
            if (!bin && i == d->nfiles) {
                rc = pd_err_set(PD_EPROTO, "%s: the node asked for '%s', which is not in the workspace", n->h->host, w);
                break;
            }
            rc = gz ? send_gz(n, d) : send_file(n, bin ? d->exe : d->files[i].local, bin ? d->exe_size : d->files[i].size);
            if (rc < 0) {
                pd_err_wrap(rc, "%s: sending %s", n->h->host, bin ? "paddle" : d->files[i].rel);
                break;
            }
            char *got = pd_xasprintf("got %s", w);
            rc = read_answer(n, d, &out, &err, &pos, got);
            free(got);
            if (rc == 2) {
                n->copied_binary |= bin;
                n->files_sent += !bin;
            } else if (rc >= 0) {
                rc = 0; /* the script stopped: said below */
                break;
            }
        }
        free(need);
        if (rc == 2) rc = read_answer(n, d, &out, &err, &pos, NULL);
    }
    char *rl = out.s ? line_value(&out, "root=") : NULL, *jl = out.s ? line_value(&out, "job=") : NULL;
    if (rl && jl && !n->root) {
        n->root = rl;
        n->job = jl;
    } else {
        free(rl);
        free(jl);
    }
    if (rc == 1) { /* the agent is starting: it reads the job secret first */
        char hex[2 * PD_SECRET + 2];
        pd_hex(d->secret, PD_SECRET, hex);
        strcat(hex, "\n");
        rc = pd_ssh_write_all(n->chan, hex, strlen(hex));
        if (rc < 0) goto out;
        n->files_cached = d->nfiles - n->files_sent;
        n->t_ready = pd_now();
        goto out;
    }
    if (rc < 0) goto out;
    int status = 0;
    pd_ssh_close_chan(n->chan, &status, NULL);
    n->chan = NULL;
    size_t el = err.len;
    while (el && (err.s[el - 1] == '\n' || err.s[el - 1] == ' ')) err.s[--el] = '\0';
    const char *last = el ? strrchr(err.s, '\n') : NULL;
    rc = pd_err_set(PD_ESSH, "%s: cannot prepare the job directory %s under root_dir %s (exit %d): %s",
                    pd_ssh_name(n->ssh), d->job_dir, d->root, status,
                    el ? (last ? last + 1 : err.s) : "is root_dir writable, the disk full?");
out:
    free(out.s);
    free(err.s);
    free(script);
    free(agent);
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

/* Copy node 0's output/pass-N back when trainer 0 saved it: 0, or -1 (said,
 * unless gone_ok and the pass was removed on the node since: keep_models
 * keeps the newest and the best, and a newer one comes). */
static int fetch_model(node *n, deploy *d, const char *dir, int gone_ok)
{
    char *remote = pd_xasprintf("%s/%s/manifest.json", n->job, dir), *local_dir = pd_xasprintf("%s.part", dir);
    char *local = pd_xasprintf("%s/manifest.json", local_dir);
    mkdir(d->r->save_dir, 0755);
    mkdir(local_dir, 0755);
    int rc = pd_ssh_download(n->ssh, remote, local);
    FILE *f = rc == 0 ? fopen(local, "r") : NULL;
    char line[1024];
    /* each parameter's file, and a growing table's keys beside its rows */
    static const char *const fields[] = {"\"file\": \"", "\"keys\": \""};
    while (f && fgets(line, sizeof line, f)) {
        for (int k = 0; k < 2; k++) {
            char *p = strstr(line, fields[k]);
            if (!p) continue;
            p += strlen(fields[k]);
            char *e = strchr(p, '"');
            if (!e || e - p > 400 || memchr(p, '/', (size_t)(e - p))) continue;
            char name[401];
            snprintf(name, sizeof name, "%.*s", (int)(e - p), p);
            char *rf = pd_xasprintf("%s/%s/%s", n->job, dir, name), *lf = pd_xasprintf("%s/%s", local_dir, name);
            int frc = pd_ssh_download(n->ssh, rf, lf);
            if (frc < 0 && rc == 0) rc = frc;
            free(rf);
            free(lf);
        }
    }
    if (f) fclose(f);
    if (rc == 0) {
        pd_remove_dir(dir); /* an older copy */
        if (rename(local_dir, dir) < 0) rc = pd_err_set(PD_EIO, "cannot rename %s: %s", local_dir, strerror(errno));
    }
    if (rc < 0) {
        pd_remove_dir(local_dir); /* no half copy is left beside the models */
        int gone = rc == PD_ENOENT || strstr(pd_err_msg(), "No such file"); /* over SFTP; over the shell */
        if (!(gone_ok && gone))
            fprintf(stderr, "paddle: could not copy %s back from %s: %s\n", dir, n->h->host, pd_err_msg());
    }
    free(remote);
    free(local);
    free(local_dir);
    return rc < 0 ? -1 : 0;
}

/* A job that failed or was stopped: the newest model trainer 0 saved comes
 * back too, from each node whose connection still stands. */
static void fetch_pending(deploy *d, node *nodes, int nn, const pd_sup *sup, int stopped)
{
    for (int i = 0; i < nn; i++) {
        if (!nodes[i].pending_model || pd_sup_node_lost(sup, nodes[i].member)) continue;
        if (stopped) /* a stop is at once: no copy that a slow link could make long */
            printf("paddle: the newest model trainer 0 saved is on %s in %s/%s/\n", nodes[i].h->host, nodes[i].job,
                   nodes[i].pending_model);
        else if (fetch_model(&nodes[i], d, nodes[i].pending_model, 0) == 0)
            printf("paddle: the newest model trainer 0 saved, %s, copied back\n", nodes[i].pending_model);
        free(nodes[i].pending_model);
        nodes[i].pending_model = NULL;
    }
}

/* A line from node n's agent (the supervisor's callback). */
static void take_line(void *ctx, char *line, int is_err)
{
    node *n = ctx;
    deploy *d = n->d;
    emit(n, line, is_err);
    /* trainer 0's "model saved to output/pass-00003" */
    const char *p = strstr(line, "] model saved to ");
    if (p && strncmp(line, "[trainer 0]", 11) == 0) {
        p += strlen("] model saved to ");
        if (strncmp(p, d->r->save_dir, strlen(d->r->save_dir)) != 0 || strstr(p, "..")) return;
        free(n->last_saved);
        n->last_saved = pd_xstrdup(p);
        if (!strcmp(d->r->copy_output ? d->r->copy_output : "pass", "pass")) {
            /* copy at most every 2 s (passes can be milliseconds); the last
             * one is copied when the job ends */
            free(n->pending_model);
            n->pending_model = pd_xstrdup(p);
            if (pd_now() - n->last_fetch > 2) {
                fetch_model(n, d, n->pending_model, 1);
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
    memset(f, 0, sizeof *f);
    f->rel = pd_xstrdup(rel);
    f->local = pd_xstrdup(local);
    f->mode = 0644;
    struct stat st;
    if (stat(local, &st) < 0) return pd_err_set(PD_EIO, "%s: %s", local, strerror(errno));
    f->size = (long long)st.st_size;
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

/* pd_ssh_opts.cancelled: Ctrl+C (or SIGTERM, SIGHUP) while the nodes are
 * deployed ends every connection's wait at once, not at its timeout. */
static int deploy_cancelled(void *ctx)
{
    const deploy *d = ctx;
    return d->deploying && pd_sup_signalled();
}

/* Deploy every node in parallel and hand each agent's channel to the
 * supervisor. Returns 0, or after stopping what started (said) 130 when a
 * signal came, 1 when a node failed. */
static int deploy_all(deploy *d, node *nodes, int nn, pd_sup *sup, double t0)
{
    pthread_t *th = pd_xcalloc((size_t)nn, sizeof *th);
    void **args = pd_xcalloc((size_t)nn * 2, sizeof *args);
    d->deploying = 1;
    for (int i = 0; i < nn; i++) {
        nodes[i].index = i;
        nodes[i].h = &d->r->hosts[i];
        nodes[i].d = d;
        args[2 * i] = &nodes[i];
        args[2 * i + 1] = d;
        pthread_create(&th[i], NULL, deploy_node, &args[2 * i]);
    }
    for (int i = 0; i < nn; i++) pthread_join(th[i], NULL);
    d->deploying = 0;
    free(th);
    free(args);
    int sig = pd_sup_signalled(), bad = sig != 0, copied = 0, sent = 0, cached = 0;
    for (int i = 0; i < nn; i++) {
        node *n = &nodes[i];
        if (n->err && !sig) fprintf(stderr, "paddle: %s\n", n->err);
        bad |= n->err != NULL;
        if (!n->chan) continue;
        int trainers = 0;
        for (int k = 0; k < d->plan->nroles; k++)
            trainers += d->plan->roles[k].kind == PD_ROLE_TRAINER && d->plan->roles[k].host == n->index;
        int m = n->member = pd_sup_add_node(sup, n->h->host, n->ssh, n->chan, trainers, take_line, n);
        n->chan = NULL;
        if (n->first) pd_sup_feed(sup, m, n->first, n->first_len);
        copied += n->copied_binary;
        sent += n->files_sent;
        cached += n->files_cached;
    }
    if (bad) {
        pd_sup_stop_all(sup);
        if (sig)
            fprintf(stderr, "paddle: %s while deploying; nothing is left running\n",
                    sig == SIGINT ? "interrupted (Ctrl+C)" : sig == SIGTERM ? "terminated (SIGTERM)" : strsignal(sig));
        else
            fprintf(stderr, "paddle: deployment failed; nothing is left running\n");
        return sig ? 130 : 1;
    }
    for (int i = 0; i < nn; i++) printf("paddle: node %d %s: job directory %s\n", i, nodes[i].h->spec, nodes[i].job);
    printf("paddle: every node started in %.2f s (binary copied to %d of %d nodes; workspace: %d files sent, "
           "%d already there)\n", pd_now() - t0, copied, nn, sent, cached);
    fflush(stdout);
    return 0;
}

/* Whether the models come back into save_dir here (copy_output). */
static int copies_back(const pd_recipe *r) { return !r->copy_output || strcmp(r->copy_output, "never") != 0; }

/* The job finished: copy the model back from trainer 0's node, say so (and
 * after how many restarts, as a local job does). */
static void finish(deploy *d, node *nodes, int nn, double t0, int restarts)
{
    const pd_recipe *r = d->r;
    char after[40] = "";
    if (restarts > 0) snprintf(after, sizeof after, " after %d restart%s", restarts, restarts > 1 ? "s" : "");
    /* the model comes from the node of trainer 0 (node 0 unless placed elsewhere) */
    int t0node = 0;
    for (int i = 0; i < d->plan->nroles; i++)
        if (d->plan->roles[i].kind == PD_ROLE_TRAINER && d->plan->roles[i].id == 0) t0node = d->plan->roles[i].host;
    for (int i = 0; i < nn; i++)
        if (nodes[i].pending_model) fetch_model(&nodes[i], d, nodes[i].pending_model, 0);
    int fetched = copies_back(r);
    /* "end": the last pass trainer 0 saved (early stopping may end before
     * settings.passes) */
    if (r->copy_output && !strcmp(r->copy_output, "end") && nodes[t0node].last_saved)
        fetch_model(&nodes[t0node], d, nodes[t0node].last_saved, 0);
    if (fetched)
        printf("paddle: job done in %.1f s%s on %d node%s; model in %s/\n", pd_now() - t0, after, nn,
               nn > 1 ? "s" : "", r->save_dir);
    else
        printf("paddle: job done in %.1f s%s on %d node%s; model on %s in %s/%s/ (copy_output = \"never\")\n",
               pd_now() - t0, after, nn, nn > 1 ? "s" : "", nodes[t0node].h->host, nodes[t0node].job, r->save_dir);
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
    pthread_mutex_init(&d->gz_lock, NULL);
    d->root = r->root_dir ? r->root_dir : ".";
    struct stat est;
    if (exe && stat(exe, &est) == 0) d->exe_size = (long long)est.st_size;
    if (!sup || pd_sha256_file(exe, d->exe_hash) < 0 || pd_secret_new(d->secret) < 0 || prepare_files(d, r, o) < 0) {
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        goto out;
    }
    mark_duplicates(d);
    d->links = link_cmd(d);
    if (o->resume) {
        free(d->job_dir);
        d->job_dir = NULL;
        if (recorded_job(r, &d->job_dir) < 0) {
            fprintf(stderr, "paddle: %s\n", pd_err_msg());
            status = 2;
            goto out;
        }
    }
    if (copies_back(r) && (status = pd_job_lock(r, "run", PD_LOCK_SAVE)) != 0) goto out; /* not into another's */
    status = 1;
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
    d->sopts.cancelled = deploy_cancelled;
    d->sopts.cancel_ctx = d;
    printf("paddle: job %s on %d host%s: %d pserver%s, %d trainer%s; job directory %s%s\n", r->path, nn,
           nn > 1 ? "s" : "", r->pservers, r->pservers > 1 ? "s" : "", r->trainers, r->trainers > 1 ? "s" : "",
           d->job_dir, o->resume ? " (resuming from its last complete checkpoint)" : "");
    fflush(stdout);
    if (!o->resume) record_job(r, d->job_dir);
    d->resume = o->resume;
    pd_sup_set_restarts(sup, r->restarts, r->checkpoint_dir != NULL, o->resume);
    pd_sup_set_heartbeat(sup, r->heartbeat_timeout);
    if (pd_sup_serve_metrics(sup, r, NULL) < 0) { /* every interface: Prometheus scrapes from elsewhere */
        fprintf(stderr, "paddle: %s\n", pd_err_msg());
        goto out;
    }
    start_progress(&board, r, &plan);
    pd_sup_set_progress(sup, &board);
    /* a restart (PD_SUP_RESTART): every node again, in the same job
     * directory, its roles from the last checkpoint */
    int deployed;
    while ((deployed = deploy_all(d, nodes, nn, sup, t0)) == 0) {
        if ((status = pd_sup_run(sup)) != PD_SUP_RESTART)
            pd_progress_end(&board, !board.live ? NULL : status == 0 ? "job done" : status == 130 ? "stopped" : "failed");
        if (status == 0) finish(d, nodes, nn, t0, pd_sup_restarts_done(sup));
        else if (status != PD_SUP_RESTART) fetch_pending(d, nodes, nn, sup, status == 130);
        if (status != PD_SUP_RESTART) break;
        status = 1;
        d->resume = pd_sup_restart_resumes(sup);
        pd_sup_clear(sup);
        d->reconnect_until = pd_now() + RECONNECT_WAIT;
    }
    if (deployed == 130) status = 130;
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
        free(nodes[i].last_saved);
        free(nodes[i].root);
        free(nodes[i].job);
    }
    free(nodes);
    for (int i = 0; i < d->nfiles; i++) {
        free(d->files[i].rel);
        free(d->files[i].local);
    }
    free(d->files);
    free(d->exe_gz);
    free(d->links);
    pthread_mutex_destroy(&d->gz_lock);
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
