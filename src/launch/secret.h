/*
 * secret.h - the job secret the launcher hands to its roles.
 *
 * 32 random bytes, written as 64 hex digits. A role reads it from an
 * inherited file descriptor (--secret_fd, what the launcher uses: never on a
 * command line), from PADDLE_JOB_SECRET_FILE, or from PADDLE_JOB_SECRET.
 * The job id is derived from it.
 */
#ifndef PD_SECRET_H
#define PD_SECRET_H

#include <stdint.h>

int pd_secret_new(uint8_t *secret);
/* fd >= 0: read from it; else the environment. */
int pd_secret_read(int fd, uint8_t *secret);
void pd_job_id(const uint8_t *secret, uint8_t *job);

#endif
