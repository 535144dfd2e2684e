/* batch.c - growing and copying batches. */
#include "batch.h"
#include "../core/pd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void pd_batch_init(pd_batch *b, const pd_slot *layout, int nslots)
{
    memset(b, 0, sizeof *b);
    b->nslots = nslots;
    b->slots = pd_xcalloc((size_t)nslots + 1, sizeof *b->slots);
    for (int i = 0; i < nslots; i++) {
        memcpy(b->slots[i].name, layout[i].name, sizeof b->slots[i].name);
        b->slots[i].kind = layout[i].kind;
        b->slots[i].width = layout[i].width;
    }
    pd_batch_clear(b);
}

void pd_batch_free(pd_batch *b)
{
    for (int i = 0; i < b->nslots; i++) {
        free(b->slots[i].values);
        free(b->slots[i].ids);
        free(b->slots[i].keys);
        free(b->slots[i].offsets);
    }
    free(b->slots);
    memset(b, 0, sizeof *b);
}

/* p (an array of *cap elements of size bytes) grown to hold at least n */
static void *grow(void *p, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap) return p;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < n) c *= 2;
    *cap = c;
    return pd_xrealloc(p, c * size);
}

/* room for n elements in slot s's array FIELD (offsets, values, ids, keys) */
#define RESERVE(s, field, n) ((s)->field = grow((s)->field, &(s)->cap_##field, (n), sizeof *(s)->field))

void pd_batch_clear(pd_batch *b)
{
    b->n = 0;
    for (int i = 0; i < b->nslots; i++)
        if (b->slots[i].kind == PD_SLOT_ID_LIST) {
            RESERVE(&b->slots[i], offsets, 1);
            b->slots[i].offsets[0] = 0;
        }
}

void pd_slot_push_key(pd_slot *s, int n, uint64_t key)
{
    RESERVE(s, keys, (size_t)n + 1);
    s->keys[n] = key;
}

void pd_slot_push_keys(pd_slot *s, int n, const uint64_t *keys, int nkeys)
{
    RESERVE(s, offsets, (size_t)n + 2);
    int32_t start = s->offsets[n];
    RESERVE(s, keys, (size_t)start + nkeys);
    if (nkeys) memcpy(s->keys + start, keys, (size_t)nkeys * sizeof *keys);
    s->offsets[n + 1] = start + nkeys;
}

/* n is the index of the sample being added (the batch's count before it). */
float *pd_slot_push_dense(pd_slot *s, int n)
{
    RESERVE(s, values, (size_t)(n + 1) * s->width);
    return s->values + (size_t)n * s->width;
}

void pd_slot_push_id(pd_slot *s, int n, int32_t id)
{
    if (s->width == 0) {
        pd_slot_push_key(s, n, (uint64_t)(int64_t)id);
        return;
    }
    RESERVE(s, ids, (size_t)n + 1);
    s->ids[n] = id;
}

void pd_slot_push_ids(pd_slot *s, int n, const int32_t *ids, int nids)
{
    if (s->width == 0) {
        RESERVE(s, offsets, (size_t)n + 2);
        int32_t start = s->offsets[n];
        RESERVE(s, keys, (size_t)start + nids);
        for (int k = 0; k < nids; k++) s->keys[start + k] = (uint64_t)(int64_t)ids[k];
        s->offsets[n + 1] = start + nids;
        return;
    }
    RESERVE(s, offsets, (size_t)n + 2);
    int32_t start = s->offsets[n];
    RESERVE(s, ids, (size_t)start + nids);
    if (nids) memcpy(s->ids + start, ids, (size_t)nids * sizeof *ids);
    s->offsets[n + 1] = start + nids;
}

void pd_batch_append(pd_batch *dst, const pd_batch *src, int i)
{
    int n = dst->n;
    for (int k = 0; k < dst->nslots; k++) {
        pd_slot *d = &dst->slots[k];
        const pd_slot *s = &src->slots[k];
        switch (d->kind) {
        case PD_SLOT_DENSE:
            memcpy(pd_slot_push_dense(d, n), s->values + (size_t)i * s->width,
                   (size_t)s->width * sizeof(float));
            break;
        case PD_SLOT_ID:
            if (d->width == 0) pd_slot_push_key(d, n, s->keys[i]);
            else pd_slot_push_id(d, n, s->ids[i]);
            break;
        case PD_SLOT_ID_LIST:
            if (d->width == 0) pd_slot_push_keys(d, n, s->keys + s->offsets[i], s->offsets[i + 1] - s->offsets[i]);
            else pd_slot_push_ids(d, n, s->ids + s->offsets[i], s->offsets[i + 1] - s->offsets[i]);
            break;
        }
    }
    dst->n = n + 1;
}

int pd_data_open_error(const char *path)
{
    if (errno == EINTR)
        return pd_err_set(PD_EINTR, "interrupted while opening data file %s (a FIFO no one writes to yet?)", path);
    return pd_err_set(PD_ENOENT, "cannot open data file %s: %s", path, strerror(errno));
}
