/* data.c - the data layer: its output is a slot of the bound batch. */
#include "net.h"

#include <string.h>

static int setup(pd_layer *l)
{
    const pd_layer_desc *d = l->d;
    int rc;
    if ((rc = pd_layer_check(l, 0, -1)) < 0) return rc;
    if (!d->slot || !d->slot[0]) return pd_layer_fail(l, "names no reader slot");
    if (!d->kind) return pd_layer_fail(l, "has no kind (dense, id or id_list)");
    if (strcmp(d->kind, "dense") == 0) {
        if (d->seq) return pd_layer_fail(l, "is dense but marked as a sequence");
        return 0;
    }
    if (strcmp(d->kind, "id") && strcmp(d->kind, "id_list"))
        return pd_layer_fail(l, "has kind '%s', not dense, id or id_list", d->kind);
    if (l->size != 1) return pd_layer_fail(l, "holds ids, so its width is 1, not %d", l->size);
    if (d->range < 0) return pd_layer_fail(l, "holds ids in [0, %d): the range must be positive", d->range);
    if (!d->seq != !strcmp(d->kind, "id"))
        return pd_layer_fail(l, "is %s but %smarked as a sequence", d->kind, d->seq ? "" : "not ");
    return 0;
}

static int forward(pd_layer *l) { (void)l; return 0; }
static int backward(pd_layer *l) { (void)l; return 0; }

const pd_layer_ops pd_layer_data = {"data", setup, forward, backward, NULL};
