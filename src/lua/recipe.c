/*
 * recipe.c - run a recipe through lua/recipe.lua and copy the result to C.
 */
#include "recipe.h"
#include "lstate.h"
#include "../core/pd.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

/* --- reading fields of the table on top of the stack --------------------- */

static char *get_str(lua_State *L, const char *key)
{
    char *s = NULL;
    lua_getfield(L, -1, key);
    if (lua_type(L, -1) == LUA_TSTRING) s = pd_xstrdup(lua_tostring(L, -1));
    lua_pop(L, 1);
    return s;
}

static double get_num(lua_State *L, const char *key, double dflt)
{
    double v = dflt;
    lua_getfield(L, -1, key);
    if (lua_type(L, -1) == LUA_TNUMBER) v = lua_tonumber(L, -1);
    else if (lua_type(L, -1) == LUA_TBOOLEAN) v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

static int get_int(lua_State *L, const char *key, int dflt)
{
    return (int)get_num(L, key, dflt);
}

static int get_strlist(lua_State *L, const char *key, char ***out)
{
    int n = 0;
    *out = NULL;
    lua_getfield(L, -1, key);
    if (lua_istable(L, -1)) {
        n = (int)luaL_len(L, -1);
        *out = pd_xcalloc((size_t)n + 1, sizeof(char *));
        for (int i = 0; i < n; i++) {
            lua_geti(L, -1, i + 1);
            (*out)[i] = pd_xstrdup(lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return n;
}

/* Push t[key] and check it is a table; returns 0 or -1. */
static int enter(lua_State *L, const char *key)
{
    lua_getfield(L, -1, key);
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return -1;
    }
    return 0;
}

static void read_cluster(lua_State *L, pd_recipe *r)
{
    if (enter(L, "cluster")) return;
    lua_getfield(L, -1, "hosts");
    r->nhosts = (int)luaL_len(L, -1);
    r->hosts = pd_xcalloc((size_t)r->nhosts + 1, sizeof *r->hosts);
    for (int i = 0; i < r->nhosts; i++) {
        lua_geti(L, -1, i + 1);
        r->hosts[i].spec = get_str(L, "spec");
        r->hosts[i].user = get_str(L, "user");
        r->hosts[i].host = get_str(L, "host");
        r->hosts[i].port = get_int(L, "port", 22);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    r->root_dir = get_str(L, "root_dir");
    r->nic = get_str(L, "nic");
    r->ld_library_path = get_str(L, "ld_library_path");
    r->known_hosts = get_str(L, "known_hosts");
    r->port = get_int(L, "port", 7164);
    r->ports_num = get_int(L, "ports_num", 1);
    r->ports_num_for_sparse = get_int(L, "ports_num_for_sparse", 1);
    r->use_agent = get_int(L, "use_agent", 1);
    r->connect_timeout = get_num(L, "connect_timeout", 10);
    r->nidentity = get_strlist(L, "identity_files", &r->identity_files);
    r->npserver_hosts = get_strlist(L, "pserver_hosts", &r->pserver_hosts);
    r->ntrainer_hosts = get_strlist(L, "trainer_hosts", &r->trainer_hosts);
    lua_pop(L, 1);
}

static void read_job(lua_State *L, pd_recipe *r)
{
    if (enter(L, "job")) return;
    r->job_name = get_str(L, "name");
    r->workspace = get_str(L, "workspace");
    r->deployed = get_str(L, "deployed");
    r->copy_output = get_str(L, "copy_output");
    r->pservers = get_int(L, "pservers", 1);
    r->trainers = get_int(L, "trainers", 1);
    r->restarts = get_int(L, "restarts", 0);
    lua_pop(L, 1);
}

static void read_data(lua_State *L, pd_recipe *r)
{
    if (enter(L, "data")) return;
    r->train = get_str(L, "train");
    r->test = get_str(L, "test");
    r->format = get_str(L, "format");
    r->separator = get_str(L, "separator");
    r->on_error = get_str(L, "on_error");
    r->header = get_int(L, "header", 0);
    r->label = get_int(L, "label", -1);
    r->features = get_int(L, "features", 0);
    r->shuffle_buffer = get_int(L, "shuffle_buffer", 0);
    r->queue = get_int(L, "queue", 8);
    r->samples = (long)get_num(L, "samples", 10000);
    r->test_fraction = get_num(L, "test_fraction", 0.1);
    r->ncolumns = get_strlist(L, "columns", &r->columns);
    lua_pop(L, 1);
}

static void read_settings(lua_State *L, pd_recipe *r)
{
    if (enter(L, "settings")) return;
    r->batch_size = get_int(L, "batch_size", 32);
    r->passes = get_int(L, "passes", 1);
    r->seed = get_int(L, "seed", 1);
    r->log_period = get_int(L, "log_period", 10);
    r->max_batches = get_int(L, "max_batches", 0);
    r->test_period = get_int(L, "test_period", 0);
    r->threads = get_int(L, "threads", 0);
    r->mode = get_str(L, "mode");
    r->device = get_str(L, "device");
    r->save_dir = get_str(L, "save_dir");
    r->checkpoint_dir = get_str(L, "checkpoint_dir");
    r->server_timeout = get_num(L, "server_timeout", 120);
    lua_pop(L, 1);
}

static void copy_str(char *dst, size_t n, char *src)
{
    snprintf(dst, n, "%s", src ? src : "");
    free(src);
}

static int read_layers(lua_State *L, pd_recipe *r)
{
    if (enter(L, "layers")) return pd_err_set(PD_ERECIPE, "%s: no model layers", r->path);
    r->nlayers = (int)luaL_len(L, -1);
    r->layers = pd_xcalloc((size_t)r->nlayers + 1, sizeof *r->layers);
    for (int i = 0; i < r->nlayers; i++) {
        pd_layer_desc *d = &r->layers[i];
        lua_geti(L, -1, i + 1);
        d->name = get_str(L, "name");
        d->type = get_str(L, "type");
        d->kind = get_str(L, "kind");
        d->slot = get_str(L, "slot");
        d->act = get_str(L, "act");
        d->pool = get_str(L, "pool");
        d->where = get_str(L, "where");
        d->size = get_int(L, "size", 0);
        d->range = get_int(L, "range", 0);
        d->seq = get_int(L, "seq", 0);
        d->scale = get_num(L, "scale", 1);
        lua_getfield(L, -1, "inputs");
        d->ninputs = (int)luaL_len(L, -1);
        if (d->ninputs > PD_MAX_INPUTS) {
            lua_pop(L, 3);
            return pd_err_set(PD_ERECIPE, "%s: layer '%s' has %d inputs, at most %d are allowed",
                              d->where ? d->where : r->path, d->name, d->ninputs, PD_MAX_INPUTS);
        }
        for (int j = 0; j < d->ninputs; j++) {
            lua_geti(L, -1, j + 1);
            d->inputs[j] = (int)lua_tointeger(L, -1) - 1;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        lua_getfield(L, -1, "params");
        d->nparams = (int)luaL_len(L, -1);
        PD_ASSERT(d->nparams <= 2);
        for (int j = 0; j < d->nparams; j++) {
            pd_param_desc *p = &d->params[j];
            lua_geti(L, -1, j + 1);
            p->name = get_str(L, "name");
            p->rows = get_int(L, "rows", 0);
            p->cols = get_int(L, "cols", 0);
            p->sparse = get_int(L, "sparse", 0);
            if (enter(L, "init") == 0) {
                copy_str(p->init.kind, sizeof p->init.kind, get_str(L, "kind"));
                p->init.a = get_num(L, "a", 0);
                p->init.b = get_num(L, "b", 0);
                lua_pop(L, 1);
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    r->cost = get_int(L, "cost", 0) - 1;
    r->predict = get_int(L, "predict", 0) - 1;
    if (enter(L, "metrics") == 0) {
        r->nmetrics = (int)luaL_len(L, -1);
        r->metrics = pd_xcalloc((size_t)r->nmetrics + 1, sizeof *r->metrics);
        for (int i = 0; i < r->nmetrics; i++) {
            lua_geti(L, -1, i + 1);
            r->metrics[i].name = get_str(L, "name");
            r->metrics[i].layer = get_int(L, "layer", 0) - 1;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    if (enter(L, "optimizer") == 0) {
        pd_optimizer_desc *o = &r->optimizer;
        copy_str(o->type, sizeof o->type, get_str(L, "type"));
        o->learning_rate = get_num(L, "learning_rate", 0.01);
        o->momentum = get_num(L, "momentum", 0);
        o->beta1 = get_num(L, "beta1", 0.9);
        o->beta2 = get_num(L, "beta2", 0.999);
        o->epsilon = get_num(L, "epsilon", 1e-8);
        o->rho = get_num(L, "rho", 0.95);
        o->weight_decay = get_num(L, "weight_decay", 0);
        o->nesterov = get_int(L, "nesterov", 0);
        lua_pop(L, 1);
    }
    return 0;
}

int pd_recipe_load(pd_recipe *r, const char *path, const char *cluster_path,
                   const pd_kv *overrides, int noverrides)
{
    int rc;
    memset(r, 0, sizeof *r);
    r->predict = -1;
    lua_State *L = pd_lua_open();
    if (!L) return pd_err_set(PD_ENOMEM, "cannot create a Lua state");

    if ((rc = pd_lua_require(L, "recipe")) < 0) goto out;
    lua_getfield(L, -1, "load");
    lua_pushstring(L, path);
    if (cluster_path) lua_pushstring(L, cluster_path);
    else lua_pushnil(L);
    lua_createtable(L, noverrides, 0);
    for (int i = 0; i < noverrides; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, overrides[i].key);
        lua_setfield(L, -2, "key");
        lua_pushstring(L, overrides[i].value);
        lua_setfield(L, -2, "value");
        lua_rawseti(L, -2, i + 1);
    }
    if ((rc = pd_lua_pcall(L, 3, 1)) < 0) goto out;

    r->path = get_str(L, "recipe");
    r->dir = get_str(L, "recipe_dir");
    read_cluster(L, r);
    read_job(L, r);
    read_data(L, r);
    read_settings(L, r);
    rc = read_layers(L, r);

    r->noverrides = noverrides;
    r->overrides = pd_xcalloc((size_t)noverrides + 1, sizeof *r->overrides);
    for (int i = 0; i < noverrides; i++) {
        r->overrides[i].key = pd_xstrdup(overrides[i].key);
        r->overrides[i].value = pd_xstrdup(overrides[i].value);
    }
out:
    pd_lua_close(L);
    if (rc < 0) {
        char *msg = pd_xstrdup(pd_err_msg());
        pd_recipe_free(r);
        pd_err_set(PD_ERECIPE, "%s", msg);
        free(msg);
        return PD_ERECIPE;
    }
    return 0;
}

