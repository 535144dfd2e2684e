/*
 * fs.h - small file-system helpers.
 *
 *     if ((rc = pd_mkdir_p("output/pass-00001")) < 0) return rc;
 *     char *exe = pd_self_exe();   // this binary, to start roles and copy it
 */
#ifndef PD_FS_H
#define PD_FS_H

/* mkdir -p with mode 0755: 0, or PD_EIO naming the directory that failed
 * (errno then says why). */
int pd_mkdir_p(const char *path);
/* The absolute path of the running executable (malloc'd), or NULL with a
 * message set. */
char *pd_self_exe(void);

#endif
