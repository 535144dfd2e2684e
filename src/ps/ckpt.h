/*
 * ckpt.h - the files of consistent checkpoints (docs/faults.md):
 * CHECKPOINT_DIR/ckpt-<step>/pserver-N/ (written by pserver N) and
 * CHECKPOINT_DIR/ckpt-<step>/complete (written last, by a trainer, once
 * every pserver saved its shard for that step; then by each pserver on a
 * host where it is not yet, at the trainer's COMMIT).
 *
 *     pd_ckpt_fsync_file(path);                  // after writing path
 *     pd_ckpt_write_atomic(path, text, len);     // temp, fsync, rename
 *     long steps[16]; int n = pd_ckpt_list(dir, steps, 16);  // complete ones, newest first
 */
#ifndef PD_CKPT_H
#define PD_CKPT_H

#include <stddef.h>

/* fsync a file (or a directory) by path: 0 or PD_EIO. */
int pd_ckpt_fsync_file(const char *path);
/* fsync every file in dir (not below it), then dir: 0 or PD_EIO. Written
 * first and synced together, files cost about one journal commit, not one
 * each. */
int pd_ckpt_fsync_files_in(const char *dir);
/* Write len bytes to path (no sync: for a directory synced and renamed
 * into place after). 0 or PD_EIO. */
int pd_ckpt_write_file(const char *path, const void *data, size_t len);
/* Write len bytes to path atomically: path.tmp, fsync, rename, fsync of the
 * directory. 0 or PD_EIO. */
int pd_ckpt_write_atomic(const char *path, const void *data, size_t len);
/* rm -rf path (missing is fine): 0 or PD_EIO. */
int pd_ckpt_remove_tree(const char *path);
/* "DIR/ckpt-<step>" (malloc'd). */
char *pd_ckpt_path(const char *dir, long step);
/* The steps of the checkpoints under dir, newest first, at most max; with
 * complete_only, only those with their complete marker. Returns how many. */
int pd_ckpt_list(const char *dir, long *steps, int max, int complete_only);
/* A role's start: checkpoint_dir made if missing, and writable (else
 * PD_EINVAL: the job cannot checkpoint, and a restart would not change it). */
int pd_ckpt_dir_ready(const char *dir);
/* Write DIR/ckpt-<step>/complete (its directory made if missing). */
int pd_ckpt_mark(const char *dir, long step, int npservers, int ntrainers);
/* Keep only the newest keep (at least 1) complete checkpoints up to step:
 * older ones, complete or not, are renamed out of the list at once and
 * removed by a thread behind the caller (with any an earlier life left);
 * !wait: not now when the last removal is still running. */
void pd_ckpt_prune(const char *dir, long step, int keep, int wait);
/* Remove the complete marker of step (-1: of every checkpoint) under dir:
 * how many there were. */
int pd_ckpt_unmark(const char *dir, long step);
/* A new job (no --resume) in a checkpoint_dir an earlier job used (dir
 * may be NULL): the earlier job's markers go, with a warning, so that a
 * later --resume of this job cannot take one of its checkpoints, nor a
 * COMMIT mark this job's shard of a step beside the earlier job's. */
void pd_ckpt_forget_earlier(const char *dir);
/* Wait until the removals pd_ckpt_prune started are done (before exit). */
void pd_ckpt_wait_removals(void);

#endif
