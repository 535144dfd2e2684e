/*
 * term.h - the status block at the bottom of a terminal: a few lines that
 * are redrawn in place while other lines scroll above them.
 *
 * One block per process (there is one terminal). It is live only when
 * stderr is a terminal, TERM is set and not "dumb", and stdout is not a
 * pipe (whose lines would reach the terminal behind the block's back);
 * otherwise every call but pd_term_write() does nothing and
 * pd_term_write() just writes.
 *
 *     if (pd_term_start()) {
 *         const char *lines[] = {"pass 2 (3 of 10)  45%", "trainer 0  training"};
 *         pd_term_set(lines, 2);
 *         pd_term_tick(0);                     // draws when due
 *     }
 *     pd_term_write(1, "a log line\n", 11);    // scrolls above the block
 *     pd_term_stop();                          // erases it for good
 *
 * Lines of the block are cut to the terminal's width (TIOCGWINSZ, again on
 * SIGWINCH) so that they never wrap; the block is redrawn at most every
 * PD_TERM_PERIOD seconds. Thread-safe.
 */
#ifndef PD_TERM_H
#define PD_TERM_H

#include <stddef.h>

#define PD_TERM_PERIOD 0.15  /* seconds between redraws, at least */
#define PD_TERM_LINES 24     /* lines in the block, at most */
#define PD_TERM_COLS 256     /* bytes kept of a block line */

/* Start the block on stderr when it is a terminal. Returns 1 when live. */
int pd_term_start(void);
/* 1 while the block is live. */
int pd_term_live(void);
/* The terminal's width and height (80 x 24 when unknown). */
void pd_term_size(int *cols, int *rows);
/* The block's next content (copied; printable ASCII, cut to PD_TERM_COLS). */
void pd_term_set(const char *const *lines, int n);
/* Draw the block when it changed, was hidden or the window was resized, and
 * at least PD_TERM_PERIOD seconds passed since the last draw (force: now). */
void pd_term_tick(int force);
/* Write n bytes to fd; when fd is the terminal, above the block (which is
 * erased and drawn again by a later pd_term_tick). */
void pd_term_write(int fd, const char *buf, size_t n);
/* Erase the block if it is drawn; it stays hidden until the next tick. */
void pd_term_hide(void);
/* Erase the block for good and stop (on exit, Ctrl+C and failure). */
void pd_term_stop(void);

#endif
