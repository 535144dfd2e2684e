/* data.c - the data layer: its output is a slot of the bound batch. */
#include "net.h"

static void forward(pd_layer *l) { (void)l; }
static void backward(pd_layer *l) { (void)l; }

const pd_layer_ops pd_layer_data = {"data", NULL, forward, backward, NULL};
