/* layout.c - blocks, tables and the model digest. */
#include "layout.h"
#include "proto.h"
#include "../core/pd.h"
#include "../core/crypto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pd_layout_make(pd_layout *l, const pd_recipe *r, int npservers)
{
    memset(l, 0, sizeof *l);
    if (npservers < 1) return pd_err_set(PD_EINVAL, "a job with parameters needs at least one pserver");
    l->npservers = npservers;
    l->ports_num = r->ports_num > 0 ? r->ports_num : 1;
    l->ports_sparse = r->ports_num_for_sparse > 0 ? r->ports_num_for_sparse : 1;
    l->unix_sockets = r->unix_sockets;
    l->shared_memory = r->shared_memory;
    int maxp = 0;
    for (int i = 0; i < r->nlayers; i++) maxp += r->layers[i].nparams;
    l->params = pd_xcalloc((size_t)maxp + 1, sizeof *l->params);
    l->tables = pd_xcalloc((size_t)maxp + 1, sizeof *l->tables);
    int cap_blocks = 0;
    /* digest text: everything both sides must agree on */
    size_t dcap = 4096, dlen = 0;
    char *d = pd_xmalloc(dcap);
#define DIGEST(...)                                                                  \
    do {                                                                             \
        int n_ = snprintf(NULL, 0, __VA_ARGS__);                                     \
        while (dlen + (size_t)n_ + 1 > dcap) d = pd_xrealloc(d, dcap *= 2);          \
        snprintf(d + dlen, dcap - dlen, __VA_ARGS__);                                \
        dlen += (size_t)n_;                                                          \
    } while (0)
    DIGEST("paddle-layout 1 block %d mode %s\n", PD_BLOCK_FLOATS, r->mode ? r->mode : "sync");
    for (int i = 0; i < r->nlayers; i++) {
        for (int j = 0; j < r->layers[i].nparams; j++) {
            const pd_param_desc *pd = &r->layers[i].params[j];
            int dup = 0;
            for (int k = 0; k < l->nparams; k++)
                if (strcmp(l->params[k].name, pd->name) == 0) dup = 1;
            if (dup) continue;
            pd_lparam *p = &l->params[l->nparams];
            p->name = pd_xstrdup(pd->name);
            p->rows = pd->rows;
            p->cols = pd->cols;
            p->sparse = pd->sparse;
            p->hash = pd->hash;
            p->desc = pd;
            p->table = -1;
            DIGEST("%s %d %d %d\n", p->name, p->rows, p->cols, p->sparse);
            if (p->hash) DIGEST("hash %ld %d %ld\n", pd->min_count, pd->ttl, pd->max_rows);
            if (p->sparse) {
                p->table = l->ntables;
                l->tables[l->ntables++] = l->nparams;
            } else {
                size_t n = (size_t)p->rows * p->cols;
                p->first_block = l->nblocks;
                for (size_t off = 0; off < n; off += PD_BLOCK_FLOATS) {
                    PD_GROW(&l->blocks, &cap_blocks, l->nblocks + 1);
                    l->blocks[l->nblocks].param = l->nparams;
                    l->blocks[l->nblocks].off = off;
                    l->blocks[l->nblocks].len = (int)(n - off < PD_BLOCK_FLOATS ? n - off : PD_BLOCK_FLOATS);
                    l->nblocks++;
                    p->nblocks++;
                }
            }
            l->nparams++;
        }
    }
    const pd_optimizer_desc *o = &r->optimizer;
    DIGEST("opt %s %.9g %.9g %.9g %.9g %.9g %.9g %.9g %d\n", o->type, o->learning_rate, o->momentum, o->beta1,
           o->beta2, o->epsilon, o->rho, o->weight_decay, o->nesterov);
#undef DIGEST
    pd_sha256(d, dlen, l->digest);
    l->digest_text = d;
    return 0;
}

void pd_layout_free(pd_layout *l)
{
    for (int i = 0; i < l->nparams; i++) free(l->params[i].name);
    free(l->params);
    free(l->blocks);
    free(l->tables);
    free(l->digest_text);
    memset(l, 0, sizeof *l);
}
