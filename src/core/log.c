/* log.c - glog-style lines to stderr and an optional file. */
#include "log.h"
#include "pd.h"
#include "term.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *logfile;
static int min_level = PD_LOG_INFO;
static int quiet;

int pd_log_open(const char *path)
{
    FILE *f = fopen(path, "a");
    if (!f) return pd_err_set(PD_EIO, "cannot open log file %s", path);
    setvbuf(f, NULL, _IOLBF, 0);
    pthread_mutex_lock(&lock);
    if (logfile) fclose(logfile);
    logfile = f;
    pthread_mutex_unlock(&lock);
    return 0;
}

void pd_log_close(void)
{
    pthread_mutex_lock(&lock);
    if (logfile) fclose(logfile);
    logfile = NULL;
    pthread_mutex_unlock(&lock);
}

void pd_log_level(int level) { min_level = level; }
void pd_log_quiet(int q) { quiet = q; }

void pd_log(int level, const char *file, int line, const char *fmt, ...)
{
    if (level < min_level) return;
    static const char letters[] = "DIWE";
    struct timeval tv;
    struct tm tm;
    char head[96], body[2048];
    const char *base = strrchr(file, '/');
    va_list ap;

    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    snprintf(head, sizeof head, "%c%02d%02d %02d:%02d:%02d.%06ld %5d %s:%d] ",
             letters[level], tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
             tm.tm_sec, (long)tv.tv_usec, (int)getpid(), base ? base + 1 : file,
             line);
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);

    pthread_mutex_lock(&lock);
    if (!quiet) {
        /* above the status block, when a terminal shows one */
        char text[sizeof head + sizeof body + 1];
        int n = snprintf(text, sizeof text, "%s%s\n", head, body);
        pd_term_write(2, text, (size_t)PD_MIN(n, (int)sizeof text - 1));
    }
    if (logfile) fprintf(logfile, "%s%s\n", head, body);
    pthread_mutex_unlock(&lock);
}
