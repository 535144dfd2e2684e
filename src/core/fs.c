/* fs.c - mkdir -p, a directory ready to write to, and the running executable's path. */
#include "fs.h"
#include "pd.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
