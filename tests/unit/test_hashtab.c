/* test_hashtab.c - the growing tables (src/nn/hashtab.c) against a plain
 * reference (arrays searched linearly) under random update / find / pass
 * end sequences: admission (min_count), ttl eviction, the max_rows cap
 * (CLOCK) and the dump round trip. */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/nn/hashtab.h"
#include "../../src/nn/net.h"
#include "../../src/ps/hashshard.h"

#include <unistd.h>

#define NKEYS 700
#define W 3

/* The reference: for every key in a small space, whether it has a row, its
 * values, its last update pass and its admission count. */
typedef struct ref {
    uint64_t key[NKEYS];
    int has[NKEYS], count[NKEYS];
    uint32_t last[NKEYS], clast[NKEYS];
    float v[NKEYS][W];
} ref;

static uint64_t key_of(int k) { return pd_hash_id((uint64_t)k * 7919u + 3) ^ ((uint64_t)k << 40); }

static void ref_init(ref *r)
{
    memset(r, 0, sizeof *r);
    for (int k = 0; k < NKEYS; k++) r->key[k] = key_of(k);
}

static void check_same(pd_hashtab *t, ref *r, int exact)
{
    long stored = 0;
    for (int k = 0; k < NKEYS; k++) {
        float *row = pd_hashtab_find(t, r->key[k]);
        if (!row && r->has[k] && !exact) r->has[k] = 0; /* evicted by the cap */
        CHECK_EQ_INT(row != NULL, r->has[k]);
        if (!row) continue;
        stored++;
        for (int j = 0; j < W; j++) CHECK_EQ_INT((long)(row[j] * 8), (long)(r->v[k][j] * 8));
    }
    CHECK_EQ_INT(pd_hashtab_rows(t), stored);
    for (long i = 0; i < pd_hashtab_rows(t); i++) CHECK(pd_hashtab_find(t, pd_hashtab_key(t, i)) == pd_hashtab_row(t, i));
}

/* One random sequence of updates, finds and pass ends, checked as it goes. */
static void run(pd_hashtab_limits lim, uint64_t seed, int ops)
{
    pd_hashtab t;
    pd_hashtab_init(&t, "t", W, &lim);
    ref r;
    ref_init(&r);
    uint64_t rng = seed;
    uint32_t pass = 0;
    int exact = lim.max_rows == 0;
    for (int op = 0; op < ops; op++) {
        int k = (int)(pd_rng_next(&rng) % NKEYS);
        int what = (int)(pd_rng_next(&rng) % 100);
        if (what < 70) {
            int created, fresh = 0;
            if (!exact && r.has[k] && !pd_hashtab_find(&t, r.key[k])) r.has[k] = 0; /* evicted by the cap */
            float *row = pd_hashtab_update(&t, r.key[k], &created);
            if (!r.has[k]) {
                r.count[k]++;
                r.clast[k] = pass;
                if (r.count[k] >= (lim.min_count > 1 ? lim.min_count : 1)) {
                    r.has[k] = fresh = 1;
                    r.count[k] = 0;
                }
            }
            CHECK_EQ_INT(row != NULL, r.has[k]);
            CHECK_EQ_INT(created, fresh);
            if (fresh) CHECK(row[0] == 0 && row[1] == 0 && row[2] == 0);
            if (row) {
                CHECK(lim.max_rows == 0 || pd_hashtab_rows(&t) <= lim.max_rows);
                r.last[k] = pass;
                for (int j = 0; j < W; j++) row[j] = r.v[k][j] = (float)(op % 1000) + j;
            }
        } else if (what < 98) {
            float *row = pd_hashtab_find(&t, r.key[k]);
            if (exact) CHECK_EQ_INT(row != NULL, r.has[k]);
            if (row) CHECK_EQ_INT((long)row[2], (long)r.v[k][2]);
        } else {
            check_same(&t, &r, exact); /* first: drops cap evictions from the reference */
            long gone = pd_hashtab_pass_end(&t), want = 0;
            if (lim.ttl > 0) {
                for (int i = 0; i < NKEYS; i++) {
                    if (r.has[i] && pass - r.last[i] >= (uint32_t)lim.ttl) r.has[i] = 0, want++;
                    if (!r.has[i] && r.count[i] && pass - r.clast[i] >= (uint32_t)lim.ttl) r.count[i] = 0;
                }
                CHECK_EQ_INT(gone, want);
            }
            pass++;
        }
        if (op % 97 == 0) check_same(&t, &r, exact);
    }
    check_same(&t, &r, exact);
    if (lim.max_rows) {
        CHECK(t.evicted_cap > 0);
        CHECK(t.warned_cap);
        CHECK(pd_hashtab_rows(&t) <= lim.max_rows);
    }
    pd_hashtab_free(&t);
}

PD_TEST(hashtab_matches_reference)
{
    for (uint64_t s = 1; s <= 5; s++) run((pd_hashtab_limits){0, 0, 0}, s, 20000);
}

/* A new row's initial value fills that one row and nothing beyond it (a
 * xavier init once wrote cols x cols values), is the same for the same id,
 * and xavier stays within +-sqrt(6 / (2 cols)). */
PD_TEST(hashtab_init_row_writes_one_row)
{
    static const char *kinds[] = {"xavier", "uniform", "normal", "zero", "constant"};
    for (int k = 0; k < (int)PD_COUNT(kinds); k++) {
        pd_init init;
        memset(&init, 0, sizeof init);
        snprintf(init.kind, sizeof init.kind, "%s", kinds[k]);
        init.a = 0.5;
        float w[16 + 8], again[16];
        for (int i = 0; i < 24; i++) w[i] = 12345.f;
        pd_init_row(&init, "emb", 7, 42, w, 16);
        for (int i = 16; i < 24; i++) CHECK_NEAR(w[i], 12345.f, 0);
        pd_init_row(&init, "emb", 7, 42, again, 16);
        for (int i = 0; i < 16; i++) CHECK_NEAR(w[i], again[i], 0);
        if (k == 0)
            for (int i = 0; i < 16; i++) CHECK(fabsf(w[i]) <= sqrtf(6.f / 32.f));
    }
}

PD_TEST(hashtab_admission_min_count)
{
    for (uint64_t s = 1; s <= 3; s++) run((pd_hashtab_limits){3, 0, 0}, s, 20000);
    pd_hashtab t;
    pd_hashtab_init(&t, "t", 2, &(pd_hashtab_limits){.min_count = 3});
    int created;
    CHECK(pd_hashtab_update(&t, 42, &created) == NULL);
    CHECK(pd_hashtab_update(&t, 42, &created) == NULL);
    CHECK_EQ_INT(pd_hashtab_rows(&t), 0);
    CHECK(pd_hashtab_find(&t, 42) == NULL);
    CHECK(pd_hashtab_update(&t, 42, &created) != NULL);
    CHECK_EQ_INT(created, 1);
    CHECK(pd_hashtab_update(&t, 42, &created) != NULL);
    CHECK_EQ_INT(created, 0);
    CHECK_EQ_INT(pd_hashtab_rows(&t), 1);
    pd_hashtab_free(&t);
}

PD_TEST(hashtab_ttl_eviction)
{
    for (uint64_t s = 1; s <= 3; s++) run((pd_hashtab_limits){0, 2, 0}, s, 20000);
    for (uint64_t s = 1; s <= 3; s++) run((pd_hashtab_limits){2, 1, 0}, s, 20000);
    pd_hashtab t;
    pd_hashtab_init(&t, "t", 1, &(pd_hashtab_limits){.ttl = 2});
    int created;
    for (uint64_t k = 0; k < 10; k++) pd_hashtab_update(&t, k, &created);
    CHECK_EQ_INT(pd_hashtab_pass_end(&t), 0);       /* pass 0 ends: all updated in it */
    for (uint64_t k = 0; k < 4; k++) pd_hashtab_update(&t, k, &created);
    CHECK_EQ_INT(pd_hashtab_pass_end(&t), 0);       /* 4..9 idle for 1 pass */
    CHECK_EQ_INT(pd_hashtab_pass_end(&t), 6);       /* 4..9 idle for 2: gone */
    CHECK_EQ_INT(pd_hashtab_rows(&t), 4);
    CHECK_EQ_INT(pd_hashtab_pass_end(&t), 4);
    CHECK_EQ_INT(t.evicted_ttl, 10);
    pd_hashtab_free(&t);
}

PD_TEST(hashtab_max_rows_cap)
{
    for (uint64_t s = 1; s <= 3; s++) run((pd_hashtab_limits){0, 0, 100}, s, 20000);
    for (uint64_t s = 1; s <= 3; s++) run((pd_hashtab_limits){1, 3, 150}, s, 20000);
    /* CLOCK keeps what is used: rows 0..49 updated between every new id survive */
    pd_hashtab t;
    pd_hashtab_init(&t, "t", 1, &(pd_hashtab_limits){.max_rows = 100});
    int created;
    for (uint64_t k = 1000; k < 3000; k++) {
        for (uint64_t h = 0; h < 50; h++) pd_hashtab_update(&t, h, &created);
        pd_hashtab_update(&t, k, &created);
        CHECK(pd_hashtab_rows(&t) <= 100);
    }
    for (uint64_t h = 0; h < 50; h++) CHECK(pd_hashtab_find(&t, h) != NULL);
    CHECK_EQ_INT(pd_hashtab_rows(&t), 100);
    CHECK(t.evicted_cap >= 1900);
    pd_hashtab_free(&t);
}

PD_TEST(hashtab_dump_round_trip)
{
    pd_hashtab t, u;
    pd_hashtab_limits lim = {.min_count = 2, .ttl = 3};
    pd_hashtab_init(&t, "t", 5, &lim);
    int created;
    for (uint64_t k = 0; k < 20000; k++) {
        float *row = pd_hashtab_update(&t, k * 0x100000001ull, &created);
        row = row ? row : pd_hashtab_update(&t, k * 0x100000001ull, &created);
        for (int j = 0; j < 5; j++) row[j] = (float)k + 0.25f * j;
    }
    pd_hashtab_update(&t, 7, &created); /* a counter: one more update admits it */
    pd_hashtab_pass_end(&t);
    FILE *f = tmpfile();
    CHECK(f != NULL);
    CHECK_EQ_INT(pd_hashtab_save(&t, f), 0);
    rewind(f);
    pd_hashtab_init(&u, "u", 5, &lim);
    CHECK_EQ_INT(pd_hashtab_load(&u, f, "dump"), 0);
    CHECK_EQ_INT(pd_hashtab_rows(&u), pd_hashtab_rows(&t));
    CHECK_EQ_INT(u.pass, 1);
    for (long i = 0; i < pd_hashtab_rows(&t); i++) {
        float *a = pd_hashtab_row(&t, i), *b = pd_hashtab_find(&u, pd_hashtab_key(&t, i));
        CHECK(b != NULL);
        CHECK(memcmp(a, b, 5 * sizeof(float)) == 0);
    }
    CHECK(pd_hashtab_update(&u, 7, &created) != NULL);
    CHECK_EQ_INT(created, 1);
    /* a truncated dump is refused */
    rewind(f);
    char buf[64];
    CHECK(fread(buf, 1, sizeof buf, f) == sizeof buf);
    FILE *g = tmpfile();
    fwrite(buf, 1, sizeof buf, g);
    rewind(g);
    CHECK(pd_hashtab_load(&u, g, "short") < 0);
    CHECK_EQ_INT(pd_hashtab_rows(&u), 0);
    fclose(f);
    fclose(g);
    pd_hashtab_free(&t);
    pd_hashtab_free(&u);
}

PD_TEST(hashtab_memory_per_row)
{
    /* 200k rows of 9 floats + Adam's 18: within 1.5 x raw + 32 bytes */
    pd_hashtab t;
    pd_hashtab_init(&t, "t", 27, NULL);
    int created;
    for (uint64_t k = 0; k < 200000; k++) pd_hashtab_update(&t, pd_hash_id(k), &created);
    double per_row = (double)pd_hashtab_bytes(&t) / (double)pd_hashtab_rows(&t), raw = 27 * 4;
    CHECK(per_row <= 1.5 * raw + 32);
    pd_hashtab_free(&t);
}

/* --- a pserver's part: frames of 64-bit ids (src/ps/hashshard.c) --------------- */

static pd_frame keys_frame(int type, const uint64_t *keys, uint32_t n, const float *vals, int dim, uint8_t *buf)
{
    memcpy(buf, keys, 8 * (size_t)n);
    if (vals) memcpy(buf + 8 * (size_t)n, vals, 4 * (size_t)n * dim);
    return (pd_frame){.type = (uint16_t)type, .len = (uint32_t)(8 * n + (vals ? 4 * n * dim : 0)), .a = 0, .b = n,
                      .payload = buf};
}

/* ids that pserver `id` of np owns */
static void owned_keys(uint64_t *keys, int n, int id, int np)
{
    for (uint64_t k = 1; n > 0; k++)
        if (pd_hash_owner(k * 0x9e3779b97f4a7c15ull, np) == id) keys[--n] = k * 0x9e3779b97f4a7c15ull;
}

PD_TEST(hashshard_frames_checked)
{
    pd_recipe r;
    memset(&r, 0, sizeof r);
    r.seed = 7;
    pd_param_desc d = {.name = "emb", .rows = 0, .cols = 2, .sparse = 1, .init = {"uniform", -1, 1}, .hash = 1};
    pd_hshard h;
    pd_hshard_init(&h, &r, &d, 0, 1, 2); /* pserver 1 of 2, sgd: no state */
    uint64_t keys[4], other[1];
    owned_keys(keys, 4, 1, 2);
    owned_keys(other, 1, 0, 2);
    uint8_t buf[256];
    float *rows, want[2];
    size_t len;
    /* pull: initial values, the same as pd_init_row gives anywhere, not stored */
    pd_frame f = keys_frame(PD_MSG_PULL_KEYS, keys, 4, NULL, 2, buf);
    CHECK_EQ_INT(pd_hshard_pull(&h, &f, &rows, &len), 0);
    CHECK_EQ_INT(len, 4 * 2 * sizeof(float));
    pd_init_row(&d.init, "emb", 7, keys[2], want, 2);
    CHECK(rows[4] == want[0] && rows[5] == want[1] && want[0] != 0);
    free(rows);
    CHECK_EQ_INT(pd_hashtab_rows(&h.tab), 0);
    /* malformed: wrong length, another pserver's id, NaN; none applied */
    f = keys_frame(PD_MSG_PULL_KEYS, keys, 4, NULL, 2, buf);
    f.len -= 1;
    CHECK_EQ_INT(pd_hshard_pull(&h, &f, &rows, &len), PD_EPROTO);
    float g[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    f = keys_frame(PD_MSG_PUSH_KEYS, keys, 4, g, 2, buf);
    f.b = 3;
    CHECK_EQ_INT(pd_hshard_push(&h, &f), PD_EPROTO);
    f = keys_frame(PD_MSG_PUSH_KEYS, other, 1, g, 2, buf);
    CHECK_EQ_INT(pd_hshard_push(&h, &f), PD_EPROTO);
    CHECK_CONTAINS(pd_err_msg(), "belongs to pserver 0");
    g[3] = NAN;
    f = keys_frame(PD_MSG_PUSH_KEYS, keys, 4, g, 2, buf);
    CHECK_EQ_INT(pd_hshard_push(&h, &f), PD_EDATA);
    g[3] = 4;
    CHECK_EQ_INT(pd_hashtab_rows(&h.grad), 0);
    /* two trainers' pushes, averaged, one SGD step from the initial row */
    f = keys_frame(PD_MSG_PUSH_KEYS, keys, 4, g, 2, buf);
    CHECK_EQ_INT(pd_hshard_push(&h, &f), 0);
    CHECK_EQ_INT(pd_hshard_push(&h, &f), 0);
    pd_opt_hyper hy = {.type = 0, .lr = 0.5f, .t = 1};
    pd_hshard_apply(&h, &hy, 0.5f);
    CHECK_EQ_INT(pd_hashtab_rows(&h.tab), 4);
    CHECK_EQ_INT(pd_hashtab_rows(&h.grad), 0);
    float *row = pd_hashtab_find(&h.tab, keys[2]);
    CHECK_NEAR(row[0], want[0] - 0.5f * 5, 1e-6);
    CHECK_NEAR(row[1], want[1] - 0.5f * 6, 1e-6);
    /* dump in chunks of 3 rows (max bytes), then the end */
    uint8_t *out;
    uint32_t n;
    pd_hshard_dump(&h, 0, 3 * (8 + 8), &out, &len, &n);
    CHECK_EQ_INT(n, 3);
    free(out);
    pd_hshard_dump(&h, 3, 1 << 20, &out, &len, &n);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(len, 8 + 8);
    free(out);
    pd_hshard_dump(&h, 4, 1 << 20, &out, &len, &n);
    CHECK_EQ_INT(n, 0);
    free(out);
    /* checkpoint file: round trip, and a changed byte is refused */
    char path[] = "/tmp/pd_hshard_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    uint32_t sum;
    CHECK_EQ_INT(pd_hshard_save(&h, path, &sum), 0);
    pd_hshard u;
    pd_hshard_init(&u, &r, &d, 0, 1, 2);
    CHECK_EQ_INT(pd_hshard_load(&u, path, sum), 0);
    CHECK_EQ_INT(pd_hashtab_rows(&u.tab), 4);
    CHECK(memcmp(pd_hashtab_find(&u.tab, keys[2]), row, 2 * sizeof(float)) == 0);
    FILE *fp = fopen(path, "r+b");
    fseek(fp, 40, SEEK_SET);
    fputc(0x55, fp);
    fclose(fp);
    CHECK_EQ_INT(pd_hshard_load(&u, path, sum), PD_EDATA);
    unlink(path);
    pd_hshard_free(&h);
    pd_hshard_free(&u);
}
