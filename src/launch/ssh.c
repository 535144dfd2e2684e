/* ssh.c - SSH to the cluster's nodes through libssh2. */
#include "ssh.h"

#include <libssh2.h>
#include <openssl/crypto.h>

const char *pd_ssh_version(void)
{
    return libssh2_version(0);
}

const char *pd_ssh_crypto_version(void)
{
    return OpenSSL_version(OPENSSL_VERSION);
}
