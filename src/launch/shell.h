/*
 * shell.h - values that reach a remote shell, quoted.
 *
 * Every value the launcher puts into a command line run by a node's shell
 * goes through one of these. pd_sh_quote() makes any string one literal
 * word. pd_sh_path() is for the settings documented as resolved by each
 * node (cluster.root_dir, job.deployed, cluster.ld_library_path): exactly
 * two expansions survive, a leading `~` (the node user's home) and
 * `$NAME` / `${NAME}` (a variable of the node's environment, which must be
 * set there); every other character, `$(...)`, backticks and `;` included,
 * is literal or refused.
 *
 *     char *q;
 *     if (pd_sh_path("$SCRATCH/paddle", "cluster.root_dir", &q) == 0)
 *         ... q is  "${SCRATCH:?...}"'/paddle'
 */
#ifndef PD_SHELL_H
#define PD_SHELL_H

/* s as one single-quoted shell word (malloc'd). */
char *pd_sh_quote(const char *s);
/* s as shell text that expands only a leading ~ and $NAME / ${NAME}.
 * 0 and *out (malloc'd), or PD_EINVAL naming `what` when s holds another
 * use of $ or a control character. */
int pd_sh_path(const char *s, const char *what, char **out);

#endif
