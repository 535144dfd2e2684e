/* fuzz_common.c - scratch directory, file writes and input fields for the
 * harnesses (fuzz_common.h). */
#include "fuzz_common.h"
#include "../../src/core/log.h"
#include "../../src/core/pd.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char scratch[PATH_MAX];

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static void remove_scratch(void)
{
    if (scratch[0]) nftw(scratch, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

void fz_init(void)
{
    if (scratch[0]) return;
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/pd-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(scratch)) fz_fail("cannot make a scratch directory under %s", tmp ? tmp : "/tmp");
    atexit(remove_scratch);
    /* PD_FUZZ_LOG=1 shows paddle's log lines, to see what an input does */
    const char *log = getenv("PD_FUZZ_LOG");
    pd_log_quiet(!(log && strcmp(log, "1") == 0));
}

const char *fz_dir(void)
{
    return scratch;
}

char *fz_path(const char *name)
{
    return pd_xasprintf("%s/%s", scratch, name);
}

void fz_write(const char *name, const void *data, size_t n)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", scratch, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fz_fail("cannot write %s", path);
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) fz_fail("cannot write %s", path);
        p += k;
        n -= (size_t)k;
    }
    close(fd);
}

void fz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz harness: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

uint8_t fz_u8(fz_in *in)
{
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

uint16_t fz_u16(fz_in *in)
{
    uint16_t lo = fz_u8(in);
    return (uint16_t)(lo | fz_u8(in) << 8);
}

uint32_t fz_u32(fz_in *in)
{
    uint32_t lo = fz_u16(in);
    return lo | (uint32_t)fz_u16(in) << 16;
}

static int remove_below(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st; (void)flag;
    if (ftw->level > 0) remove(path);
    return 0;
}

void fz_clear(void)
{
    if (scratch[0]) nftw(scratch, remove_below, 16, FTW_DEPTH | FTW_PHYS);
}
