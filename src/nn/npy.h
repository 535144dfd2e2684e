/*
 * npy.h - models on disk: one NumPy .npy file per parameter plus a small
 * manifest.json, so NumPy (np.load) and everything else can read them.
 *
 *     pd_model_save(&net, "output/pass-00003", &info);   // atomic: .tmp + rename
 *     pd_model_load(&net, "output/pass-00003");          // shapes must match
 */
#ifndef PD_NPY_H
#define PD_NPY_H

#include "net.h"

typedef struct pd_model_info {
    int pass;
    double train_cost, test_cost;   /* NAN when unknown */
    long samples;
} pd_model_info;

/* Write a float32 array of shape [rows, cols] (C order) to path. */
int pd_npy_write(const char *path, const float *data, int rows, int cols);
/* Read path into data, which must be [rows, cols] floats; the file's shape
 * must be (rows, cols), or (rows*cols,) for vectors. */
int pd_npy_read(const char *path, float *data, int rows, int cols);


int pd_model_save(pd_net *net, const char *dir, const pd_model_info *info);
int pd_model_load(pd_net *net, const char *dir);

#endif
