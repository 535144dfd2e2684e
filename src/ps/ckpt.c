/* ckpt.c - checkpoint directories: atomic writes, the complete marker,
 * listing and pruning. */
#include "ckpt.h"
#include "../core/fs.h"
#include "../core/log.h"
#include "../core/pd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LISTED 4096

int pd_ckpt_fsync_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pd_err_set(PD_EIO, "cannot open %s: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* some file systems refuse fsync on a directory: that is no error */
    if (rc < 0 && e != EINVAL && e != EBADF) return pd_err_set(PD_EIO, "fsync %s: %s", path, strerror(e));
    return 0;
}

int pd_ckpt_fsync_files_in(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return pd_err_set(PD_EIO, "cannot open %s: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char *path = pd_xasprintf("%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) rc = pd_ckpt_fsync_file(path);
        free(path);
    }
    closedir(d);
    return rc < 0 ? rc : pd_ckpt_fsync_file(dir);
}

static int fsync_parent(const char *path)
{
    char *d = pd_xstrdup(path), *slash = strrchr(d, '/');
    if (slash) *slash = '\0';
    int rc = pd_ckpt_fsync_file(slash ? (*d ? d : "/") : ".");
    free(d);
    return rc;
}

/* Write len bytes to path (created or truncated), fsynced when sync. */
static int write_whole(const char *path, const void *data, size_t len, int sync)
{
    int rc = 0, fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) rc = pd_err_set(PD_EIO, "cannot write %s: %s", path, strerror(errno));
    for (size_t off = 0; rc == 0 && off < len;) {
        ssize_t n = write(fd, (const char *)data + off, len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) rc = pd_err_set(PD_EIO, "cannot write %s: %s", path, strerror(errno));
        else off += (size_t)n;
    }
    if (rc == 0 && sync && fsync(fd) < 0) rc = pd_err_set(PD_EIO, "fsync %s: %s", path, strerror(errno));
    if (fd >= 0 && close(fd) < 0 && rc == 0) rc = pd_err_set(PD_EIO, "cannot write %s: %s", path, strerror(errno));
    return rc;
}

int pd_ckpt_write_file(const char *path, const void *data, size_t len) { return write_whole(path, data, len, 0); }

int pd_ckpt_write_atomic(const char *path, const void *data, size_t len)
{
    /* several processes may write the same marker (pservers sharing a
     * host's checkpoint_dir): each its own temp file, the last rename wins */
    char *tmp = pd_xasprintf("%s.tmp.%ld", path, (long)getpid());
    int rc = write_whole(tmp, data, len, 1);
    if (rc == 0 && rename(tmp, path) < 0) rc = pd_err_set(PD_EIO, "rename %s: %s", tmp, strerror(errno));
    if (rc == 0) rc = fsync_parent(path);
    if (rc < 0) unlink(tmp);
    free(tmp);
    return rc;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

int pd_ckpt_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0) return 0;
    if (nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return pd_err_set(PD_EIO, "cannot remove %s: %s", path, strerror(errno));
    return 0;
}

char *pd_ckpt_path(const char *dir, long step) { return pd_xasprintf("%s/ckpt-%ld", dir, step); }

static int has_marker(const char *dir, long step)
{
    char *p = pd_xasprintf("%s/ckpt-%ld/complete", dir, step);
    struct stat st;
    int ok = stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

static int cmp_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Every ckpt-<step> under dir, newest first; *n of them (malloc'd array). */
static long *list_all(const char *dir, int *n)
{
    long *all = pd_xmalloc(MAX_LISTED * sizeof *all);
    *n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && *n < MAX_LISTED) {
        char *end;
        if (strncmp(e->d_name, "ckpt-", 5) != 0) continue;
        long step = strtol(e->d_name + 5, &end, 10);
        if (*end || end == e->d_name + 5 || step < 0) continue;
        all[(*n)++] = step;
    }
    if (d) closedir(d);
    qsort(all, (size_t)*n, sizeof *all, cmp_desc);
    return all;
}

int pd_ckpt_list(const char *dir, long *steps, int max, int complete_only)
{
    int n, k = 0;
    long *all = list_all(dir, &n);
    for (int i = 0; i < n && k < max; i++)
        if (!complete_only || has_marker(dir, all[i])) steps[k++] = all[i];
    free(all);
    return k;
}

/* Old checkpoints are removed behind the job: their trees (a hundred files
 * and more each) cost a trainer that waited for them about as much as
 * writing a shard. pd_ckpt_prune renames each to ckpt-<step>.removed (no
 * longer a checkpoint to list, resume or prune) and one thread at a time
 * removes those; a life killed before it finished leaves them for the next
 * commit's thread. */
static struct {
    pthread_t thread;
    int running, swept; /* swept: leftovers of earlier lives looked for */
    int done;           /* the thread has finished (atomic) */
} removal;

static int is_removed_name(const char *name)
{
    char *end;
    if (strncmp(name, "ckpt-", 5) != 0) return 0;
    long step = strtol(name + 5, &end, 10);
    return end != name + 5 && step >= 0 && strcmp(end, ".removed") == 0;
}

/* Remove every DIR/ckpt-<step>.removed (arg: DIR, malloc'd, freed here). */
static void *remove_old(void *arg)
{
    char *dir = arg;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!is_removed_name(e->d_name)) continue;
        char *p = pd_xasprintf("%s/%s", dir, e->d_name);
        if (pd_ckpt_remove_tree(p) < 0) PD_WARN("%s", pd_err_msg());
        free(p);
    }
    if (d) closedir(d);
    free(dir);
    __atomic_store_n(&removal.done, 1, __ATOMIC_RELEASE);
    return NULL;
}

void pd_ckpt_wait_removals(void)
{
    if (!removal.running) return;
    pthread_join(removal.thread, NULL);
    removal.running = 0;
}

/* ckpt-<step> out of the list: renamed for the removal thread, or (the
 * name taken by a tree an earlier life left) removed here. */
static void retire(const char *dir, long step)
{
    char *p = pd_ckpt_path(dir, step), *gone = pd_xasprintf("%s.removed", p);
    if (rename(p, gone) < 0 && pd_ckpt_remove_tree(p) < 0) PD_WARN("%s", pd_err_msg());
    free(p);
    free(gone);
}

int pd_ckpt_mark(const char *dir, long step, int npservers, int ntrainers)
{
    char text[128];
    int len = snprintf(text, sizeof text, "step %ld\npservers %d\ntrainers %d\n", step, npservers, ntrainers);
    char *ck = pd_ckpt_path(dir, step), *path = pd_xasprintf("%s/complete", ck);
    int rc = pd_mkdir_p(ck); /* no pserver on this host: only the marker is here */
    if (rc == 0) rc = pd_ckpt_write_atomic(path, text, (size_t)len);
    free(ck);
    free(path);
    return rc;
}

void pd_ckpt_prune(const char *dir, long step, int keep, int wait)
{
    if (!wait && removal.running && !__atomic_load_n(&removal.done, __ATOMIC_ACQUIRE)) return;
    pd_ckpt_wait_removals();
    if (keep < 1) keep = 1; /* the newest complete one is never removed */
    int n, kept = 0, retired = 0;
    long *all = list_all(dir, &n);
    for (int i = 0; i < n; i++) {
        if (all[i] > step) continue; /* newer: another life's, left to its resume */
        if (kept < keep && has_marker(dir, all[i])) {
            kept++;
            continue;
        }
        if (kept > 0) {
            retire(dir, all[i]);
            retired++;
        }
    }
    free(all);
    if (retired == 0 && removal.swept) return;
    removal.swept = 1;
    removal.done = 0;
    char *arg = pd_xstrdup(dir);
    if (pthread_create(&removal.thread, NULL, remove_old, arg) == 0) removal.running = 1;
    else remove_old(arg);
}

int pd_ckpt_dir_ready(const char *dir)
{
    return pd_dir_ready(dir, "settings.checkpoint_dir");
}

int pd_ckpt_unmark(const char *dir, long step)
{
    int n, k = 0;
    long *all = list_all(dir, &n);
    for (int i = 0; i < n; i++) {
        if (step >= 0 && all[i] != step) continue;
        char *ck = pd_ckpt_path(dir, all[i]), *p = pd_xasprintf("%s/complete", ck);
        if (unlink(p) == 0) {
            k++;
            pd_ckpt_fsync_file(ck); /* the marker's going on disk before anything follows */
        }
        free(ck);
        free(p);
    }
    free(all);
    return k;
}

void pd_ckpt_forget_earlier(const char *dir)
{
    int n = dir ? pd_ckpt_unmark(dir, -1) : 0;
    if (n > 0)
        PD_WARN("%s held %d complete checkpoint%s of an earlier job: this job started without --resume, so they "
                "are no longer resumed from (their complete markers are removed; the shards stay)", dir, n,
                n > 1 ? "s" : "");
}
