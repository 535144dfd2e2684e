/* ssh.h - SSH to the cluster's nodes through libssh2. */
#ifndef PD_SSH_H
#define PD_SSH_H

/* Versions of libssh2 and of the crypto library it is built on. */
const char *pd_ssh_version(void);
const char *pd_ssh_crypto_version(void);

#endif
