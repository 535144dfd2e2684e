/*
 * hashtab.h - a growing table of float rows keyed by 64-bit feature ids:
 * the storage of embeddings over ids without a declared range
 * (nn.id("C1") without a range; docs/ctr.md). The pservers hold one per
 * table for the ids they own, `paddle train` one per table for all ids.
 *
 * Open addressing (linear probing) over 4-byte row numbers; the rows are
 * dense, in chunks, each with its key, the pass it was last updated in and
 * a reference bit. A removed row's place is taken by the last row, so rows
 * stay dense and a scan is a loop over 0..rows-1.
 *
 *     pd_hashtab t;
 *     pd_hashtab_limits lim = {.min_count = 2, .ttl = 3, .max_rows = 1000000};
 *     pd_hashtab_init(&t, "emb", width, &lim);
 *     float *r = pd_hashtab_find(&t, id);      // NULL: not stored (initial value)
 *     int created;
 *     r = pd_hashtab_update(&t, id, &created); // admission, LRU cap; NULL: not admitted yet
 *     pd_hashtab_pass_end(&t);                 // ttl eviction
 *     pd_hashtab_free(&t);
 *
 * Admission: an id gets a row on its min_count-th update; until then only a
 * counter (key, count) is kept. The memory cap (max_rows) evicts by CLOCK,
 * an approximation of least recently used: every update sets the row's
 * reference bit; to make room a hand sweeps the rows, clearing set bits and
 * evicting the first row whose bit is clear.
 */
#ifndef PD_HASHTAB_H
#define PD_HASHTAB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PD_HT_CHUNK 4096 /* rows per allocation */
#define PD_HT_MAX_ROWS 2000000000L

typedef struct pd_hashtab_limits {
    long min_count; /* updates before an id gets a row (<= 1: the first) */
    int ttl;        /* passes without update before a row is evicted (0: never) */
    long max_rows;  /* rows at most (0: no cap) */
} pd_hashtab_limits;

/* Rows of width floats keyed by 64-bit ids (one store; a table has two). */
typedef struct pd_htstore {
    int width;
    long n;             /* rows */
    long nchunks, cap_chunks;
    uint8_t **chunks;   /* each: keys[C] (u64), last[C] (u32), aux[C] (u32), values[C * width] */
    uint32_t *index;    /* cap slots: 0 empty, else row + 1 */
    uint64_t cap, mask;
    long hand;          /* the CLOCK hand */
} pd_htstore;

typedef struct pd_hashtab {
    char name[64];
    pd_hashtab_limits lim;
    pd_htstore rows;    /* aux: reference bit */
    pd_htstore counts;  /* ids not admitted yet; aux: updates so far */
    uint32_t pass;      /* passes ended */
    long evicted_ttl, evicted_cap; /* totals, for logs and tests */
    int warned_cap;
} pd_hashtab;

void pd_hashtab_init(pd_hashtab *t, const char *name, int width, const pd_hashtab_limits *lim);
void pd_hashtab_free(pd_hashtab *t);
/* Drop every row and counter (keeps the limits). */
void pd_hashtab_clear(pd_hashtab *t);
static inline long pd_hashtab_rows(const pd_hashtab *t) { return t->rows.n; }

/* The row of id, or NULL when it has none. No side effect. */
float *pd_hashtab_find(pd_hashtab *t, uint64_t id);
/* An update of id: its row (reference bit set, last pass noted), created
 * zero-filled when the id reaches min_count (*created = 1, the caller fills
 * in its initial value); NULL while the id is not admitted. At max_rows the
 * CLOCK evicts a row first (warning once). */
float *pd_hashtab_update(pd_hashtab *t, uint64_t id, int *created);
/* The row of id, created zero-filled without admission or cap (loading). */
float *pd_hashtab_put(pd_hashtab *t, uint64_t id);
/* Row i (0 <= i < rows) and its key. */
float *pd_hashtab_row(const pd_hashtab *t, long i);
uint64_t pd_hashtab_key(const pd_hashtab *t, long i);
/* End of a pass: evict rows (and counters) not updated for ttl passes.
 * Returns the rows evicted. */
long pd_hashtab_pass_end(pd_hashtab *t);
/* The pass-end line: rows, ids waiting for admission, evictions (ttl:
 * this pass's, max_rows: so far), bytes per row. */
void pd_hash_pass_log(const pd_hashtab *t, int pass, long evicted);
/* Bytes the table holds (rows, counters, index). */
size_t pd_hashtab_bytes(const pd_hashtab *t);

/* Binary dump (checkpoints): 0 or PD_EIO / PD_EDATA (message set; what names
 * the file). load replaces the contents; the width must match. */
int pd_hashtab_save(const pd_hashtab *t, FILE *f);
int pd_hashtab_load(pd_hashtab *t, FILE *f, const char *what);

/* 64-bit mixes of an id: the index's, and the one that picks its pserver. */
uint64_t pd_hash_id(uint64_t id);
static inline int pd_hash_owner(uint64_t id, int npservers)
{
    return (int)(pd_hash_id(id ^ 0x9e3779b97f4a7c15ull) % (uint64_t)npservers);
}

#endif
