/*
 * batch.h - a batch of samples as the readers produce it.
 *
 * A batch has one slot per data layer of the model, in the order the reader
 * defines them. A slot is dense (n rows of width floats), id (n int32 ids) or
 * id_list (n variable-length lists of ids: offsets[n+1] into ids). An id
 * slot of width 0 holds 64-bit feature ids (keys instead of ids), for the
 * growing tables. All of it lives in host memory.
 */
#ifndef PD_BATCH_H
#define PD_BATCH_H

#include <stddef.h>
#include <stdint.h>

enum { PD_SLOT_DENSE, PD_SLOT_ID, PD_SLOT_ID_LIST };

typedef struct pd_slot {
    char name[32];
    int kind;
    int width;          /* dense: floats per sample; id kinds: id range (0: 64-bit ids) */
    float *values;      /* dense: n * width */
    int32_t *ids;       /* id: n; id_list: offsets[n] (width > 0) */
    uint64_t *keys;     /* the same for width 0 */
    int32_t *offsets;   /* id_list: n + 1 */
    size_t cap_values, cap_ids, cap_offsets, cap_keys;
} pd_slot;

typedef struct pd_batch {
    int n;              /* samples */
    int nslots;
    pd_slot *slots;
} pd_batch;

/* A batch with these slots (copied: names, kinds, widths) and no samples. */
void pd_batch_init(pd_batch *b, const pd_slot *layout, int nslots);
void pd_batch_free(pd_batch *b);
/* Drop the samples, keep the memory. */
void pd_batch_clear(pd_batch *b);
/* Append sample i of src to dst (same layout). */
void pd_batch_append(pd_batch *dst, const pd_batch *src, int i);
/* Reserve room in slot s for one more sample with nids ids (id_list). */
float *pd_slot_push_dense(pd_slot *s, int n);
void pd_slot_push_id(pd_slot *s, int n, int32_t id);
void pd_slot_push_ids(pd_slot *s, int n, const int32_t *ids, int nids);
/* 64-bit ids (slots of width 0; push_id(s) into them store the id as is). */
void pd_slot_push_key(pd_slot *s, int n, uint64_t key);
void pd_slot_push_keys(pd_slot *s, int n, const uint64_t *keys, int nkeys);

/* The error of a data file fopen could not open (errno as it left it): a
 * signal that came while a FIFO waited for its writer is named as such.
 * Returns the error code (pd_err_set). */
int pd_data_open_error(const char *path);

#endif
