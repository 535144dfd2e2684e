/*
 * criteo.h - the Criteo Display Advertising format (data.format = "criteo").
 *
 * One sample a line, tab-separated:
 *
 *     label  I1 .. I13  C1 .. C26
 *
 * label is 0 or 1; I1..I13 are integers (may be negative); C1..C26 are
 * categorical values of up to 8 hex digits. Any field but the label may be
 * empty (missing). A line of 39 fields has no label (the test files of the
 * Kaggle challenge): each file is read as labelled or not from its first
 * line, and a label slot then reads 0.
 *
 * The slots a model may read, by data-layer name:
 *
 *     label    nn.data("label", 1) (0.0 / 1.0) or nn.id("label", 2)
 *     dense    nn.data("dense", 13): I1..I13 transformed
 *     I1..I13  nn.data("In", 1): one of them transformed
 *     C1..C26  nn.id("Cn", N): the column's feature, folded into [0, N);
 *              nn.id("Cn") (no range): the 64-bit feature id itself, for
 *              a growing table
 *     sparse   nn.id_list("sparse", N): the 26 features of the line (no
 *              range: their 64-bit ids)
 *
 * Transform of the integers (data.dense_transform): "log1p" (default)
 * gives log(1 + max(v, 0)), "none" the value itself; a missing value is 0.
 * A categorical value is a 64-bit feature id that holds its column, so equal
 * strings in different columns are different features (a missing value is a
 * feature of its own per column); pd_criteo_fold hashes it into the slot's
 * range, or into [0, data.hash_space) when that is set.
 *
 *     pd_criteo c;
 *     pd_criteo_bind(&c, layout, nslots, &recipe);
 *     pd_criteo_sink sink = {.sample = offer, .bad = skip_or_fail, .ctx = rd};
 *     pd_criteo_read_file(&c, "day_0.txt", &stage, &sink);
 */
#ifndef PD_CRITEO_H
#define PD_CRITEO_H

#include "batch.h"
#include "../core/recipe.h"

#include <stdint.h>

#define PD_CRITEO_NDENSE 13
#define PD_CRITEO_NCAT 26
#define PD_CRITEO_MAX_LINE 4096 /* bytes a line, newline included */
#define PD_CRITEO_MAX_INT 19    /* characters of an integer field */

typedef struct pd_criteo {
    int label, dense, sparse;       /* slot indices, -1: not read */
    int label_is_id;
    int ints[PD_CRITEO_NDENSE];     /* slots I1..I13, -1 */
    int cats[PD_CRITEO_NCAT];       /* slots C1..C26, -1 */
    uint32_t fold[PD_CRITEO_NCAT];  /* ids of column k fold into [0, fold[k]) (0: not folded) */
    uint32_t sparse_fold;
    int log1p;
} pd_criteo;

/* Which slot of the layout reads what; PD_ERECIPE naming the slot when one
 * is not a Criteo field or has the wrong kind or width, or when a range is
 * smaller than data.hash_space. */
int pd_criteo_bind(pd_criteo *c, const pd_slot *layout, int nslots, const pd_recipe *r);

/* The 64-bit feature id of value v of categorical column col (0..25). */
uint64_t pd_criteo_feature(int col, uint32_t v, int present);
/* A feature id folded into [0, n) by a hash of all its bits (n >= 1). */
int32_t pd_criteo_fold(uint64_t id, uint32_t n);

/* Where read_file sends its lines: sample() when stage holds one good line
 * (0 or < 0 to stop), bad() when a line is malformed (the message is set;
 * 0 to go on, < 0 to stop). */
typedef struct pd_criteo_sink {
    int (*sample)(void *ctx);
    int (*bad)(void *ctx);
    void *ctx;
} pd_criteo_sink;

/* Parse one line (no newline) into stage as one sample. *labelled: -1 at
 * the start of a file, set by the first line; 0 or PD_EDATA "file:line: ...". */
int pd_criteo_parse(const pd_criteo *c, char *line, pd_batch *stage, int *labelled, const char *file, long lineno);
/* Read one file: 0, or < 0 (message set) when it cannot be read or a sink
 * callback stopped. Every line is read into a bounded buffer. */
int pd_criteo_read_file(const pd_criteo *c, const char *file, pd_batch *stage, const pd_criteo_sink *sink);

#endif
