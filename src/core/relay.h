/*
 * relay.h - stdout and stderr that never hold up the process writing them.
 *
 * A pipe to a reader that does not keep up (`paddle run ... | less` left
 * unscrolled, a launcher paused with Ctrl+Z, whose roles write into its
 * pipes) blocks every write once the kernel's 64 KB are full: a trainer
 * blocked on a log line sends no heartbeat, and its pservers end the job
 * as "dead or hung". With the relay, stdout (and stderr when it is the
 * same pipe) is a pipe of this process's own, read at once by a thread
 * that writes to the real one as far as it takes bytes without waiting,
 * and keeps the rest (up to 8 MB each; past that the oldest lines kept go,
 * and a line says how many once the reader caught up). Everything written
 * to one descriptor keeps its order; stdout and stderr that are one pipe
 * share one relay. A reader that goes away is learnt as before (SIGPIPE,
 * unless ignored). A terminal or a file takes its writes at once: there
 * is no relay.
 *
 *     pd_relay_start();   // at the start of a command
 *     ...                 // printf, write(1, ...), PD_INFO: never wait
 *     exit(rc);           // what waits is written first (atexit)
 */
#ifndef PD_RELAY_H
#define PD_RELAY_H

/* Start the relay when stdout is a pipe or a socket (once a process). */
void pd_relay_start(void);
/* Where a message goes that must be out before the process dies at once
 * (_exit, abort): the real stderr, which the relay thread would not have
 * time to reach. Async-signal-safe. */
int pd_relay_fatal_fd(void);
/* Write what waits, however long the reader takes, and stop relaying:
 * stdout and stderr are the real ones again. Runs at exit by itself. */
void pd_relay_stop(void);

#endif
