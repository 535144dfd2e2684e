/*
 * ssh.h - SSH to the cluster's nodes through libssh2 (on OpenSSL).
 *
 * One pd_ssh is one TCP connection to one node: connected, the host key
 * checked against known_hosts, the user authenticated (ssh-agent, then key
 * files). On it the launcher runs commands, keeps exec channels open and
 * copies files. Every function returns 0 (or a count) on success and a
 * negative PD_E* code on failure, with a one-line message in pd_err_msg()
 * that names the host as user@host:port and says what to do.
 *
 *     pd_ssh_opts o = {.use_agent = 1, .timeout = 10};
 *     pd_ssh *s;
 *     char *out;
 *     if (pd_ssh_connect(&s, &r->hosts[0], &o) < 0 ||
 *         pd_ssh_run(s, "uname -m", &out, NULL) < 0)
 *         fprintf(stderr, "%s\n", pd_err_msg());
 *     pd_ssh_free(s);
 *
 * Waiting: the session's socket is non-blocking. Functions that wait
 * (connect, exec, run, upload, close) never wait longer than opts.timeout
 * for the peer to make progress, so a dead or silent host ends in
 * PD_ETIMEDOUT, never a hang. The channel I/O functions never wait: they
 * return 0 when nothing can be done now, and the caller polls pd_ssh_fd()
 * for pd_ssh_events() (several sessions in one poll()).
 *
 * Threads: sessions are independent; use each from one thread at a time
 * (connect many hosts in parallel from one thread each).
 */
#ifndef PD_SSH_H
#define PD_SSH_H

#include <stddef.h>
#include <sys/types.h>

#include "../core/recipe.h"

/* Versions of libssh2 and of the crypto library it is built on. */
const char *pd_ssh_version(void);
const char *pd_ssh_crypto_version(void);

typedef struct pd_ssh_opts {     /* paths may start with ~/ */
    const char *const *identity_files; /* none: ~/.ssh/id_ed25519, id_ecdsa, id_rsa */
    int nidentity;
    int use_agent;           /* try ssh-agent keys first when SSH_AUTH_SOCK is set */
    const char *known_hosts; /* NULL: ~/.ssh/known_hosts (+ /etc/ssh/ssh_known_hosts) */
    int accept_new;          /* --accept-new-host-keys: an unknown host key is
                                trusted and appended to known_hosts (OpenSSH's
                                accept-new); a changed key is refused anyway */
    double timeout;          /* seconds; <= 0: 10 */
    /* when set and it returns nonzero (Ctrl+C), every wait of the session
     * gives up within 0.1 s and the call fails with PD_EINTR */
    int (*cancelled)(void *ctx);
    void *cancel_ctx;
} pd_ssh_opts;

typedef struct pd_ssh pd_ssh;           /* one connected, authenticated session */
typedef struct pd_ssh_chan pd_ssh_chan; /* one exec channel on it */

/* Connect to h (user NULL: this process's user; port 0: 22), verify the host
 * key, authenticate. Errors, each one line naming user@host:port:
 * PD_ECONN (unresolvable, refused, unreachable, closed by the peer),
 * PD_ETIMEDOUT, PD_EAUTH (host key unknown or changed, with the SHA256
 * fingerprints; no key accepted, listing the methods and keys tried),
 * PD_ESSH (handshake failures). *out is NULL on failure. */
int pd_ssh_connect(pd_ssh **out, const pd_host *h, const pd_ssh_opts *o);
/* Disconnect and free the session, and any channel still open on it (do
 * not use those afterwards). This is also how to abandon a command fast:
 * sshd then closes its stdin and output pipes, and the command sees EOF. */
void pd_ssh_free(pd_ssh *s);
/* Cut the connection now (a node that stopped answering): the socket is
 * shut down, so every later call on the session or its channels fails at
 * once instead of waiting for the node. Free it with pd_ssh_free. */
void pd_ssh_cut(pd_ssh *s);

/* "user@host:port", for messages. */
const char *pd_ssh_name(const pd_ssh *s);
/* The socket, to poll() on, and the events to poll it for now (POLLIN, plus
 * POLLOUT while libssh2 has output waiting). */
int pd_ssh_fd(const pd_ssh *s);
int pd_ssh_events(pd_ssh *s);

/* Start command (run by the user's shell on the node) on a new channel. */
int pd_ssh_exec(pd_ssh *s, const char *command, pd_ssh_chan **out);
/* Non-blocking channel I/O. read/read_err return the bytes read from the
 * command's stdout/stderr, 0 when there is nothing now, or < 0 on error;
 * *eof becomes 1 once the stream has ended and is drained. Read both
 * streams: unread stderr holds up stdout. write returns the bytes taken, 0
 * when it would block (then call again with the same bytes), or < 0. */
ssize_t pd_ssh_read(pd_ssh_chan *c, char *buf, size_t n, int *eof);
ssize_t pd_ssh_read_err(pd_ssh_chan *c, char *buf, size_t n, int *eof);
ssize_t pd_ssh_write(pd_ssh_chan *c, const void *buf, size_t n);
/* Write all n bytes, waiting while the channel's window is full; fails
 * after the timeout without progress. Returns 0 or < 0. It leaves at most
 * pd_ssh_in_flight bytes unacknowledged: 256 KB, doubled each second
 * that a server which never acknowledged any data leaves it waiting. */
int pd_ssh_write_all(pd_ssh_chan *c, const void *buf, size_t n);
/* That cap of c; set to cap when cap > 0. Returns the value before. */
size_t pd_ssh_in_flight(pd_ssh_chan *c, size_t cap);
/* Bytes written on c that the server has not acknowledged yet, as far as
 * its acknowledgements have been read. */
size_t pd_ssh_unacked(pd_ssh_chan *c);
/* Close the command's stdin (waits at most the timeout to send it). */
int pd_ssh_send_eof(pd_ssh_chan *c);
/* Close the channel and free c (always, even on error): sends EOF, drops
 * unread output, waits at most the timeout for the command to exit. Its exit
 * status goes to *exit_status (-1 when it was killed by a signal or none
 * came) and the signal's name ("TERM", malloc'd, or NULL) to *exit_signal;
 * either pointer may be NULL. */
int pd_ssh_close_chan(pd_ssh_chan *c, int *exit_status, char **exit_signal);

/* Run command to completion with stdin at EOF; its stdout goes to *out
 * (malloc'd, NUL-terminated; may be NULL to drop it; at most 16 MiB). A
 * non-zero exit is PD_ECHILD with the status in *exit_status (if not NULL)
 * and the tail of its stderr in the message. The timeout bounds each wait
 * for output, not the whole run. */
int pd_ssh_run(pd_ssh *s, const char *command, char **out, int *exit_status);

/* Copy the local file to the remote path (absolute, or relative to the
 * user's home) with the given mode (e.g. 0755), atomically: written to a
 * temporary name beside it, then renamed over it. SFTP (one subsystem per
 * session, started on first use), or, when the server has no SFTP
 * subsystem, `cat` and `mv` on an exec channel. */
int pd_ssh_upload(pd_ssh *s, const char *local, const char *remote, int mode);
/* Copy the remote file to the local path, keeping its mode, atomically
 * (the shell fallback needs stat -c, as in GNU coreutils and BusyBox). */
int pd_ssh_download(pd_ssh *s, const char *remote, const char *local);


/* --- known_hosts, exposed for the unit tests ------------------------------- */

enum {
    PD_SSH_KNOWN_NONE,     /* no entry for the host */
    PD_SSH_KNOWN_MATCH,    /* an entry holds this key */
    PD_SSH_KNOWN_CHANGED,  /* entries of this key type, none with this key */
    PD_SSH_KNOWN_OTHER,    /* entries for the host, none of this key type */
    PD_SSH_KNOWN_REVOKED,  /* an @revoked line holds this key */
};

typedef struct pd_ssh_known {
    int status;            /* PD_SSH_KNOWN_* */
    int line;              /* CHANGED: the line of the first entry of the type */
    char fingerprint[64];  /* CHANGED: that entry's SHA256 fingerprint */
    char types[160];       /* key types the file has for the host, in order,
                              comma-separated ("ssh-ed25519,ssh-rsa") */
} pd_ssh_known;

/* Check the host key blob (SSH wire format, key may be NULL to collect only
 * the types) against known_hosts text for host:port, as OpenSSH does: plain
 * patterns (wildcards, !negation, [host]:port when port != 22) and hashed
 * |1|salt|hmac entries. Returns 0, or PD_EINVAL for a malformed key blob. */
int pd_ssh_known_check(const char *text, const char *host, int port,
                       const unsigned char *key, size_t keylen, pd_ssh_known *k);
/* "SHA256:" + unpadded base64 of the SHA-256 of blob, as ssh-keygen -l. */
void pd_ssh_fingerprint(const unsigned char *blob, size_t len, char out[64]);
/* Base64 (RFC 4648, padded on output, padding optional on input). decode
 * returns the length or -1 for bad input; out must hold 3*(strlen/4)+3. */
char *pd_ssh_base64(const unsigned char *data, size_t len);
long pd_ssh_unbase64(const char *text, size_t len, unsigned char *out);
/* 1 if the private key text is passphrase-protected (OpenSSH, PEM or
 * PKCS#8 format), else 0. */
int pd_ssh_key_encrypted(const char *text);

#endif
