/* test_launch.c - the supervisor's line splitter, the plan's role lists, the
 * error message buffer's bound. */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/launch/plan.h"
#include "../../src/launch/supervisor.h"

typedef struct lines_seen {
    int n;
    char got[8][PD_LINE_MAX + 1];
} lines_seen;

static void take(void *ctx, char *line)
{
    lines_seen *s = ctx;
    if (s->n < 8) snprintf(s->got[s->n], sizeof s->got[0], "%s", line);
    s->n++;
}

PD_TEST(lines_split_across_reads_and_flush_the_tail)
{
    pd_lines l = {0};
    lines_seen s = {0};
    pd_lines_feed(&l, "one\ntw", 6, take, &s);
    CHECK_EQ_INT(s.n, 1);
    CHECK_STR_EQ(s.got[0], "one");
    pd_lines_feed(&l, "o\n\nthree", 8, take, &s);
    CHECK_EQ_INT(s.n, 3);
    CHECK_STR_EQ(s.got[1], "two");
    CHECK_STR_EQ(s.got[2], "");
    pd_lines_flush(&l, take, &s); /* the last line had no newline */
    CHECK_EQ_INT(s.n, 4);
    CHECK_STR_EQ(s.got[3], "three");
    pd_lines_flush(&l, take, &s); /* nothing left */
    CHECK_EQ_INT(s.n, 4);
}

PD_TEST(lines_longer_than_the_limit_come_in_pieces)
{
    pd_lines l = {0};
    lines_seen s = {0};
    size_t n = PD_LINE_MAX * 2 + 10;
    char *big = pd_xmalloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\n';
    pd_lines_feed(&l, big, n + 1, take, &s);
    CHECK(s.n >= 2);
    size_t total = 0;
    for (int i = 0; i < s.n && i < 8; i++) {
        CHECK(strlen(s.got[i]) <= PD_LINE_MAX);
        total += strlen(s.got[i]);
    }
    CHECK_EQ_INT(total, n); /* nothing lost, nothing over the limit */
    free(big);
}

PD_TEST(plan_role_lists_round_trip_and_reject_garbage)
{
    pd_role *roles;
    int n;
    CHECK_EQ_INT(pd_plan_parse_roles("ps:0:7164,ps:1:7166,tr:0:0", &roles, &n), 0);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(roles[0].kind, PD_ROLE_PSERVER);
    CHECK_EQ_INT(roles[1].id, 1);
    CHECK_EQ_INT(roles[1].port, 7166);
    CHECK_EQ_INT(roles[2].kind, PD_ROLE_TRAINER);
    free(roles);
    static const char *const bad[] = {"ps:0", "xx:0:1", "ps:a:1", "ps:0:1,", "ps:0:1;tr:0:0", "ps:-1:5",
                                      "ps:0:70000"};
    for (size_t i = 0; i < PD_COUNT(bad); i++) {
        roles = NULL;
        int rc = pd_plan_parse_roles(bad[i], &roles, &n);
        if (rc != PD_EINVAL) pd_test_fail(__FILE__, __LINE__, "'%s' was accepted (rc %d)", bad[i], rc);
        free(roles);
    }
}

PD_TEST(error_messages_longer_than_the_buffer_end_in_dots)
{
    char big[3000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    pd_err_set(PD_EIO, "%s", big);
    const char *m = pd_err_msg();
    size_t len = strlen(m);
    CHECK(len > 100 && len < sizeof big);
    CHECK_STR_EQ(m + len - 3, "...");
    pd_err_wrap(PD_EIO, "context");
    m = pd_err_msg();
    CHECK(strncmp(m, "context: aaa", 12) == 0);
    CHECK_STR_EQ(m + strlen(m) - 3, "...");
}
