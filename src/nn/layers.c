/* layers.c - the list of layer types. */
#include "net.h"

#include <string.h>

extern const pd_layer_ops pd_layer_data, pd_layer_fc, pd_layer_embedding, pd_layer_seq_pool,
    pd_layer_concat, pd_layer_cos_sim, pd_layer_square_error_cost, pd_layer_cross_entropy,
    pd_layer_softmax_cross_entropy, pd_layer_classification_error, pd_layer_sigmoid_cross_entropy, pd_layer_add,
    pd_layer_auc;

static const pd_layer_ops *const all[] = {
    &pd_layer_data,    &pd_layer_fc,      &pd_layer_embedding,         &pd_layer_seq_pool,
    &pd_layer_concat,  &pd_layer_cos_sim, &pd_layer_square_error_cost, &pd_layer_cross_entropy,
    &pd_layer_softmax_cross_entropy, &pd_layer_classification_error, &pd_layer_sigmoid_cross_entropy,
    &pd_layer_add, &pd_layer_auc,
};

const pd_layer_ops *pd_layer_ops_find(const char *type)
{
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->type, type) == 0) return all[i];
    return NULL;
}
