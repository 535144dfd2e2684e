/* fs.c - mkdir -p and the running executable's path. */
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
