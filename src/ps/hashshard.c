/* hashshard.c - a pserver's part of a growing table (hashshard.h). */
#include "hashshard.h"
#include "ckpt.h"
#include "../backend/backend.h"
#include "../core/pd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void pd_hshard_init(pd_hshard *h, const pd_recipe *r, const pd_param_desc *d, int opt_state, int id, int np)
{
    memset(h, 0, sizeof *h);
    pd_hashtab_limits lim = {.min_count = d->min_count, .ttl = d->ttl, .max_rows = d->max_rows};
    pd_hashtab_init(&h->tab, d->name, pd_hash_width(d->cols, opt_state), &lim);
    pd_hashtab_init(&h->grad, d->name, d->cols, NULL);
    h->init = d->init;
    h->dim = d->cols;
    h->id = id;
    h->np = np;
    h->seed = (uint64_t)r->seed;
}

void pd_hshard_free(pd_hshard *h)
{
    pd_hashtab_free(&h->tab);
    pd_hashtab_free(&h->grad);
}

/* n ids of 8 bytes, then per id `per` more bytes: the frame's size, and
 * every id this pserver's. */
static int check_keys(const pd_hshard *h, const pd_frame *f, uint64_t per)
{
    if ((uint64_t)f->b * (8 + per) != f->len)
        return pd_err_set(PD_EPROTO, "%s: %u ids do not fit %u bytes", pd_msg_name(f->type), f->b, f->len);
    for (uint32_t i = 0; i < f->b; i++) {
        uint64_t key;
        memcpy(&key, f->payload + 8 * (size_t)i, 8);
        if (pd_hash_owner(key, h->np) != h->id)
            return pd_err_set(PD_EPROTO, "%s: id %llu of table '%s' belongs to pserver %d, not %d",
                              pd_msg_name(f->type), (unsigned long long)key, h->tab.name, pd_hash_owner(key, h->np),
                              h->id);
    }
    return 0;
}

int pd_hshard_pull(pd_hshard *h, const pd_frame *f, float **out, size_t *len)
{
    int rc = check_keys(h, f, 0);
    if (rc < 0) return rc;
    size_t n = (size_t)f->b * h->dim;
    if (n * sizeof(float) > PD_MAX_FRAME)
        return pd_err_set(PD_ERANGE, "PULL_KEYS of %u ids: the reply (%zu bytes) would be over the %u frame limit",
                          f->b, n * sizeof(float), PD_MAX_FRAME);
    float *v = pd_xmalloc(n * sizeof(float) + 1);
    for (uint32_t i = 0; i < f->b; i++) {
        uint64_t key;
        memcpy(&key, f->payload + 8 * (size_t)i, 8);
        float *row = pd_hashtab_find(&h->tab, key), *dst = v + (size_t)i * h->dim;
        if (row) memcpy(dst, row, (size_t)h->dim * sizeof(float));
        else pd_init_row(&h->init, h->tab.name, h->seed, key, dst, h->dim);
    }
    h->pulled += f->b;
    *out = v;
    *len = n * sizeof(float);
    return 0;
}

int pd_hshard_push(pd_hshard *h, const pd_frame *f)
{
    int rc = check_keys(h, f, 4ull * (uint64_t)h->dim);
    if (rc < 0) return rc;
    const uint8_t *vals = f->payload + 8 * (size_t)f->b;
    if (!pd_all_finite((const float *)vals, (size_t)f->b * h->dim))
        return pd_err_set(PD_EDATA, "a gradient with NaN or Inf for table '%s': refused", h->tab.name);
    for (uint32_t i = 0; i < f->b; i++) {
        uint64_t key;
        memcpy(&key, f->payload + 8 * (size_t)i, 8);
        float *g = pd_hashtab_put(&h->grad, key), x;
        for (int j = 0; j < h->dim; j++) {
            memcpy(&x, vals + 4 * ((size_t)i * h->dim + j), 4);
            g[j] += x;
        }
    }
    h->pushed += f->b;
    return 0;
}

void pd_hshard_apply(pd_hshard *h, const pd_opt_hyper *hyper, float scale)
{
    long n = pd_hashtab_rows(&h->grad);
    if (n == 0) return;
    uint64_t *keys = pd_xmalloc((size_t)n * sizeof *keys);
    float *g = pd_xmalloc((size_t)n * h->dim * sizeof(float));
    for (long i = 0; i < n; i++) {
        keys[i] = pd_hashtab_key(&h->grad, i);
        const float *src = pd_hashtab_row(&h->grad, i);
        for (int j = 0; j < h->dim; j++) g[(size_t)i * h->dim + j] = src[j] * scale;
    }
    pd_hash_update(&h->tab, &h->init, h->dim, keys, g, (int)n, hyper, h->seed);
    pd_hashtab_clear(&h->grad);
    free(keys);
    free(g);
}

void pd_hshard_dump(pd_hshard *h, uint32_t first, size_t max, uint8_t **out, size_t *len, uint32_t *n)
{
    long rows = pd_hashtab_rows(&h->tab);
    size_t per = 8 + 4 * (size_t)h->dim, cnt = first < (uint64_t)rows ? (size_t)(rows - first) : 0;
    if (cnt > max / per) cnt = max / per;
    uint8_t *p = pd_xmalloc(cnt * per + 1);
    for (size_t i = 0; i < cnt; i++) {
        uint64_t key = pd_hashtab_key(&h->tab, (long)(first + i));
        memcpy(p + 8 * i, &key, 8);
        memcpy(p + 8 * cnt + 4 * (size_t)h->dim * i, pd_hashtab_row(&h->tab, (long)(first + i)),
               4 * (size_t)h->dim);
    }
    *out = p;
    *len = cnt * per;
    *n = (uint32_t)cnt;
}

void pd_hshard_pass_end(pd_hshard *h, int pass)
{
    pd_hash_pass_log(&h->tab, pass, pd_hashtab_pass_end(&h->tab));
    h->pulled = h->pushed = 0;
}

int pd_hshard_save(const pd_hshard *h, const char *path, uint32_t *sum)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return pd_err_set(PD_ENOMEM, "out of memory");
    int rc = pd_hashtab_save(&h->tab, f);
    fclose(f);
    if (rc == 0) {
        *sum = pd_checksum(text, len);
        rc = pd_ckpt_write_atomic(path, text, len);
    }
    free(text);
    return rc;
}

int pd_hshard_load(pd_hshard *h, const char *path, uint32_t sum)
{
    FILE *f = fopen(path, "rb");
    if (!f) return pd_err_set(errno == ENOENT ? PD_ENOENT : PD_EIO, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0, k;
    uint8_t *buf = pd_xmalloc(cap);
    while ((k = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += k) == cap) buf = pd_xrealloc(buf, cap *= 2);
    int bad = ferror(f), err = errno;
    fclose(f);
    int rc = 0;
    if (bad) {
        rc = pd_err_set(PD_EIO, "%s: read error: %s", path, strerror(err)); /* the file may be fine */
    } else if (pd_checksum(buf, n) != sum) {
        rc = pd_err_set(PD_EDATA, "%s: checksum mismatch (a corrupt or incomplete checkpoint)", path);
    } else {
        FILE *m = fmemopen(buf, n ? n : 1, "rb");
        if (!m) rc = pd_err_set(PD_ENOMEM, "out of memory");
        else {
            rc = pd_hashtab_load(&h->tab, m, path);
            fclose(m);
        }
    }
    free(buf);
    return rc;
}
