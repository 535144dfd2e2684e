/*
 * fs.h - small file-system helpers.
 *
 *     if ((rc = pd_mkdir_p("output/pass-00001")) < 0) return rc;
 *     if ((rc = pd_dir_ready(r->save_dir, "settings.save_dir")) < 0) return rc;
 *     char *exe = pd_self_exe();   // this binary, to start roles and copy it
 *
 *     pd_out o;                    // a file that appears whole or not at all
 *     if ((rc = pd_out_open(&o, "data/train.txt")) < 0) return rc;
 *     fprintf(o.f, ...);
 *     rc = pd_out_close(&o, rc == 0);  // renamed into place, or removed
 */
#ifndef PD_FS_H
#define PD_FS_H

#include <stdio.h>

/* mkdir -p with mode 0755: 0, or PD_EIO naming the directory that failed
 * (errno then says why). */
int pd_mkdir_p(const char *path);
/* Whether errno e says a path is wrong (not there, not a directory, no
 * permission, a read-only filesystem: what a user gave), not that the disk
 * or the network failed for a while. */
int pd_path_errno(int e);
/* A directory a role writes to (what: "settings.save_dir"), made and
 * checked as the role starts, not at its first write hours in: 0, PD_EINVAL
 * where the path is wrong (a file, no permission, a read-only filesystem:
 * what the role was given), PD_EIO where the disk or the network failed. */
int pd_dir_ready(const char *dir, const char *what);
/* The same for a directory made at its first write: checked, not made (the
 * nearest part of the path that is there must be a directory this process
 * can write to). */
int pd_dir_writable(const char *dir, const char *what);
/* Remove a directory of files (a saved model, a copy of one): its files,
 * then itself. 0 (also where it is not there), or PD_EIO naming what could
 * not be removed. */
int pd_remove_dir(const char *dir);
/* The lock a job holds on a directory it writes (dir/.paddle-lock, made
 * with dir), so that a second job started in the same place while the
 * first runs (the same log/, save_dir or checkpoint_dir) is refused rather
 * than mix its files with the first's: 0 (held until this process exits),
 * or PD_EINVAL naming dir (as what = dir, or dir/ where what is NULL) and
 * the job that holds it (job: "paddle run job.lua",
 * said to the next one) and what to do instead ("give this one another
 * --save_dir"); PD_EINVAL or PD_EIO where dir cannot be made or locked. */
#define PD_LOCK_NAME ".paddle-lock"
int pd_dir_lock(const char *dir, const char *what, const char *job, const char *instead);
/* The absolute path of the running executable (malloc'd), or NULL with a
 * message set. */
char *pd_self_exe(void);

/* A file that appears whole or not at all: written as PATH.partial-PID-N
 * beside PATH (a name of its own, made exclusively; the mode of a PATH
 * there is kept), and
 * renamed over PATH once every write went well. A PATH that is a link, a
 * FIFO or a device is written directly (tmp NULL). */
typedef struct pd_out {
    FILE *f;
    char *path, *tmp;
} pd_out;
/* 0, or PD_EIO naming path (errno then says why: pd_path_errno tells a
 * wrong path from a failing disk). Partial files of path whose writer is
 * gone from this host (a kill -9) are named in a warning, and left. */
int pd_out_open(pd_out *o, const char *path);
/* Everything written so far on the disk (fsync): 0, or
 * PD_EIO naming path (a full disk). Before renaming several files that go
 * together, so that a write failing in one renames none. */
int pd_out_flush(pd_out *o);
/* keep: rename the file into place (where a write failed: PD_EIO naming
 * it, and it is removed; where the rename fails: PD_EIO naming the partial
 * file, which is kept). !keep: the partial file is removed; 0. */
int pd_out_close(pd_out *o, int keep);
/* From now on SIGINT, SIGTERM and SIGHUP remove the partial files still
 * open, each said on stderr ("paddle: stopped by a signal: PATH left as it
 * was"), before they end the process (for commands that set no handler of
 * their own). */
void pd_out_remove_on_signal(void);

#endif
