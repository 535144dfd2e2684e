/*
 * fuzz_reader.c - a data reader (src/data/reader.c, movielens.c) on
 * arbitrary file contents, through pd_reader_open and pd_reader_next as a
 * trainer reads.
 *
 * Built once per format (FUZZ_FORMAT): reader_csv, reader_libsvm,
 * reader_uci (uci_housing) and reader_movielens. Two recipes per format are
 * loaded once, at start: a strict one, and one that skips bad lines (and,
 * for csv, has a header line and ';' between fields).
 *
 * Input: two bytes of options, then the file. Byte 0: bit 0 the skipping
 * recipe, bit 1 the test part, bits 2-3 the number of shares (trainers)
 * less one, bits 4-5 this share, bit 6 two passes. Byte 1: bits 0-3 the
 * batch size less one, bit 4 a shuffle buffer of 4. For movielens the file
 * is users.dat, movies.dat and ratings.dat, separated by lines "====".
 *
 * Checks, besides the sanitizers: every batch holds 1 to batch-size
 * samples in the recipe's slots, every id is inside its slot's range and
 * id lists are well formed.
 */
#include "fuzz_common.h"
#include "../../src/core/pd.h"
#include "../../src/data/reader.h"
#include "../../src/lua/recipe.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef FUZZ_FORMAT
#define FUZZ_FORMAT "csv"
#endif

#define SEPARATOR "\n====\n"

typedef struct format {
    const char *name;
    const char *data[2];    /* data { } of the strict and the skipping recipe */
    const char *model;
} format;

static const format formats[] = {
    {"csv",
     {"data { train = 'data.csv', test = 'data.csv', format = 'csv',\n"
      "       columns = { 'y=1', 'x=2-4', 'c=5', 'l=6' } }\n",
      "data { train = 'data.csv', test = 'data.csv', format = 'csv', header = true,\n"
      "       separator = ';', on_error = 'skip' }\n"},
     "model = function(nn)\n"
     "  local x, c, l, y = nn.data('x', 3), nn.id('c', 4), nn.id_list('l', 5), nn.data('y', 1)\n"
     "  local h = nn.concat { x, nn.embedding(c, 2), nn.seq_pool(nn.embedding(l, 2), 'sum') }\n"
     "  return nn.square_error_cost(nn.fc(h, 1), y)\n"
     "end\n"},
    {"libsvm",
     {"data { train = 'data.svm', test = 'data.svm', format = 'libsvm' }\n"
      "model = function(nn)\n"
      "  local x, label = nn.data('x', 8), nn.id('label', 3)\n"
      "  return nn.softmax_cross_entropy(nn.fc(x, 3), label)\n"
      "end\n",
      "data { train = 'data.svm', test = 'data.svm', format = 'libsvm', on_error = 'skip' }\n"
      "model = function(nn)\n"
      "  local x, y = nn.data('x', 8), nn.data('y', 1)\n"
      "  return nn.square_error_cost(nn.fc(x, 1), y)\n"
      "end\n"},
     ""},
    {"uci",
     {"data { train = 'housing.data', test = 'housing.data', format = 'uci_housing' }\n",
      "data { train = 'housing.data', test = 'housing.data', format = 'uci_housing', on_error = 'skip' }\n"},
     "model = function(nn)\n"
     "  local x, y = nn.data('x', 13), nn.data('y', 1)\n"
     "  return nn.square_error_cost(nn.fc(x, 1), y)\n"
     "end\n"},
    {"movielens",
     {"data { train = 'ml', test = 'ml', format = 'movielens' }\n",
      "data { train = 'ml', test = 'ml', format = 'movielens', on_error = 'skip', test_fraction = 0.5 }\n"},
     "model = function(nn)\n"
     "  local usr = nn.fc(nn.concat {\n"
     "    nn.embedding(nn.id('user_id', 50), 4), nn.embedding(nn.id('gender', 2), 2),\n"
     "    nn.embedding(nn.id('age', 7), 2), nn.embedding(nn.id('occupation', 21), 2) }, 4)\n"
     "  local mov = nn.fc(nn.concat {\n"
     "    nn.embedding(nn.id('movie_id', 50), 4),\n"
     "    nn.seq_pool(nn.embedding(nn.id_list('genres', 18), 2), 'sum'),\n"
     "    nn.seq_pool(nn.embedding(nn.id_list('title', 40), 2), 'max') }, 4)\n"
     "  return nn.square_error_cost(nn.cos_sim(usr, mov, 5), nn.data('rating', 1))\n"
     "end\n"},
};

static const format *fmt;
static pd_recipe recipes[2];

/* Write the data file(s) the recipes name from input bytes p[0..n). */
static void write_data(const uint8_t *p, size_t n)
{
    if (strcmp(fmt->name, "movielens") != 0) {
        const char *file = !strcmp(fmt->name, "csv") ? "data.csv" : !strcmp(fmt->name, "libsvm") ? "data.svm"
                                                                                                 : "housing.data";
        fz_write(file, p, n);
        return;
    }
    static const char *const files[3] = {"ml/users.dat", "ml/movies.dat", "ml/ratings.dat"};
    size_t sep = strlen(SEPARATOR);
    for (int i = 0; i < 3; i++) {
        const uint8_t *end = n >= sep ? memmem(p, n, SEPARATOR, sep) : NULL;
        size_t len = end ? (size_t)(end - p) : n;
        fz_write(files[i], p, len);
        p += len, n -= len;
        if (end) p += sep, n -= sep;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fz_init();
    for (size_t i = 0; i < PD_COUNT(formats); i++)
        if (strcmp(formats[i].name, FUZZ_FORMAT) == 0) fmt = &formats[i];
    if (!fmt) fz_fail("no format %s", FUZZ_FORMAT);
    char *ml = fz_path("ml");
    mkdir(ml, 0755);
    free(ml);
    write_data((const uint8_t *)"", 0);
    for (int v = 0; v < 2; v++) {
        char *name = pd_xasprintf("%s-%d.lua", fmt->name, v), *path = fz_path(name);
        char *text = pd_xasprintf("%s%soptimizer = nn.sgd { learning_rate = 0.1 }\n", fmt->data[v], fmt->model);
        fz_write(name, text, strlen(text));
        if (pd_recipe_load(&recipes[v], path, NULL, NULL, 0) < 0) fz_fail("%s", pd_err_msg());
        free(name);
        free(path);
        free(text);
    }
    return 0;
}

/* The reader's promises about a batch b of at most max samples. */
static void check_batch(const pd_batch *b, const pd_slot *layout, int nslots, int max)
{
    if (b->n < 1 || b->n > max) fz_fail("a batch of %d samples (batch size %d)", b->n, max);
    if (b->nslots != nslots) fz_fail("a batch with %d slots, the model has %d", b->nslots, nslots);
    for (int i = 0; i < nslots; i++) {
        const pd_slot *s = &b->slots[i];
        if (s->kind != layout[i].kind || s->width != layout[i].width)
            fz_fail("slot %d of a batch is not the model's slot '%s'", i, layout[i].name);
        int nids = s->kind == PD_SLOT_ID ? b->n : s->kind == PD_SLOT_ID_LIST ? 0 : -1;
        if (s->kind == PD_SLOT_ID_LIST) {
            if (s->offsets[0] != 0) fz_fail("slot '%s': id lists start at %d", s->name, s->offsets[0]);
            for (int k = 0; k < b->n; k++)
                if (s->offsets[k + 1] < s->offsets[k]) fz_fail("slot '%s': id list %d ends before it starts", s->name, k);
            nids = s->offsets[b->n];
        }
        for (int k = 0; k < nids; k++)
            if (s->ids[k] < 0 || s->ids[k] >= s->width)
                fz_fail("slot '%s': id %d outside [0, %d)", s->name, s->ids[k], s->width);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    uint8_t o0 = data[0], o1 = data[1];
    write_data(data + 2, size - 2);
    const pd_recipe *r = &recipes[o0 & 1];
    pd_reader_opts o = {.part = o0 & 2 ? PD_PART_TEST : PD_PART_TRAIN, .nshares = 1 + (o0 >> 2 & 3),
                        .batch_size = 1 + (o1 & 15), .shuffle = o1 & 16 ? 4 : 0, .seed = 7,
                        .passes = 1 + (o0 >> 6 & 1)};
    o.share = (o0 >> 4 & 3) % o.nshares;
    pd_slot *layout;
    int nslots;
    if (pd_reader_layout(r, &layout, &nslots) < 0) fz_fail("%s", pd_err_msg());
    pd_reader *rd;
    if (pd_reader_open(&rd, r, &o) == 0) {
        int rc = 0;
        for (int pass = 0; pass < o.passes && rc >= 0; pass++) {
            pd_batch *b;
            while ((rc = pd_reader_next(rd, &b)) == 1) {
                check_batch(b, layout, nslots, o.batch_size);
                pd_reader_release(rd, b);
            }
        }
        pd_reader_close(rd);
    }
    free(layout);
    return 0;
}
