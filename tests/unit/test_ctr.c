/*
 * test_ctr.c - the CTR pieces: exact AUC against NumPy, and the Criteo
 * reader's parsing, feature ids and errors.
 */
#include "test.h"
#include "../../src/core/auc.h"
#include "../../src/core/pd.h"
#include "../../src/data/criteo.h"

/* --- AUC ------------------------------------------------------------------- */

/* 200 scores rounded to 0.1 (40 distinct values: many ties) and labels drawn
 * from them (NumPy, default_rng(7)) */
static const float scores200[200] = {
    0.0f, 0.3f, -0.3f, -0.9f, -0.5f, -1.0f, 0.1f, 1.3f, -0.5f, -0.6f, 0.5f, 0.4f, 0.1f, -0.9f, -0.0f,
    0.7f, -1.3f, -0.5f, -1.9f, -1.3f, -1.8f, -0.2f, -1.3f, 0.3f, 0.2f, -0.2f, -2.5f, -0.5f, -0.0f, 0.1f,
    -1.5f, -0.5f, -1.0f, -0.8f, 1.1f, -0.8f, -0.0f, 0.9f, -0.6f, -0.1f, 0.1f, 0.1f, -1.2f, 0.1f, 1.4f,
    -1.5f, 0.9f, 0.1f, -0.6f, 2.0f, 0.8f, -1.2f, 0.1f, 0.6f, -0.2f, 0.7f, -0.1f, 0.7f, 1.4f, -0.7f,
    0.2f, -0.5f, 0.1f, -1.2f, -0.6f, -0.2f, 0.9f, 1.1f, -1.3f, -0.8f, 0.6f, -2.0f, -0.5f, -0.1f, 1.3f,
    0.7f, -0.3f, -0.4f, -0.3f, 1.5f, -0.4f, -0.3f, 0.4f, -0.1f, -0.2f, -1.1f, -0.0f, -0.4f, 1.2f, 0.7f,
    -0.0f, 0.7f, -0.3f, 1.1f, -0.0f, 0.6f, -1.3f, 0.3f, -1.7f, -2.0f, -0.3f, -0.9f, 0.2f, 2.2f, -0.8f,
    -0.6f, 0.2f, 0.5f, -0.2f, -0.2f, 0.7f, 0.5f, -1.0f, -0.1f, 0.0f, -1.1f, 0.3f, -0.9f, 1.0f, 0.2f,
    0.1f, -0.6f, -0.1f, -2.0f, -1.1f, 0.4f, -2.1f, 0.8f, -1.7f, 0.8f, -0.8f, 0.8f, 0.1f, -1.5f, 1.2f,
    1.4f, -0.1f, -0.3f, -0.2f, -1.0f, 1.1f, -0.5f, -0.1f, -0.8f, -0.6f, -1.3f, 1.3f, -0.2f, 1.0f, 0.0f,
    -0.7f, -0.3f, -0.6f, 0.0f, -0.4f, -0.3f, -1.4f, -0.8f, 1.7f, -0.7f, -1.1f, 0.3f, 1.4f, -1.5f, -0.2f,
    -0.6f, -1.8f, 0.7f, -0.0f, 0.1f, -0.8f, 0.5f, -0.5f, -0.1f, -1.1f, -1.2f, 1.3f, -0.5f, 0.3f, -0.0f,
    -0.4f, -0.5f, 0.6f, -0.3f, -0.2f, 0.0f, 1.2f, 0.7f, 0.4f, -0.6f, -1.4f, 0.9f, 1.0f, -0.1f, 0.5f,
    0.8f, 0.8f, 0.9f, -0.5f, 1.5f
};
static const float labels200[200] = {
    1, 1, 1, 0, 0, 0, 1, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1,
    0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1,
    1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0,
    0, 0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0,
    1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 0, 0,
    0, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1,
    0, 1
};

/* The expected values come from NumPy, from the definition (not from a
 * rank formula like ours): the share of (positive, negative) pairs ordered
 * right, ties counted half:
 *   p = s[y == 1][:, None]; n = s[y == 0][None, :]
 *   ((p > n).sum() + 0.5 * (p == n).sum()) / (p.size * n.size)        */
PD_TEST(auc_matches_numpy)
{
    const float s[12] = {0.1f, 0.4f, 0.35f, 0.8f, 0.4f, 0.4f, 0.9f, 0.1f, 0.55f, 0.2f, -3.0f, 0.35f};
    const float y[12] = {0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 0, 1};
    CHECK_NEAR(pd_auc_compute(s, y, 12), 0.6944444444444444, 1e-12);
    CHECK_NEAR(pd_auc_compute(scores200, labels200, 200), 0.8578032358556928, 1e-12);
}

PD_TEST(auc_edge_cases)
{
    const float s[4] = {0.3f, 0.3f, 0.3f, 0.3f}, y[4] = {0, 1, 1, 0}, ones[4] = {1, 1, 1, 1};
    CHECK_NEAR(pd_auc_compute(s, y, 4), 0.5, 1e-12);          /* all tied: a constant predictor */
    CHECK(isnan(pd_auc_compute(s, ones, 4)));                  /* one class only */
    CHECK(isnan(pd_auc_compute(s, y, 0)));
    const float perfect[4] = {0.1f, 0.9f, 0.8f, 0.2f}, reversed[4] = {0.9f, 0.1f, 0.2f, 0.8f};
    CHECK_NEAR(pd_auc_compute(perfect, y, 4), 1.0, 1e-12);
    CHECK_NEAR(pd_auc_compute(reversed, y, 4), 0.0, 1e-12);
}

/* --- the Criteo reader ------------------------------------------------------- */

/* A layout: label, dense, C1, C2, sparse (ranges 1000), bound. */
typedef struct crit {
    pd_recipe r;
    pd_slot layout[5];
    pd_criteo c;
    pd_batch st;
} crit;

static void crit_init(crit *t, int hash_space)
{
    memset(t, 0, sizeof *t);
    t->r.path = (char *)"test.lua";
    t->r.hash_space = hash_space;
    const char *names[5] = {"label", "dense", "C1", "C2", "sparse"};
    const int kinds[5] = {PD_SLOT_DENSE, PD_SLOT_DENSE, PD_SLOT_ID, PD_SLOT_ID, PD_SLOT_ID_LIST};
    const int widths[5] = {1, 13, 1000, 1000, 1000};
    for (int i = 0; i < 5; i++) {
        snprintf(t->layout[i].name, sizeof t->layout[i].name, "%s", names[i]);
        t->layout[i].kind = kinds[i];
        t->layout[i].width = widths[i];
    }
    if (pd_criteo_bind(&t->c, t->layout, 5, &t->r) < 0) pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
    pd_batch_init(&t->st, t->layout, 5);
}

/* "label\tI1..I13\tC1..C26" from the given fields (NULL: the defaults) */
static char *line_of(const char *label, const char *i1, const char *c1, const char *c2)
{
    static char buf[1024];
    char *p = buf;
    if (label) p += sprintf(p, "%s\t", label);
    p += sprintf(p, "%s", i1);
    for (int k = 2; k <= 13; k++) p += sprintf(p, "\t%d", k == 5 ? -7 : k);
    p += sprintf(p, "\t%s\t%s", c1, c2);
    for (int k = 3; k <= 26; k++) p += sprintf(p, "\t%08x", k * 0x1111);
    return buf;
}

static int parse(crit *t, char *line, int *labelled)
{
    return pd_criteo_parse(&t->c, line, &t->st, labelled, "day_0.txt", 7);
}

PD_TEST(criteo_parses_a_line)
{
    crit t;
    crit_init(&t, 0);
    int labelled = -1;
    CHECK_EQ_INT(parse(&t, line_of("1", "", "68fd1e64", "80e26c9b"), &labelled), 0);
    CHECK_EQ_INT(labelled, 1);
    CHECK_EQ_INT(t.st.n, 1);
    CHECK(t.st.slots[0].values[0] == 1.f);
    const float *d = t.st.slots[1].values;
    CHECK(d[0] == 0.f);                              /* I1 missing -> 0 */
    CHECK_NEAR(d[1], log1p(2.0), 1e-6);              /* log1p */
    CHECK(d[4] == 0.f);                              /* I5 = -7: clipped at 0 */
    CHECK_NEAR(d[12], log1p(13.0), 1e-6);
    int32_t c1 = t.st.slots[2].ids[0], c2 = t.st.slots[3].ids[0];
    CHECK_EQ_INT(c1, pd_criteo_fold(pd_criteo_feature(0, 0x68fd1e64u, 1), 1000));
    CHECK_EQ_INT(c2, pd_criteo_fold(pd_criteo_feature(1, 0x80e26c9bu, 1), 1000));
    CHECK_EQ_INT(t.st.slots[4].offsets[1], 26);
    CHECK_EQ_INT(t.st.slots[4].ids[0], c1);
    for (int k = 0; k < 26; k++) CHECK(t.st.slots[4].ids[k] >= 0 && t.st.slots[4].ids[k] < 1000);
    pd_batch_free(&t.st);
}

PD_TEST(criteo_feature_ids_hold_the_column)
{
    /* equal strings in different columns, and a missing value, are all
     * different features */
    uint64_t a = pd_criteo_feature(0, 0xabcdu, 1), b = pd_criteo_feature(1, 0xabcdu, 1);
    uint64_t m0 = pd_criteo_feature(0, 0, 0), z0 = pd_criteo_feature(0, 0, 1);
    CHECK(a != b && m0 != z0 && m0 != pd_criteo_feature(1, 0, 0));
    /* folding spreads them: 26 columns x 200 values into 1,000,001 rows */
    static uint8_t seen[1000001];
    int collisions = 0;
    for (int k = 0; k < 26; k++)
        for (uint32_t v = 0; v < 200; v++) {
            int32_t r = pd_criteo_fold(pd_criteo_feature(k, v, 1), 1000001);
            CHECK(r >= 0 && r < 1000001);
            collisions += seen[r]++ > 0;
        }
    CHECK(collisions < 40); /* about 5200^2 / 2e6 = 14 expected */
    /* hash_space folds into a smaller range than the slot's */
    crit t;
    crit_init(&t, 10);
    int labelled = -1;
    CHECK_EQ_INT(parse(&t, line_of("0", "3", "", "ff"), &labelled), 0);
    CHECK(t.st.slots[2].ids[0] < 10 && t.st.slots[3].ids[0] < 10);
    CHECK_EQ_INT(t.st.slots[2].ids[0], pd_criteo_fold(pd_criteo_feature(0, 0, 0), 10));
    pd_batch_free(&t.st);
}

PD_TEST(criteo_file_without_label)
{
    crit t;
    crit_init(&t, 0);
    int labelled = -1;
    CHECK_EQ_INT(parse(&t, line_of(NULL, "5", "1", "2"), &labelled), 0);
    CHECK_EQ_INT(labelled, 0);
    CHECK(t.st.slots[0].values[0] == 0.f);
    CHECK_NEAR(t.st.slots[1].values[0], log1p(5.0), 1e-6);
    /* a labelled line in a file without labels is an error */
    CHECK(parse(&t, line_of("1", "5", "1", "2"), &labelled) < 0);
    CHECK_CONTAINS(pd_err_msg(), "day_0.txt:7: 40 fields, but the file's first line has 39");
    pd_batch_free(&t.st);
}

static void bad_line(crit *t, char *line, const char *msg)
{
    int labelled = -1;
    if (parse(t, line, &labelled) == 0) pd_test_fail(__FILE__, __LINE__, "accepted: %.60s", line);
    CHECK_CONTAINS(pd_err_msg(), msg);
    CHECK_EQ_INT(t->st.n, 0);
}

PD_TEST(criteo_malformed_lines)
{
    crit t;
    crit_init(&t, 0);
    bad_line(&t, line_of("1", "x1", "1", "2"), "day_0.txt:7: field 2 (I1) 'x1' is not an integer");
    bad_line(&t, line_of("1", "-", "1", "2"), "field 2 (I1) '-' is not an integer");
    bad_line(&t, line_of("1", "12345678901234567890", "1", "2"), "(I1) '12345678901234567890' is too long");
    bad_line(&t, line_of("1", "1", "68fd1e6g", "2"), "day_0.txt:7: field 15 (C1) '68fd1e6g' is not hexadecimal");
    bad_line(&t, line_of("1", "1", "1", "68fd1e640"), "field 16 (C2) '68fd1e640' is longer than 8 hex digits");
    bad_line(&t, line_of("2", "1", "1", "2"), "field 1 (label) '2' must be 0 or 1");
    bad_line(&t, line_of("", "1", "1", "2"), "field 1 (label) '' must be 0 or 1");
    char few[] = "1\t2\t3";
    bad_line(&t, few, "day_0.txt:7: 3 tab-separated fields, criteo lines have 40");
    char many[1200];
    snprintf(many, sizeof many, "%s\t0", line_of("1", "1", "1", "2"));
    bad_line(&t, many, "more than 40 tab-separated fields");
    pd_batch_free(&t.st);
}

PD_TEST(criteo_bind_checks_slots)
{
    crit t;
    crit_init(&t, 0);
    pd_batch_free(&t.st);
    t.r.hash_space = 5000;
    CHECK(pd_criteo_bind(&t.c, t.layout, 5, &t.r) < 0);
    CHECK_CONTAINS(pd_err_msg(), "slot 'C1' has 1000 ids, fewer than data.hash_space = 5000");
    t.r.hash_space = 0;
    snprintf(t.layout[2].name, sizeof t.layout[2].name, "C27");
    CHECK(pd_criteo_bind(&t.c, t.layout, 5, &t.r) < 0);
    CHECK_CONTAINS(pd_err_msg(), "data layer 'C27' is not a criteo field");
    snprintf(t.layout[2].name, sizeof t.layout[2].name, "I3");
    CHECK(pd_criteo_bind(&t.c, t.layout, 5, &t.r) < 0);
    CHECK_CONTAINS(pd_err_msg(), "criteo slot 'I3' is id of 1000 here; declare it as nn.data(\"In\", 1)");
}

/* Lines longer than the bound are reported with file:line and skipped to
 * their end; the next line is read normally. */
static int n_ok, n_bad;
static char first_bad[256];
static int count_ok(void *ctx) { (void)ctx; n_ok++; return 0; }
static int count_bad(void *ctx)
{
    (void)ctx;
    if (!n_bad++) snprintf(first_bad, sizeof first_bad, "%s", pd_err_msg());
    return 0;
}

PD_TEST(criteo_file_long_line_bounded)
{
    crit t;
    crit_init(&t, 0);
    char *good = pd_xstrdup(line_of("0", "1", "2", "3"));
    size_t big = 3 * PD_CRITEO_MAX_LINE;
    char *text = pd_xmalloc(strlen(good) * 2 + big + 8);
    char *p = text + sprintf(text, "%s\n", good);
    memset(p, '7', big);
    p += big;
    p += sprintf(p, "\n\n%s\r\n", good);
    const char *path = pd_test_write("day_1.txt", text);
    pd_criteo_sink sink = {count_ok, count_bad, NULL};
    CHECK_EQ_INT(pd_criteo_read_file(&t.c, path, &t.st, &sink), 0);
    CHECK_EQ_INT(n_ok, 2);
    CHECK_EQ_INT(n_bad, 1);
    CHECK_CONTAINS(first_bad, "day_1.txt:2: line longer than 4095 bytes");
    free(text);
    free(good);
    pd_batch_free(&t.st);
}
