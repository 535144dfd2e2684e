/* npy.c - NumPy .npy files (format version 1.0, '<f4', C order). */
#include "npy.h"
#include "../core/pd.h"
#include "../core/fs.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define MAX_HEADER 65536

/* The header of an array of descr and shape (rows, cols) (cols < 0: a
 * vector of rows elements) into f. */
static void npy_header(FILE *f, const char *descr, long rows, long cols)
{
    char dict[256];
    int n = cols >= 0 ? snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%ld, %ld), }",
                                 descr, rows, cols)
                      : snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%ld,), }",
                                 descr, rows);
    /* magic(6) + version(2) + len(2) + dict + padding + '\n', a multiple of 64 */
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    int hlen = n + pad + 1;
    unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                              (unsigned char)(hlen >> 8)};
    fwrite(head, 1, 10, f);
    fwrite(dict, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
}

/* A model's save can take seconds: a trainer's net heartbeats (net->tick)
 * between its chunks, so that its pservers do not call it hung. */
#define SAVE_CHUNK ((size_t)4 << 20) /* bytes written between two ticks */

typedef struct ticker {
    int (*fn)(void *ctx);
    void *ctx;
} ticker;

/* fwrite in chunks of SAVE_CHUNK, t (may be NULL) ticked after each. */
static size_t write_ticked(const void *data, size_t elsize, size_t count, FILE *f, const ticker *t)
{
    size_t per = SAVE_CHUNK / elsize, done = 0;
    while (done < count) {
        size_t n = PD_MIN(per, count - done);
        size_t w = fwrite((const char *)data + done * elsize, elsize, n, f);
        done += w;
        if (w != n) break;
        /* a pserver lost meanwhile is found at the trainer's next exchange;
         * the model written here is whole either way */
        if (t && t->fn) (void)t->fn(t->ctx);
    }
    return done;
}

/* descr '<f4' or '<u8'; cols < 0: a vector of rows elements. */
static int npy_write(const char *path, const char *descr, const void *data, size_t elsize, long rows, long cols,
                     const ticker *t)
{
    FILE *f = fopen(path, "wb");
    if (!f) return pd_err_set(PD_EIO, "cannot write %s: %s", path, strerror(errno));
    npy_header(f, descr, rows, cols);
    size_t count = (size_t)rows * (size_t)(cols >= 0 ? cols : 1);
    size_t wrote = write_ticked(data, elsize, count, f, t);
    int bad = ferror(f) | (fclose(f) != 0);
    if (wrote != count || bad) return pd_err_set(PD_EIO, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

int pd_npy_write_parts(const char *path, const float *const *parts, const size_t *counts, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) total += counts[i];
    if (total > PD_NPY_MAX_DIM) return pd_err_set(PD_ERANGE, "%s: %zu values, over the %ld of one file", path, total,
                                                  (long)PD_NPY_MAX_DIM);
    FILE *f = fopen(path, "wb");
    if (!f) return pd_err_set(PD_EIO, "cannot write %s: %s", path, strerror(errno));
    npy_header(f, "<f4", (long)total, -1);
    int short_write = 0;
    for (int i = 0; i < n && !short_write; i++)
        short_write = counts[i] && fwrite(parts[i], sizeof(float), counts[i], f) != counts[i];
    int bad = ferror(f) | (fclose(f) != 0);
    if (short_write || bad) return pd_err_set(PD_EIO, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

int pd_npy_write(const char *path, const float *data, int rows, int cols)
{
    return npy_write(path, "<f4", data, sizeof(float), rows, cols, NULL);
}

int pd_npy_write_u64(const char *path, const uint64_t *data, long n)
{
    return npy_write(path, "<u8", data, sizeof(uint64_t), n, -1, NULL);
}

/* In the error of a parameter whose shape is not the net's (a model of
 * another recipe), and in those of a file cut short ("truncated header",
 * "truncated data") or written over (a damaged model); the other errors of
 * a .npy say what to do themselves. */
#define SHAPE_DIFFERS "differs from the model's"
#define TRUNCATED "truncated"
#define NOT_NPY "is not a .npy file"

/* Parse "(a, b)" or "(a,)" from the header's shape entry. */
static int parse_shape(const char *h, long *dims, int *ndims)
{
    const char *p = strstr(h, "'shape'");
    if (!p || !(p = strchr(p, '('))) return -1;
    p++;
    *ndims = 0;
    while (*p && *p != ')') {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > PD_NPY_MAX_DIM || *ndims >= 4) return -1;
        dims[(*ndims)++] = v;
        p = end;
    }
    return *p == ')' ? 0 : -1;
}

/* Open path, check its header (descr, C order) and read its shape; the
 * file is left at its data. NULL with *rc set (message too) on failure. */
/* A read that came short: an I/O error (PD_EIO: the file may be fine) or
 * the file's end (PD_EDATA: what: "truncated header", ...). */
static int short_read(FILE *f, const char *path, const char *what)
{
    if (ferror(f)) return pd_err_set(PD_EIO, "%s: read error: %s", path, strerror(errno));
    return pd_err_set(PD_EDATA, "%s: %s", path, what);
}

static FILE *npy_open(const char *path, const char *descr, long *dims, int *nd, int *rc_out)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *rc_out = pd_err_set(errno == ENOENT ? PD_ENOENT : PD_EIO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    unsigned char head[12];
    int rc = 0;
    char *h = NULL;
    if (fread(head, 1, 10, f) != 10 || memcmp(head, NPY_MAGIC, 6) != 0) {
        rc = ferror(f) ? short_read(f, path, "") : pd_err_set(PD_EDATA, "%s " NOT_NPY, path);
        goto out;
    }
    size_t hlen;
    if (head[6] == 1) {
        hlen = head[8] | (size_t)head[9] << 8;
    } else if (head[6] == 2 || head[6] == 3) {
        if (fread(head + 10, 1, 2, f) != 2) {
            rc = short_read(f, path, "truncated header");
            goto out;
        }
        hlen = head[8] | (size_t)head[9] << 8 | (size_t)head[10] << 16 | (size_t)head[11] << 24;
    } else {
        rc = pd_err_set(PD_EDATA, "%s: unknown .npy version %d", path, head[6]);
        goto out;
    }
    if (hlen > MAX_HEADER) {
        rc = pd_err_set(PD_EDATA, "%s: header of %zu bytes is over the %d limit", path, hlen, MAX_HEADER);
        goto out;
    }
    h = pd_xmalloc(hlen + 1);
    if (fread(h, 1, hlen, f) != hlen) {
        rc = short_read(f, path, "truncated header");
        goto out;
    }
    h[hlen] = '\0';
    char want[16];
    snprintf(want, sizeof want, "'%s'", descr);
    if (!strstr(h, want)) {
        rc = pd_err_set(PD_EDATA, "%s: not %s", path, strcmp(descr, "<f4") ? "uint64 little-endian ('<u8')"
                                                                              : "float32 little-endian ('<f4')");
        goto out;
    }
    if (strstr(h, "'fortran_order': True")) {
        rc = pd_err_set(PD_EDATA, "%s: Fortran order is not supported; save with np.ascontiguousarray", path);
        goto out;
    }
    if (parse_shape(h, dims, nd) < 0) {
        rc = pd_err_set(PD_EDATA, "%s: cannot read the shape in the header", path);
        goto out;
    }
out:
    free(h);
    if (rc < 0) {
        fclose(f);
        *rc_out = rc;
        return NULL;
    }
    return f;
}

int pd_npy_read(const char *path, float *data, int rows, int cols)
{
    long dims[4] = {0, 0, 0, 0};
    int nd = 0, rc = 0;
    FILE *f = npy_open(path, "<f4", dims, &nd, &rc);
    if (!f) return rc;
    int ok = (nd == 2 && dims[0] == rows && dims[1] == cols) ||
             (nd == 1 && dims[0] == (long)rows * cols && (rows == 1 || cols == 1));
    if (!ok) {
        rc = pd_err_set(PD_EDATA, "%s: shape (%ld%s%ld) " SHAPE_DIFFERS " (%d, %d)", path, dims[0],
                        nd > 1 ? ", " : ",", nd > 1 ? dims[1] : 0L, rows, cols);
        goto out;
    }
    size_t count = (size_t)rows * cols;
    if (fread(data, sizeof(float), count, f) != count) {
        rc = short_read(f, path, "truncated data");
        goto out;
    }
out:
    fclose(f);
    return rc;
}

int pd_npy_read_part(const char *path, size_t offset, float *data, size_t count)
{
    long dims[4] = {0, 0, 0, 0};
    int nd = 0, rc = 0;
    FILE *f = npy_open(path, "<f4", dims, &nd, &rc);
    if (!f) return rc;
    if (nd != 1 || offset > (size_t)dims[0] || count > (size_t)dims[0] - offset)
        rc = pd_err_set(PD_EDATA, "%s: %zu values from %zu are not in it (shape (%ld%s))", path, count, offset, dims[0],
                        nd == 1 ? ",": ", ...");
    else if (offset && fseeko(f, (off_t)(offset * sizeof(float)), SEEK_CUR) != 0)
        rc = pd_err_set(PD_EIO, "%s: %s", path, strerror(errno));
    else if (count && fread(data, sizeof(float), count, f) != count)
        rc = short_read(f, path, "truncated data");
    fclose(f);
    return rc;
}

/* A growing table saved as NAME.keys.npy (uint64, n) + NAME.npy (n, cols)
 * into p->tab (optimizer state zero). */
static int load_table(pd_param *p, const char *dir)
{
    long dims[4] = {0, 0, 0, 0};
    int nd = 0, rc = 0;
    char *path = pd_xasprintf("%s/%s.keys.npy", dir, p->name);
    FILE *f = npy_open(path, "<u8", dims, &nd, &rc);
    if (!f) goto out;
    long n = dims[0];
    if (nd != 1 || n > PD_HT_MAX_ROWS) {
        rc = pd_err_set(PD_EDATA, "%s: keys must be a vector, not of %d dimensions", path, nd);
        fclose(f);
        goto out;
    }
    uint64_t *keys = pd_xmalloc((size_t)n * sizeof *keys + 1);
    if (fread(keys, sizeof *keys, (size_t)n, f) != (size_t)n) rc = short_read(f, path, "truncated");
    fclose(f);
    float *rows = NULL;
    if (rc == 0) {
        free(path);
        path = pd_xasprintf("%s/%s.npy", dir, p->name);
        rows = pd_xmalloc((size_t)n * p->cols * sizeof(float) + 1);
        rc = n ? pd_npy_read(path, rows, (int)n, p->cols) : 0;
    }
    if (rc == 0) {
        pd_hashtab_clear(p->tab);
        for (long i = 0; i < n; i++)
            memcpy(pd_hashtab_put(p->tab, keys[i]), rows + (size_t)i * p->cols, (size_t)p->cols * sizeof(float));
    }
    free(rows);
    free(keys);
out:
    free(path);
    return rc;
}

/* p->tab as NAME.keys.npy + NAME.npy in dir. */
static int save_table(const pd_param *p, const char *dir, const ticker *t)
{
    long n = pd_hashtab_rows(p->tab);
    uint64_t *keys = pd_xmalloc((size_t)n * sizeof *keys + 1);
    float *rows = pd_xmalloc((size_t)n * p->cols * sizeof(float) + 1);
    for (long i = 0; i < n; i++) {
        keys[i] = pd_hashtab_key(p->tab, i);
        memcpy(rows + (size_t)i * p->cols, pd_hashtab_row(p->tab, i), (size_t)p->cols * sizeof(float));
    }
    char *path = pd_xasprintf("%s/%s.keys.npy", dir, p->name);
    int rc = npy_write(path, "<u8", keys, sizeof *keys, n, -1, t);
    free(path);
    if (rc == 0) {
        path = pd_xasprintf("%s/%s.npy", dir, p->name);
        rc = npy_write(path, "<f4", rows, sizeof(float), n, p->cols, t);
        free(path);
    }
    free(keys);
    free(rows);
    return rc;
}

/* Remove a saved model's directory: its manifest and every .npy file in it
 * (whatever model saved them), then the directory. 0 when it is gone or
 * never was; < 0 (message set) when it holds other files. */
static int rm_model_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : pd_err_set(PD_EIO, "cannot open %s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (strcmp(e->d_name, "manifest.json") != 0 && (n < 4 || strcmp(e->d_name + n - 4, ".npy") != 0)) continue;
        char *path = pd_xasprintf("%s/%s", dir, e->d_name);
        unlink(path);
        free(path);
    }
    closedir(d);
    if (rmdir(dir) < 0)
        return pd_err_set(PD_EIO, "cannot replace %s: %s (it holds files that are not a saved model's)", dir,
                          strerror(errno));
    return 0;
}

static void json_number(FILE *f, double v)
{
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fprintf(f, "null");
}

int pd_param_name_check(const char *name)
{
    size_t len = name ? strlen(name) : 0;
    const char *why = NULL;
    if (len == 0) why = "is empty";
    else if (len > PD_PARAM_NAME_MAX) why = "is longer than 128 bytes";
    else if (name[0] == '.') why = "starts with '.'";
    else if (strchr(name, '/')) why = "contains '/'";
    for (size_t i = 0; !why && i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f) why = "contains a control character";
        else if (c == '"' || c == '\\') why = "contains a quote or a backslash";
    }
    if (!why) return 0;
    /* print at most 128 bytes of it, control characters as '?' */
    char shown[PD_PARAM_NAME_MAX + 1];
    size_t n = len < PD_PARAM_NAME_MAX ? len : PD_PARAM_NAME_MAX;
    for (size_t i = 0; i < n; i++) shown[i] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
    shown[n] = '\0';
    return pd_err_set(PD_EINVAL, "parameter name '%s'%s %s: it names a file of the model", shown,
                      n < len ? "..." : "", why);
}

static int check_names(const pd_net *net, const char *dir)
{
    for (int i = 0; i < net->nparams; i++)
        if (pd_param_name_check(net->params[i].name) < 0) return pd_err_wrap(PD_EINVAL, "model %s", dir);
    return 0;
}

int pd_model_save(pd_net *net, const char *dir, const pd_model_info *info)
{
    int rc;
    if ((rc = check_names(net, dir)) < 0) return rc;
    char *tmp = pd_xasprintf("%s.tmp", dir);
    if ((rc = rm_model_dir(tmp)) < 0 || (rc = pd_mkdir_p(tmp)) < 0) goto out;
    float *host = NULL;
    size_t cap = 0;
    ticker t = {net->tick, net->tick_ctx};
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (p->hash) {
            if ((rc = save_table(p, tmp, &t)) < 0) break;
            continue;
        }
        size_t n = (size_t)p->rows * p->cols;
        if (n > cap) {
            free(host);
            host = pd_xmalloc(n * sizeof(float));
            cap = n;
        }
        net->be->download(host, p->w, n * sizeof(float));
        char *path = pd_xasprintf("%s/%s.npy", tmp, p->name);
        rc = npy_write(path, "<f4", host, sizeof(float), p->rows, p->cols, &t);
        free(path);
        if (rc < 0) break;
    }
    free(host);
    if (rc < 0) goto out;
    char *mpath = pd_xasprintf("%s/manifest.json", tmp);
    FILE *f = fopen(mpath, "w");
    if (!f) {
        rc = pd_err_set(PD_EIO, "cannot write %s: %s", mpath, strerror(errno));
        free(mpath);
        goto out;
    }
    fprintf(f, "{\n  \"format\": \"paddle-model\",\n  \"version\": 1,\n  \"pass\": %d,\n  \"samples\": %ld,\n",
            info->pass, info->samples);
    fprintf(f, "  \"train_cost\": ");
    json_number(f, info->train_cost);
    fprintf(f, ",\n  \"test_cost\": ");
    json_number(f, info->test_cost);
    fprintf(f, ",\n  \"params\": [\n");
    for (int i = 0; i < net->nparams; i++) {
        pd_param *p = &net->params[i];
        if (p->hash)
            fprintf(f, "    {\"name\": \"%s\", \"file\": \"%s.npy\", \"keys\": \"%s.keys.npy\", \"shape\": [%ld, %d], "
                       "\"sparse\": true, \"table\": \"hash\"}%s\n", p->name, p->name, p->name,
                    pd_hashtab_rows(p->tab), p->cols, i + 1 < net->nparams ? "," : "");
        else
            fprintf(f, "    {\"name\": \"%s\", \"file\": \"%s.npy\", \"shape\": [%d, %d], \"sparse\": %s}%s\n",
                    p->name, p->name, p->rows, p->cols, p->sparse ? "true" : "false", i + 1 < net->nparams ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    int bad = ferror(f) | (fclose(f) != 0);
    free(mpath);
    if (bad) {
        rc = pd_err_set(PD_EIO, "cannot write the manifest in %s", tmp);
        goto out;
    }
    /* replace an older save of the same pass, by this model or another */
    if ((rc = rm_model_dir(dir)) < 0) goto out;
    if (rename(tmp, dir) < 0) rc = pd_err_set(PD_EIO, "cannot rename %s to %s: %s", tmp, dir, strerror(errno));
out:
    free(tmp);
    return rc;
}

int pd_model_load(pd_net *net, const char *dir)
{
    float *host = NULL;
    size_t cap = 0;
    int rc = check_names(net, dir);
    for (int i = 0; i < net->nparams && rc == 0; i++) {
        pd_param *p = &net->params[i];
        if (p->hash) {
            rc = load_table(p, dir);
            continue;
        }
        size_t n = (size_t)p->rows * p->cols;
        if (n > cap) {
            free(host);
            host = pd_xmalloc(n * sizeof(float));
            cap = n;
        }
        char *path = pd_xasprintf("%s/%s.npy", dir, p->name);
        rc = pd_npy_read(path, host, p->rows, p->cols);
        free(path);
        if (rc == 0) net->be->upload(p->w, host, n * sizeof(float));
    }
    free(host);
    if (rc < 0) return rc == PD_EINVAL ? rc : pd_err_wrap(rc, "loading model %s", dir);
    return 0;
}

#define MANIFEST_MAX (64 << 20) /* the largest manifest.json read: about 500,000 parameters */

/* Does dir's manifest.json list the file name (written "file": "NAME")? */
static int manifest_lists(const char *dir, const char *name)
{
    char *path = pd_xasprintf("%s/manifest.json", dir);
    FILE *f = fopen(path, "r");
    free(path);
    if (!f) return 0;
    struct stat st;
    if (fstat(fileno(f), &st) < 0 || st.st_size > MANIFEST_MAX) {
        fclose(f);
        return 0;
    }
    char *text = pd_xmalloc((size_t)st.st_size + 1);
    size_t n = fread(text, 1, (size_t)st.st_size, f);
    fclose(f);
    text[n] = '\0';
    char *want = pd_xasprintf("\"file\": \"%s\"", name);
    int found = memchr(text, '\0', n) == NULL && strstr(text, want) != NULL;
    free(want);
    free(text);
    return found;
}

/* dir is a model paddle saved, with a file for every parameter of net. */
static int check_model_dir(const pd_net *net, const char *dir)
{
    struct stat st;
    if (stat(dir, &st) < 0)
        return pd_err_set(PD_ENOENT, "model %s: no such directory (models are SAVE_DIR/pass-NNNNN or SAVE_DIR/best)",
                          dir);
    if (!S_ISDIR(st.st_mode))
        return pd_err_set(PD_EINPUT, "model %s is a file, not a model's directory (models are SAVE_DIR/pass-NNNNN "
                          "or SAVE_DIR/best)", dir);
    char *path = pd_xasprintf("%s/manifest.json", dir);
    int ok = access(path, R_OK) == 0;
    free(path);
    if (!ok) {
        path = pd_xasprintf("%s/best/manifest.json", dir); /* SAVE_DIR itself */
        ok = access(path, R_OK) == 0;
        free(path);
        return pd_err_set(PD_EINPUT, "model %s: no manifest.json, not a model paddle saved%s", dir,
                          ok ? " (a save_dir: its models are DIR/pass-NNNNN or DIR/best)" : "");
    }
    for (int i = 0; i < net->nparams; i++) {
        const pd_param *p = &net->params[i];
        path = pd_xasprintf("%s/%s.npy", dir, p->name);
        ok = access(path, R_OK) == 0;
        int err = errno;
        free(path);
        if (ok) continue;
        /* one the manifest lists: the model lost a file (deleted, not copied) */
        char *file = pd_xasprintf("%s.npy", p->name);
        int listed = manifest_lists(dir, file);
        if (listed && err == ENOENT)
            pd_err_set(PD_EINPUT, "model %s: %s, listed in its manifest.json, is missing: save or copy the model again",
                       dir, file);
        else if (listed)
            pd_err_set(PD_EINPUT, "model %s: %s, listed in its manifest.json, cannot be read (%s)", dir, file,
                       strerror(err));
        free(file);
        if (listed) return PD_EINPUT;
        return pd_err_set(PD_EINPUT, "model %s has no parameter '%s' [%d, %d] of %s: a model of another recipe?",
                          dir, p->name, p->rows, p->cols, net->r->path);
    }
    return 0;
}

int pd_model_load_saved(pd_net *net, const char *dir)
{
    int rc = check_model_dir(net, dir);
    if (rc == 0 && (rc = pd_model_load(net, dir)) == PD_EDATA) {
        const char *msg = pd_err_msg(), *hint = "";
        if (strstr(msg, SHAPE_DIFFERS)) hint = ": a model of another recipe?";
        else if (strstr(msg, TRUNCATED) || strstr(msg, NOT_NPY))
            hint = ": the file is damaged (cut short, or written over): save or copy the model again";
        char why[1024];
        snprintf(why, sizeof why, "%s", msg);
        return pd_err_set(PD_EINPUT, "%s%s", why, hint);
    }
    return rc;
}
