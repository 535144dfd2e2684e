/* test_ps.c - the pserver against bad peers: garbage, truncated, oversized
 * and mis-checksummed frames, unauthenticated pushes, a wrong secret, bad
 * block ids after authentication. It must drop each of them and go on
 * serving, and apply no update for any of them. */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/lua/recipe.h"
#include "../../src/launch/secret.h"
#include "../../src/nn/net.h"
#include "../../src/ps/client.h"
#include "../../src/ps/proto.h"
#include "../../src/ps/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *recipe_text =
    "data { train = 'x.csv' }\n"
    "model = function(nn)\n"
    "  local x, y = nn.data('x', 4), nn.data('y', 2)\n"
    "  return nn.square_error_cost(nn.fc(x, 2), y)\n"
    "end\n"
    "optimizer = nn.sgd { learning_rate = 0.1 }\n"
    "job { pservers = 1, trainers = 1 }\n";

static uint8_t secret[PD_SECRET], job[PD_JOB_ID];

static pid_t start_server(pd_recipe *r, int *port)
{
    int p[2];
    CHECK(pipe(p) == 0);
    for (int i = 0; i < PD_SECRET; i++) secret[i] = (uint8_t)(i * 7 + 1);
    pd_job_id(secret, job);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        pd_server_opts o = {.id = 0, .npservers = 1, .ntrainers = 1, .bind_addr = "127.0.0.1", .port = 0,
                            .ready_fd = p[1], .idle_timeout = 60};
        memcpy(o.secret, secret, PD_SECRET);
        memcpy(o.job, job, PD_JOB_ID);
        _exit(pd_server_run(r, &o) < 0 ? 1 : 0);
    }
    close(p[1]);
    char buf[32] = "";
    CHECK(read(p[0], buf, sizeof buf - 1) > 0);
    close(p[0]);
    *port = atoi(buf);
    CHECK(*port > 0);
    return pid;
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    return fd;
}

/* The server closes fd within 3 s (reads return 0 or an error). */
static int closed_by_server(int fd)
{
    char buf[4096];
    double end = pd_now() + 3;
    while (pd_now() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0) return 1;
        }
    }
    return 0;
}

static void header(uint8_t *h, int type, uint32_t len, uint32_t a, uint32_t b, uint32_t sum)
{
    uint32_t magic = PD_PROTO_MAGIC;
    memcpy(h, &magic, 4);
    h[4] = PD_PROTO_VERSION;
    h[5] = 0;
    h[6] = (uint8_t)type;
    h[7] = 0;
    memcpy(h + 8, &len, 4);
    memcpy(h + 12, &a, 4);
    memcpy(h + 16, &b, 4);
    memcpy(h + 20, &sum, 4);
}

/* A connection that completed the handshake (as trainer 0), proving the
 * secret `key`; with a wrong key the server must refuse and close. */
static int handshake_with(int port, const pd_layout *lay, const uint8_t *key, int expect_ok)
{
    pd_conn c;
    pd_conn_init(&c, dial(port), PD_MAX_FRAME);
    uint8_t hello[PD_JOB_ID + 32 + PD_NONCE], cn[PD_NONCE] = {1, 2, 3};
    memcpy(hello, job, PD_JOB_ID);
    memcpy(hello + PD_JOB_ID, lay->digest, 32);
    memcpy(hello + PD_JOB_ID + 32, cn, PD_NONCE);
    pd_conn_queue(&c, PD_MSG_HELLO, 1, 0, hello, sizeof hello, NULL, 0);
    CHECK(pd_conn_send_all(&c, 5) == 0);
    pd_frame f;
    CHECK(pd_conn_recv(&c, &f, 5) == 0);
    CHECK_EQ_INT(f.type, PD_MSG_CHALLENGE);
    uint8_t proof[PD_MAC];
    pd_proof(key, "pd-client", f.payload, cn, job, proof);
    pd_conn_queue(&c, PD_MSG_AUTH, 0, 0, proof, PD_MAC, NULL, 0);
    CHECK(pd_conn_send_all(&c, 5) == 0);
    CHECK(pd_conn_recv(&c, &f, 5) == 0);
    CHECK_EQ_INT(f.type, expect_ok ? PD_MSG_WELCOME : PD_MSG_ERROR);
    int fd = c.fd;
    c.fd = -1;
    pd_conn_free(&c);
    return fd;
}

static int authed(int port, const pd_layout *lay)
{
    return handshake_with(port, lay, secret, 1);
}

PD_TEST(pserver_survives_bad_peers)
{
    signal(SIGPIPE, SIG_IGN);
    char *path = pd_test_write("r.lua", recipe_text);
    pd_recipe r;
    CHECK(pd_recipe_load(&r, path, NULL, NULL, 0) == 0);
    pd_layout lay;
    CHECK(pd_layout_make(&lay, &r, 1) == 0);
    int port;
    pid_t server = start_server(&r, &port);

    /* garbage bytes */
    int fd = dial(port);
    CHECK(write(fd, "GET / HTTP/1.0\r\n\r\n and more garbage", 36) == 36);
    CHECK(closed_by_server(fd));
    close(fd);

    /* an oversized frame: refused on its header, nothing allocated */
    uint8_t h[PD_HEADER_SIZE];
    fd = dial(port);
    header(h, PD_MSG_HELLO, 100u << 20, 1, 0, 0);
    CHECK(write(fd, h, sizeof h) == (ssize_t)sizeof h);
    CHECK(closed_by_server(fd));
    close(fd);

    /* a truncated frame, then the peer goes away */
    fd = dial(port);
    header(h, PD_MSG_HELLO, 64, 1, 0, 0);
    CHECK(write(fd, h, sizeof h) == (ssize_t)sizeof h);
    CHECK(write(fd, "0123456789", 10) == 10);
    close(fd);

    /* an unknown message type, a wrong version */
    fd = dial(port);
    header(h, 77, 0, 0, 0, pd_checksum("", 0));
    CHECK(write(fd, h, sizeof h) == (ssize_t)sizeof h);
    CHECK(closed_by_server(fd));
    close(fd);

    /* an update pushed without authenticating: dropped, never applied */
    fd = dial(port);
    float grad[8];
    for (int i = 0; i < 8; i++) grad[i] = 1000.f;
    header(h, PD_MSG_PUSH_BLOCK, sizeof grad, 0, 1, pd_checksum(grad, sizeof grad));
    CHECK(write(fd, h, sizeof h) == (ssize_t)sizeof h);
    CHECK(write(fd, grad, sizeof grad) == (ssize_t)sizeof grad);
    CHECK(closed_by_server(fd));
    close(fd);

    /* a trainer with the wrong secret is refused */
    pd_endpoint ep = {"127.0.0.1", port};
    pd_client bad;
    uint8_t wrong[PD_SECRET];
    memset(wrong, 9, sizeof wrong);
    CHECK(pd_client_connect(&bad, &lay, &ep, 1, 0, wrong, job, 5) < 0);
    CHECK_CONTAINS(pd_err_msg(), "secret");
    /* one that ignores the server's proof and answers with a wrong one is
     * refused by the server, and its push never applied */
    fd = handshake_with(port, &lay, wrong, 0);
    header(h, PD_MSG_PUSH_BLOCK, sizeof grad, 0, 1, pd_checksum(grad, sizeof grad));
    if (write(fd, h, sizeof h) == (ssize_t)sizeof h && write(fd, grad, sizeof grad)) {}
    CHECK(closed_by_server(fd));
    close(fd);

    /* after authenticating: a bad checksum, a block this server lacks, a
     * gradient of the wrong length - each drops the connection */
    fd = authed(port, &lay);
    header(h, PD_MSG_PUSH_BLOCK, sizeof grad, 0, 1, pd_checksum(grad, sizeof grad) ^ 1);
    CHECK(write(fd, h, sizeof h) == (ssize_t)sizeof h);
    CHECK(write(fd, grad, sizeof grad) == (ssize_t)sizeof grad);
    CHECK(closed_by_server(fd));
    close(fd);
    fd = authed(port, &lay);
    header(h, PD_MSG_PULL_BLOCK, 0, 999, 0, pd_checksum("", 0));
    CHECK(write(fd, h, sizeof h) == (ssize_t)sizeof h);
    CHECK(closed_by_server(fd));
    close(fd);
    fd = authed(port, &lay);
    header(h, PD_MSG_INIT_BLOCK, 4, 0, 0, pd_checksum(grad, 4));
    CHECK(write(fd, h, sizeof h) == (ssize_t)sizeof h);
    CHECK(write(fd, grad, 4) == 4);
    CHECK(closed_by_server(fd));
    close(fd);

    /* the real trainer still gets served, and finds the values it put there */
    pd_net net;
    CHECK(pd_net_build(&net, &r, &pd_backend_cpu, 5) == 0);
    pd_param *w = pd_net_param(&net, "fc_0.w_0");
    float before[8];
    memcpy(before, w->w, sizeof before);
    pd_client good;
    CHECK(pd_client_connect(&good, &lay, &ep, 1, 0, secret, job, 5) == 0);
    CHECK(pd_client_init(&good, &net) == 0);
    memset(w->w, 0, sizeof before);
    CHECK(pd_client_fetch_all(&good, &net) == 0);
    for (int i = 0; i < 8; i++) CHECK_NEAR(w->w[i], before[i], 0);
    pd_client_finish(&good);
    pd_client_free(&good);

    int status;
    CHECK(waitpid(server, &status, 0) == server);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    pd_net_free(&net);
    pd_layout_free(&lay);
    pd_recipe_free(&r);
}

PD_TEST(checksum_detects_changes)
{
    uint8_t buf[100];
    for (int i = 0; i < 100; i++) buf[i] = (uint8_t)i;
    uint32_t a = pd_checksum(buf, 100);
    for (int i = 0; i < 100; i++) {
        buf[i] ^= 4;
        CHECK(pd_checksum(buf, 100) != a);
        buf[i] ^= 4;
    }
    CHECK(pd_checksum(buf, 99) != a);
}

PD_TEST(endpoints_parse_and_reject)
{
    pd_endpoint *e;
    int n;
    CHECK(pd_endpoints_parse("h1:7164,10.0.0.2:7200", 1, &e, &n) == 0);
    CHECK_EQ_INT(n, 2);
    CHECK_STR_EQ(e[1].host, "10.0.0.2");
    CHECK_EQ_INT(e[1].port, 7200);
    free(e);
    CHECK(pd_endpoints_parse("h1,h2", 7164, &e, &n) == 0);
    CHECK_EQ_INT(e[0].port, 7164);
    free(e);
    CHECK(pd_endpoints_parse("h1:99999", 7164, &e, &n) < 0);
    CHECK(pd_endpoints_parse("h1,,h2", 7164, &e, &n) < 0);
}
