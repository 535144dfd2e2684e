/* secret.c - reading and making the job secret. */
#include "secret.h"
#include "../core/pd.h"
#include "../ps/proto.h"
#include "../core/crypto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pd_secret_new(uint8_t *secret)
{
    return pd_random(secret, PD_SECRET);
}

static int parse(const char *text, uint8_t *secret, const char *from)
{
    char hex[2 * PD_SECRET + 1];
    size_t n = 0;
    for (const char *p = text; *p && n < sizeof hex - 1; p++)
        if (*p != '\n' && *p != '\r' && *p != ' ') hex[n++] = *p;
    hex[n] = '\0';
    if (pd_unhex(hex, secret, PD_SECRET) < 0)
        return pd_err_set(PD_EAUTH, "the job secret from %s must be %d hex digits", from, 2 * PD_SECRET);
    return 0;
}

int pd_secret_read(int fd, uint8_t *secret)
{
    char buf[256];
    if (fd >= 0) {
        size_t got = 0;
        while (got < sizeof buf - 1) {
            ssize_t n = read(fd, buf + got, sizeof buf - 1 - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += (size_t)n;
            if (memchr(buf, '\n', got)) break;
        }
        buf[got] = '\0';
        close(fd);
        return parse(buf, secret, "the launcher");
    }
    const char *file = getenv("PADDLE_JOB_SECRET_FILE");
    if (file && *file) {
        FILE *f = fopen(file, "r");
        if (!f) return pd_err_set(PD_EAUTH, "cannot open PADDLE_JOB_SECRET_FILE=%s: %s", file, strerror(errno));
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        return parse(buf, secret, "PADDLE_JOB_SECRET_FILE");
    }
    const char *env = getenv("PADDLE_JOB_SECRET");
    if (env && *env) return parse(env, secret, "PADDLE_JOB_SECRET");
    return pd_err_set(PD_EAUTH, "no job secret: set PADDLE_JOB_SECRET (64 hex digits, e.g. from "
                                "'openssl rand -hex 32') or PADDLE_JOB_SECRET_FILE, the same for every role");
}

void pd_job_id(const uint8_t *secret, uint8_t *job)
{
    uint8_t buf[10 + PD_SECRET], h[32];
    memcpy(buf, "paddle-job", 10);
    memcpy(buf + 10, secret, PD_SECRET);
    pd_sha256(buf, sizeof buf, h);
    memcpy(job, h, PD_JOB_ID);
}
