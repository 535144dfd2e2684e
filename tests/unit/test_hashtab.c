/* test_hashtab.c - the growing tables (src/nn/hashtab.c) against a plain
 * reference (arrays searched linearly) under random update / find / pass
 * end sequences: admission (min_count), ttl eviction, the max_rows cap
 * (CLOCK) and the dump round trip. */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/nn/hashtab.h"

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
