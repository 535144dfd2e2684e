/*
 * npy.h - models on disk: one NumPy .npy file per parameter plus a small
 * manifest.json, so NumPy (np.load) and everything else can read them.
 * A growing table is two files: NAME.keys.npy (uint64 ids) and NAME.npy
 * (one row for each, in the same order).
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
/* Write a uint64 vector of n elements to path ('<u8'). */
int pd_npy_write_u64(const char *path, const uint64_t *data, long n);
/* The largest dimension a .npy file read or written here may have. */
#define PD_NPY_MAX_DIM (1L << 31)
/* Write n float32 arrays back to back as one vector (shape (total,)). */
int pd_npy_write_parts(const char *path, const float *const *parts, const size_t *counts, int n);
/* Read count values from offset (in values) of a float32 vector's file. */
int pd_npy_read_part(const char *path, size_t offset, float *data, size_t count);
/* Read path into data, which must be [rows, cols] floats; the file's shape
 * must be (rows, cols), or (rows*cols,) for vectors. */
int pd_npy_read(const char *path, float *data, int rows, int cols);


/* A parameter's name is a file name in the model's directory: 0, or
 * PD_EINVAL when it is empty, longer than PD_PARAM_NAME_MAX bytes, starts
 * with '.', or contains '/', a control character, '"' or '\\'. */
#define PD_PARAM_NAME_MAX 128
int pd_param_name_check(const char *name);

/* Both refuse a net with a parameter name pd_param_name_check() refuses. */
int pd_model_save(pd_net *net, const char *dir, const pd_model_info *info);
int pd_model_load(pd_net *net, const char *dir);
/* pd_model_load of a model paddle saved (predict, --init_model): a directory
 * that is not there is PD_ENOENT; one that is not a saved model, or a model
 * of other parameters or shapes, PD_EINPUT, its message naming what differs. */
int pd_model_load_saved(pd_net *net, const char *dir);

#endif
