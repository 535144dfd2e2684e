/* k8s.c - printing a job's Kubernetes manifests. */
#include "k8s.h"
#include "secret.h"
#include "../core/crypto.h"
#include "../core/pd.h"
#include "../ps/proto.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FILE_LIMIT (256 << 10)      /* one file of the ConfigMap */
#define TOTAL_LIMIT (900 << 10)     /* a ConfigMap holds at most 1 MiB */
#define MAX_FILES 64
#define CKPT_MOUNT "/checkpoint"    /* where every role mounts the checkpoint volume */

typedef struct wfile {
    char key[256], path[512];
    char *data;
    size_t len;
} wfile;

typedef struct job {
    const pd_recipe *r;
    const pd_k8s_opts *o;
    char name[64], secret[2 * PD_SECRET + 1];
    char *recipe;           /* the recipe's path from here, tidied (tidy()) */
    wfile files[MAX_FILES];
    int nfiles;
    size_t total;
    int nports;
} job;

static int dir_first(const job *j, int i);

/* A YAML double-quoted scalar (JSON's escapes). */
static void quoted(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void q(FILE *f, const char *s)
{
    quoted(f, s, strlen(s));
}

/* A relative path without its "." and "dir/.." parts (malloc'd), as
 * Kubernetes wants a ConfigMap item's path; NULL when it leads out of the
 * directory it starts in ("a/../../b"). */
static char *tidy(const char *path)
{
    char *out = pd_xmalloc(strlen(path) + 1);
    size_t k = 0;
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (k == 0) {
                free(out);
                return NULL;
            }
            while (k > 0 && out[k - 1] != '/') k--; /* drop the last part */
            if (k > 0) k--;
        } else if (n > 0 && !(n == 1 && p[0] == '.')) {
            if (k > 0) out[k++] = '/';
            memcpy(out + k, p, n);
            k += n;
        }
        p += n + (p[n] == '/');
    }
    out[k] = '\0';
    return out;
}

/* Add a workspace file (relative, small, text) to the ConfigMap. */
static int add_file(job *j, const char *path)
{
    if (!path || path[0] == '/') return 0; /* absolute: on a volume of its own */
    for (int i = 0; i < j->nfiles; i++)
        if (strcmp(j->files[i].path, path) == 0) return 0;
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) return 0;
    if (j->nfiles == MAX_FILES || strlen(path) >= sizeof j->files[0].path)
        return pd_err_set(PD_ERANGE, "the workspace has over %d files or a path too long (%s): give the job a "
                          "volume instead", MAX_FILES, path);
    if (st.st_size > FILE_LIMIT || j->total + (size_t)st.st_size > TOTAL_LIMIT)
        return pd_err_set(PD_ERANGE, "%s (%lld bytes) does not fit a ConfigMap (%d KiB a file, %d KiB in all): "
                          "put the data on a volume and give its absolute path", path, (long long)st.st_size,
                          FILE_LIMIT >> 10, TOTAL_LIMIT >> 10);
    wfile *w = &j->files[j->nfiles];
    FILE *in = fopen(path, "rb");
    if (!in) return pd_err_set(PD_EIO, "cannot read %s: %s", path, strerror(errno));
    w->data = pd_xmalloc((size_t)st.st_size + 1);
    w->len = fread(w->data, 1, (size_t)st.st_size, in);
    fclose(in);
    snprintf(w->path, sizeof w->path, "%s", path);
    size_t k = 0;
    for (const char *p = path; *p && k + 3 < sizeof w->key; p++) {
        if (*p == '/') w->key[k++] = '_', w->key[k++] = '_';
        else w->key[k++] = isalnum((unsigned char)*p) || *p == '-' || *p == '.' ? *p : '_';
    }
    w->key[k] = '\0';
    j->total += w->len;
    j->nfiles++;
    return 0;
}

/* A path the recipe names, relative to the recipe's directory: a file, or
 * the files at the top of a directory. Absolute paths are left to volumes. */
static int add_path(job *j, const char *name, const char *path)
{
    if (!path || path[0] == '/') return 0;
    int rc = 0;
    char *joined = strcmp(j->r->dir, ".") ? pd_xasprintf("%s/%s", j->r->dir, path) : pd_xstrdup(path);
    char *p = tidy(joined);
    struct stat st;
    if (!p) {
        rc = pd_err_set(PD_EINVAL, "%s = %s: a path out of the directory paddle k8s runs in (%s) is not put in the "
                        "ConfigMap: put the data on a volume and give its absolute path", name, path, joined);
    } else if (stat(p, &st) < 0) {
        rc = pd_err_set(PD_ENOENT, "%s = %s: %s is not here to put in the ConfigMap (%s)", name, path, p,
                        strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(p);
        struct dirent *e;
        if (!d) rc = pd_err_set(PD_EIO, "%s %s: %s", name, p, strerror(errno));
        while (d && rc == 0 && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char *f = pd_xasprintf("%s/%s", p, e->d_name);
            rc = add_file(j, f);
            free(f);
        }
        if (d) closedir(d);
    } else {
        rc = add_file(j, p);
    }
    free(p);
    free(joined);
    return rc;
}

/* The recipe, its data, and the files of job.workspace (top level). */
static int collect(job *j)
{
    const pd_recipe *r = j->r;
    int rc;
    j->recipe = r->path[0] == '/' ? NULL : tidy(r->path);
    if (!j->recipe)
        return pd_err_set(PD_EINVAL, "%s: the recipe goes in the ConfigMap by its path from here, and this one is "
                          "not below here: run paddle k8s in the job's directory (the recipe's, or one above it)",
                          r->path);
    if ((rc = add_file(j, j->recipe)) < 0 || (rc = add_path(j, "data.train", r->train)) < 0 ||
        (rc = add_path(j, "data.test", r->test)) < 0)
        return rc;
    return add_path(j, "job.workspace", r->workspace);
}

static void meta(FILE *f, const job *j, const char *kind, const char *api, const char *suffix)
{
    fprintf(f, "---\napiVersion: %s\nkind: %s\nmetadata:\n  name: %s%s\n", api, kind, j->name, suffix);
    if (j->o->namespace_) fprintf(f, "  namespace: %s\n", j->o->namespace_);
    fprintf(f, "  labels: {app: paddle, paddle-job: %s}\n", j->name);
}

static void configmap(FILE *f, const job *j)
{
    meta(f, j, "ConfigMap", "v1", "-workspace");
    fprintf(f, "data:\n");
    for (int i = 0; i < j->nfiles; i++) {
        fprintf(f, "  %s: ", j->files[i].key);
        quoted(f, j->files[i].data, j->files[i].len);
        fputc('\n', f);
    }
}

/* The pserver list as the trainers see it. */
static char *pserver_list(const job *j)
{
    char *s = pd_xstrdup("");
    for (int k = 0; k < j->r->pservers; k++) {
        char *n = j->o->pod ? pd_xasprintf("%s%s127.0.0.1:%d", s, k ? "," : "", j->r->port + k * j->nports)
                            : pd_xasprintf("%s%s%s-pserver-%d.%s-pserver:%d", s, k ? "," : "", j->name, k,
                                           j->name, j->r->port);
        free(s);
        s = n;
    }
    return s;
}

/* One container running `paddle start`; env: extra YAML lines at indent. */
static void container(FILE *f, const job *j, const char *in, const char *name, const char *env)
{
    fprintf(f, "%s- name: %s\n%s  image: ", in, name, in);
    q(f, j->o->image);
    fprintf(f, "\n%s  workingDir: /job\n%s  args: [start, ", in, in);
    q(f, j->recipe);
    char *save = pd_xasprintf("--save_dir=/output/%s", j->r->save_dir ? j->r->save_dir : "output");
    fputs(", ", f);
    q(f, save);
    free(save);
    for (int i = 0; i < j->o->nargs; i++) {
        /* the ones written here: the volumes are there */
        if (!strncmp(j->o->args[i], "--save_dir=", 11)) continue;
        if (j->r->checkpoint_dir && !strncmp(j->o->args[i], "--checkpoint_dir=", 17)) continue;
        fputs(", ", f);
        q(f, j->o->args[i]);
    }
    if (j->r->checkpoint_dir) /* after the user's: the volume is there */
        fprintf(f, ", \"--checkpoint_dir=" CKPT_MOUNT "/%s\", \"--resume\"", j->name);
    fprintf(f, "]\n%s  env:\n", in);
    if (j->o->pod) fprintf(f, "%s  - {name: PADDLE_JOB_SECRET, value: \"%s\"}\n", in, j->secret);
    else fprintf(f, "%s  - name: PADDLE_JOB_SECRET\n%s    valueFrom: {secretKeyRef: {name: %s-secret, key: "
                 "PADDLE_JOB_SECRET}}\n", in, in, j->name);
    fputs(env, f);
    fprintf(f, "%s  volumeMounts:\n", in);
    if (!j->o->pod) fprintf(f, "%s  - {name: workspace, mountPath: /job, readOnly: true}\n", in);
    for (int i = 0; j->o->pod && i < j->nfiles; i++) {
        const char *slash = strrchr(j->files[i].path, '/');
        if (dir_first(j, i))
            fprintf(f, "%s  - {name: workspace-%d, mountPath: \"/job%s%.*s\"}\n", in, i, slash ? "/" : "",
                    slash ? (int)(slash - j->files[i].path) : 0, j->files[i].path);
    }
    fprintf(f, "%s  - {name: output, mountPath: /output}\n", in);
    if (j->r->checkpoint_dir) fprintf(f, "%s  - {name: checkpoint, mountPath: " CKPT_MOUNT "}\n", in);
}

/* --pod: podman 4 makes no subdirectories for a ConfigMap's items, so each
 * directory of the workspace is a volume of its own; file i comes first in
 * its directory? */
static int dir_first(const job *j, int i)
{
    const char *a = j->files[i].path, *sa = strrchr(a, '/');
    for (int k = 0; k < i; k++) {
        const char *b = j->files[k].path, *sb = strrchr(b, '/');
        if ((!sa && !sb) || (sa && sb && sa - a == sb - b && strncmp(a, b, (size_t)(sa - a)) == 0)) return 0;
    }
    return 1;
}

/* The model's emptyDir, and the checkpoints' volume: the claim every pod
 * mounts, or with --pod an emptyDir that the pod's containers share and
 * that outlives a container's restart. */
static void output_volumes(FILE *f, const job *j, const char *in)
{
    fprintf(f, "%s- name: output\n%s  emptyDir: {}\n", in, in);
    if (!j->r->checkpoint_dir) return;
    if (j->o->checkpoint_claim) {
        fprintf(f, "%s- name: checkpoint\n%s  persistentVolumeClaim: {claimName: ", in, in);
        q(f, j->o->checkpoint_claim);
        fputs("}\n", f);
    } else {
        fprintf(f, "%s- name: checkpoint\n%s  emptyDir: {}\n", in, in);
    }
}

static void pod_volumes(FILE *f, const job *j, const char *in)
{
    fprintf(f, "%svolumes:\n", in);
    for (int i = 0; i < j->nfiles; i++) {
        if (!dir_first(j, i)) continue;
        fprintf(f, "%s- name: workspace-%d\n%s  configMap:\n%s    name: %s-workspace\n%s    items:\n", in, i, in, in,
                j->name, in);
        const char *sa = strrchr(j->files[i].path, '/');
        for (int k = i; k < j->nfiles; k++) {
            const char *b = j->files[k].path, *sb = strrchr(b, '/');
            if (k > i && dir_first(j, k)) continue;
            int same = (!sa && !sb) || (sa && sb && sa - j->files[i].path == sb - b &&
                                        strncmp(j->files[i].path, b, (size_t)(sa - j->files[i].path)) == 0);
            if (same) fprintf(f, "%s    - {key: %s, path: \"%s\"}\n", in, j->files[k].key, sb ? sb + 1 : b);
        }
    }
    output_volumes(f, j, in);
}

static void volumes(FILE *f, const job *j, const char *in)
{
    if (j->o->pod) return pod_volumes(f, j, in);
    fprintf(f, "%svolumes:\n%s- name: workspace\n%s  configMap:\n%s    name: %s-workspace\n%s    items:\n", in, in,
            in, in, j->name, in);
    for (int i = 0; i < j->nfiles; i++)
        fprintf(f, "%s    - {key: %s, path: \"%s\"}\n", in, j->files[i].key, j->files[i].path);
    output_volumes(f, j, in);
}

/* Fleet's variables for role kind ("PSERVER" or "TRAINER"), at indent. */
static char *fleet_env(const job *j, const char *in, const char *kind, int k)
{
    char *list = pserver_list(j), *s;
    char *common = pd_xasprintf("%s  - {name: TRAINING_ROLE, value: %s}\n%s  - {name: PADDLE_PSERVERS_IP_PORT_LIST, "
                                "value: \"%s\"}\n%s  - {name: PADDLE_TRAINERS_NUM, value: \"%d\"}\n",
                                in, kind, in, list, in, j->r->trainers);
    if (kind[0] == 'P' && j->o->pod)
        s = pd_xasprintf("%s%s  - {name: POD_IP, value: 127.0.0.1}\n%s  - {name: PADDLE_PORT, value: \"%d\"}\n",
                         common, in, in, j->r->port + k * j->nports);
    else if (kind[0] == 'P')
        s = pd_xasprintf("%s%s  - name: POD_NAME\n%s    valueFrom: {fieldRef: {fieldPath: metadata.name}}\n"
                         "%s  - {name: POD_IP, value: \"$(POD_NAME).%s-pserver\"}\n"
                         "%s  - {name: PADDLE_PORT, value: \"%d\"}\n", common, in, in, in, j->name, in, j->r->port);
    else if (j->o->pod)
        s = pd_xasprintf("%s%s  - {name: PADDLE_TRAINER_ID, value: \"%d\"}\n", common, in, k);
    else
        s = pd_xasprintf("%s%s  - name: PADDLE_TRAINER_ID\n%s    valueFrom: {fieldRef: {fieldPath: "
                         "\"metadata.annotations['batch.kubernetes.io/job-completion-index']\"}}\n", common, in, in);
    free(list);
    free(common);
    return s;
}

static void pod(FILE *f, const job *j)
{
    meta(f, j, "Pod", "v1", "");
    fprintf(f, "spec:\n  restartPolicy: %s\n  containers:\n", j->r->restarts > 0 ? "OnFailure" : "Never");
    for (int k = 0; k < j->r->pservers + j->r->trainers; k++) {
        int ps = k < j->r->pservers, id = ps ? k : k - j->r->pservers;
        char name[64], *env = fleet_env(j, "  ", ps ? "PSERVER" : "TRAINER", id);
        snprintf(name, sizeof name, "%s-%d", ps ? "pserver" : "trainer", id);
        container(f, j, "  ", name, env);
        free(env);
    }
    volumes(f, j, "  ");
}

static void pserver_workloads(FILE *f, const job *j)
{
    meta(f, j, "Service", "v1", "-pserver");
    fprintf(f, "spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n"
               "  selector: {paddle-job: %s, paddle-role: pserver}\n  ports:\n", j->name);
    for (int p = 0; p < j->nports; p++) fprintf(f, "  - {name: ps-%d, port: %d}\n", p, j->r->port + p);
    meta(f, j, "StatefulSet", "apps/v1", "-pserver");
    fprintf(f, "spec:\n  serviceName: %s-pserver\n  replicas: %d\n  podManagementPolicy: Parallel\n"
               "  selector:\n    matchLabels: {paddle-job: %s, paddle-role: pserver}\n  template:\n"
               "    metadata:\n      labels: {app: paddle, paddle-job: %s, paddle-role: pserver}\n"
               "    spec:\n      containers:\n", j->name, j->r->pservers, j->name, j->name);
    char *env = fleet_env(j, "      ", "PSERVER", 0);
    container(f, j, "      ", "pserver", env);
    free(env);
    volumes(f, j, "      ");
}

/* The Job's backoffLimit counts every restart of every trainer's
 * container. One fault restarts each trainer once or twice: the one that
 * failed, and every other when the pservers end; a trainer that reaches a
 * pserver not yet ended is refused and restarts once more. So job.restarts
 * faults take up to 2 x trainers restarts each. */
static int backoff_limit(const job *j)
{
    return j->r->restarts * 2 * j->r->trainers;
}

static void trainer_job(FILE *f, const job *j)
{
    meta(f, j, "Job", "batch/v1", "-trainer");
    fprintf(f, "spec:\n  completionMode: Indexed\n  completions: %d\n  parallelism: %d\n  backoffLimit: %d\n"
               "  template:\n    metadata:\n      labels: {app: paddle, paddle-job: %s, paddle-role: trainer}\n"
               "    spec:\n      restartPolicy: %s\n      containers:\n", j->r->trainers, j->r->trainers,
            backoff_limit(j), j->name, j->r->restarts > 0 ? "OnFailure" : "Never");
    char *env = fleet_env(j, "      ", "TRAINER", 0);
    container(f, j, "      ", "trainer", env);
    free(env);
    volumes(f, j, "      ");
}

/* Kubeflow's PaddleJob: PS and Worker replicas; its controller sets
 * PADDLE_MASTER, PADDLE_NNODES and the counts, the rendezvous does the rest. */
static void paddlejob(FILE *f, const job *j)
{
    meta(f, j, "PaddleJob", "kubeflow.org/v1", "");
    fprintf(f, "spec:\n  paddleReplicaSpecs:\n");
    for (int ps = 1; ps >= 0; ps--) {
        char *env = pd_xasprintf("              - {name: TRAINING_ROLE, value: %s}\n"
                                 "              - {name: PADDLE_SERVER_NUM, value: \"%d\"}\n"
                                 "              - {name: PADDLE_TRAINER_NUM, value: \"%d\"}\n",
                                 ps ? "PSERVER" : "TRAINER", j->r->pservers, j->r->trainers);
        fprintf(f, "    %s:\n      replicas: %d\n      restartPolicy: %s\n      template:\n        spec:\n"
                   "          containers:\n", ps ? "PS" : "Worker", ps ? j->r->pservers : j->r->trainers,
                j->r->restarts > 0 ? "OnFailure" : "Never");
        container(f, j, "            ", "paddle", env);
        free(env);
        volumes(f, j, "          ");
    }
}

/* The job's name (JOB), a DNS label of at most NAME_MAX_LEN characters: the
 * longest name made of it, JOB-pserver, must stay within the 52 a
 * StatefulSet's name may have (its pods' labels add 11). */
#define NAME_MAX_LEN 40
static int job_name(job *j)
{
    const char *src = j->o->name ? j->o->name : j->r->job_name;
    char base[256] = "";
    if (!src) {
        const char *b = strrchr(j->r->path, '/');
        snprintf(base, sizeof base, "%s", b ? b + 1 : j->r->path);
        char *dot = strrchr(base, '.');
        if (dot) *dot = '\0';
        src = base;
    }
    /* lower-case letters, digits and '-' (a DNS label, as Kubernetes wants) */
    char clean[NAME_MAX_LEN + 8];
    size_t k = 0, n = strlen(src);
    int cut = 0;
    k = (size_t)snprintf(clean, sizeof clean, "%s", isalpha((unsigned char)src[0]) ? "" : "paddle-");
    for (const char *p = src; *p; p++) {
        if (k == NAME_MAX_LEN) {
            cut = 1;
            break;
        }
        clean[k++] = isalnum((unsigned char)*p) ? (char)tolower((unsigned char)*p) : '-';
    }
    clean[k] = '\0';
    int alnum = 0;
    for (const char *p = src; *p && !alnum; p++) alnum = isalnum((unsigned char)*p) != 0;
    if (!alnum)
        return pd_err_set(PD_EINVAL, "%s '%s': a job's name needs a letter or a digit (Kubernetes names are "
                          "lower-case letters, digits and '-')", j->o->name ? "--name" : "job name", src);
    if (cut) {
        /* a hash of the whole name keeps two long names apart (their
         * checkpoints' directories on a shared claim are named by it) */
        uint32_t h = 2166136261u;
        for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)src[i]) * 16777619u;
        k = NAME_MAX_LEN - 7;
        while (k > 0 && clean[k - 1] == '-') k--;
        snprintf(clean + k, sizeof clean - k, "-%06x", (unsigned)(h & 0xffffff));
    } else {
        while (k > 0 && clean[k - 1] == '-') k--;
        clean[k] = '\0';
    }
    snprintf(j->name, sizeof j->name, "%s", clean);
    return 0;
}

/* A DNS label: lower-case letters, digits and '-', a letter or digit at
 * each end, 63 at most (a namespace's name). */
static int dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)s[i]) && !isdigit((unsigned char)s[i]) && s[i] != '-') return 0;
    return 1;
}

int pd_k8s_print(FILE *f, const pd_recipe *r, const pd_k8s_opts *o)
{
    job *j = pd_xcalloc(1, sizeof *j);
    uint8_t s[PD_SECRET];
    j->r = r, j->o = o;
    j->nports = r->ports_num + r->ports_num_for_sparse;
    int rc = job_name(j);
    if (rc == 0) rc = pd_secret_new(s);
    if (rc == 0 && o->namespace_ && !dns_label(o->namespace_))
        rc = pd_err_set(PD_EINVAL, "--namespace '%s': a namespace is a DNS label (lower-case letters, digits and "
                        "'-', a letter or digit at each end, 63 at most)", o->namespace_);
    if (rc == 0 && r->checkpoint_dir && !o->pod && !o->checkpoint_claim)
        rc = pd_err_set(PD_EINVAL, "%s: settings.checkpoint_dir = %s: under Kubernetes the checkpoints need a "
                        "volume every pod mounts: create a ReadWriteMany PersistentVolumeClaim and name it with "
                        "--checkpoint_claim CLAIM (it is mounted at " CKPT_MOUNT ")", r->path, r->checkpoint_dir);
    if (rc == 0 && o->checkpoint_claim && !r->checkpoint_dir)
        rc = pd_err_set(PD_EINVAL, "--checkpoint_claim %s: %s sets no settings.checkpoint_dir, so the job writes "
                        "no checkpoints (set one, e.g. --checkpoint_dir=ckpt)", o->checkpoint_claim, r->path);
    if (rc == 0) rc = collect(j);
    if (rc == 0) {
        pd_hex(s, PD_SECRET, j->secret);
        fprintf(f, "# paddle k8s %s: %d pservers + %d trainers (docs/engines.md)\n", r->path, r->pservers,
                r->trainers);
        if (!o->pod) {
            meta(f, j, "Secret", "v1", "-secret");
            fprintf(f, "type: Opaque\nstringData:\n  PADDLE_JOB_SECRET: \"%s\"\n", j->secret);
        }
        configmap(f, j);
        if (o->pod) pod(f, j);
        else if (o->kubeflow) paddlejob(f, j);
        else {
            pserver_workloads(f, j);
            trainer_job(f, j);
        }
    }
    for (int i = 0; i < j->nfiles; i++) free(j->files[i].data);
    free(j->recipe);
    free(j);
    return rc;
}
