/*
 * log.h - the one logger, in the glog format PaddlePaddle users know:
 *
 *     I1122 10:00:00.123456  1234 server.c:88] Server listening on 0.0.0.0:7164
 *
 * Lines go to stderr and, once pd_log_open() named one, to a log file as well
 * (paddle_pserver.INFO, paddle_trainer.INFO). Thread-safe.
 *
 *     PD_INFO("pass %d done, cost %g", pass, cost);
 */
#ifndef PD_LOG_H
#define PD_LOG_H

enum { PD_LOG_DEBUG, PD_LOG_INFO, PD_LOG_WARN, PD_LOG_ERROR };

void pd_log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Also write every line to path (appending). Returns 0 or PD_EIO. */
int pd_log_open(const char *path);
void pd_log_close(void);
/* Lines below level are dropped (default PD_LOG_INFO). */
void pd_log_level(int level);
/* Stop copying lines to stderr (the file, if open, still gets them). */
void pd_log_quiet(int quiet);

#define PD_DEBUG(...) pd_log(PD_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define PD_INFO(...) pd_log(PD_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define PD_WARN(...) pd_log(PD_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define PD_ERROR(...) pd_log(PD_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)

#endif
