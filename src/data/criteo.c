/*
 * criteo.c - the Criteo format: binding slots to its fields, parsing one
 * line, reading a file line by line in a bounded buffer. See criteo.h.
 */
#include "criteo.h"
#include "../core/pd.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NFIELDS (1 + PD_CRITEO_NDENSE + PD_CRITEO_NCAT)

/* --- feature ids ------------------------------------------------------------- */

uint64_t pd_criteo_feature(int col, uint32_t v, int present)
{
    /* column in the high bits, a presence bit, the 32-bit value: distinct
     * for every (column, value) and for a missing value of each column */
    return ((uint64_t)(col + 1) << 33) | ((uint64_t)(present != 0) << 32) | v;
}

int32_t pd_criteo_fold(uint64_t id, uint32_t n)
{
    /* splitmix64's finaliser: every bit of the id moves every bit of the hash */
    uint64_t z = id + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (int32_t)(z % (n ? n : 1));
}

/* --- binding ------------------------------------------------------------------ */

static int numbered(const char *name, char prefix, int max)
{
    if (name[0] != prefix || name[1] < '1' || name[1] > '9') return -1;
    char *end;
    long k = strtol(name + 1, &end, 10);
    return *end == '\0' && k >= 1 && k <= max ? (int)k - 1 : -1;
}

static const char *kind_name(const pd_slot *s)
{
    return s->kind == PD_SLOT_DENSE ? "dense" : s->kind == PD_SLOT_ID ? "id" : "id_list";
}

static int bind_ids(const pd_slot *s, const pd_recipe *r, uint32_t *fold)
{
    if (s->width == 0) { /* 64-bit feature ids, for a growing table: not folded */
        *fold = 0;
        return 0;
    }
    if (r->hash_space > 0 && s->width < r->hash_space)
        return pd_err_set(PD_ERECIPE, "%s: slot '%s' has %d ids, fewer than data.hash_space = %d: declare it with "
                                      "range %d or more", r->path, s->name, s->width, r->hash_space, r->hash_space);
    *fold = (uint32_t)(r->hash_space > 0 ? r->hash_space : s->width);
    return 0;
}

static int bind_slot(pd_criteo *c, const pd_slot *s, int i, const pd_recipe *r)
{
    int k;
    const char *want = NULL;
    if (strcmp(s->name, "label") == 0) {
        c->label = i;
        c->label_is_id = s->kind == PD_SLOT_ID;
        if (!(s->kind == PD_SLOT_DENSE && s->width == 1) && !(s->kind == PD_SLOT_ID && s->width == 2))
            want = "nn.data(\"label\", 1) or nn.id(\"label\", 2)";
    } else if (strcmp(s->name, "dense") == 0) {
        c->dense = i;
        if (s->kind != PD_SLOT_DENSE || s->width != PD_CRITEO_NDENSE) want = "nn.data(\"dense\", 13)";
    } else if ((k = numbered(s->name, 'I', PD_CRITEO_NDENSE)) >= 0) {
        c->ints[k] = i;
        if (s->kind != PD_SLOT_DENSE || s->width != 1) want = "nn.data(\"In\", 1)";
    } else if ((k = numbered(s->name, 'C', PD_CRITEO_NCAT)) >= 0) {
        c->cats[k] = i;
        if (s->kind != PD_SLOT_ID) want = "nn.id(\"Cn\", range)";
        else return bind_ids(s, r, &c->fold[k]);
    } else if (strcmp(s->name, "sparse") == 0) {
        c->sparse = i;
        if (s->kind != PD_SLOT_ID_LIST) want = "nn.id_list(\"sparse\", range)";
        else return bind_ids(s, r, &c->sparse_fold);
    } else {
        return pd_err_set(PD_ERECIPE, "%s: data layer '%s' is not a criteo field (the fields are label, dense, "
                                      "I1..I13, C1..C26, sparse)", r->path, s->name);
    }
    if (want)
        return pd_err_set(PD_ERECIPE, "%s: criteo slot '%s' is %s of %d here; declare it as %s", r->path, s->name,
                          kind_name(s), s->width, want);
    return 0;
}

int pd_criteo_bind(pd_criteo *c, const pd_slot *layout, int nslots, const pd_recipe *r)
{
    memset(c, 0, sizeof *c);
    c->label = c->dense = c->sparse = -1;
    for (int k = 0; k < PD_CRITEO_NDENSE; k++) c->ints[k] = -1;
    for (int k = 0; k < PD_CRITEO_NCAT; k++) c->cats[k] = -1;
    c->log1p = !r->dense_transform || strcmp(r->dense_transform, "none") != 0;
    for (int i = 0; i < nslots; i++) {
        int rc = bind_slot(c, &layout[i], i, r);
        if (rc < 0) return rc;
    }
    return 0;
}

/* --- one line ------------------------------------------------------------------ */

/* "label", "I1".."I13" or "C1".."C26"; buf holds at least 8 bytes. */
static const char *field_name(int f, char *buf, size_t len)
{
    int n;
    if (f == 0) n = snprintf(buf, len, "label");
    else if (f <= PD_CRITEO_NDENSE) n = snprintf(buf, len, "I%d", f);
    else n = snprintf(buf, len, "C%d", f - PD_CRITEO_NDENSE);
    return n < (int)len ? buf : "?";
}

static int bad_field(const char *file, long lineno, int f, const char *text, size_t len, const char *why)
{
    char name[8];
    return pd_err_set(PD_EDATA, "%s:%ld: field %d (%s) '%.*s%s' %s", file, lineno, f + 1,
                      field_name(f, name, sizeof name), (int)PD_MIN(len, 24), text, len > 24 ? "..." : "", why);
}

/* An integer field: optional '-', digits. *missing when empty. */
static int parse_int(const char *p, size_t len, double *v, int *missing)
{
    *missing = len == 0;
    *v = 0;
    if (len == 0) return 0;
    if (len > PD_CRITEO_MAX_INT) return -2;
    size_t i = p[0] == '-' ? 1 : 0;
    if (i == len) return -1;
    long long x = 0;
    for (; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        x = x * 10 + (p[i] - '0');
    }
    *v = (double)(p[0] == '-' ? -x : x);
    return 0;
}

/* A categorical field: 1 to 8 hex digits. */
static int parse_hex(const char *p, size_t len, uint32_t *v)
{
    uint32_t x = 0;
    if (len > 8) return -2;
    for (size_t i = 0; i < len; i++) {
        char ch = p[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0) return -1;
        x = x << 4 | (uint32_t)d;
    }
    *v = x;
    return 0;
}

/* Split at tabs: start and length of each field; the number of fields, or
 * NFIELDS + 1 when there are more. */
static int split(char *line, const char **start, size_t *len)
{
    int n = 0;
    char *p = line;
    for (;;) {
        char *tab = strchr(p, '\t');
        if (n == NFIELDS) return NFIELDS + 1;
        start[n] = p;
        len[n] = tab ? (size_t)(tab - p) : strlen(p);
        n++;
        if (!tab) return n;
        p = tab + 1;
    }
}

static int put_label(const pd_criteo *c, pd_batch *st, const char *p, size_t len, const char *file, long lineno)
{
    int y = 0;
    if (p) {
        if (len != 1 || (p[0] != '0' && p[0] != '1')) return bad_field(file, lineno, 0, p, len, "must be 0 or 1");
        y = p[0] - '0';
    }
    if (c->label < 0) return 0;
    pd_slot *s = &st->slots[c->label];
    if (c->label_is_id) pd_slot_push_id(s, 0, y);
    else *pd_slot_push_dense(s, 0) = (float)y;
    return 0;
}

static int put_ints(const pd_criteo *c, pd_batch *st, const char **f, const size_t *len, const char *file,
                    long lineno)
{
    float x[PD_CRITEO_NDENSE];
    for (int k = 0; k < PD_CRITEO_NDENSE; k++) {
        double v;
        int missing, rc = parse_int(f[k], len[k], &v, &missing);
        if (rc < 0)
            return bad_field(file, lineno, 1 + k, f[k], len[k],
                             rc == -2 ? "is too long for an integer" : "is not an integer");
        x[k] = missing ? 0.f : c->log1p ? (float)log1p(v > 0 ? v : 0) : (float)v;
    }
    if (c->dense >= 0) memcpy(pd_slot_push_dense(&st->slots[c->dense], 0), x, sizeof x);
    for (int k = 0; k < PD_CRITEO_NDENSE; k++)
        if (c->ints[k] >= 0) *pd_slot_push_dense(&st->slots[c->ints[k]], 0) = x[k];
    return 0;
}

static int put_cats(const pd_criteo *c, pd_batch *st, const char **f, const size_t *len, const char *file,
                    long lineno)
{
    int32_t all[PD_CRITEO_NCAT];
    uint64_t keys[PD_CRITEO_NCAT];
    for (int k = 0; k < PD_CRITEO_NCAT; k++) {
        uint32_t v = 0;
        int rc = parse_hex(f[k], len[k], &v);
        if (rc < 0)
            return bad_field(file, lineno, 1 + PD_CRITEO_NDENSE + k, f[k], len[k],
                             rc == -2 ? "is longer than 8 hex digits" : "is not hexadecimal");
        uint64_t id = pd_criteo_feature(k, v, len[k] > 0);
        keys[k] = id;
        if (c->cats[k] >= 0) {
            if (c->fold[k]) pd_slot_push_id(&st->slots[c->cats[k]], 0, pd_criteo_fold(id, c->fold[k]));
            else pd_slot_push_key(&st->slots[c->cats[k]], 0, id);
        }
        if (c->sparse >= 0 && c->sparse_fold) all[k] = pd_criteo_fold(id, c->sparse_fold);
    }
    if (c->sparse >= 0 && c->sparse_fold) pd_slot_push_ids(&st->slots[c->sparse], 0, all, PD_CRITEO_NCAT);
    else if (c->sparse >= 0) pd_slot_push_keys(&st->slots[c->sparse], 0, keys, PD_CRITEO_NCAT);
    return 0;
}

int pd_criteo_parse(const pd_criteo *c, char *line, pd_batch *st, int *labelled, const char *file, long lineno)
{
    const char *f[NFIELDS + 1];
    size_t len[NFIELDS + 1];
    int n = split(line, f, len);
    if (n != NFIELDS && n != NFIELDS - 1)
        return pd_err_set(PD_EDATA, "%s:%ld: %s%d tab-separated fields, criteo lines have %d (label, I1..I13, "
                                    "C1..C26) or %d (no label)", file, lineno, n > NFIELDS ? "more than " : "",
                          n > NFIELDS ? NFIELDS : n, NFIELDS, NFIELDS - 1);
    int has = n == NFIELDS;
    if (*labelled < 0) *labelled = has;
    if (has != *labelled)
        return pd_err_set(PD_EDATA, "%s:%ld: %d fields, but the file's first line has %d: %s", file, lineno, n,
                          *labelled ? NFIELDS : NFIELDS - 1,
                          *labelled ? "the label is missing" : "a label column where the file has none");
    pd_batch_clear(st);
    int rc, o = has ? 1 : 0;
    if ((rc = put_label(c, st, has ? f[0] : NULL, has ? len[0] : 0, file, lineno)) < 0 ||
        (rc = put_ints(c, st, f + o, len + o, file, lineno)) < 0 ||
        (rc = put_cats(c, st, f + o + PD_CRITEO_NDENSE, len + o + PD_CRITEO_NDENSE, file, lineno)) < 0) {
        pd_batch_clear(st);
        return rc;
    }
    st->n = 1;
    return 0;
}

/* --- a file --------------------------------------------------------------------- */

/* Read the next line into buf (at most cap - 1 bytes kept, newline and a
 * trailing CR dropped). 1: a line; 0: end of file; -1: the line was longer
 * (read to its end, not kept); -2: it holds a NUL byte. */
static int next_line(FILE *f, char *buf, size_t cap)
{
    size_t n = 0;
    int ch, nul = 0, over = 0;
    while ((ch = getc_unlocked(f)) != EOF && ch != '\n') {
        nul |= ch == 0;
        if (n + 1 < cap) buf[n++] = (char)ch;
        else over = 1;
    }
    if (ch == EOF && n == 0) return 0;
    if (n > 0 && buf[n - 1] == '\r') n--;
    buf[n] = '\0';
    return over ? -1 : nul ? -2 : 1;
}

int pd_criteo_read_file(const pd_criteo *c, const char *file, pd_batch *stage, const pd_criteo_sink *sink)
{
    FILE *f = fopen(file, "r");
    if (!f) return pd_data_open_error(file);
    char *buf = pd_xmalloc(PD_CRITEO_MAX_LINE);
    long lineno = 0;
    int labelled = -1, rc = 0, got;
    while (rc == 0 && (got = next_line(f, buf, PD_CRITEO_MAX_LINE)) != 0) {
        lineno++;
        if (got == 1 && buf[0] == '\0') continue;
        if (got == -1)
            pd_err_set(PD_EDATA, "%s:%ld: line longer than %d bytes", file, lineno, PD_CRITEO_MAX_LINE - 1);
        else if (got == -2)
            pd_err_set(PD_EDATA, "%s:%ld: a NUL byte in the line", file, lineno);
        if (got < 0 || pd_criteo_parse(c, buf, stage, &labelled, file, lineno) < 0) {
            rc = sink->bad(sink->ctx);
            continue;
        }
        rc = sink->sample(sink->ctx);
    }
    if (rc == 0 && ferror(f)) rc = pd_err_set(PD_EIO, "%s:%ld: read error", file, lineno);
    free(buf);
    fclose(f);
    return rc;
}
