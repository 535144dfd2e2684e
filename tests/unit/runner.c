/*
 * runner.c - runs every registered unit test in its own process with a
 * timeout, prints one line per test and a closing "N passed, N failed,
 * N skipped". A test that cannot run here (no GPU) calls pd_test_skip(),
 * which ends its process with SKIP_EXIT and leaves the reason in SKIP_FILE
 * of its scratch directory.
 *
 *     build/musl/unit_tests            all tests
 *     build/musl/unit_tests fc_        tests whose name contains "fc_"
 */
#include "test.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define X(name) void test_##name(void);
#include "test_list.h"
#undef X

static const struct {
    const char *name;
    void (*fn)(void);
} tests[] = {
#define X(name) {#name, test_##name},
#include "test_list.h"
#undef X
};

#define TIMEOUT_S 120
#define SKIP_EXIT 77
#define SKIP_FILE ".skipped"

static char dir[256];

void pd_test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "    %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    _exit(1);
}

void pd_test_skip(const char *fmt, ...)
{
    char path[300];
    snprintf(path, sizeof path, "%s/" SKIP_FILE, dir);
    FILE *f = fopen(path, "w");
    if (f) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(f, fmt, ap);
        va_end(ap);
        fclose(f);
    }
    fflush(stdout);
    _exit(SKIP_EXIT);
}

/* The reason a skipped test left, without its newline, or "". */
static void skip_reason(char *buf, size_t len)
{
    char path[300];
    snprintf(path, sizeof path, "%s/" SKIP_FILE, dir);
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (!fgets(buf, (int)len, f)) buf[0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

const char *pd_test_dir(void)
{
    return dir;
}

char *pd_test_write(const char *name, const char *text)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) pd_test_fail(__FILE__, __LINE__, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

static void rm_rf(const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", path, (char *)NULL);
        _exit(127);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0, skipped = 0;
    const char *filter = argc > 1 ? argv[1] : NULL;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        snprintf(dir, sizeof dir, "%s/pd-unit-%d-%zu", tmp, (int)getpid(), i);
        mkdir(dir, 0700);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(TIMEOUT_S);
            tests[i].fn();
            fflush(stdout);
            _exit(0);
        }
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        char why[256];
        skip_reason(why, sizeof why);
        rm_rf(dir);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            passed++;
            printf("ok     %-44s %8.1f ms\n", tests[i].name, ms);
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == SKIP_EXIT) {
            skipped++;
            printf("skip   %-44s (%s)\n", tests[i].name, why[0] ? why : "no reason given");
        } else {
            failed++;
            if (WIFSIGNALED(status))
                printf("FAIL   %-44s (signal %d%s)\n", tests[i].name, WTERMSIG(status),
                       WTERMSIG(status) == SIGALRM ? ": timed out" : "");
            else
                printf("FAIL   %-44s (exit %d)\n", tests[i].name, WEXITSTATUS(status));
        }
    }
    printf("unit: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
