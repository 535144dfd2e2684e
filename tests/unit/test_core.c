/* test_core.c - errors, rng, batches, the progress board. */
#include "test.h"
#include "../../src/core/fs.h"
#include "../../src/core/log.h"
#include "../../src/core/pd.h"
#include "../../src/data/batch.h"
#include "../../src/nn/net.h"
#include "../../src/core/rng.h"
#include "../../src/nn/progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

PD_TEST(err_wrap_keeps_context)
{
    pd_err_set(PD_EIO, "disk full");
    pd_err_wrap(PD_EIO, "writing %s", "model.npy");
    CHECK_STR_EQ(pd_err_msg(), "writing model.npy: disk full");
    /* the message itself as an argument of the next */
    pd_err_set(PD_EINVAL, "pserver %d: %s", 3, pd_err_msg());
    CHECK_STR_EQ(pd_err_msg(), "pserver 3: writing model.npy: disk full");
}

PD_TEST(err_messages_escape_control_characters)
{
    /* a data file's bytes quoted in a message reach no terminal raw */
    pd_err_set(PD_EDATA, "d.csv:1: field 1 is not a decimal number: '%s'", "\033[31mRED\033]0;t\007");
    CHECK_STR_EQ(pd_err_msg(), "d.csv:1: field 1 is not a decimal number: '\\27[31mRED\\27]0;t\\7'");
    pd_err_wrap(PD_EDATA, "reading\tpart\r%s", "x\n");
    CHECK_STR_EQ(pd_err_msg(), "reading\\tpart\\rx\\n: d.csv:1: field 1 is not a decimal number: '\\27[31mRED\\27]0;t\\7'");
    pd_err_set(PD_EDATA, "%s", "caf\xc3\xa9 \x7f"); /* UTF-8 stays, DEL does not */
    CHECK_STR_EQ(pd_err_msg(), "caf\xc3\xa9 \\127");
    char big[3000];
    memset(big, 1, sizeof big - 1);
    big[sizeof big - 1] = '\0';
    pd_err_set(PD_EDATA, "%s", big); /* grows past the buffer: cut, and says so */
    size_t n = strlen(pd_err_msg());
    CHECK(n < 1024 && n > 1000);
    CHECK(!strcmp(pd_err_msg() + n - 3, "..."));
    CHECK(!strncmp(pd_err_msg(), "\\1\\1", 4));
}

PD_TEST(rng_is_deterministic)
{
    uint64_t a = 42, b = 42;
    for (int i = 0; i < 100; i++) CHECK_EQ_INT(pd_rng_next(&a), pd_rng_next(&b));
    double u = pd_rng_uniform(&a);
    CHECK(u >= 0 && u < 1);
}

PD_TEST(batch_append_copies_every_slot_kind)
{
    pd_slot layout[3] = {{.name = "x", .kind = PD_SLOT_DENSE, .width = 2},
                         {.name = "id", .kind = PD_SLOT_ID, .width = 10},
                         {.name = "seq", .kind = PD_SLOT_ID_LIST, .width = 10}};
    pd_batch a, b;
    pd_batch_init(&a, layout, 3);
    pd_batch_init(&b, layout, 3);
    for (int i = 0; i < 3; i++) {
        float *x = pd_slot_push_dense(&a.slots[0], i);
        x[0] = (float)i;
        x[1] = (float)(10 * i);
        pd_slot_push_id(&a.slots[1], i, i + 1);
        int32_t ids[3] = {i, i + 1, i + 2};
        pd_slot_push_ids(&a.slots[2], i, ids, i);
        a.n++;
    }
    pd_batch_append(&b, &a, 2);
    pd_batch_append(&b, &a, 0);
    CHECK_EQ_INT(b.n, 2);
    CHECK_NEAR(b.slots[0].values[1], 20, 0);
    CHECK_NEAR(b.slots[0].values[2], 0, 0);
    CHECK_EQ_INT(b.slots[1].ids[0], 3);
    CHECK_EQ_INT(b.slots[2].offsets[1], 2);
    CHECK_EQ_INT(b.slots[2].offsets[2], 2);
    CHECK_EQ_INT(b.slots[2].ids[1], 3);
    pd_batch_free(&a);
    pd_batch_free(&b);
}

/* The progress board reads what the roles print: states, the pass line,
 * a trainer's progress line (consumed); durations as people read them. */
PD_TEST(progress_reads_role_lines)
{
    pd_progress p;
    pd_progress_init(&p, "paddle run t.lua", 10, 0);
    pd_progress_state(&p, "pserver 0", "h1", PD_ST_STARTING);
    CHECK_EQ_INT(pd_progress_line(&p, "pserver 0", "h1", "I1122 10:00:00.1 7 server.c:1] Server listening on x:1"), 0);
    CHECK_EQ_INT(pd_progress_role(&p, "pserver 0", "h1")->state, PD_ST_SERVING);
    pd_progress_line(&p, "trainer 0", "h2", "I1 2 3 trainer.c:98] trainer 0 of 2: connecting to 2 pservers");
    CHECK_EQ_INT(pd_progress_role(&p, "trainer 0", "h2")->state, PD_ST_WAITING);
    char buf[256];
    pd_progress_format(buf, sizeof buf, 3, 5, 10, 100, 0.5, 2.25);
    buf[strlen(buf) - 1] = '\0';
    CHECK_EQ_INT(pd_progress_line(&p, "trainer 0", "h2", buf), 1);
    pd_prog_role *r = pd_progress_role(&p, "trainer 0", "h2");
    CHECK_EQ_INT(r->state, PD_ST_TRAINING);
    CHECK_EQ_INT(r->pass, 3);
    CHECK_EQ_INT(r->batches, 10);
    CHECK_NEAR(r->rate, 200, 1e-9);
    pd_progress_line(&p, "trainer 0", "h2", "I1 2 3 driver.c:1] pass 3 done: 202 samples in 0.01 s (20200 samples/s), "
                                            "train cost 12.5, test cost 9.5, auc 0.75");
    CHECK_EQ_INT(p.pass_done, 3);
    CHECK_NEAR(p.train_cost, 12.5, 1e-12);
    CHECK_STR_EQ(p.test, "test cost 9.5, auc 0.75");
    CHECK_NEAR(r->rate, 20200, 1e-9);
    CHECK_EQ_INT(pd_progress_role(&p, "trainer 0", "h2")->pass, 4);
    pd_progress_line(&p, "trainer 0", "h2", "I1 2 3 trainer.c:118] trainer 0 finished: 33 steps, 0.0 MB sent");
    CHECK_EQ_INT(r->state, PD_ST_DONE);
    pd_progress_duration(3725, buf, sizeof buf);
    CHECK_STR_EQ(buf, "1h02m");
    pd_progress_duration(185, buf, sizeof buf);
    CHECK_STR_EQ(buf, "3m05s");
    pd_progress_free(&p);
}

/* Trainer 0's first progress line, at pass and batch (of 10). */
static void first_progress(pd_progress *p, int pass, int batch)
{
    char line[256];
    pd_progress_format(line, sizeof line, pass, batch, 10, 20, 0.1, 5.0);
    line[strlen(line) - 1] = '\0';
    pd_progress_line(p, "trainer 0", "h2", line);
}

/* Trainer 0's "pass N done" lines for passes [from, to). */
static void passes_done(pd_progress *p, int from, int to)
{
    for (int pass = from; pass < to; pass++) {
        char done[200];
        snprintf(done, sizeof done, "I1 2 3 driver.c:1] pass %d done: 202 samples in 0.30 s (673 samples/s), "
                 "train cost 1.5", pass);
        pd_progress_line(p, "trainer 0", "h2", done);
    }
}

/* A pass's summary line takes the job's share done from the pass trainer 0
 * finished: another node's trainer, whose lines reach the launcher late,
 * no longer holds the ETA up (the last pass said "ETA 18s"). */
PD_TEST(progress_summary_eta_from_the_pass_done)
{
    pd_progress p;
    pd_progress_init(&p, "paddle run t.lua", 30, 0);
    char buf[512];
    pd_progress_line(&p, "trainer 1", "h3", "I1 2 3 trainer.c:1] trainer 1: parameters ready; training");
    first_progress(&p, 0, 1);
    p.t0 -= 10;     /* the job started 10 s ago */
    p.t_first -= 9; /* its first progress 9 s ago */
    passes_done(&p, 0, 30);
    pd_progress_summary(&p, 14, 673, buf, sizeof buf);
    CHECK(strstr(buf, "paddle: pass 14 done (15 of 30): train cost 1.5, 673 samples/s, elapsed 10s, ETA ") != NULL);
    CHECK(strstr(buf, "ETA 9s") || strstr(buf, "ETA 10s")); /* 9 s for half the job less its first 1/300 */
    pd_progress_summary(&p, 29, 673, buf, sizeof buf);
    CHECK(strstr(buf, "pass 29 done (30 of 30)") && strstr(buf, "elapsed 10s, ETA 0s\n"));
    pd_progress_free(&p);
}

/* A resumed job's ETA counts what it does from its first progress line
 * only: resumed at pass 20 of 30, 2 passes in 4 s leave 8 passes, 16 s
 * (from the job's start, its first 20 passes would read as done in 4 s:
 * "ETA 2s"). No progress yet: no ETA. A restart measures it again. */
PD_TEST(progress_eta_of_a_resumed_job)
{
    pd_progress p;
    pd_progress_init(&p, "paddle run t.lua", 30, 0);
    char buf[512];
    pd_progress_line(&p, "trainer 0", "h2", "I1 2 3 trainer.c:1] trainer 0: parameters ready; training");
    /* trainer 1 training, its place not reported yet: not at pass 0 */
    pd_progress_line(&p, "trainer 1", "h3", "I1 2 3 trainer.c:1] trainer 1: parameters ready; training");
    p.t0 -= 5;
    pd_progress_line(&p, "trainer 0", "h2", "I1 2 3 driver.c:1] pass 19 done: 202 samples in 2.00 s (101 "
                     "samples/s), train cost 1.5"); /* no progress line yet: 20 of 30 passes in 5 s says nothing */
    pd_progress_summary(&p, 19, 100, buf, sizeof buf);
    CHECK(strstr(buf, "elapsed 5s, ETA ?\n") != NULL);
    first_progress(&p, 20, 0);
    p.t_first -= 4;
    passes_done(&p, 20, 22);
    pd_progress_summary(&p, 21, 101, buf, sizeof buf);
    CHECK(strstr(buf, "elapsed 5s, ETA 16s\n") != NULL);
    pd_progress_all(&p, PD_ST_RESTARTING, 1);
    pd_progress_summary(&p, 21, 101, buf, sizeof buf);
    CHECK(strstr(buf, ", ETA ?\n") != NULL);
    pd_progress_free(&p);
}

/* pd_out: the file appears whole, with the earlier file's mode; one that
 * fails leaves the earlier file and no partial file; a partial file of the
 * same pid (a killed process's, or another container's) is not touched. */
PD_TEST(out_file_whole_or_not_at_all)
{
    char *path = pd_test_write("out.txt", "earlier\n");
    CHECK(chmod(path, 0600) == 0);
    char *stale = pd_xasprintf("%s.partial-%ld", path, (long)getpid());
    FILE *f = fopen(stale, "w");
    CHECK(f != NULL);
    fclose(f);
    pd_out o;
    CHECK(pd_out_open(&o, path) == 0);
    CHECK(o.tmp != NULL); /* not written directly */
    fprintf(o.f, "new\n");
    CHECK(pd_out_flush(&o) == 0);
    CHECK(pd_out_close(&o, 1) == 0);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    char buf[32] = "";
    f = fopen(path, "r");
    CHECK(f && fgets(buf, sizeof buf, f));
    fclose(f);
    CHECK(strcmp(buf, "new\n") == 0);
    CHECK(access(stale, F_OK) == 0);
    /* not kept: the file as it was, nothing beside it */
    CHECK(pd_out_open(&o, path) == 0);
    fprintf(o.f, "half\n");
    CHECK(pd_out_close(&o, 0) == 0);
    f = fopen(path, "r");
    CHECK(f && fgets(buf, sizeof buf, f));
    fclose(f);
    CHECK(strcmp(buf, "new\n") == 0);
    CHECK(unlink(stale) == 0); /* the only partial file there */
    /* a directory not there: named, errno kept for the caller */
    char *bad = pd_xasprintf("%s/no/such/dir/x", pd_test_dir());
    CHECK(pd_out_open(&o, bad) == PD_EIO);
    CHECK(errno == ENOENT);
    CHECK_CONTAINS(pd_err_msg(), "no/such/dir/x");
    free(bad);
    free(stale);
    free(path);
}

/* A partial file whose writer is gone from this host (a kill -9) is said
 * when its file is written next, and left there; a live writer's is not
 * said */
PD_TEST(out_file_says_partials_left)
{
    char *path = pd_test_write("said.txt", "earlier\n");
    pid_t child = fork();
    if (child == 0) _exit(0);
    CHECK(child > 0 && waitpid(child, NULL, 0) == child);
    char *dead = pd_xasprintf("%s.partial-%ld-0000abcd", path, (long)child);
    char *live = pd_xasprintf("%s.partial-%ld-0000abcd", path, (long)getppid());
    FILE *f = fopen(dead, "w");
    CHECK(f != NULL);
    fclose(f);
    CHECK((f = fopen(live, "w")) != NULL);
    fclose(f);
    char *log = pd_xasprintf("%s/said.log", pd_test_dir());
    CHECK(pd_log_open(log) == 0);
    pd_log_quiet(1);
    pd_out o;
    int rc = pd_out_open(&o, path);
    pd_log_quiet(0);
    pd_log_close();
    CHECK(rc == 0);
    CHECK(pd_out_close(&o, 1) == 0);
    char text[4096] = "";
    CHECK((f = fopen(log, "r")) != NULL);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    CHECK_CONTAINS(text, dead);
    CHECK_CONTAINS(text, "ended before it finished (killed?)");
    CHECK(strstr(text, live) == NULL);
    CHECK(access(dead, F_OK) == 0 && access(live, F_OK) == 0);
    unlink(dead);
    unlink(live);
    free(log);
    free(live);
    free(dead);
    free(path);
}
