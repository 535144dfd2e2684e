/* predict.c - a saved model's predictions over a data file (paddle predict). */
#include "predict.h"
#include "driver.h"
#include "npy.h"
#include "../core/pd.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* need[k] for the k-th data layer: the prediction reads it. */
static unsigned char *needed_slots(const pd_net *net)
{
    unsigned char *live = pd_xmalloc((size_t)net->nlayers), *need = pd_xcalloc((size_t)net->nlayers + 1, 1);
    pd_net_live(net, net->r->predict, live);
    for (int i = 0, k = 0; i < net->nlayers; i++)
        if (net->layers[i].is_data) need[k++] = live[i];
    free(live);
    return need;
}

/* The slots written before the prediction: the sample's ids (movielens). */
static int id_slots(const pd_recipe *r, int *ids)
{
    static const char *const names[] = {"user_id", "movie_id"};
    int n = 0;
    if (!r->format || strcmp(r->format, "movielens") != 0) return 0;
    for (size_t j = 0; j < PD_COUNT(names); j++)
        for (int i = 0, k = 0; i < r->nlayers; i++) {
            if (strcmp(r->layers[i].type, "data") != 0) continue;
            if (!strcmp(r->layers[i].slot, names[j]) && !strcmp(r->layers[i].kind, "id")) ids[n++] = k;
            k++;
        }
    return n;
}

/* One CSV line per sample of b: its ids, then the prediction. */
static int write_rows(pd_net *net, const pd_batch *b, const int *ids, int nids, FILE *out)
{
    pd_layer *l = &net->layers[net->r->predict];
    if (l->rows != b->n)
        return pd_err_set(PD_ERECIPE, "predict layer '%s' gives %d rows for %d samples (a sequence)", l->d->name,
                          l->rows, b->n);
    size_t n = (size_t)b->n * l->size;
    const float *h = l->out;
    float *copy = NULL;
    if (!net->be->host_memory) {
        h = copy = pd_xmalloc(n * sizeof(float) + 1);
        net->be->download(copy, l->out, n * sizeof(float));
    }
    for (int i = 0; i < b->n; i++) {
        for (int k = 0; k < nids; k++) fprintf(out, "%d,", b->slots[ids[k]].ids[i]);
        for (int k = 0; k < l->size; k++) fprintf(out, "%s%.9g", k ? "," : "", h[(size_t)i * l->size + k]);
        fputc('\n', out);
    }
    free(copy);
    if (ferror(out)) return pd_err_set(PD_EIO, "cannot write the predictions: %s", strerror(errno));
    return 0;
}

static int open_input(pd_reader **rd, const pd_recipe *r, int part, const unsigned char *need)
{
    pd_reader_opts ro = {.part = part, .nshares = 1, .batch_size = r->batch_size, .seed = (uint64_t)r->seed,
                         .passes = 1, .need = need, .where = "option --input"};
    return pd_reader_open(rd, r, &ro);
}

/* One pass of the input: the predictions written, the samples counted. */
static int predict_pass(pd_net *net, pd_reader *rd, pd_predict_opts *o)
{
    int ids[2], nids = id_slots(net->r, ids), rc;
    pd_batch *b;
    while ((rc = pd_reader_next(rd, &b)) == 1) {
        if ((rc = pd_net_bind(net, b)) == 0 && (rc = pd_net_forward_to(net, net->r->predict)) == 0)
            rc = write_rows(net, b, ids, nids, o->out);
        o->samples += b->n;
        pd_reader_release(rd, b);
        if (rc < 0) return rc;
    }
    return rc;
}

int pd_predict(const pd_recipe *r, pd_predict_opts *o)
{
    if (r->predict < 0)
        return pd_err_set(PD_ERECIPE, "%s: the model has no predict layer (return { cost = ..., predict = LAYER })",
                          r->path);
    /* the recipe as it is, reading the input once, in file order */
    pd_recipe in = *r;
    in.train = in.test = (char *)o->input;
    in.shuffle_buffer = 0;
    in.passes = 1;
    const pd_backend *be = pd_backend_get(r->device);
    if (!be) return pd_backend_missing(r->device);
    pd_net net;
    pd_reader *rd = NULL;
    unsigned char *need = NULL;
    int rc = pd_net_build(&net, &in, be, (uint64_t)r->seed);
    if (rc < 0) return rc;
    o->samples = 0;
    o->labelled = 0;
    if ((rc = pd_model_load_saved(&net, o->model)) < 0) goto out;
    need = needed_slots(&net);
    if ((rc = open_input(&rd, &in, o->part, need)) < 0 || (rc = predict_pass(&net, rd, o)) < 0) goto out;
    if (fflush(o->out) != 0) {
        rc = pd_err_set(PD_EIO, "cannot write the predictions: %s", strerror(errno));
        goto out;
    }
    o->labelled = o->samples > 0 && pd_reader_unlabeled(rd) == 0;
    pd_reader_close(rd);
    rd = NULL;
    /* the cost and metrics as the pass line's test part has them */
    if (o->labelled && (rc = open_input(&rd, &in, o->part, NULL)) == 0) {
        long n = pd_evaluate(&net, rd, &o->cost, o->metrics);
        rc = n < 0 ? (int)n : 0;
    }
out:
    pd_reader_close(rd);
    free(need);
    pd_net_free(&net);
    return rc;
}
