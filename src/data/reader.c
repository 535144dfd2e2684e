/*
 * reader.c - the reader thread, the batch queue, and the table formats
 * (uci_housing, csv, libsvm; movielens in movielens.c). See reader.h.
 */
#include "reader.h"
#include "criteo.h"
#include "movielens.h"
#include "../core/log.h"
#include "../core/pd.h"
#include "../core/rng.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_COLUMNS 100000
#define MAX_LINE PD_READER_MAX_LINE
#define WAIT_TICK_NS 100000000L /* waits wake this often to look at the stop flag */
#define WAIT_SAY_S 10               /* a wait for data this long is said, */
#define WAIT_SAY_EVERY_S 60         /* and again this often */

enum { FMT_UCI, FMT_CSV, FMT_LIBSVM, FMT_MOVIELENS, FMT_CRITEO, FMT_SYNTH };
enum { ITEM_BATCH, ITEM_END, ITEM_ERROR };

/* Which columns of a table row feed a slot (0-based, inclusive). */
typedef struct colmap {
    int first, last;
} colmap;

struct pd_reader {
    pd_reader_opts o;
    const pd_recipe *r;
    int format;
    pd_slot *layout;
    int nslots;
    colmap *cols;       /* per slot, table formats */
    int ncols_needed;
    int ncols_required; /* of the slots opts.need asks for */
    long unlabeled;     /* rows that lacked the other slots */
    char sep;
    int skip_bad;
    char **files;
    int nfiles;
    char *list;         /* the .list that named the files (NULL: one file) */
    long *list_lines;   /* the line of the list naming each */
    int split_files;    /* shares are whole files */

    /* uci_housing: the whole table, normalised */
    float *uci;
    int uci_rows;

    /* movielens: the dataset, and the field each slot takes */
    pd_movielens *ml;
    int *ml_fields;

    /* criteo: which slot reads which field */
    pd_criteo criteo;

    /* queue */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int qcap, qhead, qlen;
    struct { int kind; pd_batch *b; } *q;
    pd_batch **free_list;
    int nfree, nbatches;
    char errmsg[1024];
    int errcode;

    long skipped;
    int one_pass_read;  /* the thread read a whole pass: skipped is then a pass's */
    long pass_samples, cur_samples;
    int ended;          /* the thread has produced its last pass */
    const char *reading; /* the file the thread reads now (NULL: none yet) */
    int (*tick)(void *ctx); /* pd_reader_set_tick */
    void *tick_ctx;

    /* thread side */
    pd_batch stage;     /* one sample being parsed */
    pd_batch shuf;      /* shuffle buffer */
    pd_batch *out;      /* batch being filled */
    uint64_t rng;
    long sample_index;  /* samples seen this pass (for line sharing) */
};

/* Read one line into *buf (grown as needed, never past MAX_LINE + 2 bytes).
 * 1: a line (with its newline if it had one); 0: end of file; < 0: the line
 * is longer than MAX_LINE or holds a NUL byte (message set). */
static int read_line(FILE *f, char **buf, size_t *cap, const char *file, long lineno)
{
    size_t n = 0;
    for (;;) {
        if (*cap - n < 2 || !*buf) {
            size_t want = PD_MIN(PD_MAX(*cap * 2, (size_t)4096), (size_t)MAX_LINE + 2);
            if (want <= *cap)
                return pd_err_set(PD_EDATA, "%s:%ld: line longer than %d bytes", file, lineno, MAX_LINE);
            *buf = pd_xrealloc(*buf, want);
            *cap = want;
        }
        if (!fgets(*buf + n, (int)(*cap - n), f)) {
            if (ferror(f)) return pd_err_set(PD_EIO, "%s:%ld: %s", file, lineno, strerror(errno));
            return n > 0;
        }
        size_t k = strlen(*buf + n);
        n += k;
        if (k > 0 && (*buf)[n - 1] == '\n') return 1;
        if (n > MAX_LINE) return pd_err_set(PD_EDATA, "%s:%ld: line longer than %d bytes", file, lineno, MAX_LINE);
        /* fgets stopped short of the buffer's end without a newline: the
         * end of the file, or a NUL byte */
        if (n < *cap - 1 && !feof(f))
            return pd_err_set(PD_EDATA, "%s:%ld: NUL byte in the line (not a text file?)", file, lineno);
        if (feof(f)) return 1;
    }
}

/* The thread or the consumer was asked to stop (close, or the caller's flag). */
static int stopping(const pd_reader *rd)
{
    return rd->stop || (rd->o.stop && *rd->o.stop);
}

/* pthread_cond_wait that wakes every WAIT_TICK_NS to look at the stop flag. */
static void wait_tick(pd_reader *rd)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_TICK_NS;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&rd->cv, &rd->mu, &ts);
}

/* Is the number at p written in hex ("0x3")? strtod takes it; ids and
 * values here must be decimal. */
static int is_hex(const char *p)
{
    if (*p == '+' || *p == '-') p++;
    return p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
}

/* --- layout ---------------------------------------------------------------- */

int pd_reader_layout(const pd_recipe *r, pd_slot **slots, int *nslots)
{
    int n = 0;
    pd_slot *s = pd_xcalloc((size_t)r->nlayers + 1, sizeof *s);
    for (int i = 0; i < r->nlayers; i++) {
        const pd_layer_desc *d = &r->layers[i];
        if (strcmp(d->type, "data") != 0) continue;
        if (strlen(d->slot) >= sizeof s[n].name) {
            free(s);
            return pd_err_set(PD_ERECIPE, "%s: slot name '%s' is too long (31 characters at most)",
                              d->where ? d->where : r->path, d->slot);
        }
        snprintf(s[n].name, sizeof s[n].name, "%s", d->slot);
        if (strcmp(d->kind, "id") == 0) {
            s[n].kind = PD_SLOT_ID;
            s[n].width = d->range;
        } else if (strcmp(d->kind, "id_list") == 0) {
            s[n].kind = PD_SLOT_ID_LIST;
            s[n].width = d->range;
        } else {
            s[n].kind = PD_SLOT_DENSE;
            s[n].width = d->size;
        }
        n++;
    }
    *slots = s;
    *nslots = n;
    return 0;
}

/* --- files ------------------------------------------------------------------ */

static char *join_path(const char *dir, const char *path)
{
    if (path[0] == '/' || !dir || !dir[0] || strcmp(dir, ".") == 0) return pd_xstrdup(path);
    return pd_xasprintf("%s/%s", dir, path);
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return pd_xstrdup(".");
    return pd_xasprintf("%.*s", (int)(slash - path), path);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
}

/* Resolve path (relative to the recipe) into rd->files, expanding .list. */
static int resolve_files(pd_reader *rd, const char *path)
{
    char *full = join_path(rd->r->dir, path);
    if (!ends_with(full, ".list")) {
        rd->files = pd_xcalloc(2, sizeof(char *));
        rd->files[0] = full;
        rd->nfiles = 1;
        return 0;
    }
    FILE *f = fopen(full, "r");
    if (!f) {
        int rc = pd_err_set(PD_ENOENT, "cannot open data list %s: %s", full, strerror(errno));
        free(full);
        return rc;
    }
    char *dir = dir_of(full), *line = NULL;
    size_t cap = 0;
    int cap_files = 0, cap_lines = 0, got;
    long lineno = 0;
    while ((got = read_line(f, &line, &cap, full, ++lineno)) > 0) {
        trim(line);
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') continue;
        PD_GROW(&rd->files, &cap_files, rd->nfiles + 2);
        PD_GROW(&rd->list_lines, &cap_lines, rd->nfiles + 1);
        rd->list_lines[rd->nfiles] = lineno;
        rd->files[rd->nfiles++] = join_path(dir, p);
        rd->files[rd->nfiles] = NULL;
    }
    free(line);
    free(dir);
    fclose(f);
    if (got < 0) {
        free(full);
        return got;
    }
    if (rd->nfiles == 0) {
        int rc = pd_err_set(PD_EDATA, "data list %s names no files", full);
        free(full);
        return rc;
    }
    rd->list = full;
    return 0;
}

/* --- column mapping ----------------------------------------------------------- */

static int slot_columns(const pd_slot *s)
{
    return s->kind == PD_SLOT_DENSE ? s->width : 1;
}

static int parse_columns(pd_reader *rd)
{
    const pd_recipe *r = rd->r;
    rd->cols = pd_xcalloc((size_t)rd->nslots + 1, sizeof *rd->cols);
    if (r->ncolumns == 0) {
        int c = 0;
        for (int i = 0; i < rd->nslots; i++) {
            rd->cols[i].first = c;
            c += slot_columns(&rd->layout[i]);
            rd->cols[i].last = c - 1;
        }
        rd->ncols_needed = c;
        return 0;
    }
    for (int i = 0; i < rd->nslots; i++) rd->cols[i].first = -1;
    char wbuf[300];
    const char *where = pd_recipe_where(r, "columns", wbuf, sizeof wbuf);
    if (strncmp(where, "option ", 7) != 0 && r->columns_where) where = r->columns_where;
    for (int k = 0; k < r->ncolumns; k++) {
        const char *spec = r->columns[k];
        const char *eq = strchr(spec, '=');
        int a = 0, b = 0, n = 0;
        if (!eq || (sscanf(eq + 1, "%d-%d%n", &a, &b, &n) != 2 &&
                    (sscanf(eq + 1, "%d%n", &a, &n) != 1 || (b = a, 0))) ||
            eq[1 + n] != '\0' || a < 1 || b < a || b > MAX_COLUMNS)
            return pd_err_set(PD_ERECIPE, "%s: data.columns entry '%s' must look like 'slot=3' or 'slot=1-13' "
                                          "(columns count from 1)", where, spec);
        int slot = -1;
        for (int i = 0; i < rd->nslots; i++)
            if ((size_t)(eq - spec) == strlen(rd->layout[i].name) &&
                strncmp(spec, rd->layout[i].name, (size_t)(eq - spec)) == 0)
                slot = i;
        if (slot < 0)
            return pd_err_set(PD_ERECIPE, "%s: data.columns entry '%s' names no data layer of the model",
                              where, spec);
        if (b - a + 1 != slot_columns(&rd->layout[slot]))
            return pd_err_set(PD_ERECIPE, "%s: data.columns '%s' gives %d columns, but slot '%s' takes %d",
                              where, spec, b - a + 1, rd->layout[slot].name, slot_columns(&rd->layout[slot]));
        rd->cols[slot].first = a - 1;
        rd->cols[slot].last = b - 1;
        if (b > rd->ncols_needed) rd->ncols_needed = b;
    }
    for (int i = 0; i < rd->nslots; i++)
        if (rd->cols[i].first < 0)
            return pd_err_set(PD_ERECIPE, "%s: data.columns says nothing of slot '%s'", where,
                              rd->layout[i].name);
    return 0;
}

/* The columns a row must have when opts.need lets the other slots be missing. */
static void required_columns(pd_reader *rd)
{
    rd->ncols_required = rd->ncols_needed;
    if (!rd->o.need || !rd->cols) return;
    rd->ncols_required = 0;
    for (int i = 0; i < rd->nslots; i++)
        if (rd->o.need[i] && rd->cols[i].last + 1 > rd->ncols_required) rd->ncols_required = rd->cols[i].last + 1;
}

/* --- parsing one line ---------------------------------------------------------- */

/* A field that is not a number, quoted: the bytes from p to the field's end
 * (sep, or a blank where sep is ' '; the line's end), its trailing blanks
 * dropped, at most 31 bytes and never half a UTF-8 character. pd_err_set
 * escapes the control characters. */
static int not_a_number(const char *p, char sep, const char *file, long lineno, int field)
{
    int len = 0;
    while (p[len] && p[len] != sep && p[len] != '\n' && p[len] != '\r' &&
           !(sep == ' ' && p[len] == '\t'))
        len++;
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
    int cut = len > 31;
    if (cut) {
        len = 31;
        while (len > 0 && ((unsigned char)p[len] & 0xC0) == 0x80) len--;
    }
    return pd_err_set(PD_EDATA, "%s:%ld: field %d is not a decimal number: '%.*s%s'", file, lineno, field, len, p,
                      cut ? "..." : "");
}

/* Split a numeric row; returns the number of values or -1 (message set). */
static int parse_numbers(char *line, char sep, double *vals, int max, const char *file, long lineno)
{
    int n = 0;
    char *p = line;
    for (;;) {
        if (sep == ' ')
            while (*p == ' ' || *p == '\t') p++;
        if (*p == '\0' || *p == '\n' || *p == '\r') {
            if (sep != ' ' && n > 0)
                return pd_err_set(PD_EDATA, "%s:%ld: empty field %d", file, lineno, n + 1), -1;
            break;
        }
        if (n >= max) return pd_err_set(PD_EDATA, "%s:%ld: more than %d fields", file, lineno, max), -1;
        char *field = p, *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno == ERANGE || !isfinite(v) || is_hex(p))
            return not_a_number(field, sep, file, lineno, n + 1), -1;
        vals[n++] = v;
        p = end;
        if (sep == ' ') {
            if (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
                return not_a_number(field, sep, file, lineno, n), -1;
            continue;
        }
        while (*p == ' ' || *p == '\t') p++;
        if (*p == sep) {
            p++;
            while (*p == ' ' || *p == '\t') p++;
            if (*p == '\0' || *p == '\n' || *p == '\r' || *p == sep)
                return pd_err_set(PD_EDATA, "%s:%ld: empty field %d", file, lineno, n + 1), -1;
        } else if (*p && *p != '\n' && *p != '\r') {
            return not_a_number(field, sep, file, lineno, n), -1;
        } else {
            break;
        }
    }
    return n;
}

/* Put one row of numbers into rd->stage as a sample. */
static int stage_row(pd_reader *rd, const double *vals, int n, const char *file, long lineno)
{
    pd_batch *st = &rd->stage;
    if (n < rd->ncols_required)
        return pd_err_set(PD_EDATA, "%s:%ld: %d fields, the model reads %d", file, lineno, n, rd->ncols_required);
    /* more fields than the model reads, the columns not chosen: said once */
    static int extra_said;
    if (n > rd->ncols_needed && rd->r->ncolumns == 0 && !__atomic_exchange_n(&extra_said, 1, __ATOMIC_RELAXED))
        PD_WARN("%s:%ld: %d fields, the model reads the first %d and ignores the rest (data.columns chooses "
                "which columns feed which data layer)", file, lineno, n, rd->ncols_needed);
    if (n < rd->ncols_needed) {
        pthread_mutex_lock(&rd->mu);
        rd->unlabeled++;
        pthread_mutex_unlock(&rd->mu);
    }
    pd_batch_clear(st);
    for (int i = 0; i < rd->nslots; i++) {
        pd_slot *s = &st->slots[i];
        const colmap *c = &rd->cols[i];
        if (c->last >= n) { /* a slot opts.need lets be missing: zeros */
            if (s->kind == PD_SLOT_DENSE) memset(pd_slot_push_dense(s, 0), 0, (size_t)s->width * sizeof(float));
            else if (s->kind == PD_SLOT_ID) pd_slot_push_id(s, 0, 0);
            else pd_slot_push_ids(s, 0, NULL, 0);
            continue;
        }
        if (s->kind == PD_SLOT_DENSE) {
            float *dst = pd_slot_push_dense(s, 0);
            for (int k = c->first; k <= c->last; k++) dst[k - c->first] = (float)vals[k];
        } else {
            double v = vals[c->first];
            double top = s->width > 0 ? s->width : 2147483648.0; /* width 0: any id an int32 holds */
            if (v != floor(v) || v < 0 || v >= top)
                return pd_err_set(PD_EDATA, "%s:%ld: field %d of slot '%s' must be an id in [0, %.0f), got %g", file,
                                  lineno, c->first + 1, s->name, top, v);
            int32_t id = (int32_t)v;
            if (s->kind == PD_SLOT_ID)
                pd_slot_push_id(s, 0, id);
            else
                pd_slot_push_ids(s, 0, &id, 1);
        }
    }
    st->n = 1;
    return 0;
}

/* libsvm: "label idx:val idx:val ..." -> first dense slot of width > 1 gets
 * the features (idx counts from 1), the other slot the label. */
static int stage_libsvm(pd_reader *rd, char *line, const char *file, long lineno)
{
    pd_batch *st = &rd->stage;
    int feat = -1, lab = -1;
    for (int i = 0; i < rd->nslots; i++) {
        if (rd->layout[i].kind == PD_SLOT_DENSE && feat < 0 && (rd->nslots == 1 || rd->layout[i].width > 1))
            feat = i;
        else if (lab < 0)
            lab = i;
    }
    if (feat < 0 || rd->nslots > 2)
        return pd_err_set(PD_ERECIPE, "%s: libsvm data needs a model with a dense feature slot and a label slot",
                          rd->r->path);
    pd_batch_clear(st);
    char *p = line, *end;
    errno = 0;
    double label = strtod(p, &end);
    if (end == p || !isfinite(label) || is_hex(p))
        return pd_err_set(PD_EDATA, "%s:%ld: the line must start with a decimal label", file, lineno);
    p = end;
    pd_slot *fs = &st->slots[feat];
    float *x = pd_slot_push_dense(fs, 0);
    memset(x, 0, (size_t)fs->width * sizeof *x);
    long last = 0;
    for (;;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '\n' || *p == '\r' || *p == '#') break;
        long idx = strtol(p, &end, 10);
        if (end == p || *end != ':')
            return pd_err_set(PD_EDATA, "%s:%ld: expected index:value near '%.16s'", file, lineno, p);
        if (idx < 1 || idx > fs->width)
            return pd_err_set(PD_EDATA, "%s:%ld: feature index %ld outside 1..%d (slot '%s')", file, lineno, idx,
                              fs->width, fs->name);
        if (idx <= last)
            return pd_err_set(PD_EDATA, "%s:%ld: feature indices must increase (%ld after %ld)", file, lineno, idx, last);
        last = idx;
        p = end + 1;
        double v = strtod(p, &end);
        if (end == p || !isfinite(v) || is_hex(p))
            return pd_err_set(PD_EDATA, "%s:%ld: bad value for feature %ld", file, lineno, idx);
        x[idx - 1] = (float)v;
        p = end;
    }
    if (lab >= 0) {
        pd_slot *ls = &st->slots[lab];
        if (ls->kind == PD_SLOT_DENSE) {
            float *y = pd_slot_push_dense(ls, 0);
            for (int k = 0; k < ls->width; k++) y[k] = (float)label;
        } else {
            if (label != floor(label) || label < 0 || label >= ls->width)
                return pd_err_set(PD_EDATA, "%s:%ld: label %g is not a class id in [0, %d)", file, lineno, label,
                                  ls->width);
            int32_t id = (int32_t)label;
            if (ls->kind == PD_SLOT_ID) pd_slot_push_id(ls, 0, id);
            else pd_slot_push_ids(ls, 0, &id, 1);
        }
    }
    st->n = 1;
    return 0;
}

/* --- uci_housing ------------------------------------------------------------------ */

static int bad_line(pd_reader *rd);
static int open_data_file(const char *path, FILE **out);

static int load_uci(pd_reader *rd)
{
    const char *file = rd->files[0];
    if (rd->nfiles != 1)
        return pd_err_set(PD_ERECIPE, "%s: uci_housing reads one file (housing.data), got a list of %d", rd->r->path,
                          rd->nfiles);
    if (rd->ncols_needed != 14 || rd->nslots != 2) {
        /* named at the first data layer of another width than 13, 1 */
        const char *where = rd->r->path;
        for (int i = 0, k = 0; i < rd->r->nlayers; i++) {
            const pd_layer_desc *d = &rd->r->layers[i];
            if (strcmp(d->type, "data") != 0) continue;
            if (d->where && (k > 1 || d->size != (k == 0 ? 13 : 1))) {
                where = d->where;
                break;
            }
            k++;
        }
        return pd_err_set(PD_ERECIPE, "%s: uci_housing gives 13 features and 1 price: the model must read "
                                      "nn.data(x, 13) and nn.data(y, 1)", where);
    }
    FILE *f = NULL;
    int rc = open_data_file(file, &f);
    if (rc == PD_ENOENT && strstr(file, "uci_housing/housing.data")) /* the demo's is made by recipes/prepare.sh */
        return pd_err_set(rc, "%s (recipes/prepare.sh makes the demo's copy)", pd_err_msg());
    if (rc < 0) return rc;
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int rows_cap = 0, got;
    double vals[16];
    while ((got = read_line(f, &line, &cap, file, lineno + 1)) != 0) {
        lineno++;
        if (got < 0) {
            rc = got;
            break;
        }
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p) continue;
        int n = parse_numbers(p, ' ', vals, 16, file, lineno);
        if (n >= 0 && n != 14) pd_err_set(PD_EDATA, "%s:%ld: %d fields, uci_housing rows have 14", file, lineno, n);
        if (n != 14) {
            if (bad_line(rd) == 0) continue; /* data.on_error = "skip" */
            rc = PD_EINPUT;
            break;
        }
        PD_GROW(&rd->uci, &rows_cap, (rd->uci_rows + 1) * 14);
        for (int k = 0; k < 14; k++) rd->uci[rd->uci_rows * 14 + k] = (float)vals[k];
        rd->uci_rows++;
    }
    free(line);
    fclose(f);
    if (rc < 0) return rc;
    if (rd->uci_rows < 2) return pd_err_set(PD_EDATA, "%s: only %d rows", file, rd->uci_rows);
    /* (x - mean) / (max - min) over all rows, features only */
    for (int k = 0; k < 13; k++) {
        double sum = 0, mn = INFINITY, mx = -INFINITY;
        for (int i = 0; i < rd->uci_rows; i++) {
            double v = rd->uci[i * 14 + k];
            sum += v;
            mn = v < mn ? v : mn;
            mx = v > mx ? v : mx;
        }
        double mean = sum / rd->uci_rows, range = mx - mn;
        if (range == 0) range = 1;
        for (int i = 0; i < rd->uci_rows; i++)
            rd->uci[i * 14 + k] = (float)((rd->uci[i * 14 + k] - mean) / range);
    }
    return 0;
}

/* --- the queue ----------------------------------------------------------------------- */

/* Thread side: wait for a free batch. NULL when stopping. */
static pd_batch *take_free(pd_reader *rd)
{
    pthread_mutex_lock(&rd->mu);
    while (!stopping(rd) && rd->nfree == 0) wait_tick(rd);
    pd_batch *b = stopping(rd) ? NULL : rd->free_list[--rd->nfree];
    pthread_mutex_unlock(&rd->mu);
    if (b) pd_batch_clear(b);
    return b;
}

/* Thread side: queue an item; returns -1 when stopping. */
static int push(pd_reader *rd, int kind, pd_batch *b)
{
    pthread_mutex_lock(&rd->mu);
    while (!stopping(rd) && rd->qlen == rd->qcap) wait_tick(rd);
    if (stopping(rd)) {
        if (b) rd->free_list[rd->nfree++] = b; /* not queued: pd_reader_close frees it */
        pthread_mutex_unlock(&rd->mu);
        return -1;
    }
    int tail = (rd->qhead + rd->qlen) % rd->qcap;
    rd->q[tail].kind = kind;
    rd->q[tail].b = b;
    rd->qlen++;
    pthread_cond_broadcast(&rd->cv);
    pthread_mutex_unlock(&rd->mu);
    return 0;
}

static int flush_out(pd_reader *rd)
{
    if (!rd->out || rd->out->n == 0) return 0;
    pd_batch *b = rd->out;
    rd->out = NULL;
    return push(rd, ITEM_BATCH, b);
}

/* Append sample i of src to the batch being filled; push it when full. */
static int emit(pd_reader *rd, const pd_batch *src, int i)
{
    if (!rd->out && !(rd->out = take_free(rd))) return -1;
    pd_batch_append(rd->out, src, i);
    if (rd->out->n >= rd->o.batch_size) return flush_out(rd);
    return 0;
}

static int flush_shuffle(pd_reader *rd)
{
    pd_batch *s = &rd->shuf;
    int n = s->n;
    int *perm = pd_xmalloc((size_t)(n ? n : 1) * sizeof *perm);
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(pd_rng_next(&rd->rng) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) rc = emit(rd, s, perm[i]);
    free(perm);
    pd_batch_clear(s);
    return rc;
}

/* A parsed sample in rd->stage: keep it if it is this trainer's share. */
static int offer(pd_reader *rd)
{
    long idx = rd->sample_index++;
    if (!rd->split_files && rd->o.nshares > 1 && idx % rd->o.nshares != rd->o.share) return 0;
    if (rd->o.shuffle <= 1) return emit(rd, &rd->stage, 0);
    pd_batch_append(&rd->shuf, &rd->stage, 0);
    if (rd->shuf.n >= rd->o.shuffle) return flush_shuffle(rd);
    return 0;
}

static int data_error(const pd_reader *rd, int rc);

/* A csv first line that does not parse: fields cut by another separator (the
 * line holds one of , ; tab, or a space and no data.separator, blanks being
 * allowed around fields), or names (a header: its first field is not a
 * number). */
static void first_line_hint(const pd_reader *rd, const char *p)
{
    static const char cands[] = {',', ';', '\t', ' '};
    int blank = rd->sep == ' '; /* data.separator " " or "\t": any run of blanks */
    for (size_t i = 0; i < sizeof cands; i++) {
        char c = cands[i];
        if (c == rd->sep || (blank && c == '\t') || !strchr(p, c) || (c == ' ' && strchr(p, rd->sep))) continue;
        const char *sep = rd->r->separator && rd->r->separator[0] ? rd->r->separator : ",";
        const char *shown = c == '\t' ? "a tab" : c == ' ' ? "a space" : c == ',' ? "','" : "';'";
        char lit[3] = {c, 0, 0};
        if (c == '\t') memcpy(lit, "\\t", 3);
        pd_err_set(pd_err_code(), "%s (the line has %s but data.separator is \"%s\"? data.separator = \"%s\" reads it)",
                   pd_err_msg(), shown, sep[0] == '\t' ? "\\t" : sep, lit);
        return;
    }
    char *end;
    strtod(p, &end);
    if (end == p) /* a line that starts with a number is no header */
        pd_err_set(pd_err_code(), "%s (a header line? data.header = true skips it)", pd_err_msg());
}

static void thread_error(pd_reader *rd)
{
    int code = pd_err_code();
    /* named where data.train (or test) was set; a file that does not
     * parse (PD_EDATA, made PD_EINPUT there) fails the same way when read
     * again, a read error, or a file gone since the reader opened it, is a
     * fault */
    code = data_error(rd, code < 0 ? code : PD_EIO);
    pthread_mutex_lock(&rd->mu);
    snprintf(rd->errmsg, sizeof rd->errmsg, "%s", pd_err_msg());
    rd->errcode = code;
    pthread_mutex_unlock(&rd->mu);
    push(rd, ITEM_ERROR, NULL);
}

/* One line failed to parse: fail the job, or count it and go on. */
static int bad_line(pd_reader *rd)
{
    if (!rd->skip_bad) {
        /* where no line parsed yet, the data and the model may not fit
         * at all (columns, format): skipping would skip every line */
        long good = rd->format == FMT_UCI ? rd->uci_rows : rd->sample_index;
        pd_err_set(PD_EINPUT, "%s%s", pd_err_msg(), good ? " (data.on_error = \"skip\" would skip such lines)" : "");
        return -1;
    }
    /* the same lines again in every pass: counted and said in the first */
    if (rd->one_pass_read) return 0;
    if (rd->skipped < 10 && !rd->o.quiet) PD_WARN("skipping: %s", pd_err_msg());
    rd->skipped++;
    return 0;
}

static int read_table_file(pd_reader *rd, const char *file)
{
    FILE *f = fopen(file, "r");
    if (!f) {
        pd_data_open_error(file);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, samples = 0;
    int rc = 0, got;
    int maxcols = rd->ncols_needed + 64;
    double *vals = pd_xmalloc((size_t)maxcols * sizeof *vals);
    /* a line over the limit (or with a NUL) ends the pass even with
     * on_error = "skip": the file is not a table */
    while (rc == 0 && (got = read_line(f, &line, &cap, file, lineno + 1)) != 0) {
        lineno++;
        if (got < 0 || stopping(rd)) {
            rc = -1;
            break;
        }
        if (lineno == 1 && rd->r->header && rd->format == FMT_CSV) continue;
        char *p = line;
        if (lineno == 1 && strncmp(p, "\xEF\xBB\xBF", 3) == 0) p += 3; /* a UTF-8 byte-order mark, unseen */
        while (isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') continue;
        int st;
        samples++; /* a data line, good or bad */
        if (rd->format == FMT_LIBSVM) {
            st = stage_libsvm(rd, p, file, lineno);
        } else {
            int n = parse_numbers(p, rd->sep, vals, maxcols, file, lineno);
            st = n < 0 ? -1 : stage_row(rd, vals, n, file, lineno);
            if (n < 0 && lineno == 1 && rd->format == FMT_CSV) first_line_hint(rd, p);
        }
        if (st < 0) {
            if (pd_err_msg()[0] && strstr(pd_err_msg(), ": libsvm data needs")) { rc = -1; break; }
            rc = bad_line(rd);
            continue;
        }
        rc = offer(rd);
    }
    free(vals);
    free(line);
    fclose(f);
    if (rc == 0 && samples == 0) {
        pd_err_set(PD_EDATA, "data file %s holds no sample (%ld lines)", file, lineno);
        rc = -1;
    }
    return rc;
}

/* criteo: the lines of one file (criteo.c), each offered as a sample */
static int criteo_sample(void *ctx) { return offer(ctx); }
static int criteo_bad(void *ctx) { return bad_line(ctx); }

static int read_criteo_file(pd_reader *rd, const char *file)
{
    pd_criteo_sink sink = {.sample = criteo_sample, .bad = criteo_bad, .ctx = rd};
    return pd_criteo_read_file(&rd->criteo, file, &rd->stage, &sink) < 0 ? -1 : 0;
}

/* synthetic: random samples in the model's slots, for benchmarks and smoke
 * tests (dense uniform with variance 1, but width-1 slots uniform in [1, 5]; ids uniform;
 * id lists of 1 to 5 ids) */
static void synth_sample(pd_reader *rd)
{
    pd_batch *st = &rd->stage;
    pd_batch_clear(st);
    for (int i = 0; i < rd->nslots; i++) {
        pd_slot *s = &st->slots[i];
        if (s->kind == PD_SLOT_DENSE) {
            float *x = pd_slot_push_dense(s, 0);
            for (int k = 0; k < s->width; k++) {
                /* uniform, cheap: the reader must not be what a benchmark measures */
                float u = (float)(pd_rng_next(&rd->rng) >> 40) * (1.0f / 16777216.0f);
                x[k] = s->width == 1 ? 1 + 4 * u : 3.4641016f * (u - 0.5f);
            }
        } else if (s->kind == PD_SLOT_ID) {
            /* width 0 (64-bit ids): ids below 100000 */
            uint64_t range = s->width > 0 ? (uint64_t)s->width : 100000;
            pd_slot_push_id(s, 0, (int32_t)(pd_rng_next(&rd->rng) % range));
        } else {
            int32_t ids[5];
            uint64_t range = s->width > 0 ? (uint64_t)s->width : 100000;
            int n = 1 + (int)(pd_rng_next(&rd->rng) % 5);
            for (int k = 0; k < n; k++) ids[k] = (int32_t)(pd_rng_next(&rd->rng) % range);
            pd_slot_push_ids(s, 0, ids, n);
        }
    }
    st->n = 1;
}

static int run_pass(pd_reader *rd)
{
    rd->sample_index = 0;
    if (rd->format == FMT_UCI) {
        int split = (int)(rd->uci_rows * 0.8);
        int lo = rd->o.part == PD_PART_TEST ? split : 0;
        int hi = rd->o.part == PD_PART_TRAIN ? split : rd->uci_rows;
        double vals[14];
        for (int i = lo; i < hi; i++) {
            for (int k = 0; k < 14; k++) vals[k] = rd->uci[i * 14 + k];
            if (stage_row(rd, vals, 14, rd->files[0], i + 1) < 0) return -1;
            if (offer(rd) < 0) return -1;
        }
    } else if (rd->format == FMT_SYNTH) {
        for (long i = 0; i < rd->r->samples; i++) {
            synth_sample(rd);
            if (offer(rd) < 0) return -1;
        }
    } else if (rd->format == FMT_MOVIELENS) {
        int want_test = rd->o.part == PD_PART_TEST;
        for (long i = 0; i < rd->ml->nratings; i++) {
            const pd_ml_rating *x = &rd->ml->ratings[i];
            if (rd->o.part != PD_PART_ALL &&
                pd_movielens_is_test(x->user, x->movie, rd->r->test_fraction) != want_test)
                continue;
            pd_movielens_stage(rd->ml, i, rd->ml_fields, &rd->stage);
            if (offer(rd) < 0) return -1;
        }
    } else {
        for (int k = 0; k < rd->nfiles; k++) {
            if (rd->split_files && k % rd->o.nshares != rd->o.share) continue;
            pthread_mutex_lock(&rd->mu);
            rd->reading = rd->files[k];
            pthread_mutex_unlock(&rd->mu);
            if ((rd->format == FMT_CRITEO ? read_criteo_file(rd, rd->files[k])
                                          : read_table_file(rd, rd->files[k])) < 0)
                return -1;
        }
        if (rd->sample_index == 0 && rd->skipped > 0) { /* a pass of nothing would train nothing, and save it */
            pd_err_set(PD_EINPUT, "no line could be read: the %ld read were all malformed, and skipped "
                       "(data.on_error = \"skip\"; the first are logged above)", rd->skipped);
            return -1;
        }
    }
    if (rd->shuf.n && flush_shuffle(rd) < 0) return -1;
    if (flush_out(rd) < 0) return -1;
    return push(rd, ITEM_END, NULL);
}

static void *reader_main(void *arg)
{
    pd_reader *rd = arg;
    for (int pass = rd->o.first_pass; pass < rd->o.passes; pass++) {
        /* each pass draws from its own stream: a trainer resumed at pass p
         * shuffles it as the uninterrupted one did */
        rd->rng = rd->o.seed * 0x9E3779B97F4A7C15ull + 7 + (uint64_t)pass * 0xD1B54A32D192ED03ull;
        if (run_pass(rd) < 0) {
            pthread_mutex_lock(&rd->mu);
            int stop = stopping(rd);
            pthread_mutex_unlock(&rd->mu);
            if (!stop) thread_error(rd);
            break;
        }
        rd->one_pass_read = 1;
    }
    pthread_mutex_lock(&rd->mu);
    rd->ended = 1;
    pthread_cond_broadcast(&rd->cv);
    pthread_mutex_unlock(&rd->mu);
    return NULL;
}

/* --- consumer side ---------------------------------------------------------------- */

/* A data file must open, and be a non-empty file (a directory, or an empty
 * file, would train nothing and look like success). Opened into *out, or
 * closed again where out is NULL. */
static int open_data_file(const char *path, FILE **out)
{
    FILE *f = fopen(path, "r");
    if (!f) return pd_data_open_error(path);
    struct stat st;
    int rc = fstat(fileno(f), &st);
    if (rc == 0 && S_ISDIR(st.st_mode)) rc = pd_err_set(PD_EDATA, "data file %s is a directory", path);
    else if (rc == 0 && S_ISREG(st.st_mode) && st.st_size == 0) rc = pd_err_set(PD_EDATA, "data file %s is empty", path);
    else rc = 0;
    if (rc < 0 || !out) fclose(f);
    else *out = f;
    return rc;
}

/* An error in the files of data.train (or data.test) as the reader opens
 * them, prefixed with where that key was set ("recipe.lua:14: data.train",
 * "option --train", or the caller's opts.where); a file that does not parse is the job's input
 * (PD_EINPUT). The recipe's own mistakes already say where they are. */
static int data_error(const pd_reader *rd, int rc)
{
    if (rc == PD_ERECIPE) return rc;
    int test = rd->o.part == PD_PART_TEST;
    const char *key = test ? "test" : "train", *set = test ? rd->r->test_where : rd->r->train_where;
    char buf[512];
    const char *where = pd_recipe_where(rd->r, key, buf, sizeof buf);
    if (rc == PD_EDATA) rc = PD_EINPUT;
    if (rd->o.where) return pd_err_wrap(rc, "%s", rd->o.where);
    if (strncmp(where, "option ", 7) == 0 || !set) return pd_err_wrap(rc, "%s", where);
    return pd_err_wrap(rc, "%s: data.%s", set, key);
}

int pd_reader_open(pd_reader **out, const pd_recipe *r, const pd_reader_opts *o)
{
    int rc;
    pd_reader *rd = pd_xcalloc(1, sizeof *rd);
    *out = NULL;
    rd->o = *o;
    if (rd->o.nshares < 1) rd->o.nshares = 1;
    if (rd->o.passes < 1) rd->o.passes = 1;
    if (rd->o.batch_size < 1) rd->o.batch_size = 1;
    rd->r = r;
    rd->rng = o->seed * 0x9E3779B97F4A7C15ull + 7;
    rd->skip_bad = r->on_error && strcmp(r->on_error, "skip") == 0;
    pthread_mutex_init(&rd->mu, NULL);
    pthread_cond_init(&rd->cv, NULL);
    const char *fmt = r->format ? r->format : "csv";
    rd->format = !strcmp(fmt, "uci_housing") ? FMT_UCI
               : !strcmp(fmt, "libsvm") ? FMT_LIBSVM
               : !strcmp(fmt, "movielens") ? FMT_MOVIELENS
               : !strcmp(fmt, "criteo") ? FMT_CRITEO
               : !strcmp(fmt, "synthetic") ? FMT_SYNTH
               : FMT_CSV;
    rd->sep = rd->format == FMT_UCI ? ' ' : (r->separator && r->separator[0] ? r->separator[0] : ',');
    if (rd->sep == '\t') rd->sep = ' ';
    if ((rc = pd_reader_layout(r, &rd->layout, &rd->nslots)) < 0) goto err;
    if (rd->nslots == 0) {
        rc = pd_err_set(PD_ERECIPE, "%s: the model has no data layer to read into", r->path);
        goto err;
    }
    const char *path = o->part == PD_PART_TEST ? r->test : r->train;
    if (!path) {
        rc = pd_err_set(PD_ERECIPE, "%s: no data.%s", r->path, o->part == PD_PART_TEST ? "test" : "train");
        goto err;
    }
    if ((rc = resolve_files(rd, path)) < 0) {
        rc = data_error(rd, rc);
        goto err;
    }
    rd->split_files = rd->o.nshares > 1 && rd->nfiles >= rd->o.nshares && rd->format != FMT_UCI;
    if (rd->format != FMT_LIBSVM && rd->format != FMT_MOVIELENS && rd->format != FMT_SYNTH &&
        rd->format != FMT_CRITEO && (rc = parse_columns(rd)) < 0)
        goto err;
    required_columns(rd);
    if (rd->format == FMT_CRITEO && (rc = pd_criteo_bind(&rd->criteo, rd->layout, rd->nslots, r)) < 0) goto err;
    if (rd->format == FMT_UCI && (rc = load_uci(rd)) < 0) {
        rc = data_error(rd, rc);
        goto err;
    }
    if (rd->format == FMT_MOVIELENS) {
        /* data.train / data.test name the directory of the three .dat files */
        rd->ml = pd_xcalloc(1, sizeof *rd->ml);
        rd->ml_fields = pd_xcalloc((size_t)rd->nslots, sizeof *rd->ml_fields);
        if ((rc = pd_movielens_load(rd->ml, rd->files[0], rd->skip_bad)) < 0) {
            rc = data_error(rd, rc);
            goto err;
        }
        if ((rc = pd_movielens_bind(rd->ml, rd->layout, rd->nslots, rd->ml_fields, r->path)) < 0) goto err;
        rd->skipped = rd->ml->skipped;
    }
    /* files that cannot be opened are reported now, not in the middle of a
     * pass (uci_housing's was read whole above) */
    for (int k = 0; k < rd->nfiles && rd->format != FMT_MOVIELENS && rd->format != FMT_SYNTH && rd->format != FMT_UCI;
         k++)
        if ((rc = open_data_file(rd->files[k], NULL)) < 0) {
            if (rd->list) pd_err_wrap(rc, "%s:%ld", rd->list, rd->list_lines[k]); /* the line naming it */
            rc = data_error(rd, rc);
            goto err;
        }
    pd_batch_init(&rd->stage, rd->layout, rd->nslots);
    pd_batch_init(&rd->shuf, rd->layout, rd->nslots);
    rd->qcap = r->queue > 0 ? r->queue : 8;
    rd->q = pd_xcalloc((size_t)rd->qcap, sizeof *rd->q);
    rd->nbatches = rd->qcap + 2;
    rd->free_list = pd_xcalloc((size_t)rd->nbatches, sizeof *rd->free_list);
    for (int i = 0; i < rd->nbatches; i++) {
        rd->free_list[i] = pd_xmalloc(sizeof(pd_batch));
        pd_batch_init(rd->free_list[i], rd->layout, rd->nslots);
    }
    rd->nfree = rd->nbatches;
    if (pthread_create(&rd->thread, NULL, reader_main, rd) != 0) {
        rc = pd_err_set(PD_ENOMEM, "cannot start the reader thread");
        goto err;
    }
    rd->started = 1;
    *out = rd;
    return 0;
err:
    pd_reader_close(rd);
    return rc;
}

/* Wait (mu held) for the thread's next item. The caller's tick runs at each
 * wake-up (a trainer's heartbeat: a slow file is no hang), and a long wait
 * is said, naming the file. */
static int wait_item(pd_reader *rd)
{
    double t0 = 0, say = WAIT_SAY_S; /* the clock is read only when the queue is empty */
    while (rd->qlen == 0 && !rd->ended && !stopping(rd)) {
        if (t0 == 0) t0 = pd_now();
        wait_tick(rd);
        if (rd->qlen || rd->ended || stopping(rd)) break;
        double waited = pd_now() - t0;
        if (waited >= say) {
            PD_INFO("waiting %.0f s for data from %s: the reader has not produced the next batch", waited,
                    rd->reading ? rd->reading : rd->files ? rd->files[0] : "the data");
            say += WAIT_SAY_EVERY_S;
        }
        if (rd->tick) {
            pthread_mutex_unlock(&rd->mu);
            int rc = rd->tick(rd->tick_ctx);
            pthread_mutex_lock(&rd->mu);
            if (rc < 0) return rc;
        }
    }
    return 0;
}

int pd_reader_next(pd_reader *rd, pd_batch **b)
{
    pthread_mutex_lock(&rd->mu);
    int rc = wait_item(rd);
    if (rc < 0) {
        pthread_mutex_unlock(&rd->mu);
        return rc;
    }
    if (stopping(rd)) {
        pthread_mutex_unlock(&rd->mu);
        return pd_err_set(PD_EINTR, "interrupted while waiting for data");
    }
    if (rd->qlen == 0) {
        pthread_mutex_unlock(&rd->mu);
        return pd_err_set(PD_EINVAL, "the reader has produced all its passes");
    }
    int kind = rd->q[rd->qhead].kind;
    *b = rd->q[rd->qhead].b;
    rd->qhead = (rd->qhead + 1) % rd->qcap;
    rd->qlen--;
    pthread_cond_broadcast(&rd->cv);
    if (kind == ITEM_ERROR) {
        int code = rd->errcode;
        pd_err_set(code, "%s", rd->errmsg);
        pthread_mutex_unlock(&rd->mu);
        return code;
    }
    if (kind == ITEM_END) {
        rd->pass_samples = rd->cur_samples;
        rd->cur_samples = 0;
        pthread_mutex_unlock(&rd->mu);
        return 0;
    }
    rd->cur_samples += (*b)->n;
    pthread_mutex_unlock(&rd->mu);
    return 1;
}

void pd_reader_release(pd_reader *rd, pd_batch *b)
{
    pthread_mutex_lock(&rd->mu);
    rd->free_list[rd->nfree++] = b;
    pthread_cond_broadcast(&rd->cv);
    pthread_mutex_unlock(&rd->mu);
}

long pd_reader_skipped(const pd_reader *rd) { return rd->skipped; }
long pd_reader_pass_samples(const pd_reader *rd) { return rd->pass_samples; }

/* The reader thread may be blocked in a read that never returns (a FIFO, a
 * stalled network file system): a signal with a handler that does nothing,
 * installed without SA_RESTART, makes that read fail with EINTR, and the
 * thread then sees that it is asked to stop. SIGURG: nothing else here uses
 * it, and its default is to be ignored. */
#define WAKE_SIGNAL SIGURG

static void on_wake(int sig) { (void)sig; }

static void install_wake(void)
{
    struct sigaction sa = {.sa_handler = on_wake};
    sigemptyset(&sa.sa_mask);
    sigaction(WAKE_SIGNAL, &sa, NULL);
}

long pd_reader_unlabeled(pd_reader *rd)
{
    pthread_mutex_lock(&rd->mu);
    long n = rd->unlabeled;
    pthread_mutex_unlock(&rd->mu);
    return n;
}

void pd_reader_close(pd_reader *rd)
{
    static pthread_once_t wake_once = PTHREAD_ONCE_INIT;
    if (!rd) return;
    if (rd->started) {
        pthread_once(&wake_once, install_wake);
        pthread_mutex_lock(&rd->mu);
        rd->stop = 1;
        pthread_cond_broadcast(&rd->cv);
        while (!rd->ended) {
            pthread_kill(rd->thread, WAKE_SIGNAL);
            wait_tick(rd);
        }
        pthread_mutex_unlock(&rd->mu);
        pthread_join(rd->thread, NULL);
    }
    /* batches are either free, queued, or held by the thread (out) */
    for (int i = 0; i < rd->nfree; i++) {
        pd_batch_free(rd->free_list[i]);
        free(rd->free_list[i]);
    }
    for (int i = 0; i < rd->qlen; i++) {
        pd_batch *b = rd->q[(rd->qhead + i) % rd->qcap].b;
        if (b) {
            pd_batch_free(b);
            free(b);
        }
    }
    if (rd->out) {
        pd_batch_free(rd->out);
        free(rd->out);
    }
    free(rd->free_list);
    free(rd->q);
    pd_batch_free(&rd->stage);
    pd_batch_free(&rd->shuf);
    for (int k = 0; k < rd->nfiles; k++) free(rd->files[k]);
    free(rd->files);
    free(rd->list);
    free(rd->list_lines);
    free(rd->layout);
    free(rd->cols);
    free(rd->uci);
    if (rd->ml) pd_movielens_free(rd->ml);
    free(rd->ml);
    free(rd->ml_fields);
    pthread_mutex_destroy(&rd->mu);
    pthread_cond_destroy(&rd->cv);
    free(rd);
}

void pd_reader_set_tick(pd_reader *rd, int (*tick)(void *ctx), void *ctx)
{
    if (!rd) return;
    pthread_mutex_lock(&rd->mu);
    rd->tick = tick;
    rd->tick_ctx = ctx;
    pthread_mutex_unlock(&rd->mu);
}

void pd_reader_set_stop(pd_reader *rd, volatile int *stop)
{
    if (!rd) return;
    pthread_mutex_lock(&rd->mu);
    rd->o.stop = stop;
    pthread_mutex_unlock(&rd->mu);
}
