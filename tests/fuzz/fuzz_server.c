/*
 * fuzz_server.c - the pserver's frame handling (src/ps/server.c) through its
 * public entry point: each input runs a fresh pd_server_run on a loopback
 * port in a thread, and one connection sends it the input's frames.
 *
 * Built twice:
 *   server_hello  (FUZZ_AUTH 0) the frames start the connection: the
 *                 handshake as an unauthenticated peer sees it
 *   server_auth   (FUZZ_AUTH 1) the harness first completes a valid
 *                 handshake with the job's secret, then sends the frames
 *
 * Input: one byte of options, then records:
 *   kind (u8) | a (u32) | b (u32) | n (u16) | n bytes
 * kind selects a frame type of the protocol (with a correct header and
 * checksum, so that the frames reach the server's handlers), a HELLO with
 * this job's id and model digest (payload: the client nonce), or raw bytes
 * sent as they are. Options: bit 0 two trainers (else one), bit 1 two
 * pservers (this is pserver 0), bit 2 async mode, bit 3 the Adam recipe
 * (else momentum), bit 4 the sparse port, bit 5 trainer id 1 in the
 * authenticated handshake (with two trainers).
 *
 * Checks, besides the sanitizers: everything the server sends is well
 * framed; an unauthenticated peer never gets anything but CHALLENGE and
 * ERROR; the server closes the connection after the peer's EOF (within
 * 10 s); a valid handshake is accepted.
 */
#include "fuzz_common.h"
#include "../../src/core/crypto.h"
#include "../../src/core/pd.h"
#include "../../src/lua/recipe.h"
#include "../../src/ps/layout.h"
#include "../../src/ps/proto.h"
#include "../../src/ps/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef FUZZ_AUTH
#define FUZZ_AUTH 0
#endif
#define WAIT_MS 10000

static const char *model_text =
    "data { train = 'x.csv' }\n"
    "cluster { ports_num = 1, ports_num_for_sparse = 1 }\n"
    "model = function(nn)\n"
    "  local x, u, y = nn.data('x', 3), nn.id('u', 10), nn.data('y', 2)\n"
    "  local h = nn.concat { nn.fc(x, 2), nn.embedding(u, 2), nn.embedding(nn.id('k'), 2, { min_count = 2 }) }\n"
    "  return nn.square_error_cost(nn.fc(h, 2), y)\n"
    "end\n";

static const uint16_t types[] = {
    PD_MSG_HELLO, PD_MSG_CHALLENGE, PD_MSG_AUTH, PD_MSG_WELCOME, PD_MSG_INIT_BLOCK, PD_MSG_INIT_ROWS,
    PD_MSG_INIT_DONE, PD_MSG_READY, PD_MSG_PUSH_BLOCK, PD_MSG_BLOCK_VALUES, PD_MSG_PULL_BLOCK,
    PD_MSG_PUSH_ROWS, PD_MSG_ROWS_DONE, PD_MSG_PULL_ROWS, PD_MSG_ROWS, PD_MSG_PASS_END, PD_MSG_PASS_DONE,
    PD_MSG_DECIDE, PD_MSG_DECIDED,
    PD_MSG_SAVE, PD_MSG_SAVED, PD_MSG_FINISH, PD_MSG_ERROR,
    PD_MSG_PULL_KEYS, PD_MSG_KEY_ROWS, PD_MSG_PUSH_KEYS, PD_MSG_DUMP_KEYS, PD_MSG_KEY_DUMP,
};
enum { KIND_GOOD_HELLO = PD_COUNT(types), KIND_RAW, NKINDS };

static pd_recipe recipes[2];            /* momentum, adam */
static uint8_t secret[PD_SECRET], job[PD_JOB_ID];

static void load_recipe(int i, const char *optimizer)
{
    char *name = pd_xasprintf("server%d.lua", i), *path = fz_path(name);
    char *text = pd_xasprintf("%soptimizer = %s\n", model_text, optimizer);
    fz_write(name, text, strlen(text));
    if (pd_recipe_load(&recipes[i], path, NULL, NULL, 0) < 0) fz_fail("%s", pd_err_msg());
    free(name);
    free(path);
    free(text);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fz_init();
    load_recipe(0, "nn.momentum { learning_rate = 0.1, momentum = 0.9 }");
    load_recipe(1, "nn.adam { learning_rate = 0.01 }");
    for (int i = 0; i < PD_SECRET; i++) secret[i] = (uint8_t)(i * 13 + 5);
    for (int i = 0; i < PD_JOB_ID; i++) job[i] = (uint8_t)(i * 7 + 3);
    return 0;
}

/* --- the server thread -------------------------------------------------------- */

typedef struct run {
    pd_recipe r;            /* a shallow copy: mode may differ */
    pd_server_opts o;
    volatile int stop;
    pthread_t thread;
    int port;
    uint8_t digest[32];     /* of the model, as trainers send it */
} run;

static void *serve(void *arg)
{
    run *x = arg;
    /* libFuzzer's -timeout timer (SIGALRM) goes to the fuzzing thread */
    sigset_t alarm;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alarm, NULL);
    /* SAVE writes checkpoints relative to the working directory: give this
     * thread its own, the scratch directory (the fuzzer's stays put) */
    if (unshare(CLONE_FS) != 0 || chdir(fz_dir()) != 0) fz_fail("cannot enter %s", fz_dir());
    pd_server_run(&x->r, &x->o);
    return NULL;
}

static void start(run *x, uint8_t opt)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) fz_fail("pipe: %s", strerror(errno));
    x->r = recipes[opt >> 3 & 1];
    x->r.mode = opt & 4 ? "async" : "sync";
    x->o = (pd_server_opts){.id = 0, .npservers = 1 + (opt >> 1 & 1), .ntrainers = 1 + (opt & 1),
                            .bind_addr = "127.0.0.1", .port = 0, .ready_fd = p[1], .stop = &x->stop};
    memcpy(x->o.secret, secret, PD_SECRET);
    memcpy(x->o.job, job, PD_JOB_ID);
    x->stop = 0;
    pd_layout lay;
    if (pd_layout_make(&lay, &x->r, x->o.npservers) < 0) fz_fail("%s", pd_err_msg());
    memcpy(x->digest, lay.digest, 32);
    pd_layout_free(&lay);
    if (pthread_create(&x->thread, NULL, serve, x) != 0) fz_fail("pthread_create failed");
    char line[32] = "";
    size_t got = 0;
    ssize_t k;
    while (got < sizeof line - 1 && ((k = read(p[0], line + got, sizeof line - 1 - got)) > 0 || (k < 0 && errno == EINTR)))
        if (k > 0) got += (size_t)k;
    close(p[0]);
    x->port = atoi(line);
    if (x->port <= 0) fz_fail("the pserver did not start: %s", pd_err_msg());
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fz_fail("socket: %s", strerror(errno));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        /* interrupted (libFuzzer's timer): the connection goes on; wait for it */
        int err = errno;
        socklen_t len = sizeof err;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (err == EINTR) {
            while (poll(&p, 1, WAIT_MS) < 0 && errno == EINTR) continue;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
        if (err) {
            close(fd);
            errno = err;
            return -1;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

/* Close without TIME_WAIT, so that a long run does not use up the ports. */
static void hang_up(int fd)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

/* Stop the server: set stop, and wake its epoll_wait with a connection. */
static void stop(run *x)
{
    x->stop = 1;
    int fd = dial(x->port);
    pthread_join(x->thread, NULL);
    if (fd >= 0) hang_up(fd);
}

/* --- the trainer's side ----------------------------------------------------------- */

static void handshake(pd_conn *c, const run *x, uint32_t trainer)
{
    uint8_t hello[PD_JOB_ID + 32 + PD_NONCE] = {0}, proof[PD_MAC];
    memcpy(hello, job, PD_JOB_ID);
    memcpy(hello + PD_JOB_ID, x->digest, 32);
    pd_conn_queue(c, PD_MSG_HELLO, 1, trainer, hello, sizeof hello, NULL, 0);
    pd_frame f;
    if (pd_conn_send_all(c, WAIT_MS / 1000.0) < 0 || pd_conn_recv(c, &f, WAIT_MS / 1000.0) < 0)
        fz_fail("handshake: %s", pd_err_msg());
    if (f.type != PD_MSG_CHALLENGE || f.len != PD_NONCE + PD_MAC)
        fz_fail("handshake: %s frame of %u bytes instead of CHALLENGE", pd_msg_name(f.type), f.len);
    uint8_t snonce[PD_NONCE], cnonce[PD_NONCE] = {0};
    memcpy(snonce, f.payload, PD_NONCE);
    pd_proof(secret, "pd-client", snonce, cnonce, job, proof);
    pd_conn_queue(c, PD_MSG_AUTH, 0, 0, proof, PD_MAC, NULL, 0);
    if (pd_conn_send_all(c, WAIT_MS / 1000.0) < 0 || pd_conn_recv(c, &f, WAIT_MS / 1000.0) < 0)
        fz_fail("handshake: %s", pd_err_msg());
    if (f.type != PD_MSG_WELCOME) fz_fail("handshake: %s frame instead of WELCOME", pd_msg_name(f.type));
}

/* Bytes to send. */
typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes;

static void append(bytes *out, const void *p, size_t n)
{
    PD_GROW(&out->p, &out->cap, out->n + n + 1);
    if (n) memcpy(out->p + out->n, p, n);
    out->n += n;
}

/* Turn the records of in into the bytes to send. Returns whether a SAVE was
 * among them (it writes files, to clean up after). */
static int encode(fz_in *in, bytes *out, const run *x)
{
    pd_conn fr;
    pd_conn_init(&fr, -1, PD_MAX_FRAME);
    int saved = 0;
    while (in->n > 0) {
        int kind = fz_u8(in) % NKINDS;
        uint32_t a = fz_u32(in), b = fz_u32(in);
        size_t n = fz_u16(in);
        n = PD_MIN(n, in->n);
        const uint8_t *p = in->p;
        in->p += n, in->n -= n;
        if (kind == KIND_RAW) {
            append(out, p, n);
            continue;
        }
        if (kind == KIND_GOOD_HELLO) {
            uint8_t hello[PD_JOB_ID + 32 + PD_NONCE] = {0};
            memcpy(hello, job, PD_JOB_ID);
            memcpy(hello + PD_JOB_ID, x->digest, 32);
            memcpy(hello + PD_JOB_ID + 32, p, PD_MIN(n, (size_t)PD_NONCE));
            pd_conn_queue(&fr, PD_MSG_HELLO, 1, b, hello, sizeof hello, NULL, 0);
        } else {
            saved |= types[kind] == PD_MSG_SAVE;
            pd_conn_queue(&fr, types[kind], a, b, p, n, NULL, 0);
        }
        append(out, fr.out, fr.out_len);
        fr.out_len = 0;
    }
    pd_conn_free(&fr);
    return saved;
}

/* Check what the server sent so far (c's socket). Returns 1 at EOF. */
static int take_replies(pd_conn *c, int authenticated)
{
    for (;;) {
        pd_frame f;
        int eof = 0;
        int rc = pd_conn_read(c, &f, &eof);
        if (rc < 0) fz_fail("the pserver sent a malformed frame: %s", pd_err_msg());
        if (rc == 0) return eof;
        if (!authenticated && f.type != PD_MSG_CHALLENGE && f.type != PD_MSG_ERROR)
            fz_fail("an unauthenticated peer got a %s frame", pd_msg_name(f.type));
    }
}

/* Send out's bytes on c, then EOF, reading replies until the server closes. */
static void converse(pd_conn *c, const bytes *out, int authenticated)
{
    size_t off = 0;
    int shut = 0;
    if (out->n == 0) {
        shutdown(c->fd, SHUT_WR);
        shut = 1;
    }
    for (;;) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN | (shut ? 0 : POLLOUT)};
        int n = poll(&p, 1, WAIT_MS);
        if (n == 0) fz_fail("the pserver neither answered nor closed the connection in %d s", WAIT_MS / 1000);
        if (n < 0) continue;
        if (p.revents & (POLLIN | POLLHUP | POLLERR) && take_replies(c, authenticated)) return;
        if (!shut && p.revents & POLLOUT) {
            ssize_t k = send(c->fd, out->p + off, out->n - off, MSG_NOSIGNAL);
            if (k > 0) off += (size_t)k;
            /* the server may drop us before it read everything */
            if ((k < 0 && errno != EAGAIN && errno != EINTR) || off == out->n) {
                shutdown(c->fd, SHUT_WR);
                shut = 1;
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    fz_in in = {data, size};
    uint8_t opt = fz_u8(&in);
    run *x = pd_xcalloc(1, sizeof *x);
    start(x, opt);
    bytes out = {0};
    int saved = encode(&in, &out, x);
    int fd = dial(x->port + (opt >> 4 & 1));
    if (fd < 0) fz_fail("cannot connect to the pserver: %s", strerror(errno));
    pd_conn c;
    pd_conn_init(&c, fd, PD_MAX_FRAME);
    if (FUZZ_AUTH) handshake(&c, x, (opt & 1) && (opt & 32) ? 1 : 0);
    converse(&c, &out, FUZZ_AUTH);
    c.fd = -1;
    hang_up(fd);
    pd_conn_free(&c);
    free(out.p);
    stop(x);
    free(x);
    if (saved) fz_clear();
    return 0;
}
