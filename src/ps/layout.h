/*
 * layout.h - where every parameter lives among the pservers.
 *
 * Trainers and pservers derive the same layout from the recipe: dense
 * parameters cut into blocks of PD_BLOCK_FLOATS spread round-robin over the
 * pservers, sparse tables (embeddings) sharded by row (row r on pserver
 * r mod P). See docs/protocol.md.
 */
#ifndef PD_LAYOUT_H
#define PD_LAYOUT_H

#include "../core/recipe.h"
#include <stddef.h>
#include <stdint.h>

typedef struct pd_lparam {
    char *name;
    int rows, cols;
    int sparse;
    int hash;           /* a growing table: rows keyed by 64-bit ids, on pd_hash_owner's pserver */
    const pd_param_desc *desc; /* the recipe's */
    int table;          /* sparse: table index, else -1 */
    int first_block;    /* dense: its first block */
    int nblocks;
} pd_lparam;

typedef struct pd_lblock {
    int param;
    size_t off;         /* floats into the parameter */
    int len;            /* floats */
} pd_lblock;

typedef struct pd_layout {
    int nparams;
    pd_lparam *params;
    int nblocks;
    pd_lblock *blocks;
    int ntables;
    int *tables;        /* table -> param */
    int npservers, ports_num, ports_sparse;
    int unix_sockets;   /* roles on a pserver's host connect over its Unix sockets */
    int shared_memory;  /* and offer it shared memory there (ring.h) */
    uint8_t digest[32];
    char *digest_text;      /* what the digest is of, a line each: what a checkpoint's shard.txt keeps */
} pd_layout;

int pd_layout_make(pd_layout *l, const pd_recipe *r, int npservers);
void pd_layout_free(pd_layout *l);

static inline int pd_block_owner(const pd_layout *l, int k) { return k % l->npservers; }
/* which of the owner's dense connections carries block k */
static inline int pd_block_conn(const pd_layout *l, int k) { return (k / l->npservers) % l->ports_num; }
/* (one pserver, the common case of one host, divides by nothing: these
 * run for every row of every table a step moves) */
static inline int pd_row_owner(const pd_layout *l, int32_t row)
{
    return l->npservers == 1 ? 0 : (int)(row % l->npservers);
}
static inline int32_t pd_row_local(const pd_layout *l, int32_t row)
{
    return l->npservers == 1 ? row : row / l->npservers;
}
/* rows of a table that pserver s holds */
static inline int pd_rows_on(const pd_layout *l, int rows, int s)
{
    return rows > s ? (rows - s + l->npservers - 1) / l->npservers : 0;
}
/* which sparse connection carries table t (index among the sparse ones) */
static inline int pd_table_conn(const pd_layout *l, int t) { return t % l->ports_sparse; }

#endif
