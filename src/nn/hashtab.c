/* hashtab.c - the growing tables of embeddings over 64-bit ids (hashtab.h). */
#include "hashtab.h"
#include "../core/log.h"
#include "../core/pd.h"

#include <stdlib.h>
#include <string.h>

uint64_t pd_hash_id(uint64_t x)
{
    /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* --- one store ------------------------------------------------------------- */

static size_t chunk_bytes(int width)
{
    return (size_t)PD_HT_CHUNK * (8 + 4 + 4 + (size_t)width * sizeof(float));
}

static uint64_t *keys_of(const pd_htstore *s, long i)
{
    return (uint64_t *)s->chunks[i / PD_HT_CHUNK] + i % PD_HT_CHUNK;
}

static uint32_t *last_of(const pd_htstore *s, long i)
{
    return (uint32_t *)(s->chunks[i / PD_HT_CHUNK] + (size_t)PD_HT_CHUNK * 8) + i % PD_HT_CHUNK;
}

static uint32_t *aux_of(const pd_htstore *s, long i)
{
    return (uint32_t *)(s->chunks[i / PD_HT_CHUNK] + (size_t)PD_HT_CHUNK * 12) + i % PD_HT_CHUNK;
}

static float *values_of(const pd_htstore *s, long i)
{
    return (float *)(s->chunks[i / PD_HT_CHUNK] + (size_t)PD_HT_CHUNK * 16) + (size_t)(i % PD_HT_CHUNK) * s->width;
}

static void store_init(pd_htstore *s, int width)
{
    memset(s, 0, sizeof *s);
    s->width = width;
}

static void store_free(pd_htstore *s)
{
    for (long c = 0; c < s->nchunks; c++) free(s->chunks[c]);
    free(s->chunks);
    free(s->index);
    store_init(s, s->width);
}

/* The index slot holding id, or of the empty slot where it would go. */
static uint64_t slot_of(const pd_htstore *s, uint64_t id)
{
    uint64_t h = pd_hash_id(id) & s->mask;
    while (s->index[h] && *keys_of(s, s->index[h] - 1) != id) h = (h + 1) & s->mask;
    return h;
}

static long store_find(const pd_htstore *s, uint64_t id)
{
    if (!s->cap) return -1;
    uint32_t v = s->index[slot_of(s, id)];
    return v ? (long)v - 1 : -1;
}

static void regrow(pd_htstore *s, uint64_t cap)
{
    free(s->index);
    s->index = pd_xcalloc(cap, sizeof *s->index);
    s->cap = cap;
    s->mask = cap - 1;
    for (long i = 0; i < s->n; i++) s->index[slot_of(s, *keys_of(s, i))] = (uint32_t)(i + 1);
}

/* Append a row for id (absent), zero-filled; returns its number. */
static long store_add(pd_htstore *s, uint64_t id)
{
    if ((uint64_t)(s->n + 1) * 4 > s->cap * 3) regrow(s, s->cap ? s->cap * 2 : 64);
    long i = s->n;
    if (i == s->nchunks * PD_HT_CHUNK) {
        PD_GROW(&s->chunks, &s->cap_chunks, s->nchunks + 1);
        s->chunks[s->nchunks++] = pd_xmalloc(chunk_bytes(s->width));
    }
    s->n++;
    *keys_of(s, i) = id;
    *last_of(s, i) = 0;
    *aux_of(s, i) = 0;
    memset(values_of(s, i), 0, (size_t)s->width * sizeof(float));
    s->index[slot_of(s, id)] = (uint32_t)(i + 1);
    return i;
}

/* Remove row i: its index slot by backward shift, then the last row moves
 * into its place. */
static void store_remove(pd_htstore *s, long i)
{
    uint64_t h = slot_of(s, *keys_of(s, i));
    for (uint64_t j = (h + 1) & s->mask;; j = (j + 1) & s->mask) {
        if (!s->index[j]) break;
        uint64_t home = pd_hash_id(*keys_of(s, s->index[j] - 1)) & s->mask;
        /* j's entry may move to h when h lies cyclically in [home, j) */
        if (((j - home) & s->mask) >= ((j - h) & s->mask)) {
            s->index[h] = s->index[j];
            h = j;
        }
    }
    s->index[h] = 0;
    long last = s->n - 1;
    if (i != last) {
        s->index[slot_of(s, *keys_of(s, last))] = (uint32_t)(i + 1);
        *keys_of(s, i) = *keys_of(s, last);
        *last_of(s, i) = *last_of(s, last);
        *aux_of(s, i) = *aux_of(s, last);
        memcpy(values_of(s, i), values_of(s, last), (size_t)s->width * sizeof(float));
    }
    s->n--;
    if (s->nchunks > 1 && s->n <= (s->nchunks - 2) * PD_HT_CHUNK) free(s->chunks[--s->nchunks]);
    if (s->hand > s->n) s->hand = 0;
}

/* CLOCK: evict one row (s->n > 0). */
static void store_evict_one(pd_htstore *s)
{
    for (;;) {
        if (s->hand >= s->n) s->hand = 0;
        uint32_t *ref = aux_of(s, s->hand);
        if (*ref) {
            *ref = 0;
            s->hand++;
            continue;
        }
        store_remove(s, s->hand);
        return;
    }
}

static long store_expire(pd_htstore *s, uint32_t pass, int ttl)
{
    long gone = 0;
    for (long i = 0; i < s->n;) {
        if (pass - *last_of(s, i) >= (uint32_t)ttl) {
            store_remove(s, i); /* row i is now the former last row: look again */
            gone++;
        } else {
            i++;
        }
    }
    return gone;
}

static size_t store_bytes(const pd_htstore *s)
{
    return (size_t)s->nchunks * chunk_bytes(s->width) + (size_t)s->cap * sizeof *s->index +
           (size_t)s->cap_chunks * sizeof *s->chunks;
}

/* --- the table ------------------------------------------------------------- */

void pd_hashtab_init(pd_hashtab *t, const char *name, int width, const pd_hashtab_limits *lim)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name ? name : "table");
    if (lim) t->lim = *lim;
    store_init(&t->rows, width);
    store_init(&t->counts, 0);
}

void pd_hashtab_free(pd_hashtab *t)
{
    store_free(&t->rows);
    store_free(&t->counts);
}

void pd_hashtab_clear(pd_hashtab *t)
{
    pd_hashtab_free(t);
    t->pass = 0;
    t->evicted_ttl = t->evicted_cap = 0;
}

float *pd_hashtab_find(pd_hashtab *t, uint64_t id)
{
    long i = store_find(&t->rows, id);
    return i < 0 ? NULL : values_of(&t->rows, i);
}

float *pd_hashtab_row(const pd_hashtab *t, long i) { return values_of(&t->rows, i); }
uint64_t pd_hashtab_key(const pd_hashtab *t, long i) { return *keys_of(&t->rows, i); }

/* Room for one more row under max_rows. */
static void make_room(pd_hashtab *t)
{
    long cap = t->lim.max_rows > 0 ? t->lim.max_rows : PD_HT_MAX_ROWS;
    if (t->rows.n < cap) return;
    if (!t->warned_cap) {
        PD_WARN("table '%s': max_rows = %ld reached; least recently updated rows are evicted from now on (CLOCK)",
                t->name, cap);
        t->warned_cap = 1;
    }
    store_evict_one(&t->rows);
    t->evicted_cap++;
}

/* Count an update of an id without a row; 1 when it is now admitted. */
static int admit(pd_hashtab *t, uint64_t id)
{
    if (t->lim.min_count <= 1) return 1;
    pd_htstore *c = &t->counts;
    long i = store_find(c, id);
    if (i < 0) {
        long cap = t->lim.max_rows > 0 ? t->lim.max_rows : PD_HT_MAX_ROWS;
        if (c->n >= cap) store_evict_one(c);
        i = store_add(c, id);
    }
    *last_of(c, i) = t->pass;
    uint32_t *n = aux_of(c, i);
    if (*n < UINT32_MAX) (*n)++;
    if ((long)*n < t->lim.min_count) return 0;
    store_remove(c, i);
    return 1;
}

float *pd_hashtab_update(pd_hashtab *t, uint64_t id, int *created)
{
    *created = 0;
    long i = store_find(&t->rows, id);
    if (i < 0) {
        if (!admit(t, id)) return NULL;
        make_room(t);
        i = store_add(&t->rows, id);
        *created = 1;
    }
    *last_of(&t->rows, i) = t->pass;
    *aux_of(&t->rows, i) = 1;
    return values_of(&t->rows, i);
}

float *pd_hashtab_put(pd_hashtab *t, uint64_t id)
{
    long i = store_find(&t->rows, id);
    if (i < 0) i = store_add(&t->rows, id);
    *last_of(&t->rows, i) = t->pass;
    return values_of(&t->rows, i);
}

long pd_hashtab_pass_end(pd_hashtab *t)
{
    long gone = 0;
    if (t->lim.ttl > 0) {
        gone = store_expire(&t->rows, t->pass, t->lim.ttl);
        store_expire(&t->counts, t->pass, t->lim.ttl);
        t->evicted_ttl += gone;
    }
    t->pass++;
    return gone;
}

size_t pd_hashtab_bytes(const pd_hashtab *t) { return store_bytes(&t->rows) + store_bytes(&t->counts); }

void pd_hash_pass_log(const pd_hashtab *t, int pass, long evicted)
{
    long n = pd_hashtab_rows(t);
    PD_INFO("table %s: pass %d: %ld rows, %ld ids waiting for min_count, %ld evicted (ttl %d), %ld evicted by "
            "max_rows so far, %.0f bytes a row", t->name, pass, n, t->counts.n, evicted, t->lim.ttl, t->evicted_cap,
            n ? (double)pd_hashtab_bytes(t) / (double)n : 0.0);
}

/* --- dumps ----------------------------------------------------------------------- */

#define HT_MAGIC "PDHASHT1"

static int store_save(const pd_htstore *s, FILE *f)
{
    int64_t n = s->n;
    if (fwrite(&n, sizeof n, 1, f) != 1) return -1;
    for (long i = 0; i < s->n; i++) {
        if (fwrite(keys_of(s, i), 8, 1, f) != 1 || fwrite(last_of(s, i), 4, 1, f) != 1 ||
            fwrite(aux_of(s, i), 4, 1, f) != 1 ||
            (s->width && fwrite(values_of(s, i), sizeof(float), (size_t)s->width, f) != (size_t)s->width))
            return -1;
    }
    return 0;
}

int pd_hashtab_save(const pd_hashtab *t, FILE *f)
{
    int32_t head[2] = {t->rows.width, (int32_t)t->pass};
    if (fwrite(HT_MAGIC, 8, 1, f) != 1 || fwrite(head, sizeof head, 1, f) != 1 || store_save(&t->rows, f) < 0 ||
        store_save(&t->counts, f) < 0)
        return pd_err_set(PD_EIO, "table '%s': cannot write its rows", t->name);
    return 0;
}

static int store_load(pd_htstore *s, FILE *f)
{
    int64_t n;
    if (fread(&n, sizeof n, 1, f) != 1 || n < 0 || n > PD_HT_MAX_ROWS) return -1;
    float *v = pd_xmalloc((size_t)(s->width ? s->width : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        uint64_t key;
        uint32_t last, aux;
        if (fread(&key, 8, 1, f) != 1 || fread(&last, 4, 1, f) != 1 || fread(&aux, 4, 1, f) != 1 ||
            (s->width && fread(v, sizeof(float), (size_t)s->width, f) != (size_t)s->width) ||
            store_find(s, key) >= 0) {
            free(v);
            return -1;
        }
        long r = store_add(s, key);
        *last_of(s, r) = last;
        *aux_of(s, r) = aux;
        memcpy(values_of(s, r), v, (size_t)s->width * sizeof(float));
    }
    free(v);
    return 0;
}

int pd_hashtab_load(pd_hashtab *t, FILE *f, const char *what)
{
    char magic[8];
    int32_t head[2];
    pd_hashtab_clear(t);
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, HT_MAGIC, 8) != 0 || fread(head, sizeof head, 1, f) != 1)
        return pd_err_set(PD_EDATA, "%s: not a table dump", what);
    if (head[0] != t->rows.width)
        return pd_err_set(PD_EDATA, "%s: rows of %d floats, table '%s' has %d", what, head[0], t->name,
                          t->rows.width);
    t->pass = (uint32_t)head[1];
    if (store_load(&t->rows, f) < 0 || store_load(&t->counts, f) < 0) {
        pd_hashtab_clear(t);
        return pd_err_set(PD_EDATA, "%s: truncated or corrupt table dump", what);
    }
    return 0;
}
