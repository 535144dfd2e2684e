/*
 * recipe.h - a loaded, validated recipe as plain C data.
 *
 * src/lua/ fills a pd_recipe from a recipe file (pd_recipe_load in
 * lua/load.h); every other layer only reads it. Every default was resolved
 * by the Lua half of the language (lua/), so nothing here has defaults.
 *
 *     pd_recipe r;                 // filled by pd_recipe_load()
 *     long n = pd_recipe_params(&r);
 *     pd_recipe_free(&r);
 */
#ifndef PD_CORE_RECIPE_H
#define PD_CORE_RECIPE_H

#include <stddef.h>

#define PD_MAX_INPUTS 16

typedef struct pd_kv {
    char *key, *value;
} pd_kv;

typedef struct pd_host {
    char *spec;  /* as written: user@host:port */
    char *user;  /* NULL: the launcher's user */
    char *host;
    int port;
} pd_host;

typedef struct pd_init {
    char kind[16];  /* xavier, zero, uniform, normal, constant */
    double a, b;
} pd_init;

typedef struct pd_param_desc {
    char *name;
    int rows, cols;
    int sparse;     /* an embedding table: rows travel one by one */
    pd_init init;
    /* a growing table (rows 0): rows keyed by 64-bit ids, created on update */
    int hash;
    long min_count; /* updates before an id gets a row */
    int ttl;        /* passes without update before a row goes (0: never) */
    long max_rows;  /* rows per pserver (0: no cap) */
} pd_param_desc;

typedef struct pd_layer_desc {
    char *name;
    char *type;     /* data, fc, embedding, seq_pool, concat, cos_sim, ... */
    char *kind;     /* data layers: dense, id, id_list */
    char *slot;     /* data layers: the reader slot */
    char *act;      /* fc: linear relu sigmoid tanh softmax */
    char *pool;     /* seq_pool: sum average max */
    char *where;    /* file:line of the declaration */
    int size;       /* output width */
    int range;      /* id layers: ids are in [0, range); 0: 64-bit ids (growing tables) */
    int seq;        /* output is a sequence (one row per id) */
    double scale;   /* cos_sim */
    int ninputs;
    int inputs[PD_MAX_INPUTS];  /* indices into pd_recipe.layers */
    int nparams;
    pd_param_desc params[2];
} pd_layer_desc;

typedef struct pd_optimizer_desc {
    char type[16];  /* sgd momentum adagrad adam rmsprop */
    double learning_rate, momentum, beta1, beta2, epsilon, rho, weight_decay;
    int nesterov;
} pd_optimizer_desc;

typedef struct pd_metric_desc {
    char *name;
    int layer;
} pd_metric_desc;

typedef struct pd_recipe {
    char *path, *dir;

    /* cluster { } */
    int nhosts;
    pd_host *hosts;
    char *root_dir, *nic, *ld_library_path, *known_hosts;
    int port, ports_num, ports_num_for_sparse;
    int unix_sockets;
    int shared_memory;
    int use_agent;
    double connect_timeout;
    int nidentity;
    char **identity_files;
    int npserver_hosts, ntrainer_hosts;
    char **pserver_hosts, **trainer_hosts;

    /* job { } */
    char *job_name, *workspace, *deployed, *copy_output;
    int pservers, trainers, restarts;

    /* data { } */
    char *train, *test, *format, *separator, *on_error;
    char *train_where, *test_where; /* "file:line" of data.train / data.test, for errors */
    char *columns_where;    /* "file:line" of data.columns, for errors */
    int header, label, features, shuffle_buffer, queue;
    int hash_space;         /* criteo: fold feature ids into [0, hash_space) (0: the slot's range) */
    char *dense_transform;  /* criteo: log1p or none */
    long samples;       /* synthetic: samples per pass */
    double test_fraction;
    int ncolumns;
    char **columns;

    /* settings { } */
    int batch_size, passes, seed, log_period, test_period, threads;
    int max_batches;    /* end each pass after this many batches (0: all) */
    char *mode, *device, *save_dir;
    char *checkpoint_dir; /* consistent checkpoints go under it (docs/faults.md) */
    int checkpoint_period;  /* sync: global steps between two checkpoints */
    int checkpoint_keep;    /* complete checkpoints kept */
    int early_stop;     /* stop after this many passes without a better test value (0: never) */
    char *early_stop_metric; /* NULL: the test cost */
    char *early_stop_mode;   /* auto, min, max */
    int save_period;    /* save every this many passes (the best and the last too) */
    int keep_models;    /* keep the last this many saved passes plus the best (0: all) */
    double server_timeout;
    double heartbeat_timeout; /* seconds a silent node (later: role) may stay silent before it is dead */
    int metrics_port;   /* Prometheus /metrics: the launcher on it, pserver i on it + 1 + i (0: off) */

    /* model */
    int nlayers;
    pd_layer_desc *layers;
    int cost;       /* index of the cost layer */
    int predict;    /* index of the prediction layer, or -1 */
    int nmetrics;
    pd_metric_desc *metrics;
    pd_optimizer_desc optimizer;

    /* the --key=value overrides it was loaded with, to pass on to roles */
    int noverrides;
    pd_kv *overrides;
    /* the keys among them that are settings of a job across processes
     * (lua/schema.lua marks them), once each: paddle train says it ignores them */
    int njob_options;
    char **job_options;
} pd_recipe;

void pd_recipe_free(pd_recipe *r);

/* Total number of parameters (floats) of a layer / of the model. */
long pd_recipe_layer_params(const pd_layer_desc *l);
long pd_recipe_params(const pd_recipe *r);
/* Where a declaration key's value came from, for an error about it: "option
 * --KEY" when the command line set it, else the recipe's path (in buf). */
const char *pd_recipe_where(const pd_recipe *r, const char *key, char *buf, size_t len);

#endif
