/*
 * ps_bench.c - pserver dense push+pull bandwidth against raw loopback TCP,
 * both measured in this run.
 *
 *     build/musl/ps_bench [floats [steps]]   (default 10M floats: 40 MB each way; 10 steps)
 *
 * Raw: one process streams bytes to another over 127.0.0.1 (one TCP stream),
 * twice: out of a buffer of the model's size into another (as many bytes
 * as a step pushes, each read from memory and written to memory once, but
 * one way, where a step also pulls as many back and counts both; the
 * baseline of the target), and out of a 1 MB buffer into another (its
 * bytes in cache: the kernel's TCP alone, a faster stream than any model's
 * bytes can take; the baseline first used, still printed).
 * Pserver: one trainer pushes a gradient of N floats and pulls the new
 * values from one pserver (SGD), repeatedly; bandwidth = 2 * 4N bytes per
 * step, over TCP (the figure against the raw stream), then over the
 * pserver's Unix socket, without and with shared memory (what roles on
 * one host use: docs/protocol.md). Each is the
 * best of 3 runs (rounds of `steps` steps for the pserver; each raw stream
 * 4 times before them and 4 after, half of them with the pserver's socket
 * buffers, the best of the 8). Prints them and their ratios.
 */
#include "../src/core/log.h"
#include "../src/core/pd.h"
#include "../src/launch/secret.h"
#include "../src/lua/recipe.h"
#include "../src/nn/net.h"
#include "../src/ps/client.h"
#include "../src/ps/proto.h"
#include "../src/ps/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* One stream's rate (bytes/s): total bytes written from a buffer of span
 * bytes (1 MB at least), over and over, and read into another; tuned: with
 * the socket buffers the pserver's connections ask for (pd_tcp_buffers),
 * else the kernel's autotuning. */
static double raw_loopback(size_t total, size_t span, int tuned)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0) return 0;
    if (tuned) pd_tcp_buffers(ls); /* the accepted end inherits them */
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    socklen_t len = sizeof sa;
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(ls, 1) < 0) {
        close(ls);
        return 0;
    }
    getsockname(ls, (struct sockaddr *)&sa, &len);
    size_t chunk = 1 << 20;
    if (span < chunk) span = chunk;
    char *buf = malloc(span); /* each side's own (copied at the fork), touched before the clock starts */
    pid_t pid = buf ? fork() : -1;
    if (pid < 0) {
        free(buf);
        close(ls);
        return 0;
    }
    memset(buf, 1, span);
    if (pid == 0) {
        /* a byte from the receiver starts the stream: nothing is sent
         * into the socket buffers before its clock starts */
        char go;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (tuned) pd_tcp_buffers(fd);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || read(fd, &go, 1) != 1) _exit(1);
        for (size_t sent = 0, at = 0; sent < total;) {
            ssize_t n = write(fd, buf + at, PD_MIN(PD_MIN(chunk, total - sent), span - at));
            if (n <= 0) _exit(1);
            sent += (size_t)n;
            at = (at + (size_t)n) % span;
        }
        _exit(0);
    }
    int fd = accept(ls, NULL, NULL), status = 0;
    double t0 = pd_now();
    size_t got = 0, at = 0;
    if (fd >= 0 && write(fd, "g", 1) == 1)
        for (ssize_t n; got < total && (n = read(fd, buf + at, PD_MIN(chunk, span - at))) > 0;) {
            got += (size_t)n;
            at = (at + (size_t)n) % span;
        }
    double secs = pd_now() - t0;
    if (got != total) kill(pid, SIGKILL); /* it may wait to start, or to write */
    waitpid(pid, &status, 0);
    if (fd >= 0) close(fd);
    close(ls);
    free(buf);
    /* a stream cut short (or its sender failing) is not a rate */
    return got == total && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? got / secs : 0;
}

/* The best of 4 runs of each stream (2 with the pserver's socket buffers,
 * 2 with the kernel's: neither was faster in 9 pairs here), raised where
 * it beat *same or *cached: bytes of the model's size, then 1 MB in cache. */
static void best_streams(size_t bytes, double *same, double *cached)
{
    for (int i = 0; i < 4; i++) *same = PD_MAX(*same, raw_loopback(bytes * 10, bytes, i & 1));
    for (int i = 0; i < 4; i++) *cached = PD_MAX(*cached, raw_loopback(bytes * 10, 0, i & 1));
}

/* Push+pull rate (bytes/s) of one trainer and one pserver of this host,
 * over TCP or over the pserver's Unix socket (with or without shared
 * memory); *step: seconds per step. */
static double pserver_rate(pd_recipe *r, int unix_sockets, int shared_memory, int steps, double *step)
{
    r->unix_sockets = unix_sockets;
    r->shared_memory = shared_memory;
    uint8_t secret[PD_SECRET], job[PD_JOB_ID];
    pd_secret_new(secret);
    pd_job_id(secret, job);
    int p[2];
    if (pipe(p) < 0) return 0;
    pid_t server = fork();
    if (server == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* no orphan if the bench fails */
        close(p[0]);
        pd_server_opts o = {.id = 0, .npservers = 1, .ntrainers = 1, .bind_addr = "127.0.0.1", .ready_fd = p[1]};
        memcpy(o.secret, secret, PD_SECRET);
        memcpy(o.job, job, PD_JOB_ID);
        _exit(pd_server_run(r, &o) < 0);
    }
    close(p[1]);
    char buf[32] = "";
    ssize_t got = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    if (got <= 0) return 0;
    pd_endpoint ep = {"127.0.0.1", atoi(buf)};
    pd_layout lay;
    pd_layout_make(&lay, r, 1);
    pd_net net;
    pd_net_build(&net, r, &pd_backend_cpu, 1);
    pd_client c;
    double rate = 0, secs = 1e30;
    int connected = pd_client_connect(&c, &lay, &ep, 1, 0, secret, job, 30, NULL) == 0;
    int rc = connected ? pd_client_init(&c, &net) : -1;
    if (rc >= 0) rc = pd_client_step(&c, &net); /* a warm-up step */
    for (int round = 0; rc >= 0 && round < 3; round++) {
        double t0 = pd_now();
        for (int i = 0; rc >= 0 && i < steps; i++) rc = pd_client_step(&c, &net);
        secs = PD_MIN(secs, pd_now() - t0);
    }
    if (rc >= 0) {
        rate = 2.0 * 4 * (double)lay.params[0].rows * lay.params[0].cols * steps / secs;
        *step = secs / steps;
        pd_client_finish(&c);
    } else {
        fprintf(stderr, "%s\n", pd_err_msg());
        kill(server, SIGKILL);
    }
    if (connected) pd_client_free(&c);
    waitpid(server, NULL, 0);
    pd_net_free(&net);
    pd_layout_free(&lay);
    return rate;
}

int main(int argc, char **argv)
{
    long floats = argc > 1 ? atol(argv[1]) : 10000000;
    int cols = 10000, rows = (int)(floats / cols);
    char path[] = "/tmp/pd-ps-bench-XXXXXX";
    int fd = mkstemp(path);
    dprintf(fd, "data { train = 'x' }\nmodel = function(nn)\n  local x, y = nn.data('x', %d), nn.data('y', %d)\n"
                "  return nn.square_error_cost(nn.fc(x, %d, { bias = false }), y)\nend\n"
                "optimizer = nn.sgd { learning_rate = 0.001 }\njob { pservers = 1, trainers = 1 }\n",
            rows, cols, cols);
    close(fd);
    pd_recipe r;
    if (pd_recipe_load(&r, path, NULL, NULL, 0) < 0) {
        fprintf(stderr, "%s\n", pd_err_msg());
        return 1;
    }
    unlink(path);
    signal(SIGPIPE, SIG_IGN);
    pd_log_quiet(1);

    /* the best runs: a shared machine only ever makes a run slower. The
     * raw streams are short (a tenth of a second a run): 4 runs before the
     * pserver's and 4 after, so that one slow moment cannot make the
     * baseline */
    double raw = 0, cached = 0;
    best_streams((size_t)4 * floats, &raw, &cached);

    int steps = argc > 2 ? atoi(argv[2]) : 10;
    if (steps < 1) steps = 10;
    double tcp_step = 0, unix_step = 0, shm_step = 0;
    double tcp = pserver_rate(&r, 0, 0, steps, &tcp_step), local = pserver_rate(&r, 1, 0, steps, &unix_step);
    double shm = pserver_rate(&r, 1, 1, steps, &shm_step);
    if (tcp <= 0 || local <= 0 || shm <= 0) return 1;
    best_streams((size_t)4 * floats, &raw, &cached);
    if (raw <= 0 || cached <= 0) {
        fprintf(stderr, "ps_bench: every loopback stream failed: no baseline\n");
        return 1;
    }
    printf("loopback TCP, one stream of the same bytes (%ld MB buffers): %.0f MB/s\n", 4 * floats / 1000000, raw / 1e6);
    printf("loopback TCP, one stream of bytes in cache (1 MB buffers):  %.0f MB/s\n", cached / 1e6);
    printf("pserver push+pull of %ld floats (both ways counted): %.0f MB/s (%.1f ms per step)\n", floats, tcp / 1e6,
           tcp_step * 1e3);
    printf("frame checksum: %s\n", pd_frame_sum_kind());
    printf("ratio pserver / loopback, the same bytes: %.2f (target >= 0.8)\n", tcp / raw);
    printf("ratio pserver / loopback, bytes in cache: %.2f\n", tcp / cached);
    printf("the same over the pserver's Unix socket (roles on one host): %.0f MB/s (%.1f ms per step), "
           "%.2f of loopback TCP (the same bytes)\n", local / 1e6, unix_step * 1e3, local / raw);
    printf("and with shared memory beside it (the default there): %.0f MB/s (%.1f ms per step), "
           "%.2f of loopback TCP (the same bytes)\n", shm / 1e6, shm_step * 1e3, shm / raw);
    pd_recipe_free(&r);
    return 0;
}
