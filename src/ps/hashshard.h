/*
 * hashshard.h - a pserver's part of a growing table (an embedding over
 * 64-bit ids, src/nn/hashtab.h): the ids that hash to this pserver
 * (pd_hash_owner), the frames that carry them (docs/protocol.md:
 * PULL_KEYS, PUSH_KEYS, DUMP_KEYS) and its checkpoint file.
 *
 *     pd_hshard h;
 *     pd_hshard_init(&h, recipe, "emb", desc, opt_state, id, npservers);
 *     pd_hshard_pull(&h, &frame, &rows, &nbytes);  // reply KEY_ROWS
 *     pd_hshard_push(&h, &frame);                  // sum this step's gradients
 *     pd_hshard_apply(&h, &hyper, 1.f / trainers); // the optimizer, once per step
 *     pd_hshard_free(&h);
 */
#ifndef PD_HASHSHARD_H
#define PD_HASHSHARD_H

#include "proto.h"
#include "../core/recipe.h"
#include "../nn/hashtab.h"
#include "../nn/net.h"

typedef struct pd_hshard {
    pd_hashtab tab;         /* the rows (values and optimizer state) */
    pd_hashtab grad;        /* the step's summed gradients, by id */
    pd_init init;
    int dim, id, np;
    uint64_t seed;
    long pulled, pushed;    /* ids moved this pass */
} pd_hshard;

void pd_hshard_init(pd_hshard *h, const pd_recipe *r, const pd_param_desc *d, int opt_state, int id, int np);
void pd_hshard_free(pd_hshard *h);
/* PULL_KEYS: the rows (or initial values) of the frame's ids into *out
 * (malloc'd, *len bytes). PD_EPROTO / PD_ERANGE with a message when the
 * frame is malformed or names an id another pserver owns. */
int pd_hshard_pull(pd_hshard *h, const pd_frame *f, float **out, size_t *len);
/* PUSH_KEYS: add the frame's gradients to the step's (checked as pull,
 * and every value finite: PD_EDATA). */
int pd_hshard_push(pd_hshard *h, const pd_frame *f);
/* The step's gradients (scaled by scale) through the optimizer into the
 * rows, then forgotten. */
void pd_hshard_apply(pd_hshard *h, const pd_opt_hyper *hyper, float scale);
/* DUMP_KEYS from row `first`: as many ids and rows as fit max bytes
 * (ids, then rows of dim floats) into *out; *n of them (0: the end). */
void pd_hshard_dump(pd_hshard *h, uint32_t first, size_t max, uint8_t **out, size_t *len, uint32_t *n);
/* Pass end: ttl eviction, logged. */
void pd_hshard_pass_end(pd_hshard *h, int pass);
/* The table's dump (rows, admission counters, its pass) into path
 * atomically (*sum: its checksum), or back (the checksum must match). */
int pd_hshard_save(const pd_hshard *h, const char *path, uint32_t *sum);
int pd_hshard_load(pd_hshard *h, const char *path, uint32_t sum);

#endif
