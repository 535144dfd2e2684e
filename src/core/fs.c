/* fs.c - mkdir -p, a directory ready to write to, the running executable's
 * path, and files that appear whole or not at all. */
#include "fs.h"
#include "log.h"
#include "pd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int make_one(const char *dir)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        int e = errno;
        pd_err_set(PD_EIO, "cannot create %s: %s", dir, strerror(e));
        errno = e; /* for a caller that tells a wrong path from a failing disk */
        return PD_EIO;
    }
    return 0;
}

int pd_mkdir_p(const char *path)
{
    char *p = pd_xstrdup(path);
    int rc = 0;
    for (char *s = p + 1; *s && rc == 0; s++) {
        if (*s != '/') continue;
        *s = '\0';
        rc = make_one(p);
        *s = '/';
    }
    if (rc == 0) rc = make_one(p);
    int e = errno;
    free(p);
    errno = e;
    return rc;
}

int pd_path_errno(int e)
{
    return e == ENOENT || e == ENOTDIR || e == EISDIR || e == EACCES || e == EPERM || e == EROFS ||
           e == ENAMETOOLONG || e == EEXIST || e == ELOOP || e == ENXIO || e == ENODEV;
}

int pd_dir_ready(const char *dir, const char *what)
{
    struct stat st;
    if (pd_mkdir_p(dir) < 0) {
        int e = errno;
        return pd_err_wrap(pd_path_errno(e) ? PD_EINVAL : PD_EIO, "%s = %s", what, dir);
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return pd_err_set(PD_EINVAL, "%s = %s: not a directory", what, dir);
    if (access(dir, W_OK | X_OK) != 0) {
        int e = errno;
        return pd_err_set(pd_path_errno(e) ? PD_EINVAL : PD_EIO, "%s = %s: cannot write there: %s", what, dir,
                          strerror(e));
    }
    return 0;
}

int pd_dir_writable(const char *dir, const char *what)
{
    char *p = pd_xstrdup(dir);
    struct stat st;
    int rc = 0;
    for (;;) {
        if (stat(p, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) rc = pd_err_set(PD_EINVAL, "%s = %s: %s is not a directory", what, dir, p);
            else if (access(p, W_OK | X_OK) != 0) {
                int e = errno;
                rc = pd_err_set(pd_path_errno(e) ? PD_EINVAL : PD_EIO, "%s = %s: cannot write to %s: %s", what, dir, p,
                                strerror(e));
            }
            break;
        }
        int e = errno;
        if (e != ENOENT || !strcmp(p, ".")) {
            int code = pd_path_errno(e) ? PD_EINVAL : PD_EIO;
            if (!strcmp(p, dir)) rc = pd_err_set(code, "%s = %s: %s", what, dir, strerror(e));
            else rc = pd_err_set(code, "%s = %s: %s: %s", what, dir, p, strerror(e));
            break;
        }
        if (lstat(p, &st) == 0) {
            rc = pd_err_set(PD_EINVAL, "%s = %s: %s is a symbolic link to nothing", what, dir, p);
            break;
        }
        /* not there: made at the first write, if its parent is */
        char *slash = strrchr(p, '/');
        if (!slash) {
            free(p);
            p = pd_xstrdup(".");
        } else if (slash == p) {
            slash[1] = '\0'; /* "/x": the root */
        } else {
            *slash = '\0';
        }
    }
    free(p);
    return rc;
}

int pd_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : pd_err_set(PD_EIO, "cannot open %s: %s", dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *path = pd_xasprintf("%s/%s", dir, e->d_name);
        if (unlink(path) < 0 && rc == 0) rc = pd_err_set(PD_EIO, "cannot remove %s: %s", path, strerror(errno));
        free(path);
    }
    closedir(d);
    if (rc == 0 && rmdir(dir) < 0) rc = pd_err_set(PD_EIO, "cannot remove %s: %s", dir, strerror(errno));
    return rc;
}

/* The directories pd_dir_lock locked (dev, ino: a second lock of one of
 * them by this process, save_dir = checkpoint_dir, is no other job), and
 * those it made: at exit, one that holds nothing but its lock goes again (a
 * job stopped before it wrote there leaves nothing). */
typedef struct locked_dir {
    dev_t dev;
    ino_t ino;
    char *made; /* the path, where pd_dir_lock made it */
} locked_dir;
static locked_dir *locked;
static int nlocked, cap_locked;
static pid_t locked_by;

static void remove_unused_locked(void)
{
    for (int i = 0; i < nlocked && getpid() == locked_by; i++) {
        const char *dir = locked[i].made;
        DIR *d = dir ? opendir(dir) : NULL;
        struct dirent *e;
        int others = 0;
        while (d && (e = readdir(d)) != NULL)
            others += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, PD_LOCK_NAME);
        if (d) closedir(d);
        if (!d || others) continue;
        char *lock = pd_xasprintf("%s/" PD_LOCK_NAME, dir);
        unlink(lock);
        rmdir(dir);
        free(lock);
    }
}

enum { LOCK_TAKEN, LOCK_HELD, LOCK_NONE, LOCK_AGAIN };

/* The lock file of dir, open (read-only where another user's file is not
 * ours to write) and flock'ed into *fd: LOCK_TAKEN; LOCK_HELD by another
 * process (its holder line in holder); LOCK_NONE: the file system takes no
 * locks; or < 0, message set. */
static int take_lock(const char *dir, char *holder, size_t n, int *fd)
{
    char *path = pd_xasprintf("%s/" PD_LOCK_NAME, dir);
    int rc = LOCK_AGAIN;
    for (int tries = 0; tries < 3 && rc == LOCK_AGAIN; tries++) {
        *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (*fd < 0 && errno == EACCES) *fd = open(path, O_RDONLY | O_CLOEXEC);
        if (*fd < 0) {
            rc = pd_err_set(pd_path_errno(errno) ? PD_EINVAL : PD_EIO, "cannot open %s: %s", path, strerror(errno));
            break;
        }
        if (flock(*fd, LOCK_EX | LOCK_NB) < 0) {
            int e = errno;
            ssize_t k = e == EWOULDBLOCK ? pread(*fd, holder, n - 1, 0) : -1;
            holder[k > 0 ? k : 0] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
            close(*fd);
            if (e == EWOULDBLOCK) rc = LOCK_HELD;
            else if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL) rc = LOCK_NONE;
            else rc = pd_err_set(PD_EIO, "cannot lock %s: %s", path, strerror(e));
            break;
        }
        /* a file that a job ending removed (an empty directory it made) is
         * no lock: take the new one */
        struct stat a, b;
        rc = LOCK_TAKEN;
        if (fstat(*fd, &a) == 0 && (stat(path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)) {
            close(*fd);
            rc = LOCK_AGAIN;
        }
    }
    free(path);
    return rc == LOCK_AGAIN ? pd_err_set(PD_EIO, "cannot lock %s: its lock file keeps going", dir) : rc;
}

int pd_dir_lock(const char *dir, const char *what, const char *job, const char *instead)
{
    int made = access(dir, F_OK) != 0;
    int rc = pd_mkdir_p(dir);
    if (rc < 0) return pd_err_set(pd_path_errno(errno) ? PD_EINVAL : PD_EIO, "%s: %s", what ? what : dir, pd_err_msg());
    struct stat st;
    if (stat(dir, &st) < 0) return pd_err_set(PD_EIO, "%s: %s", dir, strerror(errno));
    for (int i = 0; i < nlocked; i++)
        if (locked[i].dev == st.st_dev && locked[i].ino == st.st_ino) return 0; /* this job's already */
    char holder[300] = "";
    int fd = -1;
    if ((rc = take_lock(dir, holder, sizeof holder, &fd)) == LOCK_NONE) {
        PD_WARN("%s: this file system takes no locks: a second job started there while this one runs is not "
                "refused", dir);
        return 0;
    }
    if (rc == LOCK_HELD)
        return pd_err_set(PD_EINVAL, "%s%s%s%s is in use by another job (%s): a second job would mix its files "
                                     "with that one's; wait for it to end, or %s",
                          what ? what : "", what ? " = " : "", dir, what ? "" : "/",
                          *holder ? holder : "its process holds the lock", instead);
    if (rc < 0) return rc;
    if (nlocked == 0) {
        locked_by = getpid();
        atexit(remove_unused_locked);
    }
    PD_GROW(&locked, &cap_locked, nlocked + 1);
    locked[nlocked++] = (locked_dir){st.st_dev, st.st_ino, made ? pd_xstrdup(dir) : NULL};
    /* who holds it, for the next job's message; the lock goes with this
     * process (its descriptor stays open until it exits) */
    char me[300];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    int n = snprintf(me, sizeof me, "pid %d, %s, since %02d:%02d:%02d\n", (int)getpid(), job, tm.tm_hour, tm.tm_min,
                     tm.tm_sec);
    if (ftruncate(fd, 0) < 0 || pwrite(fd, me, (size_t)PD_MIN(n, (int)sizeof me - 1), 0) < 0) {}
    return 0;
}

char *pd_self_exe(void)
{
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0 || n >= (ssize_t)sizeof buf - 1) {
        pd_err_set(PD_EIO, "cannot find my own executable (/proc/self/exe): %s", n < 0 ? strerror(errno) : "too long");
        return NULL;
    }
    buf[n] = '\0';
    return pd_xstrdup(buf);
}

/* --- files written whole -------------------------------------------------------- */

/* the partial files open now, for a signal handler to remove, and the
 * files each was to replace, for it to name (a handler may run on any
 * thread: stored with release, read with acquire) */
static char *partial[8], *target[8];
/* set by the handler before it reads them: from then on pd_out_close does
 * not free the names it untracked (the handler may have just read them,
 * and the process is ending). Sequentially consistent, with the stores
 * that untrack: either the handler sees a name untracked, or the closer
 * sees the handler began. */
static int out_dying;

/* Track tmp (for path), or stop tracking it (path NULL). */
static void track(char *tmp, char *path)
{
    for (size_t i = 0; i < PD_COUNT(partial); i++) {
        if (path && !__atomic_load_n(&partial[i], __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&target[i], path, __ATOMIC_RELEASE); /* before partial[i]: read after it */
            __atomic_store_n(&partial[i], tmp, __ATOMIC_RELEASE);
            return;
        }
        if (!path && __atomic_load_n(&partial[i], __ATOMIC_ACQUIRE) == tmp) {
            __atomic_store_n(&partial[i], NULL, __ATOMIC_SEQ_CST);
            __atomic_store_n(&target[i], NULL, __ATOMIC_SEQ_CST);
            return;
        }
    }
}

static void say_raw(const char *s)
{
    if (write(2, s, strlen(s)) < 0) {}
}

/* Remove the partial files, then say so (every file gone before a write
 * that could fail: stderr a closed pipe), then the signal ends the process. */
static void on_out_signal(int sig)
{
    char *gone[PD_COUNT(partial)] = {0};
    __atomic_store_n(&out_dying, 1, __ATOMIC_SEQ_CST);
    for (size_t i = 0; i < PD_COUNT(partial); i++) {
        char *tmp = __atomic_load_n(&partial[i], __ATOMIC_SEQ_CST);
        char *path = __atomic_load_n(&target[i], __ATOMIC_SEQ_CST);
        if (tmp && unlink(tmp) == 0) gone[i] = path; /* else renamed into place just now */
    }
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < PD_COUNT(gone); i++) {
        if (!gone[i]) continue;
        say_raw("paddle: stopped by a signal: ");
        say_raw(gone[i]);
        say_raw(" left as it was\n");
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void pd_out_remove_on_signal(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < PD_COUNT(sigs); i++) signal(sigs[i], on_out_signal);
}

static int cannot_write(const char *path)
{
    int e = errno;
    pd_err_set(PD_EIO, "cannot write %s: %s", path, strerror(e));
    errno = e;
    return PD_EIO;
}

/* PATH.partial-PID-N files beside path whose writer is gone from this
 * host (a kill -9, a power cut) are said, not removed: a writer of the same
 * pid in another container, on a shared volume, may still be at it. */
static void say_left_partials(const char *path)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    char *dir = slash ? pd_xasprintf("%.*s", (int)(slash - path + 1), path) : pd_xstrdup(".");
    size_t blen = strlen(base);
    DIR *d = opendir(dir);
    char *first = NULL;
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, base, blen) != 0) continue;
        const char *tail = e->d_name + blen;
        if (strncmp(tail, ".partial-", 9) != 0) continue;
        char *end;
        errno = 0;
        long pid = strtol(tail + 9, &end, 10);
        if (errno || end == tail + 9 || *end != '-' || pid <= 0 || pid > INT_MAX || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to ask */
        if (n++ == 0) first = pd_xasprintf("%s%s", slash ? dir : "", e->d_name);
    }
    if (d) closedir(d);
    if (n) {
        char more[48] = "";
        if (n > 1) snprintf(more, sizeof more, " and %d more", n - 1);
        const char *them = n > 1 ? "them" : "it";
        PD_WARN("%s%s: left beside %s by a writer that ended before it finished (killed?); paddle leaves %s (a "
                "writer on another machine may share the disk): remove %s once nothing else writes %s", first, more,
                path, them, them, path);
    }
    free(first);
    free(dir);
}

int pd_out_open(pd_out *o, const char *path)
{
    struct stat st;
    int there = lstat(path, &st) == 0;
    o->path = pd_xstrdup(path);
    o->tmp = NULL;
    o->f = NULL;
    if (there && !S_ISREG(st.st_mode)) {
        o->f = fopen(path, "w");
    } else if (there && access(path, W_OK) != 0) {
        /* one it may not write stays so */
    } else {
        /* a name of its own: one left by a killed process, or made by a
         * process of the same pid in another container on a shared volume,
         * is not touched */
        static unsigned serial;
        int fd = -1;
        for (int tries = 0; fd < 0 && tries < 16; tries++) {
            free(o->tmp);
            unsigned r = (unsigned)(uint64_t)(pd_now() * 1e6) ^
                         (__atomic_fetch_add(&serial, 1, __ATOMIC_RELAXED) * 2654435761u);
            o->tmp = pd_xasprintf("%s.partial-%ld-%08x", path, (long)getpid(), r);
            fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            if (fd < 0 && errno != EEXIST) break;
        }
        if (fd >= 0 && (!there || fchmod(fd, st.st_mode & 07777) == 0)) o->f = fdopen(fd, "w");
        if (o->f) {
            track(o->tmp, o->path);
            say_left_partials(path);
            return 0;
        }
        if (fd >= 0) {
            close(fd);
            unlink(o->tmp);
        }
        free(o->tmp);
        o->tmp = NULL;
        o->f = fopen(path, "w"); /* where it says why, if it fails too */
    }
    if (o->f) return 0;
    int rc = cannot_write(path);
    free(o->path);
    o->path = NULL;
    return rc;
}

int pd_out_flush(pd_out *o)
{
    errno = EIO; /* where ferror alone saw it */
    if (fflush(o->f) != 0 || ferror(o->f) || fsync(fileno(o->f)) != 0) return cannot_write(o->path);
    return 0;
}

int pd_out_close(pd_out *o, int keep)
{
    int bad = ferror(o->f), rc = 0, kept = 0;
    errno = EIO; /* where ferror alone saw it */
    if ((fclose(o->f) != 0 || bad) && keep) {
        rc = cannot_write(o->path);
    } else if (o->tmp && keep && rename(o->tmp, o->path) != 0) {
        rc = pd_err_set(PD_EIO, "cannot replace %s: %s; what was written is in %s", o->path, strerror(errno), o->tmp);
        kept = 1;
    }
    if (o->tmp) {
        track(o->tmp, NULL);
        if ((!keep || rc < 0) && !kept) unlink(o->tmp);
    }
    if (!__atomic_load_n(&out_dying, __ATOMIC_SEQ_CST)) {
        free(o->tmp);
        free(o->path);
    }
    o->f = NULL;
    o->tmp = o->path = NULL;
    return rc;
}
