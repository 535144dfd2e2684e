/* test_ssh.c - the SSH layer: known_hosts, fingerprints and key files (pure
 * logic), failures that need no SSH server (refused, timeout, not SSH), and
 * ssh_live_* tests against a real sshd, which run only when
 * tests/integration/ssh_basic.sh sets PD_SSH_TEST_HOST and friends. */
#include "test.h"
#include "../../src/core/log.h"
#include "../../src/core/pd.h"
#include "../../src/launch/shell.h"
#include "../../src/launch/ssh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ssh-keygen -t ed25519 / ecdsa, with ssh-keygen -lf's fingerprints */
#define K1 "AAAAC3NzaC1lZDI1NTE5AAAAIEgiOFKj4itT3iTuc/j/2U4io7mZWTAQzIcqN9RPePdL"
#define K1_FP "SHA256:3Jj3ozboWICySd7GEVtG7vJFI01ch/I8vrNX1GReGxA"
#define K2 "AAAAC3NzaC1lZDI1NTE5AAAAIDJcX0FGSxD68HiUBG8GArv9O210L4pkyC7pQ+rCpKpa"
#define K2_FP "SHA256:89hGE5Tr52dNtBqRe9SeCkvnH5Ip01W61y4voQXK6VA"
#define K3 "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBfCsOw8b+XsRBhlH9Y4wlcqATVfI67+" \
           "UbnRooKtRw5eT8QMaLtwZ/d11MTTtHwb6eXn7byG0hlQStI/o8Syvj8="
#define K3_FP "SHA256:bZxKJkH3DogC4CSg1GNSf9jmrCAenp3zo3VIvcvCngg"
/* ssh-keygen -H of "[node1.example]:2222 ssh-ed25519 K1" */
#define K1_HASHED "|1|K5KUDziYw3szO9c6ks/QsY2sN10=|/8eo7rpBY1m46Wi1dY3cALUuEGQ= ssh-ed25519 " K1

/* Decode a base64 key into a malloc'd blob. */
static unsigned char *blob(const char *b64, size_t *len)
{
    unsigned char *out = malloc(strlen(b64));
    long n = pd_ssh_unbase64(b64, strlen(b64), out);
    CHECK(n > 0);
    *len = (size_t)n;
    return out;
}

/* known_hosts check of key b64 for host:port; returns the status. */
static int known(const char *text, const char *host, int port, const char *b64, pd_ssh_known *k)
{
    size_t len;
    unsigned char *b = blob(b64, &len);
    CHECK_EQ_INT(pd_ssh_known_check(text, host, port, b, len, k), 0);
    free(b);
    return k->status;
}

PD_TEST(ssh_base64_round_trip)
{
    const char *in[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *want[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < PD_COUNT(in); i++) {
        char *e = pd_ssh_base64((const unsigned char *)in[i], strlen(in[i]));
        CHECK_STR_EQ(e, want[i]);
        unsigned char d[16];
        long n = pd_ssh_unbase64(e, strlen(e), d);
        CHECK_EQ_INT(n, (long)strlen(in[i]));
        CHECK(memcmp(d, in[i], (size_t)n) == 0);
        free(e);
    }
    unsigned char d[16];
    CHECK_EQ_INT(pd_ssh_unbase64("Zm9v!", 5, d), -1);
    CHECK_EQ_INT(pd_ssh_unbase64("Zm9vY", 5, d), -1);
    CHECK_EQ_INT(pd_ssh_unbase64("Zg=x", 4, d), -1);
    CHECK_EQ_INT(pd_ssh_unbase64("Zm9vYg", 6, d), 4);  /* padding optional */
}

PD_TEST(ssh_fingerprint_is_ssh_keygens)
{
    const char *keys[] = {K1, K2, K3}, *fps[] = {K1_FP, K2_FP, K3_FP};
    for (int i = 0; i < 3; i++) {
        size_t len;
        unsigned char *b = blob(keys[i], &len);
        char fp[64];
        pd_ssh_fingerprint(b, len, fp);
        CHECK_STR_EQ(fp, fps[i]);
        free(b);
    }
}

PD_TEST(ssh_known_hosts_plain_entries)
{
    const char *text =
        "# a comment\n"
        "\n"
        "node0,10.0.0.1 ssh-ed25519 " K2 " old\n"
        "[node1]:2222 ssh-ed25519 " K2 "\n"
        "  node1   ecdsa-sha2-nistp256   " K3 "\r\n"
        "node2 ssh-ed25519 " K1 " comment with spaces\n"
        "node3 ssh-ed25519 not-base64!\n"
        "node3 ssh-rsa " K1 "\n"  /* type field disagrees with the blob: ignored */
        "@cert-authority *.example ssh-ed25519 " K1 "\n"
        "nodeX";
    pd_ssh_known k;
    /* an entry of the same type holds another key: changed, with its line */
    CHECK_EQ_INT(known(text, "node0", 22, K1, &k), PD_SSH_KNOWN_CHANGED);
    CHECK_EQ_INT(k.line, 3);
    CHECK_STR_EQ(k.fingerprint, K2_FP);
    CHECK_STR_EQ(k.types, "ssh-ed25519");
    CHECK_EQ_INT(known(text, "10.0.0.1", 22, K2, &k), PD_SSH_KNOWN_MATCH);
    CHECK_EQ_INT(known(text, "NODE0", 0, K2, &k), PD_SSH_KNOWN_MATCH);  /* port 0 is 22 */
    /* [host]:port entries are for that port only */
    CHECK_EQ_INT(known(text, "node1", 2222, K2, &k), PD_SSH_KNOWN_MATCH);
    CHECK_EQ_INT(known(text, "node1", 2223, K2, &k), PD_SSH_KNOWN_NONE);
    /* node1:22 has only an ecdsa key: another type */
    CHECK_EQ_INT(known(text, "node1", 22, K2, &k), PD_SSH_KNOWN_OTHER);
    CHECK_STR_EQ(k.types, "ecdsa-sha2-nistp256");
    CHECK_EQ_INT(known(text, "node1", 22, K3, &k), PD_SSH_KNOWN_MATCH);
    CHECK_EQ_INT(known(text, "node2", 22, K1, &k), PD_SSH_KNOWN_MATCH);
    CHECK_EQ_INT(known(text, "node3", 22, K1, &k), PD_SSH_KNOWN_NONE);
    CHECK_EQ_INT(known(text, "a.example", 22, K1, &k), PD_SSH_KNOWN_NONE);
    CHECK_EQ_INT(known(text, "nodex", 22, K1, &k), PD_SSH_KNOWN_NONE);
    CHECK_EQ_INT(known("", "node0", 22, K1, &k), PD_SSH_KNOWN_NONE);
    /* collecting only the types, before the handshake */
    CHECK_EQ_INT(pd_ssh_known_check(text, "node1", 22, NULL, 0, &k), 0);
    CHECK_STR_EQ(k.types, "ecdsa-sha2-nistp256");
    CHECK_EQ_INT(k.status, PD_SSH_KNOWN_NONE);
    unsigned char bad[3] = {0, 0, 9};
    CHECK_EQ_INT(pd_ssh_known_check(text, "node1", 22, bad, 3, &k), PD_EINVAL);
}

PD_TEST(ssh_known_hosts_patterns)
{
    const char *text = "*.prod.example,!db.prod.example ssh-ed25519 " K1 "\n"
                       "node?? ssh-ed25519 " K1 "\n"
                       "[10.0.0.*]:2222 ssh-ed25519 " K1 "\n";
    pd_ssh_known k;
    CHECK_EQ_INT(known(text, "web.prod.example", 22, K1, &k), PD_SSH_KNOWN_MATCH);
    CHECK_EQ_INT(known(text, "db.prod.example", 22, K1, &k), PD_SSH_KNOWN_NONE);
    CHECK_EQ_INT(known(text, "node12", 22, K1, &k), PD_SSH_KNOWN_MATCH);
    CHECK_EQ_INT(known(text, "node1", 22, K1, &k), PD_SSH_KNOWN_NONE);
    CHECK_EQ_INT(known(text, "10.0.0.7", 2222, K1, &k), PD_SSH_KNOWN_MATCH);
    CHECK_EQ_INT(known(text, "10.0.0.7", 22, K1, &k), PD_SSH_KNOWN_NONE);
}

PD_TEST(ssh_known_hosts_hashed_entries)
{
    pd_ssh_known k;
    CHECK_EQ_INT(known(K1_HASHED "\n", "node1.example", 2222, K1, &k), PD_SSH_KNOWN_MATCH);
    CHECK_EQ_INT(known(K1_HASHED "\n", "Node1.Example", 2222, K1, &k), PD_SSH_KNOWN_MATCH);
    CHECK_EQ_INT(known(K1_HASHED "\n", "node1.example", 22, K1, &k), PD_SSH_KNOWN_NONE);
    CHECK_EQ_INT(known(K1_HASHED "\n", "node2.example", 2222, K1, &k), PD_SSH_KNOWN_NONE);
    CHECK_EQ_INT(known(K1_HASHED "\n", "node1.example", 2222, K2, &k), PD_SSH_KNOWN_CHANGED);
    CHECK_STR_EQ(k.fingerprint, K1_FP);
    CHECK_EQ_INT(k.line, 1);
    CHECK_EQ_INT(known("|1|bad|hash ssh-ed25519 " K1 "\n", "node1.example", 2222, K1, &k),
                 PD_SSH_KNOWN_NONE);
}

PD_TEST(ssh_known_hosts_revoked_wins)
{
    const char *text = "node1 ssh-ed25519 " K1 "\n"
                       "@revoked * ssh-ed25519 " K1 "\n";
    pd_ssh_known k;
    CHECK_EQ_INT(known(text, "node1", 22, K1, &k), PD_SSH_KNOWN_REVOKED);
    CHECK_EQ_INT(known(text, "node2", 22, K2, &k), PD_SSH_KNOWN_NONE);
}

/* A private key file around an openssh-key-v1 blob with this cipher. */
static char *openssh_key(const char *cipher)
{
    unsigned char raw[128];
    size_t n = 0, cl = strlen(cipher);
    memcpy(raw, "openssh-key-v1", 15);
    n = 15;
    raw[n++] = 0, raw[n++] = 0, raw[n++] = 0, raw[n++] = (unsigned char)cl;
    memcpy(raw + n, cipher, cl);
    n += cl;
    memset(raw + n, 7, 40);
    n += 40;
    char *b = pd_ssh_base64(raw, n);
    char *text = pd_xasprintf("-----BEGIN OPENSSH PRIVATE KEY-----\n%.20s\n%s\n"
                              "-----END OPENSSH PRIVATE KEY-----\n", b, b + 20);
    free(b);
    return text;
}

PD_TEST(ssh_key_encrypted_formats)
{
    char *plain = openssh_key("none"), *enc = openssh_key("aes256-ctr");
    CHECK_EQ_INT(pd_ssh_key_encrypted(plain), 0);
    CHECK_EQ_INT(pd_ssh_key_encrypted(enc), 1);
    free(plain);
    free(enc);
    CHECK_EQ_INT(pd_ssh_key_encrypted("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n"), 0);
    CHECK_EQ_INT(pd_ssh_key_encrypted("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
                                      "DEK-Info: AES-128-CBC,00\n\nMIIE\n"), 1);
    CHECK_EQ_INT(pd_ssh_key_encrypted("-----BEGIN PRIVATE KEY-----\nMIIE\n"), 0);
    CHECK_EQ_INT(pd_ssh_key_encrypted("-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIE\n"), 1);
}

PD_TEST(ssh_quote_for_the_shell)
{
    char *q = pd_sh_quote("it's a $HOME `x`");
    CHECK_STR_EQ(q, "'it'\\''s a $HOME `x`'");
    free(q);
    q = pd_sh_quote("");
    CHECK_STR_EQ(q, "''");
    free(q);
}

/* What /bin/sh prints for `printf %s TEXT` in dir, with SCRATCH=/s set. */
static char *sh_print(const char *dir, const char *text)
{
    /* the text is meant for a shell: let one evaluate it */
    char *prog = pd_xasprintf("printf %%s %s", text), *q = pd_sh_quote(prog);
    char *cmd = pd_xasprintf("cd '%s' && SCRATCH=/s HOME=/h sh -c %s 2>&1", dir, q);
    FILE *f = popen(cmd, "r");
    char buf[512] = "";
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) pclose(f);
    free(prog);
    free(q);
    free(cmd);
    return pd_xstrdup(buf);
}

PD_TEST(shell_paths_expand_only_home_and_variables)
{
    const char *dir = pd_test_dir();
    static const struct { const char *in, *out; } ok[] = {
        {"/home/paddle", "/home/paddle"},
        {"~", "/h"},
        {"~/jobs", "/h/jobs"},
        {"$SCRATCH/paddle", "/s/paddle"},
        {"${SCRATCH}x", "/sx"},
        {"a;touch PWNED;b", "a;touch PWNED;b"},
        {"`touch PWNED`", "`touch PWNED`"},
        {"it's \"here\" & | > PWNED", "it's \"here\" & | > PWNED"},
        {"a~b", "a~b"},
    };
    for (size_t i = 0; i < PD_COUNT(ok); i++) {
        char *q;
        CHECK_EQ_INT(pd_sh_path(ok[i].in, "cluster.root_dir", &q), 0);
        char *got = sh_print(dir, q);
        CHECK_STR_EQ(got, ok[i].out);
        free(got);
        free(q);
    }
    char *pwned = pd_xasprintf("%s/PWNED", dir);
    CHECK(access(pwned, F_OK) != 0); /* nothing ran */
    free(pwned);
    static const char *const bad[] = {"$(touch PWNED)", "a$", "$1", "${X:-y}", "$$", "a\nb", "${X"};
    for (size_t i = 0; i < PD_COUNT(bad); i++) {
        char *q = NULL;
        CHECK(pd_sh_path(bad[i], "cluster.root_dir", &q) == PD_EINVAL);
        CHECK(strstr(pd_err_msg(), "cluster.root_dir") != NULL);
        CHECK(q == NULL);
    }
    /* a variable unset on the node stops the shell with a message naming it */
    char *q;
    CHECK_EQ_INT(pd_sh_path("$PD_SURELY_UNSET_VAR/x", "cluster.root_dir", &q), 0);
    char *got = sh_print(dir, q);
    CHECK(strstr(got, "PD_SURELY_UNSET_VAR") != NULL && strstr(got, "is not set on this node") != NULL);
    free(got);
    free(q);
}

/* --- failures that need no SSH server ------------------------------------------- */

/* A TCP listener on addr:0 with backlog; returns the fd, port in *port. */
static int listener(const char *addr, int backlog, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, addr, &a.sin_addr);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    socklen_t al = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &al);
    *port = ntohs(a.sin_port);
    if (backlog >= 0) CHECK(listen(fd, backlog) == 0);
    return fd;
}

/* Connect to host:port with timeout; returns rc, message in msg. */
static int try_connect(const char *host, int port, double timeout, double *secs)
{
    pd_host h = {.spec = NULL, .user = "paddle", .host = (char *)host, .port = port};
    pd_ssh_opts o = {.timeout = timeout, .known_hosts = "/dev/null"};
    pd_ssh *s = NULL;
    double t0 = pd_now();
    int rc = pd_ssh_connect(&s, &h, &o);
    *secs = pd_now() - t0;
    printf("    rc %d after %.2f s: %s\n", rc, *secs, rc < 0 ? pd_err_msg() : "connected");
    CHECK(s == NULL || rc == 0);
    pd_ssh_free(s);
    CHECK(rc == 0 || !strchr(pd_err_msg(), '\n'));
    return rc;
}

PD_TEST(ssh_unreachable_port_is_named)
{
    int port, fd = listener("127.0.0.9", -1, &port);
    close(fd);  /* a port nobody listens on */
    double secs;
    CHECK_EQ_INT(try_connect("127.0.0.9", port, 5, &secs), PD_ECONN);
    char want[64];
    snprintf(want, sizeof want, "ssh paddle@127.0.0.9:%d: ", port);
    CHECK_CONTAINS(pd_err_msg(), want);
    CHECK_CONTAINS(pd_err_msg(), "connection refused");
    CHECK(secs < 1);
}

PD_TEST(ssh_silent_server_times_out)
{
    /* accepts TCP (the kernel does) but never says a word */
    int port, fd = listener("127.0.0.1", 8, &port);
    double secs;
    CHECK_EQ_INT(try_connect("127.0.0.1", port, 0.5, &secs), PD_ETIMEDOUT);
    CHECK_CONTAINS(pd_err_msg(), "timed out after 0.5 s in the SSH handshake");
    CHECK(secs >= 0.45 && secs < 1.5);
    close(fd);
}

PD_TEST(ssh_tcp_connect_times_out)
{
    /* a full accept queue drops SYNs, as a firewall would */
    int port, fd = listener("127.0.0.1", 0, &port);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fill[4];
    for (int i = 0; i < 4; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fill[i], (struct sockaddr *)&a, sizeof a);
    }
    usleep(100000);
    double secs;
    int rc = try_connect("127.0.0.1", port, 0.6, &secs);
    CHECK_EQ_INT(rc, PD_ETIMEDOUT);
    CHECK(secs >= 0.55 && secs < 1.5);
    CHECK_CONTAINS(pd_err_msg(), "127.0.0.1");
    CHECK_CONTAINS(pd_err_msg(), "timed out after 0.6 s");
    for (int i = 0; i < 4; i++) close(fill[i]);
    close(fd);
}

PD_TEST(ssh_not_an_ssh_server)
{
    int port, fd = listener("127.0.0.1", 8, &port);
    pid_t pid = fork();
    if (pid == 0) {
        int c = accept(fd, NULL, NULL);
        const char *reply = "HTTP/1.1 400 Bad Request\r\n\r\n";
        if (write(c, reply, strlen(reply)) < 0) {}
        usleep(100000);
        _exit(0);
    }
    close(fd);
    double secs;
    int rc = try_connect("127.0.0.1", port, 3, &secs);
    waitpid(pid, NULL, 0);
    CHECK(rc == PD_ECONN || rc == PD_ESSH);
    CHECK_CONTAINS(pd_err_msg(), "handshake");
    CHECK(secs < 2);
}

/* --- against a real sshd (tests/integration/ssh_basic.sh) ------------------------ */

typedef struct live {
    pd_host host;
    pd_ssh_opts opts;
    char *keys[8];
    char spec[256];
} live;

/* Options from PD_SSH_TEST_*; 0 if not set (the test then does nothing). */
static int live_setup(live *l)
{
    const char *spec = getenv("PD_SSH_TEST_HOST");
    if (!spec || !*spec) {
        printf("    (skipped: needs PD_SSH_TEST_HOST; run by tests/integration/ssh_basic.sh)\n");
        return 0;
    }
    memset(l, 0, sizeof *l);
    snprintf(l->spec, sizeof l->spec, "%s", spec);
    char *at = strchr(l->spec, '@'), *hp = at ? at + 1 : l->spec;
    if (at) {
        *at = '\0';
        l->host.user = l->spec;
    }
    char *colon = strrchr(hp, ':');
    if (colon) {
        *colon = '\0';
        l->host.port = atoi(colon + 1);
    }
    l->host.host = hp;
    const char *keys = getenv("PD_SSH_TEST_KEYS");
    if (keys && *keys) {
        char *copy = pd_xstrdup(keys);
        for (char *p = strtok(copy, ":"); p && l->opts.nidentity < 8; p = strtok(NULL, ":"))
            l->keys[l->opts.nidentity++] = p;
        l->opts.identity_files = (const char *const *)l->keys;
    }
    const char *v;
    l->opts.known_hosts = getenv("PD_SSH_TEST_KNOWN");
    l->opts.use_agent = (v = getenv("PD_SSH_TEST_AGENT")) && *v == '1';
    l->opts.accept_new = (v = getenv("PD_SSH_TEST_ACCEPT_NEW")) && *v == '1';
    l->opts.timeout = (v = getenv("PD_SSH_TEST_TIMEOUT")) ? atof(v) : 10;
    pd_log_level(PD_LOG_DEBUG);
    return 1;
}

static pd_ssh *live_connect(live *l)
{
    pd_ssh *s;
    double t0 = pd_now();
    int rc = pd_ssh_connect(&s, &l->host, &l->opts);
    if (rc < 0) pd_test_fail(__FILE__, __LINE__, "connect: %s", pd_err_msg());
    printf("    connected to %s in %.1f ms\n", pd_ssh_name(s), (pd_now() - t0) * 1e3);
    return s;
}

/* Wait until the session's socket is ready (or 100 ms). */
static void live_wait(pd_ssh *s)
{
    struct pollfd p = {.fd = pd_ssh_fd(s), .events = (short)pd_ssh_events(s)};
    poll(&p, 1, 100);
}

/* Connect (PD_SSH_TEST_EXPECT: must fail with a message holding each
 * |-separated part, PD_SSH_TEST_EXPECT_RC: with that code); with
 * PD_SSH_TEST_RUN=1 also run a command (a remote shell start). */
PD_TEST(ssh_live_connect)
{
    live l;
    if (!live_setup(&l)) return;
    const char *expect = getenv("PD_SSH_TEST_EXPECT");
    if (expect && *expect) {
        pd_ssh *s = NULL;
        double t0 = pd_now();
        int rc = pd_ssh_connect(&s, &l.host, &l.opts);
        printf("    rc %d after %.2f s: %s\n", rc, pd_now() - t0, rc < 0 ? pd_err_msg() : "ok");
        CHECK(rc < 0);
        CHECK(s == NULL);
        CHECK(!strchr(pd_err_msg(), '\n'));
        const char *want_rc = getenv("PD_SSH_TEST_EXPECT_RC");
        if (want_rc && *want_rc) CHECK_EQ_INT(rc, atoi(want_rc));
        char *parts = pd_xstrdup(expect);
        for (char *p = strtok(parts, "|"); p; p = strtok(NULL, "|")) CHECK_CONTAINS(pd_err_msg(), p);
        free(parts);
        return;
    }
    pd_ssh *s = live_connect(&l);
    const char *run = getenv("PD_SSH_TEST_RUN");
    if (!run || *run != '1') {  /* connected and authenticated is the test */
        pd_ssh_free(s);
        return;
    }
    char *out = NULL;
    int status = -1;
    double t0 = pd_now();
    int rc = pd_ssh_run(s, "echo ok-$((6*7))", &out, &status);
    if (rc < 0) pd_test_fail(__FILE__, __LINE__, "run: %s", pd_err_msg());
    printf("    ran a command in %.1f ms\n", (pd_now() - t0) * 1e3);
    CHECK_STR_EQ(out, "ok-42\n");
    CHECK_EQ_INT(status, 0);
    free(out);
    pd_ssh_free(s);
}

/* Read a channel's stdout and stderr to their ends. */
static void drain(pd_ssh *s, pd_ssh_chan *c, char *out, size_t on, char *err, size_t en,
                  double *first_out)
{
    size_t ol = 0, el = 0;
    int eo = 0, ee = 0;
    double t0 = pd_now();
    while (!(eo && ee)) {
        CHECK(pd_now() - t0 < 10);
        ssize_t a = 0, b = 0;
        if (!eo) {
            a = pd_ssh_read(c, out + ol, on - 1 - ol, &eo);
            if (a < 0) pd_test_fail(__FILE__, __LINE__, "read: %s", pd_err_msg());
            if (a > 0 && ol == 0 && first_out) *first_out = pd_now();
            ol += (size_t)a;
        }
        if (!ee) {
            b = pd_ssh_read_err(c, err + el, en - 1 - el, &ee);
            if (b < 0) pd_test_fail(__FILE__, __LINE__, "read_err: %s", pd_err_msg());
            el += (size_t)b;
        }
        if (a == 0 && b == 0 && !(eo && ee)) live_wait(s);
    }
    out[ol] = err[el] = '\0';
}

PD_TEST(ssh_live_exec)
{
    live l;
    if (!live_setup(&l)) return;
    pd_ssh *s = live_connect(&l);
    char out[4096], err[4096];
    int status;
    char *sig;

    /* output streams while the command runs; stderr apart; exit status */
    pd_ssh_chan *c;
    double t0 = pd_now(), first = 0;
    CHECK_EQ_INT(pd_ssh_exec(s, "echo first; sleep 1; echo second; echo err1 >&2; exit 3", &c), 0);
    drain(s, c, out, sizeof out, err, sizeof err, &first);
    double end = pd_now();
    printf("    first line after %.0f ms, end after %.0f ms\n", (first - t0) * 1e3, (end - t0) * 1e3);
    CHECK(first > 0 && end - first >= 0.9);  /* it came while the command ran */
    CHECK_STR_EQ(out, "first\nsecond\n");
    CHECK_STR_EQ(err, "err1\n");
    CHECK_EQ_INT(pd_ssh_close_chan(c, &status, &sig), 0);
    CHECK_EQ_INT(status, 3);
    CHECK(sig == NULL);

    /* stdin reaches the command, and so does its EOF */
    CHECK_EQ_INT(pd_ssh_exec(s, "cat; echo after-eof", &c), 0);
    const char *msg = "hello\n";
    size_t off = 0;
    while (off < strlen(msg)) {
        ssize_t w = pd_ssh_write(c, msg + off, strlen(msg) - off);
        CHECK(w >= 0);
        off += (size_t)w;
        if (w == 0) live_wait(s);
    }
    CHECK_EQ_INT(pd_ssh_send_eof(c), 0);
    drain(s, c, out, sizeof out, err, sizeof err, NULL);
    CHECK_STR_EQ(out, "hello\nafter-eof\n");
    CHECK_EQ_INT(pd_ssh_close_chan(c, &status, &sig), 0);
    CHECK_EQ_INT(status, 0);

    /* killed by a signal */
    CHECK_EQ_INT(pd_ssh_exec(s, "kill -TERM $$", &c), 0);
    drain(s, c, out, sizeof out, err, sizeof err, NULL);
    CHECK_EQ_INT(pd_ssh_close_chan(c, &status, &sig), 0);
    CHECK_STR_EQ(sig, "TERM");
    CHECK_EQ_INT(status, -1);
    free(sig);

    /* several channels at once on one session */
    pd_ssh_chan *cs[4];
    for (int i = 0; i < 4; i++) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "sleep 0.2; echo chan-%d", i);
        CHECK_EQ_INT(pd_ssh_exec(s, cmd, &cs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        char want[32];
        snprintf(want, sizeof want, "chan-%d\n", i);
        drain(s, cs[i], out, sizeof out, err, sizeof err, NULL);
        CHECK_STR_EQ(out, want);
        CHECK_EQ_INT(pd_ssh_close_chan(cs[i], &status, NULL), 0);
        CHECK_EQ_INT(status, 0);
    }

    /* run: big output, and a failure with its stderr in the message */
    char *big = NULL;
    t0 = pd_now();
    CHECK_EQ_INT(pd_ssh_run(s, "head -c 3000000 /dev/zero | tr '\\0' x", &big, &status), 0);
    printf("    3 MB of output in %.0f ms\n", (pd_now() - t0) * 1e3);
    CHECK_EQ_INT(strlen(big), 3000000);
    CHECK(big[0] == 'x' && big[2999999] == 'x');
    free(big);
    char *o2 = NULL;
    CHECK_EQ_INT(pd_ssh_run(s, "echo partial; echo oops >&2; exit 5", &o2, &status), PD_ECHILD);
    printf("    %s\n", pd_err_msg());
    CHECK_EQ_INT(status, 5);
    CHECK_STR_EQ(o2, "partial\n");
    CHECK_CONTAINS(pd_err_msg(), "exited with status 5: oops");
    CHECK_CONTAINS(pd_err_msg(), pd_ssh_name(s));
    free(o2);

    /* freeing the session abandons a running command: it sees EOF */
    pd_ssh *s3 = live_connect(&l);
    char *marker = pd_xasprintf("%s/abandoned", pd_test_dir());
    char *cmd = pd_xasprintf("cat >/dev/null; echo ended > %s", marker);
    CHECK_EQ_INT(pd_ssh_exec(s3, cmd, &c), 0);
    pd_ssh_free(s3);  /* c with it */
    t0 = pd_now();
    while (access(marker, F_OK) != 0 && pd_now() - t0 < 10) usleep(20000);
    printf("    abandoned command ended %.0f ms after the session was freed\n", (pd_now() - t0) * 1e3);
    CHECK(access(marker, F_OK) == 0);  /* the test runs on the ssh host */
    free(cmd);
    free(marker);

    /* run's timeout bounds silence, and the session stays usable */
    l.opts.timeout = 0.5;
    pd_ssh *s2 = live_connect(&l);
    t0 = pd_now();
    CHECK_EQ_INT(pd_ssh_run(s2, "sleep 3", NULL, NULL), PD_ETIMEDOUT);
    printf("    %s (%.2f s)\n", pd_err_msg(), pd_now() - t0);
    CHECK(pd_now() - t0 < 2.5);
    pd_ssh_free(s2);
    pd_ssh_free(s);
}

static void *connect_thread(void *arg)
{
    live *l = arg;
    pd_ssh *s;
    int rc = pd_ssh_connect(&s, &l->host, &l->opts);
    if (rc < 0) printf("    thread: %s\n", pd_err_msg());
    else pd_ssh_free(s);
    return (void *)(intptr_t)rc;
}

/* Sessions connect in parallel threads, as the launcher does. */
PD_TEST(ssh_live_parallel)
{
    live l;
    if (!live_setup(&l)) return;
    pd_log_level(PD_LOG_INFO);
    double t0 = pd_now();
    pd_ssh *s = live_connect(&l);
    pd_ssh_free(s);
    double one = pd_now() - t0;
    pthread_t t[8];
    t0 = pd_now();
    for (int i = 0; i < 8; i++) CHECK_EQ_INT(pthread_create(&t[i], NULL, connect_thread, &l), 0);
    for (int i = 0; i < 8; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        CHECK_EQ_INT((intptr_t)rc, 0);
    }
    printf("    one connect %.0f ms, 8 in parallel %.0f ms\n", one * 1e3, (pd_now() - t0) * 1e3);
}

/* A local file of n pseudo-random bytes. */
static char *make_file(const char *name, size_t n, unsigned seed)
{
    char *path = pd_xasprintf("%s/%s", pd_test_dir(), name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        fputc((int)(seed >> 16 & 0xff), f);
    }
    fclose(f);
    return path;
}

static int same_file(const char *a, const char *b)
{
    size_t la, lb;
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    CHECK(fa && fb);
    int same = 1;
    for (;;) {
        char ba[65536], bb[65536];
        la = fread(ba, 1, sizeof ba, fa);
        lb = fread(bb, 1, sizeof bb, fb);
        if (la != lb || memcmp(ba, bb, la) != 0) {
            same = 0;
            break;
        }
        if (la == 0) break;
    }
    fclose(fa);
    fclose(fb);
    return same;
}

PD_TEST(ssh_live_transfer)
{
    live l;
    if (!live_setup(&l)) return;
    const char *dir = getenv("PD_SSH_TEST_DIR");
    CHECK(dir && *dir);
    pd_ssh *s = live_connect(&l);
    size_t n = 6 << 20;
    char *a = make_file("a.bin", n, 1), *b = make_file("b.bin", 1000, 2);
    char *remote = pd_xasprintf("%s/sub dir/it's.bin", dir);
    char *back = pd_xasprintf("%s/back.bin", pd_test_dir());
    char *q = pd_sh_quote(dir), *cmd = pd_xasprintf("mkdir -p %s/'sub dir'", q);
    CHECK_EQ_INT(pd_ssh_run(s, cmd, NULL, NULL), 0);
    free(cmd);

    double t0 = pd_now();
    CHECK_EQ_INT(pd_ssh_run(s, "true", NULL, NULL), 0);
    printf("    a remote command (shell start) %.0f ms\n", (pd_now() - t0) * 1e3);
    t0 = pd_now();
    if (pd_ssh_upload(s, b, remote, 0644) < 0) pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
    printf("    first upload (1000 bytes, starts SFTP if any) %.0f ms\n", (pd_now() - t0) * 1e3);
    t0 = pd_now();
    if (pd_ssh_upload(s, a, remote, 0751) < 0) pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
    double t1 = pd_now();
    if (pd_ssh_download(s, remote, back) < 0) pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
    double t2 = pd_now();
    printf("    6 MiB: upload %.0f ms (%.0f MB/s), download %.0f ms (%.0f MB/s)\n", (t1 - t0) * 1e3,
           n / 1e6 / (t1 - t0), (t2 - t1) * 1e3, n / 1e6 / (t2 - t1));
    CHECK(same_file(a, back));
    struct stat st;
    CHECK_EQ_INT(stat(back, &st), 0);
    CHECK_EQ_INT(st.st_mode & 07777, 0751);
    char *rq = pd_sh_quote(remote), *out = NULL;
    cmd = pd_xasprintf("stat -c %%a %s; ls -a %s/'sub dir' | wc -l", rq, q);
    CHECK_EQ_INT(pd_ssh_run(s, cmd, &out, NULL), 0);
    CHECK_STR_EQ(out, "751\n3\n");  /* ., .. and the file: no temporary left */
    free(out);

    /* replacing the file, and an empty one, with another mode */
    CHECK_EQ_INT(pd_ssh_upload(s, b, remote, 0600), 0);
    CHECK_EQ_INT(pd_ssh_download(s, remote, back), 0);
    CHECK(same_file(b, back));
    CHECK_EQ_INT(stat(back, &st), 0);
    CHECK_EQ_INT(st.st_mode & 07777, 0600);
    char *empty = make_file("empty", 0, 3);
    CHECK_EQ_INT(pd_ssh_upload(s, empty, remote, 0644), 0);
    CHECK_EQ_INT(pd_ssh_download(s, remote, back), 0);
    CHECK_EQ_INT(stat(back, &st), 0);
    CHECK_EQ_INT(st.st_size, 0);
    CHECK_EQ_INT(pd_ssh_run(s, cmd, &out, NULL), 0);
    CHECK_STR_EQ(out, "644\n3\n");
    free(out);

    /* failures name the host and the path */
    char *bad = pd_xasprintf("%s/no-such-dir/x", dir);
    CHECK(pd_ssh_upload(s, a, bad, 0644) < 0);
    printf("    %s\n", pd_err_msg());
    CHECK_CONTAINS(pd_err_msg(), pd_ssh_name(s));
    CHECK_CONTAINS(pd_err_msg(), "no-such-dir");
    CHECK(pd_ssh_download(s, bad, back) < 0);
    printf("    %s\n", pd_err_msg());
    CHECK_CONTAINS(pd_err_msg(), "no-such-dir/x");
    CHECK(pd_ssh_upload(s, "/no/such/local", remote, 0644) < 0);
    CHECK_CONTAINS(pd_err_msg(), "/no/such/local");
    /* the session still works */
    CHECK_EQ_INT(pd_ssh_run(s, "true", NULL, NULL), 0);

    free(bad);
    free(cmd);
    free(rq);
    free(q);
    free(a);
    free(b);
    free(empty);
    free(remote);
    free(back);
    pd_ssh_free(s);
}

/* pd_ssh_write_all into a command that reads late: the bytes arrive whole,
 * and no more than the cap (256 KB) waits unacknowledged in sshd, which
 * would hold its whole 2 MB window. Round 0 stops reading for 2 s after
 * sshd acknowledged data: the cap stays, and the writer sleeps through
 * the pause (CPU time well under the 1 s a spin past the 1 s doubling
 * timer would burn). Round 1 starts at 64 KB, below the 96 KB that sshd
 * waits for before it acknowledges: after a second without an
 * acknowledgement the cap doubles, and data flows; then it stays. */
PD_TEST(ssh_live_bulk_write)
{
    live l;
    if (!live_setup(&l)) return;
    const char *dir = getenv("PD_SSH_TEST_DIR");
    CHECK(dir && *dir);
    pd_ssh *s = live_connect(&l);
    size_t n = 4 << 20, piece = 32 << 10;
    char *local = make_file("bulk.bin", n, 7);
    char *data = pd_xmalloc(n);
    FILE *f = fopen(local, "rb");
    CHECK(f && fread(data, 1, n, f) == n);
    fclose(f);
    for (int round = 0; round < 2; round++) {
        char *remote = pd_xasprintf("%s/bulk%d.bin", dir, round), *q = pd_sh_quote(remote);
        char *cmd = round == 0 ? pd_xasprintf("{ head -c 1048576 && sleep 2 && cat; } > %s", q)
                               : pd_xasprintf("cat > %s", q);
        pd_ssh_chan *c;
        CHECK_EQ_INT(pd_ssh_exec(s, cmd, &c), 0);
        if (round == 1) CHECK_EQ_INT((int)pd_ssh_in_flight(c, 64 << 10), 256 << 10);
        size_t most = 0;
        double t0 = pd_now();
        struct timespec cpu0, cpu1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
        for (size_t off = 0; off < n; off += piece) {
            if (pd_ssh_write_all(c, data + off, piece) < 0) pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
            size_t out = pd_ssh_unacked(c);
            CHECK(out <= pd_ssh_in_flight(c, 0));
            most = PD_MAX(most, out);
        }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
        double cpu = (double)(cpu1.tv_sec - cpu0.tv_sec) + (double)(cpu1.tv_nsec - cpu0.tv_nsec) * 1e-9;
        size_t cap = pd_ssh_in_flight(c, 0);
        printf("    round %d: 4 MiB in %.0f ms (%.0f ms of CPU), at most %zu bytes unacknowledged, cap %zu\n",
               round, (pd_now() - t0) * 1e3, cpu * 1e3, most, cap);
        if (round == 0) {
            CHECK_EQ_INT((int)cap, 256 << 10);
            CHECK(most > (192 << 10)); /* the reader's pauses filled the cap */
            CHECK(cpu < 0.5);
        } else {
            /* doubled past sshd's 96 KB, once (twice if the first
             * acknowledgement took over a second) */
            CHECK(cap == (128 << 10) || cap == (256 << 10));
        }
        int status = -1;
        CHECK_EQ_INT(pd_ssh_close_chan(c, &status, NULL), 0);
        CHECK_EQ_INT(status, 0);
        CHECK(same_file(local, remote));
        free(cmd);
        free(q);
        free(remote);
    }
    free(data);
    free(local);
    pd_ssh_free(s);
}
