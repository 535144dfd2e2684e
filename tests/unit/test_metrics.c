/* test_metrics.c - the Prometheus text helpers, the launcher's reading of
 * trainer lines, the /metrics responder over a real socket, and the loss
 * curves written and read back, and early stopping resumed from them. */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/launch/jobstats.h"
#include "../../src/launch/plan.h"
#include "../../src/nn/curves.h"
#include "../../src/nn/keep.h"
#include "../../src/ps/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

PD_TEST(prom_values_and_labels)
{
    pd_buf b = {0};
    pd_prom_head(&b, "x_total", "counter", "Things.");
    pd_prom_val(&b, "x_total", NULL, 42);
    pd_prom_val(&b, "y", "k=\"v\"", 0.25);
    pd_prom_val(&b, "z", NULL, NAN);
    pd_prom_val(&b, "w", NULL, -INFINITY);
    pd_prom_val(&b, "t", NULL, 1795474490.5);
    CHECK_STR_EQ(b.s, "# HELP x_total Things.\n# TYPE x_total counter\nx_total 42\ny{k=\"v\"} 0.25\nz NaN\nw -Inf\n"
                      "t 1795474490.5\n");
    free(b.s);
    char esc[16];
    pd_prom_escape(esc, sizeof esc, "a\"b\\c\nd");
    CHECK_STR_EQ(esc, "a\\\"b\\\\c\\nd");
    pd_prom_escape(esc, 6, "abcdefgh");
    CHECK(strlen(esc) < 6);
}

static pd_recipe small_recipe(pd_metric_desc *m)
{
    pd_recipe r;
    memset(&r, 0, sizeof r);
    r.path = "dir/demo.lua";
    r.trainers = 2;
    r.batch_size = 20;
    r.passes = 7;
    r.log_period = 10;
    r.nmetrics = 1;
    r.metrics = m;
    return r;
}

PD_TEST(jobstats_reads_trainer_lines)
{
    pd_metric_desc m = {.name = "auc"};
    pd_recipe r = small_recipe(&m);
    pd_jobstats *j = pd_jobstats_new(&r);
    const char *h = "I1123 22:52:27.024050 31931 driver.c:199] ";
    char line[256];
    snprintf(line, sizeof line, "%strainer 0: parameters ready; training 7 passes", h);
    pd_jobstats_line(j, PD_ROLE_TRAINER, 0, line);
    snprintf(line, sizeof line, "%spass 0, batch 10, cost 670.5, 133975 samples/s", h);
    pd_jobstats_line(j, PD_ROLE_TRAINER, 0, line);
    snprintf(line, sizeof line, "%spass 0 done: 202 samples in 0.01 s (37933 samples/s), train cost 664.549, "
                                "test cost 260.5, auc 0.75, test rmse 16.1", h);
    pd_jobstats_line(j, PD_ROLE_TRAINER, 0, line);
    snprintf(line, sizeof line, "%spass 1, batch 10, cost 600, 1 samples/s", h);
    pd_jobstats_line(j, PD_ROLE_TRAINER, 0, line);
    /* a node agent's line for trainer 1; a pserver's and an unknown trainer's are ignored */
    snprintf(line, sizeof line, "[trainer 1] %spass 0, batch 10, cost 5, 1 samples/s", h);
    pd_jobstats_node_line(j, line);
    pd_jobstats_line(j, PD_ROLE_PSERVER, 0, "pass 9, batch 9, cost 9");
    pd_jobstats_line(j, PD_ROLE_TRAINER, 7, "pass 9, batch 9, cost 9");
    pd_buf b = {0};
    pd_jobstats_write(j, &b);
    CHECK_CONTAINS(b.s, "\npaddle_job_step 21\n");            /* 11 batches of pass 0, 10 of pass 1 */
    CHECK_CONTAINS(b.s, "\npaddle_job_samples_total 202\n");
    CHECK_CONTAINS(b.s, "\npaddle_trainer_pass{trainer=\"0\"} 1\n");
    CHECK_CONTAINS(b.s, "\npaddle_trainer_step{trainer=\"1\"} 10\n");
    CHECK_CONTAINS(b.s, "\npaddle_trainer_train_cost{trainer=\"0\"} 600\n");
    CHECK_CONTAINS(b.s, "\npaddle_trainer_train_cost{trainer=\"1\"} 5\n");
    CHECK_CONTAINS(b.s, "\npaddle_job_test_cost 260.5\n");
    CHECK_CONTAINS(b.s, "\npaddle_job_test_metric{metric=\"auc\"} 0.75\n");
    CHECK_CONTAINS(b.s, "\npaddle_job_trainers_training 2\n");
    CHECK(!strstr(b.s, "checkpoint"));
    free(b.s);
    snprintf(line, sizeof line, "%strainer 0 finished: 22 steps, 0.0 MB sent", h);
    pd_jobstats_line(j, PD_ROLE_TRAINER, 0, line);
    snprintf(line, sizeof line, "%scheckpoint of step 20 complete (pass 1, batch 9) in 0.01 s", h);
    pd_jobstats_line(j, PD_ROLE_TRAINER, 1, line);
    b = (pd_buf){0};
    pd_jobstats_write(j, &b);
    CHECK_CONTAINS(b.s, "\npaddle_job_trainers_finished 1\n");
    CHECK_CONTAINS(b.s, "\npaddle_job_checkpoint_step 20\n");
    free(b.s);
    pd_jobstats_free(j);
}

static void body(void *ctx, pd_buf *out)
{
    (*(int *)ctx)++;
    pd_buf_put(out, "# HELP a A.\n# TYPE a gauge\na 1\n");
}

/* Send req to port, serving h until the answer is complete; the answer. */
static char *ask(pd_http *h, int port, const char *req, size_t split)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    size_t n = strlen(req), first = split && split < n ? split : n;
    CHECK(send(fd, req, first, MSG_NOSIGNAL) == (ssize_t)first);
    for (int i = 0; i < 5; i++) pd_http_serve(h); /* part of a request: nothing answered, nothing blocks */
    if (first < n) send(fd, req + first, n - first, MSG_NOSIGNAL);
    pd_buf got = {0};
    pd_buf_put(&got, "");
    double until = pd_now() + 5;
    while (pd_now() < until) {
        struct pollfd p = {.fd = pd_http_fd(h), .events = POLLIN};
        poll(&p, 1, 20);
        pd_http_serve(h);
        char buf[4096];
        ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k > 0) pd_buf_putn(&got, buf, (size_t)k);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
    }
    close(fd);
    return got.s;
}

PD_TEST(http_answers_metrics_and_refuses_the_rest)
{
    pd_http h;
    int calls = 0, port = 0;
    for (int tries = 0; tries < 50 && !port; tries++) {
        int p = 30000 + (int)((unsigned)getpid() * 7919u + (unsigned)tries * 104729u) % 30000;
        if (pd_http_open(&h, "127.0.0.1", p, body, &calls) == 0) port = p;
        else pd_http_close(&h);
    }
    if (!port) pd_test_skip("no free loopback port");
    char *a = ask(&h, port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 9);
    CHECK_CONTAINS(a, "HTTP/1.0 200 OK\r\n");
    CHECK_CONTAINS(a, "Content-Type: text/plain; version=0.0.4");
    CHECK_CONTAINS(a, "Content-Length: 31\r\n");
    CHECK_CONTAINS(a, "\r\n\r\n# HELP a A.\n# TYPE a gauge\na 1\n");
    CHECK_EQ_INT(calls, 1);
    free(a);
    a = ask(&h, port, "GET /other HTTP/1.0\r\n\r\n", 0);
    CHECK_CONTAINS(a, "404 Not Found");
    free(a);
    a = ask(&h, port, "DELETE /metrics HTTP/1.0\r\n\r\n", 0);
    CHECK_CONTAINS(a, "405 Method Not Allowed");
    free(a);
    char *big = pd_xmalloc(PD_HTTP_MAX_REQ + 100);
    memcpy(big, "GET /metrics HTTP/1.0\r\nX: ", 26);
    memset(big + 26, 'a', PD_HTTP_MAX_REQ + 50);
    big[PD_HTTP_MAX_REQ + 76] = '\0';
    a = ask(&h, port, big, 0);
    CHECK_CONTAINS(a, "431");
    free(a);
    free(big);
    CHECK_EQ_INT(calls, 1);
    pd_http_close(&h);
    pd_http_close(&h); /* twice: harmless */
}

PD_TEST(curves_write_svg_and_read_back)
{
    pd_metric_desc m = {.name = "auc"};
    pd_recipe r = small_recipe(&m);
    pd_curves c;
    pd_curves_init(&c, &r);
    for (int s = 1; s <= 30; s++) pd_curves_train(&c, s * 10, 1000.0 / s);
    pd_curves_train(&c, 310, NAN); /* skipped */
    for (int p = 0; p < 3; p++) {
        double auc = 0.5 + 0.1 * p;
        pd_curves_test(&c, (p + 1) * 100, p, 500.0 / (p + 1), &auc);
    }
    const char *dir = pd_test_dir();
    CHECK_EQ_INT(pd_curves_write(&c, dir), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/curves.svg", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    static char svg[200000];
    size_t n = fread(svg, 1, sizeof svg - 1, f);
    svg[n] = '\0';
    fclose(f);
    CHECK(strncmp(svg, "<?xml", 5) == 0);
    CHECK_CONTAINS(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"");
    CHECK_CONTAINS(svg, "demo.lua: pass 2, step 300, test cost 166.6"); /* 166.67 (166.66 under valgrind) */
    CHECK_CONTAINS(svg, ", auc 0.");
    CHECK_CONTAINS(svg, "cost (log scale)");
    CHECK_CONTAINS(svg, ">test metric");
    CHECK_CONTAINS(svg, "</svg>\n");
    snprintf(path, sizeof path, "%s/curves.svg.partial-%ld", dir, (long)getpid());
    CHECK(access(path, F_OK) != 0);
    pd_curves back;
    pd_curves_init(&back, &r);
    pd_curves_load(&back, dir, 200); /* a resume at step 200: later points dropped */
    CHECK_EQ_INT(back.ntrain, 20);
    CHECK_EQ_INT(back.ntest, 2);
    CHECK_NEAR(back.test[4 + 3], 0.6, 1e-6);
    CHECK_NEAR(back.train[2 * 19 + 1], 1000.0 / 20, 1e-6);
    pd_curves_free(&back);
    pd_curves_free(&c);
}

/* A resumed run counts early stopping on from the passes of the life before
 * (as its curves hold them), links the best of them, and keeps removing the
 * oldest of the passes that life kept. */
PD_TEST(keep_resume_counts_on_from_the_last_life)
{
    pd_recipe r;
    memset(&r, 0, sizeof r);
    r.passes = 20;
    r.early_stop = 3;
    r.keep_models = 2;
    char dir[400], path[512];
    snprintf(dir, sizeof dir, "%s", pd_test_dir());
    r.save_dir = dir;
    /* the last life kept passes 2 (the best), 4 and 5, and went on to 7
     * past the checkpoint this life starts from (pass 6) */
    const int kept[] = {2, 4, 5, 7};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/pass-%05d", r.save_dir, kept[i]);
        CHECK_EQ_INT(mkdir(path, 0755), 0);
    }
    /* a life before the last one tested pass 2 at 1 and was cut off
     * before its checkpoint: its row comes first, the last life's counts */
    const double costs[] = {10, 8, 5, 6, 7, 9, 1};
    double rows[8 * 3] = {50, 2, 1};
    for (int p = 0; p < 7; p++) {
        rows[3 * (p + 1)] = 100.0 * (p + 1);
        rows[3 * (p + 1) + 1] = p;
        rows[3 * (p + 1) + 2] = costs[p];
    }
    pd_keep k;
    pd_keep_init(&k, &r);
    CHECK_EQ_INT(pd_keep_resume(&k, rows, 8, 3, 6), 0);
    CHECK_EQ_INT(k.best_pass, 2); /* pass 6's 1 belongs to the life that this one replaces */
    CHECK_NEAR(k.best, 5, 1e-12);
    CHECK_EQ_INT(k.stop, 0);
    CHECK_EQ_INT(k.nsaved, 3);
    CHECK_EQ_INT(k.saved[0], 2);
    CHECK_EQ_INT(k.saved[2], 5);
    char link[64] = "";
    snprintf(path, sizeof path, "%s/best", r.save_dir);
    CHECK(readlink(path, link, sizeof link - 1) > 0);
    CHECK_STR_EQ(link, "pass-00002");
    /* pass 6 no better: 4 passes since the best, early_stop 3 */
    CHECK_EQ_INT(pd_keep_pass(&k, 6, 9.5, NULL), 1);
    CHECK_EQ_INT(k.stop, 1);
    snprintf(path, sizeof path, "%s/pass-%05d", r.save_dir, 6);
    CHECK_EQ_INT(mkdir(path, 0755), 0);
    CHECK_EQ_INT(pd_keep_saved(&k, 6), 0);
    snprintf(path, sizeof path, "%s/pass-00004", r.save_dir);
    CHECK(access(path, F_OK) != 0); /* beyond the last 2, not the best */
    snprintf(path, sizeof path, "%s/pass-00002", r.save_dir);
    CHECK(access(path, F_OK) == 0);
    pd_keep_free(&k);
}
