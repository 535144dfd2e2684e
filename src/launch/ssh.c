/*
 * ssh.c - SSH to the cluster's nodes through libssh2.
 *
 * The session runs non-blocking: every libssh2 call that would block
 * returns LIBSSH2_ERROR_EAGAIN, and RETRY() waits on the socket (poll) until
 * a deadline, so nothing waits longer than the timeout. Host keys are
 * checked here, not with libssh2's knownhost API: that one stops reading a
 * file at the first line it does not understand, and we need the key types
 * a file holds for a host before the handshake (the host-key algorithm
 * preference, see FACTS.md) and both fingerprints for a changed key.
 */
#include "ssh.h"
#include "shell.h"
#include "../core/log.h"
#include "../core/pd.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libssh2.h>
#include <libssh2_sftp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define DEFAULT_TIMEOUT 10.0
#define MAX_KEY_FILE (64 * 1024)        /* a private key file, at most */
#define MAX_KNOWN_HOSTS (16 << 20)      /* a known_hosts file, at most */
#define MAX_RUN_OUTPUT (16 << 20)       /* pd_ssh_run's stdout, at most */
#define ERR_TAIL 400                    /* stderr kept for messages */
#define XFER_CHUNK (256 * 1024)
#define GLOBAL_KNOWN_HOSTS "/etc/ssh/ssh_known_hosts"

/* Host-key algorithms in the order we ask for them when known_hosts says
 * nothing (OpenSSH's order); known types go first. */
static const char *const hostkey_order[] = {
    "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa",
};

struct pd_ssh {
    char name[320];         /* user@host:port */
    char *user, *host;
    int port;
    int fd;
    double timeout;
    LIBSSH2_SESSION *ss;
    LIBSSH2_SFTP *sftp;
    int no_sftp;            /* the server has no SFTP subsystem: use the shell */
    int secure;             /* the handshake is done */
    unsigned tmp_seq;       /* for temporary upload names */
    pd_ssh_chan *chans;     /* open channels, freed with the session */
    int (*cancelled)(void *ctx); /* pd_ssh_opts' */
    void *cancel_ctx;
};

struct pd_ssh_chan {
    pd_ssh *s;
    LIBSSH2_CHANNEL *ch;
    pd_ssh_chan *prev, *next; /* the session's open channels */
    int eof_sent;
    unsigned long window_max;  /* the widest send window seen: the peer's whole window */
    unsigned long window_left; /* the window at the last look, less what was written since */
    int looked, acked;         /* window_left is set; the peer has acknowledged data */
    size_t in_flight;          /* what a bulk write leaves unacknowledged at most (write_room) */
};

/* What a bulk write (pd_ssh_write_all) leaves unacknowledged at first.
 * OpenSSH's sshd grants a 2 MB window and holds what it received until
 * the command reads it, in a buffer that it grows and copies as it fills:
 * at 16 hosts on one machine that cost sshd more than its cipher
 * (docs/performance.md, the launch). A quarter megabyte keeps a 100 MB/s
 * link busy across a 2.5 ms round trip (5 MB/s across 50 ms), and is past
 * the 96 KB after which sshd acknowledges. A server that waits longer to
 * acknowledge gets the cap doubled after each CAP_WAIT seconds without
 * one, until its first. */
enum { IN_FLIGHT = 256 << 10 };
#define CAP_WAIT 1.0

const char *pd_ssh_version(void)
{
    return libssh2_version(0);
}

const char *pd_ssh_crypto_version(void)
{
    return OpenSSL_version(OPENSSL_VERSION);
}

/* --- small helpers ------------------------------------------------------------ */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_rc;

static void lib_init(void)
{
    init_rc = libssh2_init(0);
}

/* Record "ssh user@host:port: message" and return code. */
static int fail(const pd_ssh *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* How long a wait blocks before it looks again whether it was cancelled. */
#define CANCEL_LOOK 0.1

static int cancelled(const pd_ssh *s)
{
    return s->cancelled && s->cancelled(s->cancel_ctx);
}

/* A cancelled session's every failure is the interruption (a wait that gave
 * up early would otherwise read as a timeout). */
static int fail(const pd_ssh *s, int code, const char *fmt, ...)
{
    if (cancelled(s)) return pd_err_set(PD_EINTR, "ssh %s: interrupted", s->name);
    char buf[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return pd_err_set(code, "ssh %s: %s", s->name, buf);
}

/* libssh2's last error text for the session. */
static const char *lerr(const pd_ssh *s)
{
    char *msg = NULL;
    if (!s->ss) return "no session";
    libssh2_session_last_error(s->ss, &msg, NULL, 0);
    return msg && *msg ? msg : "unknown libssh2 error";
}

/* A libssh2 failure of the connection itself (not of one request). */
static int conn_lost(int rc)
{
    return rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_RECV ||
           rc == LIBSSH2_ERROR_SOCKET_SEND || rc == LIBSSH2_ERROR_SOCKET_TIMEOUT ||
           rc == LIBSSH2_ERROR_BANNER_RECV || rc == LIBSSH2_ERROR_BANNER_SEND;
}

/* The command shortened for messages. */
static const char *short_cmd(const char *cmd, char *buf, size_t n)
{
    size_t len = strlen(cmd);
    if (len < n) return cmd;
    snprintf(buf, n, "%.*s...", (int)(n - 4), cmd);
    return buf;
}

/* Wait until the socket is ready for what libssh2 waits on, or the
 * deadline. Returns 0, or -1 once the deadline has passed or the session
 * was cancelled. */
static int wait_io(pd_ssh *s, double deadline)
{
    for (;;) {
        double left = deadline - pd_now();
        if (left <= 0 || cancelled(s)) return -1;
        struct pollfd p = {.fd = s->fd, .events = (short)pd_ssh_events(s)};
        int ms = (int)(PD_MIN(left, CANCEL_LOOK) * 1000) + 1;
        int n = poll(&p, 1, ms);
        if (n > 0) return 0;
        if (n < 0 && errno != EINTR) return 0;  /* let libssh2 see the error */
    }
}

/* Repeat call while it would block, waiting on the socket until dl. After
 * it rc is the call's result; still LIBSSH2_ERROR_EAGAIN means timed out. */
#define RETRY(s, dl, rc, call)                                                 \
    do {                                                                       \
        while (((rc) = (call)) == LIBSSH2_ERROR_EAGAIN)                        \
            if (wait_io((s), (dl)) < 0) break;                                 \
    } while (0)

/* The same for calls that return a pointer (NULL + last errno EAGAIN). */
#define RETRY_PTR(s, dl, p, call)                                              \
    do {                                                                       \
        while (!((p) = (call)) &&                                              \
               libssh2_session_last_errno((s)->ss) == LIBSSH2_ERROR_EAGAIN)    \
            if (wait_io((s), (dl)) < 0) break;                                 \
    } while (0)

#define TIMED_OUT(s) (libssh2_session_last_errno((s)->ss) == LIBSSH2_ERROR_EAGAIN)

/* Read a whole (small) file; NULL with errno set on failure. */
static char *read_file(const char *path, size_t limit, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = pd_xmalloc(cap + 1);
    for (;;) {
        if (n == cap) {
            if (cap >= limit) {
                free(buf);
                fclose(f);
                errno = EFBIG;
                return NULL;
            }
            cap *= 2;
            buf = pd_xrealloc(buf, cap + 1);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* This process's user name or home directory (thread-safe), malloc'd. */
static char *local_user(int home)
{
    const char *env = getenv(home ? "HOME" : "USER");
    if (home && env && *env) return pd_xstrdup(env);
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwuid_r(getuid(), &pw, buf, sizeof buf, &res) == 0 && res)
        return pd_xstrdup(home ? pw.pw_dir : pw.pw_name);
    return pd_xstrdup(env && *env ? env : home ? "/" : "root");
}

static char *home_path(const char *rel)
{
    char *home = local_user(1), *path = pd_xasprintf("%s/%s", home, rel);
    free(home);
    return path;
}

/* path with a leading ~/ made absolute, malloc'd. */
static char *expand_home(const char *path)
{
    return strncmp(path, "~/", 2) == 0 ? home_path(path + 2) : pd_xstrdup(path);
}

/* --- base64, fingerprints ----------------------------------------------------- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *pd_ssh_base64(const unsigned char *data, size_t len)
{
    char *out = pd_xmalloc(4 * ((len + 2) / 3) + 1), *o = out;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        if (i + 1 < len) v |= (uint32_t)data[i + 1] << 8;
        if (i + 2 < len) v |= data[i + 2];
        *o++ = b64[v >> 18 & 63];
        *o++ = b64[v >> 12 & 63];
        *o++ = i + 1 < len ? b64[v >> 6 & 63] : '=';
        *o++ = i + 2 < len ? b64[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

long pd_ssh_unbase64(const char *text, size_t len, unsigned char *out)
{
    uint32_t v = 0;
    int bits = 0;
    long n = 0;
    size_t i = 0;
    for (; i < len && text[i] != '='; i++) {
        const char *p = text[i] ? strchr(b64, text[i]) : NULL;
        if (!p) return -1;
        v = v << 6 | (uint32_t)(p - b64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(v >> bits);
        }
    }
    for (; i < len; i++)
        if (text[i] != '=') return -1;
    if (bits >= 6) return -1;  /* one stray character */
    return n;
}

void pd_ssh_fingerprint(const unsigned char *blob, size_t len, char out[64])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(blob, len, md, &mdlen, EVP_sha256(), NULL);
    char *b = pd_ssh_base64(md, mdlen);
    char *eq = strchr(b, '=');
    if (eq) *eq = '\0';
    snprintf(out, 64, "SHA256:%s", b);
    free(b);
}

/* The type name a key blob starts with ("ssh-ed25519"), into out; -1 if the
 * blob is malformed. */
static int blob_type(const unsigned char *blob, size_t len, char *out, size_t n)
{
    if (len < 4) return -1;
    uint32_t tl = (uint32_t)blob[0] << 24 | (uint32_t)blob[1] << 16 |
                  (uint32_t)blob[2] << 8 | blob[3];
    if (tl == 0 || tl > len - 4 || tl >= n) return -1;
    memcpy(out, blob + 4, tl);
    out[tl] = '\0';
    return 0;
}

/* --- known_hosts -------------------------------------------------------------- */

/* OpenSSH's match_pattern: '*' and '?' wildcards, case-insensitive. */
static int match_pattern(const char *s, const char *p, size_t plen)
{
    for (;;) {
        if (plen == 0) return *s == '\0';
        if (*p == '*') {
            while (plen && *p == '*') p++, plen--;
            if (plen == 0) return 1;
            for (; *s; s++)
                if (match_pattern(s, p, plen)) return 1;
            return 0;
        }
        if (*s == '\0') return 0;
        if (*p != '?' && tolower((unsigned char)*p) != tolower((unsigned char)*s)) return 0;
        s++, p++, plen--;
    }
}

/* Does the hosts field (patterns or a |1|salt|hash) name host? */
static int host_matches(const char *field, size_t flen, const char *host)
{
    if (flen > 3 && memcmp(field, "|1|", 3) == 0) {
        const char *salt = field + 3, *end = field + flen;
        const char *bar = memchr(salt, '|', (size_t)(end - salt));
        if (!bar) return 0;
        unsigned char sbuf[64], hbuf[64], mac[EVP_MAX_MD_SIZE];
        unsigned int maclen = 0;
        if ((size_t)(bar - salt) > 80 || (size_t)(end - bar - 1) > 80) return 0;
        long sl = pd_ssh_unbase64(salt, (size_t)(bar - salt), sbuf);
        long hl = pd_ssh_unbase64(bar + 1, (size_t)(end - bar - 1), hbuf);
        if (sl <= 0 || hl != 20) return 0;
        if (!HMAC(EVP_sha1(), sbuf, (int)sl, (const unsigned char *)host, strlen(host), mac,
                  &maclen))
            return 0;
        return maclen == 20 && memcmp(mac, hbuf, 20) == 0;
    }
    int found = 0;
    const char *p = field, *end = field + flen;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t len = comma ? (size_t)(comma - p) : (size_t)(end - p);
        int neg = len > 0 && *p == '!';
        if (match_pattern(host, p + neg, len - (size_t)neg)) {
            if (neg) return 0;
            found = 1;
        }
        p += len + 1;
    }
    return found;
}

/* The name known_hosts uses for host:port, lowercased. */
static void known_name(const char *host, int port, char *out, size_t n)
{
    if (port <= 0 || port == 22)
        snprintf(out, n, "%s", host);
    else
        snprintf(out, n, "[%s]:%d", host, port);
    for (char *p = out; *p; p++) *p = (char)tolower((unsigned char)*p);
}

static void add_type(char *types, size_t n, const char *t)
{
    size_t tl = strlen(t);
    for (const char *p = types; *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == tl && memcmp(p, t, tl) == 0) return;
        p += len + (c ? 1 : 0);
    }
    size_t used = strlen(types);
    if (used + tl + 2 > n) return;
    if (used) types[used++] = ',';
    memcpy(types + used, t, tl + 1);
}

/* Next whitespace-separated field of line [*p, end). */
static int next_field(const char **p, const char *end, const char **f, size_t *flen)
{
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t')) s++;
    const char *e = s;
    while (e < end && *e != ' ' && *e != '\t') e++;
    *f = s;
    *flen = (size_t)(e - s);
    *p = e;
    return e > s;
}

int pd_ssh_known_check(const char *text, const char *host, int port,
                       const unsigned char *key, size_t keylen, pd_ssh_known *k)
{
    memset(k, 0, sizeof *k);
    k->status = PD_SSH_KNOWN_NONE;
    char name[300], ktype[64] = "";
    known_name(host, port, name, sizeof name);
    if (key && blob_type(key, keylen, ktype, sizeof ktype) < 0) return PD_EINVAL;
    int matched = 0, revoked = 0, lineno = 0;
    const char *line = text;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        const char *end = nl ? nl : line + strlen(line);
        const char *next = nl ? nl + 1 : NULL;
        lineno++;
        const char *p = line, *f;
        size_t fl;
        line = next;
        if (end > p && end[-1] == '\r') end--;
        if (!next_field(&p, end, &f, &fl) || *f == '#') continue;
        int is_revoked = 0;
        if (*f == '@') {
            if (fl == 8 && memcmp(f, "@revoked", 8) == 0)
                is_revoked = 1;
            else
                continue;  /* @cert-authority: no host certificates here */
            if (!next_field(&p, end, &f, &fl)) continue;
        }
        if (!host_matches(f, fl, name)) continue;
        const char *tf, *kf;
        size_t tl, kl;
        if (!next_field(&p, end, &tf, &tl) || !next_field(&p, end, &kf, &kl)) continue;
        if (tl >= 64 || kl > 16384) continue;
        char etype[64];
        memcpy(etype, tf, tl);
        etype[tl] = '\0';
        unsigned char *blob = pd_xmalloc(kl / 4 * 3 + 3);
        long bl = pd_ssh_unbase64(kf, kl, blob);
        char btype[64];
        if (bl <= 0 || blob_type(blob, (size_t)bl, btype, sizeof btype) < 0 ||
            strcmp(btype, etype) != 0) {
            free(blob);
            continue;
        }
        int same = key && (size_t)bl == keylen && memcmp(blob, key, keylen) == 0;
        if (is_revoked) {
            revoked |= same;
        } else {
            add_type(k->types, sizeof k->types, etype);
            if (same) {
                matched = 1;
            } else if (key && strcmp(etype, ktype) == 0 && !k->line) {
                k->line = lineno;
                pd_ssh_fingerprint(blob, (size_t)bl, k->fingerprint);
            }
        }
        free(blob);
    }
    if (revoked)
        k->status = PD_SSH_KNOWN_REVOKED;
    else if (matched)
        k->status = PD_SSH_KNOWN_MATCH;
    else if (k->line)
        k->status = PD_SSH_KNOWN_CHANGED;
    else if (k->types[0] && key)
        k->status = PD_SSH_KNOWN_OTHER;
    if (k->status != PD_SSH_KNOWN_CHANGED) {
        k->line = 0;
        k->fingerprint[0] = '\0';
    }
    return 0;
}

int pd_ssh_key_encrypted(const char *text)
{
    if (strstr(text, "-----BEGIN ENCRYPTED PRIVATE KEY-----")) return 1;
    const char *begin = strstr(text, "-----BEGIN OPENSSH PRIVATE KEY-----");
    if (!begin) return strstr(text, "Proc-Type: 4,ENCRYPTED") != NULL;
    /* openssh-key-v1: magic, then the cipher name ("none" if plain) */
    const char *p = strchr(begin, '\n');
    if (!p) return 0;
    char enc[64];
    size_t n = 0;
    for (p++; *p && *p != '-' && n < sizeof enc - 1; p++)
        if (!isspace((unsigned char)*p)) enc[n++] = *p;
    n -= n % 4;
    unsigned char raw[48];
    long rl = pd_ssh_unbase64(enc, n, raw);
    static const char magic[] = "openssh-key-v1";
    if (rl < (long)sizeof magic + 4 || memcmp(raw, magic, sizeof magic) != 0) return 0;
    const unsigned char *c = raw + sizeof magic;
    uint32_t cl = (uint32_t)c[0] << 24 | (uint32_t)c[1] << 16 | (uint32_t)c[2] << 8 | c[3];
    return !(cl == 4 && rl >= (long)sizeof magic + 8 && memcmp(c + 4, "none", 4) == 0);
}

/* The known_hosts files for a session: the user's (written by accept_new)
 * and, when it is the default one, the system's. */
typedef struct known_file {
    char *path;
    char *text;
} known_file;

static int load_known(pd_ssh *s, const pd_ssh_opts *o, known_file kf[2], int *nkf)
{
    *nkf = 0;
    char *paths[2];
    int n = 0;
    if (o->known_hosts && *o->known_hosts) {
        paths[n++] = expand_home(o->known_hosts);
    } else {
        paths[n++] = home_path(".ssh/known_hosts");
        paths[n++] = pd_xstrdup(GLOBAL_KNOWN_HOSTS);
    }
    for (int i = 0; i < n; i++) {
        char *text = read_file(paths[i], MAX_KNOWN_HOSTS, NULL);
        if (!text && errno != ENOENT && (i == 0 || errno != EACCES)) {
            int e = errno;
            for (int j = i; j < n; j++) free(paths[j]);
            return fail(s, PD_EIO, "cannot read %s: %s", paths[i], strerror(e));
        }
        kf[i].path = paths[i];
        kf[i].text = text ? text : pd_xstrdup("");
        (*nkf)++;
    }
    return 0;
}

static void free_known(known_file *kf, int n)
{
    for (int i = 0; i < n; i++) {
        free(kf[i].path);
        free(kf[i].text);
    }
}

/* Host-key algorithm preference: the types known_hosts has for the host
 * first, so that the server shows a key we can check, then the rest. */
static void hostkey_pref(const char *known_types, char *out, size_t n)
{
    out[0] = '\0';
    for (const char *p = known_types; *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        char t[64];
        if (len < sizeof t) {
            memcpy(t, p, len);
            t[len] = '\0';
            if (strcmp(t, "ssh-rsa") == 0) {
                add_type(out, n, "rsa-sha2-512");
                add_type(out, n, "rsa-sha2-256");
            }
            add_type(out, n, t);
        }
        p += len + (c ? 1 : 0);
    }
    for (size_t i = 0; i < PD_COUNT(hostkey_order); i++) add_type(out, n, hostkey_order[i]);
}

/* Append the host's key to known_hosts (creating it, and ~/.ssh). */
static int record_key(pd_ssh *s, const char *path, const unsigned char *key, size_t len,
                      const char *type)
{
    char name[300];
    known_name(s->host, s->port, name, sizeof name);
    char *dir = pd_xstrdup(path), *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
            int e = errno;
            free(dir);
            return fail(s, PD_EIO, "cannot record the host key: mkdir %s: %s", path, strerror(e));
        }
    }
    free(dir);
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return fail(s, PD_EIO, "cannot record the host key in %s: %s", path, strerror(errno));
    /* start on a new line if the file does not end with one */
    char last = '\n';
    off_t end = lseek(fd, 0, SEEK_END);
    if (end > 0 && pread(fd, &last, 1, end - 1) != 1) last = '\n';
    char *b = pd_ssh_base64(key, len);
    char *line = pd_xasprintf("%s%s %s %s\n", last == '\n' ? "" : "\n", name, type, b);
    size_t ll = strlen(line);
    ssize_t w = write(fd, line, ll);
    int e = errno;
    free(b);
    free(line);
    if (close(fd) < 0 && w == (ssize_t)ll) {
        w = -1;
        e = errno;
    }
    if (w != (ssize_t)ll)
        return fail(s, PD_EIO, "cannot record the host key in %s: %s", path, strerror(e));
    return 0;
}

/* Check the host key the server showed against known_hosts. */
static int verify_host_key(pd_ssh *s, const pd_ssh_opts *o, known_file *kf, int nkf)
{
    size_t len = 0;
    int ktype = 0;
    const char *key = libssh2_session_hostkey(s->ss, &len, &ktype);
    char type[64], fp[64];
    if (!key || blob_type((const unsigned char *)key, len, type, sizeof type) < 0)
        return fail(s, PD_ESSH, "the server sent no usable host key");
    pd_ssh_fingerprint((const unsigned char *)key, len, fp);
    pd_ssh_known k[2];
    int best = -1;
    for (int i = 0; i < nkf; i++) {
        pd_ssh_known_check(kf[i].text, s->host, s->port, (const unsigned char *)key, len, &k[i]);
        if (k[i].status == PD_SSH_KNOWN_REVOKED) {
            return fail(s, PD_EAUTH, "host key %s %s is marked @revoked in %s: refusing to connect",
                        type, fp, kf[i].path);
        }
    }
    for (int i = 0; i < nkf; i++)
        if (k[i].status == PD_SSH_KNOWN_MATCH) return 0;
    for (int i = 0; i < nkf && best < 0; i++)
        if (k[i].status == PD_SSH_KNOWN_CHANGED) best = i;
    char name[300];
    known_name(s->host, s->port, name, sizeof name);
    if (best >= 0)
        return fail(s, PD_EAUTH,
                    "HOST KEY CHANGED: the host shows %s %s but %s:%d has %s for it; this "
                    "may be a man-in-the-middle attack; if the host was reinstalled, remove "
                    "the old key with: ssh-keygen -f %s -R '%s'",
                    type, fp, kf[best].path, k[best].line, k[best].fingerprint,
                    kf[best].path, name);
    for (int i = 0; i < nkf && best < 0; i++)
        if (k[i].status == PD_SSH_KNOWN_OTHER) best = i;
    if (best >= 0)
        return fail(s, PD_EAUTH,
                    "HOST KEY CHANGED: the host shows %s %s but %s has only %s keys for it; "
                    "if its keys were really replaced, remove the old ones with: "
                    "ssh-keygen -f %s -R '%s'",
                    type, fp, kf[best].path, k[best].types, kf[best].path, name);
    if (!o->accept_new) {
        char port[16] = "";
        if (s->port != 22) snprintf(port, sizeof port, " -p %d", s->port);
        return fail(s, PD_EAUTH,
                    "host key unknown: %s %s is not in %s; check the fingerprint, then run "
                    "with --accept-new-host-keys to record it, or add it with: "
                    "ssh-keyscan%s -t %s %s >> %s",
                    type, fp, kf[0].path, port, type, s->host, kf[0].path);
    }
    int rc = record_key(s, kf[0].path, (const unsigned char *)key, len, type);
    if (rc < 0) return rc;
    PD_WARN("ssh %s: permanently added host key %s %s to %s", s->name, type, fp, kf[0].path);
    return 0;
}

/* --- connecting ------------------------------------------------------------------- */

/* getaddrinfo on its own thread, so that a dead DNS server cannot hold us
 * past the deadline; the thread frees what it got if we gave up. */
typedef struct lookup {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs, done, rc;
    char host[256], port[16];
    struct addrinfo *res;
} lookup;

static void lookup_unref(lookup *l)
{
    pthread_mutex_lock(&l->mu);
    int last = --l->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (!last) return;
    if (l->res) freeaddrinfo(l->res);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}

static void *lookup_main(void *arg)
{
    lookup *l = arg;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(l->host, l->port, &hints, &res);
    pthread_mutex_lock(&l->mu);
    l->rc = rc;
    l->res = res;
    l->done = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    lookup_unref(l);
    return NULL;
}

static int resolve(pd_ssh *s, double deadline, struct addrinfo **res)
{
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_NUMERICHOST};
    if (getaddrinfo(s->host, port, &hints, res) == 0) return 0;
    if (strlen(s->host) >= sizeof ((lookup *)0)->host)
        return fail(s, PD_ECONN, "host name too long");
    lookup *l = pd_xcalloc(1, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    snprintf(l->host, sizeof l->host, "%s", s->host);
    snprintf(l->port, sizeof l->port, "%s", port);
    l->refs = 2;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, lookup_main, l) != 0)
        lookup_main(l);  /* no thread: look it up here, unbounded */
    pthread_attr_destroy(&attr);
    pthread_mutex_lock(&l->mu);
    while (!l->done) {
        double left = PD_MIN(deadline - pd_now(), CANCEL_LOOK);
        if (left <= 0 || cancelled(s)) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double until = (double)ts.tv_sec + ts.tv_nsec / 1e9 + left;
        ts.tv_sec = (time_t)until;
        ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    int done = l->done, rc = l->rc;
    *res = done && rc == 0 ? l->res : NULL;
    if (*res) l->res = NULL;
    pthread_mutex_unlock(&l->mu);
    lookup_unref(l);
    if (!done)
        return fail(s, PD_ETIMEDOUT, "timed out after %.1f s resolving the host name '%s'",
                    s->timeout, s->host);
    if (rc != 0)
        return fail(s, PD_ECONN, "cannot resolve the host name '%s': %s", s->host,
                    gai_strerror(rc));
    return 0;
}

static int tcp_connect(pd_ssh *s, double deadline)
{
    struct addrinfo *res = NULL;
    int rc = resolve(s, deadline, &res);
    if (rc < 0) return rc;
    int err = 0, timed_out = 0;
    for (struct addrinfo *a = res; a && s->fd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
            err = errno;
            close(fd);
            continue;
        }
        for (;;) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            double left = deadline - pd_now();
            if (left <= 0 || cancelled(s)) {
                timed_out = 1;
                break;
            }
            int n = poll(&p, 1, (int)(PD_MIN(left, CANCEL_LOOK) * 1000) + 1);
            if (n > 0) break;
            if (n < 0 && errno != EINTR) break;
        }
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (timed_out || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
            err = timed_out ? ETIMEDOUT : soerr ? soerr : errno;
            close(fd);
            if (timed_out) break;
            continue;
        }
        s->fd = fd;
    }
    freeaddrinfo(res);
    if (s->fd >= 0) {
        int one = 1, idle = 15, intvl = 5, cnt = 3;
        setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* a node that vanishes (power, network) is noticed in ~30 s */
        setsockopt(s->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        setsockopt(s->fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
        setsockopt(s->fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
        setsockopt(s->fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
        return 0;
    }
    if (timed_out)
        return fail(s, PD_ETIMEDOUT,
                    "timed out after %.1f s connecting (host down, or a firewall dropping "
                    "packets?)", s->timeout);
    if (err == ECONNREFUSED)
        return fail(s, PD_ECONN, "cannot connect: connection refused (no SSH server "
                    "listening on port %d?)", s->port);
    if (err == EHOSTUNREACH || err == ENETUNREACH)
        return fail(s, PD_ECONN, "cannot connect: %s (is the address right and the "
                    "host up?)", strerror(err));
    return fail(s, PD_ECONN, "cannot connect: %s", strerror(err ? err : EIO));
}

static int handshake(pd_ssh *s, const pd_ssh_opts *o, double deadline)
{
    known_file kf[2];
    int nkf = 0, rc = load_known(s, o, kf, &nkf);
    if (rc < 0) return rc;
    pd_ssh_known k;
    char types[200] = "", pref[400];
    for (int i = 0; i < nkf; i++) {
        pd_ssh_known_check(kf[i].text, s->host, s->port, NULL, 0, &k);
        char *save = NULL;
        for (char *p = strtok_r(k.types, ",", &save); p; p = strtok_r(NULL, ",", &save))
            add_type(types, sizeof types, p);
    }
    hostkey_pref(types, pref, sizeof pref);
    if (libssh2_session_method_pref(s->ss, LIBSSH2_METHOD_HOSTKEY, pref) != 0)
        PD_WARN("ssh %s: host key preference '%s' refused: %s", s->name, pref, lerr(s));
    RETRY(s, deadline, rc, libssh2_session_handshake(s->ss, s->fd));
    if (rc == LIBSSH2_ERROR_EAGAIN) {
        rc = fail(s, PD_ETIMEDOUT, "timed out after %.1f s in the SSH handshake (is it an "
                  "SSH server?)", s->timeout);
    } else if (rc == LIBSSH2_ERROR_BANNER_RECV || rc == LIBSSH2_ERROR_SOCKET_DISCONNECT ||
               rc == LIBSSH2_ERROR_SOCKET_RECV) {
        rc = fail(s, PD_ECONN, "the host closed the connection during the SSH handshake "
                  "(not an SSH server, or it refuses us: %s)", lerr(s));
    } else if (rc == LIBSSH2_ERROR_KEX_FAILURE || rc == LIBSSH2_ERROR_KEY_EXCHANGE_FAILURE) {
        rc = fail(s, PD_ESSH, "SSH handshake failed: no common algorithms (%s)", lerr(s));
    } else if (rc != 0) {
        rc = fail(s, PD_ESSH, "SSH handshake failed: %s", lerr(s));
    } else {
        rc = verify_host_key(s, o, kf, nkf);
    }
    free_known(kf, nkf);
    return rc;
}

/* --- authentication ---------------------------------------------------------- */

typedef struct tried {
    char text[600];
    int n;
    int lost;           /* the server hung up on us */
} tried;

static void note(tried *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(tried *t, const char *fmt, ...)
{
    size_t used = strlen(t->text);
    if (used + 8 >= sizeof t->text) return;
    if (t->n++) {
        memcpy(t->text + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->text + used, sizeof t->text - used, fmt, ap);
    va_end(ap);
}

/* Why a publickey attempt failed, for the list of what was tried. */
static const char *auth_why(pd_ssh *s, int rc, tried *t)
{
    if (rc == LIBSSH2_ERROR_EAGAIN) return "timed out";
    if (conn_lost(rc)) {
        t->lost = 1;
        return "the server closed the connection (too many keys tried? see MaxAuthTries)";
    }
    if (rc == LIBSSH2_ERROR_AUTHENTICATION_FAILED || rc == LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED)
        return "refused";
    return lerr(s);
}

/* Try every key the agent holds; 0 once one is accepted, 1 if none. */
static int auth_agent(pd_ssh *s, double deadline, tried *t)
{
    const char *sock = getenv("SSH_AUTH_SOCK");
    if (!sock || !*sock) return 1;
    LIBSSH2_AGENT *ag = libssh2_agent_init(s->ss);
    if (!ag) {
        note(t, "ssh-agent (cannot use it: %s)", lerr(s));
        return 1;
    }
    int rc, result = 1, nkeys = 0, nrefused = 0;
    RETRY(s, deadline, rc, libssh2_agent_connect(ag));
    if (rc != 0) {
        note(t, "ssh-agent at %s (cannot connect to it)", sock);
        libssh2_agent_free(ag);
        return 1;
    }
    RETRY(s, deadline, rc, libssh2_agent_list_identities(ag));
    if (rc != 0) {
        note(t, "ssh-agent (cannot list its keys: %s)", lerr(s));
    } else {
        struct libssh2_agent_publickey *id = NULL, *prev = NULL;
        char refused[300] = "";
        while (libssh2_agent_get_identity(ag, &id, prev) == 0) {
            prev = id;
            nkeys++;
            RETRY(s, deadline, rc, libssh2_agent_userauth(ag, s->user, id));
            if (rc == 0) {
                result = 0;
                break;
            }
            const char *why = auth_why(s, rc, t);
            char type[64];
            if (blob_type(id->blob, id->blob_len, type, sizeof type) < 0)
                snprintf(type, sizeof type, "key");
            size_t used = strlen(refused);
            snprintf(refused + used, sizeof refused - used, "%s%s%s%s%s", used ? ", " : "",
                     type, id->comment && *id->comment ? " " : "",
                     id->comment ? id->comment : "", strcmp(why, "refused") ? " (" : "");
            if (strcmp(why, "refused")) {
                used = strlen(refused);
                snprintf(refused + used, sizeof refused - used, "%s)", why);
            } else {
                nrefused++;
            }
            if (t->lost || rc == LIBSSH2_ERROR_EAGAIN) break;
        }
        if (result != 0) {
            if (nkeys == 0)
                note(t, "ssh-agent (holds no keys)");
            else
                note(t, "ssh-agent keys %s%s", refused, nrefused == nkeys ? " (refused)" : "");
        }
    }
    libssh2_agent_disconnect(ag);
    libssh2_agent_free(ag);
    return result;
}

/* Try one private key file; 0 if accepted, 1 if not. */
static int auth_file(pd_ssh *s, const char *path, int explicit, double deadline, tried *t)
{
    size_t len;
    char *text = read_file(path, MAX_KEY_FILE, &len);
    if (!text) {
        if (explicit || errno != ENOENT)
            note(t, "%s (cannot read it: %s)", path, strerror(errno));
        return 1;
    }
    int encrypted = pd_ssh_key_encrypted(text), public = strncmp(text, "ssh-", 4) == 0 ||
                                                        strncmp(text, "ecdsa-", 6) == 0;
    free(text);
    if (public) {
        note(t, "%s (a public key: name the private key file)", path);
        return 1;
    }
    const char *pass = getenv("PADDLE_SSH_PASSPHRASE");
    if (encrypted && !pass) {
        note(t, "%s (encrypted: set PADDLE_SSH_PASSPHRASE, or load it into ssh-agent)", path);
        return 1;
    }
    int rc;
    RETRY(s, deadline, rc,
          libssh2_userauth_publickey_fromfile_ex(s->ss, s->user, (unsigned)strlen(s->user), NULL,
                                                 path, encrypted ? pass : NULL));
    if (rc == 0) return 0;
    if (rc == LIBSSH2_ERROR_FILE)
        note(t, "%s (cannot load it%s: %s)", path,
             encrypted ? ": wrong PADDLE_SSH_PASSPHRASE?" : "", lerr(s));
    else
        note(t, "%s (%s)", path, auth_why(s, rc, t));
    return 1;
}

static int authenticate(pd_ssh *s, const pd_ssh_opts *o, double deadline)
{
    char *methods;
    RETRY_PTR(s, deadline, methods,
              libssh2_userauth_list(s->ss, s->user, (unsigned)strlen(s->user)));
    if (!methods) {
        if (libssh2_userauth_authenticated(s->ss)) return 0;  /* "none" was enough */
        if (TIMED_OUT(s))
            return fail(s, PD_ETIMEDOUT, "timed out after %.1f s waiting to authenticate",
                        s->timeout);
        return fail(s, PD_ECONN, "the host closed the connection before authentication: %s",
                    lerr(s));
    }
    if (!strstr(methods, "publickey"))
        return fail(s, PD_EAUTH, "authentication failed: the server allows only %s; paddle "
                    "logs in with keys (enable PubkeyAuthentication in its sshd_config)",
                    methods);
    char allowed[200];
    snprintf(allowed, sizeof allowed, "%s", methods);
    tried t = {.text = "", .n = 0};
    if (o->use_agent && auth_agent(s, deadline, &t) == 0) return 0;
    if (!t.lost && pd_now() < deadline) {
        if (o->nidentity > 0) {
            for (int i = 0; i < o->nidentity && !t.lost && pd_now() < deadline; i++) {
                char *path = expand_home(o->identity_files[i]);
                int rc = auth_file(s, path, 1, deadline, &t);
                free(path);
                if (rc == 0) return 0;
            }
        } else {
            static const char *const defaults[] = {".ssh/id_ed25519", ".ssh/id_ecdsa",
                                                   ".ssh/id_rsa"};
            for (size_t i = 0; i < PD_COUNT(defaults) && !t.lost && pd_now() < deadline; i++) {
                char *path = home_path(defaults[i]);
                int rc = auth_file(s, path, 0, deadline, &t);
                free(path);
                if (rc == 0) return 0;
            }
        }
    }
    if (pd_now() >= deadline)
        return fail(s, PD_ETIMEDOUT, "timed out after %.1f s authenticating; tried: %s",
                    s->timeout, t.n ? t.text : "nothing");
    if (t.n == 0)
        return fail(s, PD_EAUTH,
                    "authentication failed: no key to try (%sno cluster.identity_files, and "
                    "none of ~/.ssh/id_ed25519, id_ecdsa, id_rsa exists)",
                    !o->use_agent ? "ssh-agent not used, " : "no ssh-agent (SSH_AUTH_SOCK), ");
    return fail(s, PD_EAUTH,
                "authentication failed (server allows: %s); tried: %s; put one of these public "
                "keys in ~%s/.ssh/authorized_keys on %s, or name the right key in "
                "cluster.identity_files",
                allowed, t.text, s->user, s->host);
}

/* --- sessions -------------------------------------------------------------------- */

int pd_ssh_connect(pd_ssh **out, const pd_host *h, const pd_ssh_opts *o)
{
    *out = NULL;
    pthread_once(&init_once, lib_init);
    pd_ssh *s = pd_xcalloc(1, sizeof *s);
    s->fd = -1;
    s->timeout = o->timeout > 0 ? o->timeout : DEFAULT_TIMEOUT;
    s->cancelled = o->cancelled;
    s->cancel_ctx = o->cancel_ctx;
    s->port = h->port > 0 ? h->port : 22;
    s->host = pd_xstrdup(h->host ? h->host : "");
    if (h->user && *h->user) {
        s->user = pd_xstrdup(h->user);
    } else {
        s->user = local_user(0);
    }
    snprintf(s->name, sizeof s->name, "%s@%s:%d", s->user, s->host, s->port);
    double t0 = pd_now(), deadline = t0 + s->timeout, t1, t2;
    int rc;
    if (init_rc != 0) {
        rc = fail(s, PD_ESSH, "libssh2_init failed (%d)", init_rc);
        goto err;
    }
    if (!*s->host) {
        rc = fail(s, PD_EINVAL, "no host name");
        goto err;
    }
    if ((rc = tcp_connect(s, deadline)) < 0) goto err;
    s->ss = libssh2_session_init();
    if (!s->ss) {
        rc = fail(s, PD_ENOMEM, "libssh2_session_init failed");
        goto err;
    }
    libssh2_session_set_blocking(s->ss, 0);
    t1 = pd_now();
    if ((rc = handshake(s, o, deadline)) < 0) goto err;
    s->secure = 1;
    t2 = pd_now();
    if ((rc = authenticate(s, o, deadline)) < 0) goto err;
    PD_DEBUG("ssh %s: connected in %.1f ms (tcp %.1f, handshake %.1f, auth %.1f)", s->name,
             (pd_now() - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (pd_now() - t2) * 1e3);
    *out = s;
    return 0;
err:
    pd_ssh_free(s);
    return rc;
}

void pd_ssh_cut(pd_ssh *s)
{
    if (s && s->fd >= 0) shutdown(s->fd, SHUT_RDWR);
}

void pd_ssh_free(pd_ssh *s)
{
    if (!s) return;
    if (s->ss) {
        double deadline = pd_now() + PD_MIN(s->timeout, 2.0);
        int rc;
        if (s->sftp) RETRY(s, deadline, rc, libssh2_sftp_shutdown(s->sftp));
        if (s->secure)
            RETRY(s, deadline, rc,
                  libssh2_session_disconnect_ex(s->ss, SSH_DISCONNECT_BY_APPLICATION,
                                                "paddle done", ""));
        /* from here on every read fails at once: nothing can block */
        if (s->fd >= 0) shutdown(s->fd, SHUT_RDWR);
        for (int i = 0; i < 1000 && libssh2_session_free(s->ss) == LIBSSH2_ERROR_EAGAIN; i++) {}
    }
    if (s->fd >= 0) close(s->fd);
    while (s->chans) {  /* libssh2 freed their channels */
        pd_ssh_chan *next = s->chans->next;
        free(s->chans);
        s->chans = next;
    }
    free(s->user);
    free(s->host);
    free(s);
}

const char *pd_ssh_name(const pd_ssh *s)
{
    return s->name;
}

int pd_ssh_fd(const pd_ssh *s)
{
    return s->fd;
}

int pd_ssh_events(pd_ssh *s)
{
    int dir = s->ss ? libssh2_session_block_directions(s->ss) : 0;
    int ev = POLLIN;
    if (dir & LIBSSH2_SESSION_BLOCK_OUTBOUND) ev |= POLLOUT;
    return ev;
}

/* --- channels ---------------------------------------------------------------------- */

/* Free a libssh2 channel, bounded; on a hung peer it is left to session free. */
static void chan_drop(pd_ssh *s, LIBSSH2_CHANNEL *ch, double deadline)
{
    int rc;
    RETRY(s, deadline, rc, libssh2_channel_free(ch));
    (void)rc;
}

int pd_ssh_exec(pd_ssh *s, const char *command, pd_ssh_chan **out)
{
    *out = NULL;
    char sc[80];
    double deadline = pd_now() + s->timeout;
    LIBSSH2_CHANNEL *ch;
    RETRY_PTR(s, deadline, ch, libssh2_channel_open_session(s->ss));
    if (!ch) {
        int e = libssh2_session_last_errno(s->ss);
        if (e == LIBSSH2_ERROR_EAGAIN)
            return fail(s, PD_ETIMEDOUT, "timed out after %.1f s opening a channel", s->timeout);
        return fail(s, conn_lost(e) ? PD_ECONN : PD_ESSH, "cannot open a channel: %s%s", lerr(s),
                    e == LIBSSH2_ERROR_CHANNEL_FAILURE ? " (too many sessions? see MaxSessions)"
                                                       : "");
    }
    int rc;
    RETRY(s, deadline, rc,
          libssh2_channel_process_startup(ch, "exec", 4, command, (unsigned)strlen(command)));
    if (rc != 0) {
        int code = rc == LIBSSH2_ERROR_EAGAIN ? PD_ETIMEDOUT : conn_lost(rc) ? PD_ECONN : PD_ESSH;
        fail(s, code, "cannot start '%s': %s", short_cmd(command, sc, sizeof sc),
             rc == LIBSSH2_ERROR_EAGAIN ? "timed out" : lerr(s));
        chan_drop(s, ch, pd_now() + 1.0);
        return code;
    }
    pd_ssh_chan *c = pd_xcalloc(1, sizeof *c);
    c->in_flight = IN_FLIGHT;
    c->s = s;
    c->ch = ch;
    c->next = s->chans;
    if (s->chans) s->chans->prev = c;
    s->chans = c;
    *out = c;
    return 0;
}

static ssize_t chan_read(pd_ssh_chan *c, int stream, char *buf, size_t n, int *eof)
{
    int dummy;
    if (!eof) eof = &dummy;
    *eof = 0;
    ssize_t r = libssh2_channel_read_ex(c->ch, stream, buf, n);
    if (r > 0) return r;
    if (r == LIBSSH2_ERROR_EAGAIN) return 0;
    if (r == 0) {  /* libssh2: no data on this stream and the remote sent EOF */
        *eof = 1;
        return 0;
    }
    return fail(c->s, conn_lost((int)r) ? PD_ECONN : PD_ESSH, "reading from the channel: %s%s",
                conn_lost((int)r) ? "connection lost: " : "", lerr(c->s));
}

ssize_t pd_ssh_read(pd_ssh_chan *c, char *buf, size_t n, int *eof)
{
    return chan_read(c, 0, buf, n, eof);
}

ssize_t pd_ssh_read_err(pd_ssh_chan *c, char *buf, size_t n, int *eof)
{
    return chan_read(c, SSH_EXTENDED_DATA_STDERR, buf, n, eof);
}

ssize_t pd_ssh_write(pd_ssh_chan *c, const void *buf, size_t n)
{
    ssize_t w = libssh2_channel_write(c->ch, buf, n);
    if (w >= 0) return w;
    if (w == LIBSSH2_ERROR_EAGAIN) return 0;
    return fail(c->s, conn_lost((int)w) ? PD_ECONN : PD_ESSH, "writing to the channel: %s%s",
                conn_lost((int)w) ? "connection lost: " : "", lerr(c->s));
}

/* How much of buf[n] to write now: n, less what would pass c->in_flight;
 * 0 when c->in_flight is reached, after the window adjustments that came
 * were read in; < 0 when reading them failed (the connection was lost).
 * Once the command has ended its output, no cap: the write itself says
 * whether the channel is closed. */
static ssize_t write_room(pd_ssh_chan *c, size_t n)
{
    for (int pumped = 0;; pumped = 1) {
        size_t out = pd_ssh_unacked(c);
        if (libssh2_channel_eof(c->ch)) return (ssize_t)PD_MIN(n, (size_t)SSIZE_MAX);
        if (out < c->in_flight) return (ssize_t)PD_MIN(n, PD_MIN(c->in_flight - out, (size_t)SSIZE_MAX));
        if (pumped) return 0;
        char none;
        ssize_t r = chan_read(c, SSH_EXTENDED_DATA_STDERR, &none, 0, NULL); /* reads the packets waiting */
        if (r < 0) return r;
    }
}

size_t pd_ssh_in_flight(pd_ssh_chan *c, size_t cap)
{
    size_t was = c->in_flight;
    if (cap > 0) c->in_flight = cap;
    return was;
}

size_t pd_ssh_unacked(pd_ssh_chan *c)
{
    unsigned long win = libssh2_channel_window_write_ex(c->ch, NULL);
    if (c->looked && win > c->window_left) c->acked = 1; /* only an acknowledgement widens it */
    c->looked = 1;
    c->window_left = win;
    if (win > c->window_max) c->window_max = win;
    return c->window_max - win;
}

int pd_ssh_write_all(pd_ssh_chan *c, const void *buf, size_t n)
{
    const char *p = buf;
    double deadline = pd_now() + c->s->timeout, capped = 0;
    /* A write that would block may have left its packet half sent in
     * libssh2: it must be called again with the same bytes, so room is
     * taken anew only after a write went through. In between, reads are
     * safe (libssh2 holds back any other packet until that one is out),
     * and needed: a read may have left its own packet half sent (our
     * window adjustment), which only a read finishes. */
    size_t room = 0;
    while (n > 0) {
        if (!room) {
            ssize_t r = write_room(c, n);
            if (r < 0) return (int)r;
            room = (size_t)r;
        }
        ssize_t w = room ? pd_ssh_write(c, p, room) : 0;
        if (w < 0) return (int)w;
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            c->window_left = c->window_left > (unsigned long)w ? c->window_left - (unsigned long)w : 0;
            room = 0;
            capped = 0;
            deadline = pd_now() + c->s->timeout;
            continue;
        }
        double wait_until = deadline;
        if (!room && !c->acked) {
            /* At c->in_flight. A server that acknowledges only past it
             * (one that waits for half of its window) would leave us here
             * for good: until the first acknowledgement, the cap doubles
             * after CAP_WAIT without one. After it, a wait here is a
             * command that reads slowly, and the cap stays. */
            double now = pd_now();
            if (!capped) capped = now;
            if (now - capped >= CAP_WAIT) {
                c->in_flight *= 2;
                capped = 0;
                continue;
            }
            wait_until = PD_MIN(deadline, capped + CAP_WAIT);
        }
        /* the wait is for what the last call needs (the write's, when it
         * would block); then what came is read before the write again */
        if (wait_io(c->s, wait_until) < 0 && wait_until >= deadline)
            return fail(c->s, PD_ETIMEDOUT, "timed out after %.1f s writing to the channel (the command does not read)",
                        c->s->timeout);
        if (room) {
            char none;
            ssize_t r = chan_read(c, SSH_EXTENDED_DATA_STDERR, &none, 0, NULL);
            if (r < 0) return (int)r;
        }
    }
    return 0;
}

int pd_ssh_send_eof(pd_ssh_chan *c)
{
    int rc;
    if (c->eof_sent) return 0;
    RETRY(c->s, pd_now() + c->s->timeout, rc, libssh2_channel_send_eof(c->ch));
    c->eof_sent = rc == 0;
    if (rc == 0) return 0;
    if (rc == LIBSSH2_ERROR_EAGAIN)
        return fail(c->s, PD_ETIMEDOUT, "timed out after %.1f s sending EOF", c->s->timeout);
    return fail(c->s, conn_lost(rc) ? PD_ECONN : PD_ESSH, "sending EOF: %s", lerr(c->s));
}

int pd_ssh_close_chan(pd_ssh_chan *c, int *exit_status, char **exit_signal)
{
    if (exit_status) *exit_status = -1;
    if (exit_signal) *exit_signal = NULL;
    if (!c) return 0;
    pd_ssh *s = c->s;
    double deadline = pd_now() + s->timeout;
    int rc = 0, result = 0;
    if (!c->eof_sent) RETRY(s, deadline, rc, libssh2_channel_send_eof(c->ch));
    /* drop what is unread until the command's EOF */
    char buf[16384];
    while (rc == 0 && !libssh2_channel_eof(c->ch)) {
        ssize_t a = libssh2_channel_read_ex(c->ch, 0, buf, sizeof buf);
        ssize_t b = libssh2_channel_read_ex(c->ch, SSH_EXTENDED_DATA_STDERR, buf, sizeof buf);
        if (a > 0 || b > 0) continue;
        if ((a < 0 && a != LIBSSH2_ERROR_EAGAIN) || (b < 0 && b != LIBSSH2_ERROR_EAGAIN)) {
            rc = (int)(a < 0 && a != LIBSSH2_ERROR_EAGAIN ? a : b);
            break;
        }
        if (a == 0 && b == 0) break;  /* at EOF */
        if (wait_io(s, deadline) < 0) {
            rc = LIBSSH2_ERROR_EAGAIN;
            break;
        }
    }
    /* sends CLOSE and waits for the server's (after the exit status) */
    if (rc == 0) RETRY(s, deadline, rc, libssh2_channel_close(c->ch));
    if (rc == LIBSSH2_ERROR_EAGAIN) {
        result = fail(s, PD_ETIMEDOUT, "the remote command did not end within %.1f s of "
                      "closing its channel", s->timeout);
    } else if (rc != 0) {
        result = fail(s, conn_lost(rc) ? PD_ECONN : PD_ESSH, "closing the channel: %s%s",
                      conn_lost(rc) ? "connection lost: " : "", lerr(s));
    } else {
        char *sig = NULL;
        size_t siglen = 0;
        libssh2_channel_get_exit_signal(c->ch, &sig, &siglen, NULL, NULL, NULL, NULL);
        if (sig) {
            if (exit_signal) *exit_signal = pd_xasprintf("%.*s", (int)siglen, sig);
            libssh2_free(s->ss, sig);
        } else if (exit_status) {
            *exit_status = libssh2_channel_get_exit_status(c->ch);
        }
    }
    chan_drop(s, c->ch, pd_now() + (result == 0 ? s->timeout : 0.2));
    if (c->prev) c->prev->next = c->next;
    else s->chans = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c);
    return result;
}

/* Keep the last part of stderr for messages, on one line. */
static void err_tail(char *tail, size_t *len, const char *data, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (*len == ERR_TAIL) {
            memmove(tail, tail + ERR_TAIL / 2, ERR_TAIL / 2);
            *len = ERR_TAIL / 2;
        }
        char ch = data[i];
        tail[(*len)++] = ch == '\n' || ch == '\r' || ch == '\t' ? ' ' : ch;
    }
}

/* Local side of a download: a temporary file renamed into place. */
typedef struct sink {
    char *tmp;
    const char *path;
    int fd;
} sink;

static int sink_open(sink *k, const char *path)
{
    k->path = path;
    k->tmp = pd_xasprintf("%s.paddle-tmp-%d", path, (int)getpid());
    k->fd = open(k->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (k->fd >= 0) return 0;
    int rc = pd_err_set(PD_EIO, "cannot create %s: %s", k->tmp, strerror(errno));
    free(k->tmp);
    return rc;
}

static int sink_write(sink *k, const char *buf, size_t n)
{
    while (n > 0) {
        ssize_t w = write(k->fd, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return pd_err_set(PD_EIO, "writing %s: %s", k->tmp, strerror(errno));
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Finish (rc == 0: set the mode and rename into place) or throw away. */
static int sink_close(sink *k, int rc, int mode)
{
    if (rc == 0 && fchmod(k->fd, (mode_t)(mode & 07777)) < 0)
        rc = pd_err_set(PD_EIO, "chmod %s: %s", k->tmp, strerror(errno));
    if (close(k->fd) < 0 && rc == 0)
        rc = pd_err_set(PD_EIO, "writing %s: %s", k->tmp, strerror(errno));
    if (rc == 0 && rename(k->tmp, k->path) < 0)
        rc = pd_err_set(PD_EIO, "rename to %s: %s", k->path, strerror(errno));
    if (rc != 0) unlink(k->tmp);
    free(k->tmp);
    return rc;
}

/* What run_io does with the command's input and output. */
typedef struct io {
    int in_fd;          /* stdin from this file, or -1 for none */
    char **out;         /* stdout into a malloc'd string (may be NULL: dropped) */
    sink *to;           /* or into this file, after a first line to head */
    char head[32];
    size_t head_len;
    int head_done;
    const char *what;   /* for messages: "writing /x" instead of the command */
} io;

/* Take stdout bytes: the head line, then the sink or the buffer. */
static int io_take(pd_ssh *s, io *x, const char *data, size_t n, char **buf, size_t *len,
                   size_t *cap, const char *command)
{
    char sc[80];
    if (x->to) {
        while (!x->head_done && n > 0) {
            if (*data == '\n') x->head_done = 1;
            else if (x->head_len + 1 < sizeof x->head) x->head[x->head_len++] = *data;
            data++, n--;
        }
        return n ? sink_write(x->to, data, n) : 0;
    }
    if (*len + n > MAX_RUN_OUTPUT)
        return fail(s, PD_ERANGE, "'%s' wrote more than %d MiB", short_cmd(command, sc, sizeof sc),
                    MAX_RUN_OUTPUT >> 20);
    PD_GROW(buf, cap, *len + n + 1);
    memcpy(*buf + *len, data, n);
    *len += n;
    return 0;
}

/* Run command, feeding it x->in_fd, taking its stdout as x says, until it
 * ends; each wait is bounded by the timeout. A non-zero exit is PD_ECHILD
 * with the tail of stderr in the message. */
static int run_io(pd_ssh *s, const char *command, io *x, int *exit_status)
{
    char sc[80];
    if (exit_status) *exit_status = -1;
    pd_ssh_chan *c;
    int rc = pd_ssh_exec(s, command, &c);
    if (rc < 0) return rc;
    int in_done = x->in_fd < 0;
    if (in_done && (rc = pd_ssh_send_eof(c)) < 0) {
        pd_ssh_close_chan(c, NULL, NULL);
        return rc;
    }
    char *buf = NULL, tail[ERR_TAIL + 1], *chunk = pd_xmalloc(XFER_CHUNK);
    size_t len = 0, cap = 0, tlen = 0, in_len = 0, in_off = 0;
    int eof_out = 0, eof_err = 0;
    double last = pd_now();
    while (rc == 0 && !(eof_out && eof_err)) {
        int was = eof_out + eof_err, moved = 0;
        if (!in_done && in_off == in_len) {
            ssize_t n = read(x->in_fd, chunk, XFER_CHUNK);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                rc = pd_err_set(PD_EIO, "reading local file: %s", strerror(errno));
                break;
            }
            in_len = (size_t)n;
            in_off = 0;
            if (n == 0) {
                in_done = 1;
                if ((rc = pd_ssh_send_eof(c)) < 0) break;
            }
        }
        if (!in_done && in_off < in_len) {
            ssize_t w = pd_ssh_write(c, chunk + in_off, in_len - in_off);
            if (w < 0) {
                /* the command may have ended early: its status says why */
                if (!libssh2_channel_eof(c->ch)) {
                    rc = (int)w;
                    break;
                }
                in_done = 1;
                pd_err_clear();
            } else {
                in_off += (size_t)w;
                moved |= w > 0;
            }
        }
        if (!eof_out) {
            char ob[16384];
            ssize_t a = pd_ssh_read(c, ob, sizeof ob, &eof_out);
            if (a < 0) {
                rc = (int)a;
                break;
            }
            if (a > 0 && (rc = io_take(s, x, ob, (size_t)a, &buf, &len, &cap, command)) < 0) break;
            moved |= a > 0;
        }
        if (!eof_err) {
            char eb[4096];
            ssize_t b = pd_ssh_read_err(c, eb, sizeof eb, &eof_err);
            if (b < 0) {
                rc = (int)b;
                break;
            }
            err_tail(tail, &tlen, eb, (size_t)b);
            moved |= b > 0;
        }
        if (moved || eof_out + eof_err != was)
            last = pd_now();
        else if (wait_io(s, last + s->timeout) < 0)
            rc = fail(s, PD_ETIMEDOUT, "'%s' did nothing for %.1f s",
                      short_cmd(command, sc, sizeof sc), s->timeout);
    }
    free(chunk);
    if (rc < 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", pd_err_msg());
        pd_ssh_close_chan(c, NULL, NULL);
        pd_err_set(rc, "%s", msg);
        free(buf);
        return rc;
    }
    int status = -1;
    char *sig = NULL;
    if ((rc = pd_ssh_close_chan(c, &status, &sig)) < 0) {
        free(buf);
        return rc;
    }
    if (exit_status) *exit_status = status;
    while (tlen > 0 && tail[tlen - 1] == ' ') tlen--;
    tail[tlen] = '\0';
    const char *what = x->what ? x->what : short_cmd(command, sc, sizeof sc);
    const char *q = x->what ? "" : "'";
    if (sig)
        rc = fail(s, PD_ECHILD, "%s%s%s was killed by signal %s%s%s", q, what, q, sig,
                  tlen ? ": " : "", tail);
    else if (status != 0 && x->what)
        rc = fail(s, PD_ECHILD, "%s: %s", what, tlen ? tail : "failed");
    else if (status != 0)
        rc = fail(s, PD_ECHILD, "'%s' exited with status %d%s%s", what, status, tlen ? ": " : "",
                  tail);
    free(sig);
    if (x->out) {
        if (!buf) buf = pd_xmalloc(1);
        buf[len] = '\0';
        *x->out = buf;
    } else {
        free(buf);
    }
    return rc;
}

int pd_ssh_run(pd_ssh *s, const char *command, char **out, int *exit_status)
{
    if (out) *out = NULL;
    io x = {.in_fd = -1, .out = out};
    return run_io(s, command, &x, exit_status);
}

/* --- file transfer ------------------------------------------------------------------ */

static const char *sftp_why(unsigned long fx)
{
    switch (fx) {
    case LIBSSH2_FX_NO_SUCH_FILE: return "no such file";
    case LIBSSH2_FX_PERMISSION_DENIED: return "permission denied";
    case LIBSSH2_FX_NO_SUCH_PATH: return "no such directory";
    case LIBSSH2_FX_NO_SPACE_ON_FILESYSTEM: return "no space left on the disk";
    case LIBSSH2_FX_QUOTA_EXCEEDED: return "disk quota exceeded";
    case LIBSSH2_FX_FILE_ALREADY_EXISTS: return "file exists";
    case LIBSSH2_FX_WRITE_PROTECT: return "read-only file system";
    case LIBSSH2_FX_OP_UNSUPPORTED: return "not supported by the server";
    case LIBSSH2_FX_FAILURE: return "failure (disk full? a directory in the way?)";
    }
    return "SFTP error";
}

/* Why an SFTP call failed: its status, a timeout or the connection. */
static int sftp_fail(pd_ssh *s, int rc, const char *what, const char *path)
{
    if (rc == LIBSSH2_ERROR_EAGAIN)
        return fail(s, PD_ETIMEDOUT, "%s %s: timed out after %.1f s", what, path, s->timeout);
    if (rc == LIBSSH2_ERROR_SFTP_PROTOCOL) {
        unsigned long fx = libssh2_sftp_last_error(s->sftp);
        int code = fx == LIBSSH2_FX_NO_SUCH_FILE || fx == LIBSSH2_FX_NO_SUCH_PATH ? PD_ENOENT
                                                                                  : PD_EIO;
        return fail(s, code, "%s %s: %s", what, path, sftp_why(fx));
    }
    return fail(s, conn_lost(rc) ? PD_ECONN : PD_ESSH, "%s %s: %s", what, path, lerr(s));
}

/* Start SFTP once per session; 1 if the server has none (use the shell). */
static int sftp_start(pd_ssh *s)
{
    if (s->sftp) return 0;
    if (s->no_sftp) return 1;
    double deadline = pd_now() + s->timeout;
    RETRY_PTR(s, deadline, s->sftp, libssh2_sftp_init(s->ss));
    if (s->sftp) return 0;
    int e = libssh2_session_last_errno(s->ss);
    if (e == LIBSSH2_ERROR_EAGAIN)
        return fail(s, PD_ETIMEDOUT, "timed out after %.1f s starting SFTP", s->timeout);
    if (conn_lost(e)) return fail(s, PD_ECONN, "starting SFTP: connection lost: %s", lerr(s));
    PD_DEBUG("ssh %s: no SFTP (%s), copying through the shell", s->name, lerr(s));
    s->no_sftp = 1;
    return 1;
}

static char *tmp_name(pd_ssh *s, const char *path)
{
    return pd_xasprintf("%s.paddle-tmp-%d-%u", path, (int)getpid(), ++s->tmp_seq);
}

/* Write all of buf to an SFTP handle; each wait bounded by the timeout. */
static int sftp_write_all(pd_ssh *s, LIBSSH2_SFTP_HANDLE *h, const char *buf, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w;
        RETRY(s, pd_now() + s->timeout, w, libssh2_sftp_write(h, buf + off, n - off));
        if (w < 0) return (int)w;
        off += (size_t)w;
    }
    return 0;
}

static int upload_sftp(pd_ssh *s, int fd, const char *remote, int mode)
{
    char *tmp = tmp_name(s, remote);
    LIBSSH2_SFTP_HANDLE *h;
    RETRY_PTR(s, pd_now() + s->timeout, h,
              libssh2_sftp_open_ex(s->sftp, tmp, (unsigned)strlen(tmp),
                                   LIBSSH2_FXF_WRITE | LIBSSH2_FXF_CREAT | LIBSSH2_FXF_TRUNC,
                                   mode & 0777, LIBSSH2_SFTP_OPENFILE));
    if (!h) {
        int rc = sftp_fail(s, libssh2_session_last_errno(s->ss), "cannot create", remote);
        free(tmp);
        return rc;
    }
    char *buf = pd_xmalloc(XFER_CHUNK);
    int rc = 0, lrc = 0;
    for (;;) {
        ssize_t n = read(fd, buf, XFER_CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = pd_err_set(PD_EIO, "reading local file: %s", strerror(errno));
            break;
        }
        if (n == 0) break;
        if ((lrc = sftp_write_all(s, h, buf, (size_t)n)) < 0) {
            rc = sftp_fail(s, lrc, "writing", tmp);
            break;
        }
    }
    free(buf);
    if (rc == 0) {
        /* the mode exactly, whatever the remote umask */
        LIBSSH2_SFTP_ATTRIBUTES a = {.flags = LIBSSH2_SFTP_ATTR_PERMISSIONS,
                                     .permissions = (unsigned long)(mode & 07777)};
        RETRY(s, pd_now() + s->timeout, lrc, libssh2_sftp_fsetstat(h, &a));
        if (lrc != 0) rc = sftp_fail(s, lrc, "setting the mode of", tmp);
    }
    RETRY(s, pd_now() + s->timeout, lrc, libssh2_sftp_close_handle(h));
    if (rc == 0 && lrc != 0) rc = sftp_fail(s, lrc, "writing", tmp);
    if (rc == 0) {
        RETRY(s, pd_now() + s->timeout, lrc,
              libssh2_sftp_posix_rename_ex(s->sftp, tmp, strlen(tmp), remote, strlen(remote)));
        if (lrc == LIBSSH2_ERROR_SFTP_PROTOCOL &&
            libssh2_sftp_last_error(s->sftp) == LIBSSH2_FX_OP_UNSUPPORTED) {
            /* no posix-rename@openssh.com: a plain rename does not replace */
            RETRY(s, pd_now() + s->timeout, lrc,
                  libssh2_sftp_unlink_ex(s->sftp, remote, (unsigned)strlen(remote)));
            RETRY(s, pd_now() + s->timeout, lrc,
                  libssh2_sftp_rename_ex(s->sftp, tmp, (unsigned)strlen(tmp), remote,
                                         (unsigned)strlen(remote), LIBSSH2_SFTP_RENAME_OVERWRITE));
        }
        if (lrc != 0) rc = sftp_fail(s, lrc, "cannot rename the upload to", remote);
    }
    if (rc != 0)
        RETRY(s, pd_now() + 1.0, lrc, libssh2_sftp_unlink_ex(s->sftp, tmp, (unsigned)strlen(tmp)));
    free(tmp);
    return rc;
}

/* Without SFTP: the file through `cat` on an exec channel (one shell). */
static int upload_shell(pd_ssh *s, int fd, const char *remote, int mode)
{
    char *tmp = tmp_name(s, remote);
    char *qt = pd_sh_quote(tmp), *qr = pd_sh_quote(remote);
    char *cmd = pd_xasprintf("umask 077 && cat > %s && chmod %o %s && mv -f %s %s "
                             "|| { rm -f %s; exit 1; }", qt, mode & 07777, qt, qt, qr, qt);
    char *what = pd_xasprintf("writing %s", remote);
    io x = {.in_fd = fd, .what = what};
    int rc = run_io(s, cmd, &x, NULL);
    free(what);
    free(cmd);
    free(qt);
    free(qr);
    free(tmp);
    return rc;
}

static int download_shell(pd_ssh *s, const char *remote, const char *local)
{
    sink k;
    int rc = sink_open(&k, local);
    if (rc < 0) return rc;
    char *q = pd_sh_quote(remote);
    /* the mode on the first line, then the bytes */
    char *cmd = pd_xasprintf("stat -L -c %%a %s && exec cat %s", q, q);
    char *what = pd_xasprintf("reading %s", remote);
    io x = {.in_fd = -1, .to = &k, .what = what};
    rc = run_io(s, cmd, &x, NULL);
    x.head[x.head_len] = '\0';
    char *end = NULL;
    long mode = strtol(x.head, &end, 8);
    if (rc == 0 && (!x.head_done || end == x.head || *end || mode < 0 || mode > 07777))
        rc = fail(s, PD_EPROTO, "reading %s: unexpected mode line '%s'", remote, x.head);
    free(what);
    free(cmd);
    free(q);
    return sink_close(&k, rc, rc == 0 ? (int)mode : 0);
}

int pd_ssh_upload(pd_ssh *s, const char *local, const char *remote, int mode)
{
    int fd = open(local, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pd_err_set(PD_EIO, "cannot upload %s: %s", local, strerror(errno));
    int rc = sftp_start(s);
    if (rc == 0)
        rc = upload_sftp(s, fd, remote, mode);
    else if (rc == 1)
        rc = upload_shell(s, fd, remote, mode);
    close(fd);
    return rc < 0 ? pd_err_wrap(rc, "uploading %s", local) : 0;
}

static int download_sftp(pd_ssh *s, const char *remote, const char *local)
{
    LIBSSH2_SFTP_HANDLE *h;
    RETRY_PTR(s, pd_now() + s->timeout, h,
              libssh2_sftp_open_ex(s->sftp, remote, (unsigned)strlen(remote), LIBSSH2_FXF_READ, 0,
                                   LIBSSH2_SFTP_OPENFILE));
    if (!h) return sftp_fail(s, libssh2_session_last_errno(s->ss), "cannot open", remote);
    LIBSSH2_SFTP_ATTRIBUTES a;
    int rc, mode = 0644;
    RETRY(s, pd_now() + s->timeout, rc, libssh2_sftp_fstat_ex(h, &a, 0));
    if (rc == 0 && (a.flags & LIBSSH2_SFTP_ATTR_PERMISSIONS)) {
        if (!LIBSSH2_SFTP_S_ISREG(a.permissions)) {
            int crc;
            RETRY(s, pd_now() + 1.0, crc, libssh2_sftp_close_handle(h));
            return fail(s, PD_EINVAL, "cannot download %s: not a regular file", remote);
        }
        mode = (int)(a.permissions & 07777);
    }
    sink k;
    if ((rc = sink_open(&k, local)) < 0) {
        int crc;
        RETRY(s, pd_now() + 1.0, crc, libssh2_sftp_close_handle(h));
        return rc;
    }
    char *buf = pd_xmalloc(XFER_CHUNK);
    for (;;) {
        ssize_t n;
        RETRY(s, pd_now() + s->timeout, n, libssh2_sftp_read(h, buf, XFER_CHUNK));
        if (n < 0) {
            rc = sftp_fail(s, (int)n, "reading", remote);
            break;
        }
        if (n == 0) break;
        if ((rc = sink_write(&k, buf, (size_t)n)) < 0) break;
    }
    free(buf);
    int crc;
    RETRY(s, pd_now() + s->timeout, crc, libssh2_sftp_close_handle(h));
    return sink_close(&k, rc, mode);
}

int pd_ssh_download(pd_ssh *s, const char *remote, const char *local)
{
    int rc = sftp_start(s);
    if (rc == 0)
        rc = download_sftp(s, remote, local);
    else if (rc == 1)
        rc = download_shell(s, remote, local);
    return rc < 0 ? pd_err_wrap(rc, "downloading %s to %s", remote, local) : 0;
}
