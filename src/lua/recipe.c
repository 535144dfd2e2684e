/*
 * recipe.c - run a recipe through lua/recipe.lua and copy the result to C.
 *
 * Everything happens inside one protected call: the recipe runs, lua/
 * resolve.lua builds a fresh table of plain values (no metatables, nothing
 * the recipe can reach), and this file copies that table into a pd_recipe
 * with raw reads. The defaults live in lua/schema.lua only: a field missing
 * here is an internal error, not a default.
 */
#include "recipe.h"
#include "lstate.h"
#include "../core/pd.h"

#include <lauxlib.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ITEMS 1000000   /* hosts, layers, list entries: sanity bound */

/* --- raw reads of the resolved table (t: an absolute stack index) -------- */

/* Push t[key]; raise an internal error unless it has type `type` (or is
 * nil, when optional). Returns the type pushed. */
static int push_field(lua_State *L, int t, const char *key, int type, int optional)
{
    lua_pushstring(L, key);
    int got = lua_rawget(L, t);
    if (got == type || (optional && got == LUA_TNIL)) return got;
    return luaL_error(L, "internal error: the resolved recipe's '%s' is %s, not %s", key,
                      lua_typename(L, got), lua_typename(L, type));
}

static char *to_str(lua_State *L, int idx, const char *what)
{
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (strlen(s) != len) luaL_error(L, "internal error: the resolved recipe's '%s' holds a NUL byte", what);
    return pd_xstrdup(s);
}

/* An optional string: NULL when unset. */
static char *get_str(lua_State *L, int t, const char *key)
{
    char *s = NULL;
    if (push_field(L, t, key, LUA_TSTRING, 1) == LUA_TSTRING) s = to_str(L, -1, key);
    lua_pop(L, 1);
    return s;
}

/* A required string, into a fixed buffer. */
static void get_name(lua_State *L, int t, const char *key, char *dst, size_t n)
{
    push_field(L, t, key, LUA_TSTRING, 0);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    if (len >= n || strlen(s) != len) luaL_error(L, "internal error: the resolved recipe's '%s' is too long", key);
    memcpy(dst, s, len + 1);
    lua_pop(L, 1);
}

static double get_num(lua_State *L, int t, const char *key)
{
    push_field(L, t, key, LUA_TNUMBER, 0);
    double v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static long long get_integer(lua_State *L, int t, const char *key, long long lo, long long hi)
{
    push_field(L, t, key, LUA_TNUMBER, 0);
    int isint;
    long long v = (long long)lua_tointegerx(L, -1, &isint);
    if (!isint || v < lo || v > hi)
        luaL_error(L, "internal error: the resolved recipe's '%s' is not an integer in range", key);
    lua_pop(L, 1);
    return v;
}

static int get_int(lua_State *L, int t, const char *key)
{
    return (int)get_integer(L, t, key, INT_MIN, INT_MAX);
}

static int get_bool(lua_State *L, int t, const char *key)
{
    push_field(L, t, key, LUA_TBOOLEAN, 0);
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* Push the table t[key] and return its absolute index and length (*n). */
static int enter(lua_State *L, int t, const char *key, int *n)
{
    push_field(L, t, key, LUA_TTABLE, 0);
    size_t len = lua_rawlen(L, -1);
    if (len > MAX_ITEMS) luaL_error(L, "internal error: the resolved recipe's '%s' has too many items", key);
    if (n) *n = (int)len;
    return lua_gettop(L);
}

/* Push list[i] (1-based), which must be a table; returns its index. */
static int item(lua_State *L, int list, int i, const char *what)
{
    if (lua_rawgeti(L, list, i) != LUA_TTABLE)
        luaL_error(L, "internal error: the resolved recipe's %s[%d] is not a table", what, i);
    return lua_gettop(L);
}

static void get_strlist(lua_State *L, int t, const char *key, char ***out, int *n)
{
    int len, l = enter(L, t, key, &len);
    *out = pd_xcalloc((size_t)len + 1, sizeof(char *));
    *n = len;
    for (int i = 0; i < len; i++) {
        if (lua_rawgeti(L, l, i + 1) != LUA_TSTRING)
            luaL_error(L, "internal error: the resolved recipe's %s[%d] is not a string", key, i + 1);
        (*out)[i] = to_str(L, -1, key);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* --- the blocks ----------------------------------------------------------- */

static void read_cluster(lua_State *L, int top, pd_recipe *r)
{
    int t = enter(L, top, "cluster", NULL);
    int n, hosts = enter(L, t, "hosts", &n);
    r->hosts = pd_xcalloc((size_t)n + 1, sizeof *r->hosts);
    r->nhosts = n;
    for (int i = 0; i < n; i++) {
        int h = item(L, hosts, i + 1, "hosts");
        r->hosts[i].spec = get_str(L, h, "spec");
        r->hosts[i].user = get_str(L, h, "user");
        r->hosts[i].host = get_str(L, h, "host");
        r->hosts[i].port = get_int(L, h, "port");
        if (!r->hosts[i].spec || !r->hosts[i].host) luaL_error(L, "internal error: a host without a name");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    r->root_dir = get_str(L, t, "root_dir");
    r->nic = get_str(L, t, "nic");
    r->ld_library_path = get_str(L, t, "ld_library_path");
    r->known_hosts = get_str(L, t, "known_hosts");
    r->port = get_int(L, t, "port");
    r->ports_num = get_int(L, t, "ports_num");
    r->ports_num_for_sparse = get_int(L, t, "ports_num_for_sparse");
    r->unix_sockets = get_bool(L, t, "unix_sockets");
    r->shared_memory = get_bool(L, t, "shared_memory");
    r->use_agent = get_bool(L, t, "use_agent");
    r->connect_timeout = get_num(L, t, "connect_timeout");
    get_strlist(L, t, "identity_files", &r->identity_files, &r->nidentity);
    get_strlist(L, t, "pserver_hosts", &r->pserver_hosts, &r->npserver_hosts);
    get_strlist(L, t, "trainer_hosts", &r->trainer_hosts, &r->ntrainer_hosts);
    lua_pop(L, 1);
}

static void read_job_data(lua_State *L, int top, pd_recipe *r)
{
    int t = enter(L, top, "job", NULL);
    r->job_name = get_str(L, t, "name");
    r->workspace = get_str(L, t, "workspace");
    r->deployed = get_str(L, t, "deployed");
    r->copy_output = get_str(L, t, "copy_output");
    r->pservers = get_int(L, t, "pservers");
    r->trainers = get_int(L, t, "trainers");
    r->restarts = get_int(L, t, "restarts");
    lua_pop(L, 1);

    t = enter(L, top, "data", NULL);
    r->train = get_str(L, t, "train");
    r->test = get_str(L, t, "test");
    r->train_where = get_str(L, t, "train_where");
    r->test_where = get_str(L, t, "test_where");
    r->columns_where = get_str(L, t, "columns_where");
    r->format = get_str(L, t, "format");
    r->separator = get_str(L, t, "separator");
    r->on_error = get_str(L, t, "on_error");
    r->header = get_bool(L, t, "header");
    r->label = get_int(L, t, "label");
    r->features = get_int(L, t, "features");
    r->shuffle_buffer = get_int(L, t, "shuffle_buffer");
    r->queue = get_int(L, t, "queue");
    r->samples = (long)get_integer(L, t, "samples", 0, LONG_MAX);
    r->test_fraction = get_num(L, t, "test_fraction");
    r->hash_space = get_int(L, t, "hash_space");
    r->dense_transform = get_str(L, t, "dense_transform");
    get_strlist(L, t, "columns", &r->columns, &r->ncolumns);
    lua_pop(L, 1);
}

static void read_settings(lua_State *L, int top, pd_recipe *r)
{
    int t = enter(L, top, "settings", NULL);
    r->batch_size = get_int(L, t, "batch_size");
    r->passes = get_int(L, t, "passes");
    r->seed = get_int(L, t, "seed");
    r->log_period = get_int(L, t, "log_period");
    r->max_batches = get_int(L, t, "max_batches");
    r->test_period = get_int(L, t, "test_period");
    r->threads = get_int(L, t, "threads");
    r->mode = get_str(L, t, "mode");
    r->device = get_str(L, t, "device");
    r->save_dir = get_str(L, t, "save_dir");
    r->checkpoint_dir = get_str(L, t, "checkpoint_dir");
    r->early_stop = get_int(L, t, "early_stop");
    r->early_stop_metric = get_str(L, t, "early_stop_metric");
    r->early_stop_mode = get_str(L, t, "early_stop_mode");
    r->save_period = get_int(L, t, "save_period");
    r->keep_models = get_int(L, t, "keep_models");
    r->server_timeout = get_num(L, t, "server_timeout");
    r->checkpoint_period = get_int(L, t, "checkpoint_period");
    r->checkpoint_keep = get_int(L, t, "checkpoint_keep");
    r->heartbeat_timeout = get_num(L, t, "heartbeat_timeout");
    r->metrics_port = get_int(L, t, "metrics_port");
    lua_pop(L, 1);
}

static void read_params(lua_State *L, int t, pd_layer_desc *d)
{
    int n, list = enter(L, t, "params", &n);
    if (n > (int)PD_COUNT(d->params)) luaL_error(L, "internal error: layer '%s' has %d parameters", d->name, n);
    d->nparams = n;
    for (int j = 0; j < n; j++) {
        pd_param_desc *p = &d->params[j];
        int pt = item(L, list, j + 1, "params");
        p->name = get_str(L, pt, "name");
        if (!p->name) luaL_error(L, "internal error: a parameter of layer '%s' has no name", d->name);
        p->rows = get_int(L, pt, "rows");
        p->cols = get_int(L, pt, "cols");
        p->sparse = get_bool(L, pt, "sparse");
        p->hash = get_bool(L, pt, "hash");
        p->min_count = (long)get_integer(L, pt, "min_count", 0, 2000000000);
        p->ttl = (int)get_integer(L, pt, "ttl", 0, 2000000000);
        p->max_rows = (long)get_integer(L, pt, "max_rows", 0, 2000000000);
        int init = enter(L, pt, "init", NULL);
        get_name(L, init, "kind", p->init.kind, sizeof p->init.kind);
        p->init.a = get_num(L, init, "a");
        p->init.b = get_num(L, init, "b");
        lua_pop(L, 2);
    }
    lua_pop(L, 1);
}

static void read_layer(lua_State *L, int t, int nlayers, pd_layer_desc *d)
{
    d->name = get_str(L, t, "name");
    d->type = get_str(L, t, "type");
    d->where = get_str(L, t, "where");
    if (!d->name || !d->type) luaL_error(L, "internal error: a layer without a name or type");
    d->kind = get_str(L, t, "kind");
    d->slot = get_str(L, t, "slot");
    d->act = get_str(L, t, "act");
    d->pool = get_str(L, t, "pool");
    d->size = get_int(L, t, "size");
    d->range = get_int(L, t, "range");
    d->seq = get_bool(L, t, "seq");
    d->scale = get_num(L, t, "scale");
    int n, inputs = enter(L, t, "inputs", &n);
    if (n > PD_MAX_INPUTS) luaL_error(L, "internal error: layer '%s' has %d inputs", d->name, n);
    d->ninputs = n;
    for (int j = 0; j < n; j++) {
        lua_rawgeti(L, inputs, j + 1);
        int isint;
        lua_Integer k = lua_tointegerx(L, -1, &isint);
        if (!isint || k < 1 || k > nlayers) luaL_error(L, "internal error: layer '%s' has a bad input", d->name);
        d->inputs[j] = (int)k - 1;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    read_params(L, t, d);
}

static void read_model(lua_State *L, int top, pd_recipe *r)
{
    int n, list = enter(L, top, "layers", &n);
    r->layers = pd_xcalloc((size_t)n + 1, sizeof *r->layers);
    r->nlayers = n;
    for (int i = 0; i < n; i++) {
        int t = item(L, list, i + 1, "layers");
        read_layer(L, t, n, &r->layers[i]);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    r->cost = (int)get_integer(L, top, "cost", 1, n) - 1;
    r->predict = (int)get_integer(L, top, "predict", 0, n) - 1;
    list = enter(L, top, "metrics", &n);
    r->metrics = pd_xcalloc((size_t)n + 1, sizeof *r->metrics);
    r->nmetrics = n;
    for (int i = 0; i < n; i++) {
        int t = item(L, list, i + 1, "metrics");
        r->metrics[i].name = get_str(L, t, "name");
        r->metrics[i].layer = (int)get_integer(L, t, "layer", 1, r->nlayers) - 1;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);

    pd_optimizer_desc *o = &r->optimizer;
    int t = enter(L, top, "optimizer", NULL);
    get_name(L, t, "type", o->type, sizeof o->type);
    o->learning_rate = get_num(L, t, "learning_rate");
    o->momentum = get_num(L, t, "momentum");
    o->beta1 = get_num(L, t, "beta1");
    o->beta2 = get_num(L, t, "beta2");
    o->epsilon = get_num(L, t, "epsilon");
    o->rho = get_num(L, t, "rho");
    o->weight_decay = get_num(L, t, "weight_decay");
    o->nesterov = get_bool(L, t, "nesterov");
    lua_pop(L, 1);
}

struct load_args {
    pd_recipe *r;
    const char *path, *cluster_path;
    const pd_kv *overrides;
    int noverrides;
};

/* Push require(module)[fn]. */
static void push_module_fn(lua_State *L, const char *module, const char *fn)
{
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    lua_call(L, 1, 1);
    lua_getfield(L, -1, fn);
}

/* Run in protected mode: run the recipe, then copy what it resolved to. */
static int load_protected(lua_State *L)
{
    struct load_args *a = lua_touserdata(L, 1);
    push_module_fn(L, "recipe", "load");
    lua_pushstring(L, a->path);
    if (a->cluster_path) lua_pushstring(L, a->cluster_path);
    else lua_pushnil(L);
    lua_createtable(L, a->noverrides, 0);
    for (int i = 0; i < a->noverrides; i++) {
        lua_createtable(L, 0, 2);
        lua_pushstring(L, a->overrides[i].key);
        lua_setfield(L, -2, "key");
        lua_pushstring(L, a->overrides[i].value);
        lua_setfield(L, -2, "value");
        lua_rawseti(L, -2, i + 1);
    }
    lua_createtable(L, 0, 1);
    lua_pushinteger(L, PD_MAX_INPUTS);
    lua_setfield(L, -2, "max_inputs");
    lua_call(L, 4, 1);
    if (!lua_istable(L, -1)) return luaL_error(L, "internal error: recipe.load returned no table");

    int top = lua_gettop(L);
    pd_recipe *r = a->r;
    r->path = get_str(L, top, "recipe");
    r->dir = get_str(L, top, "recipe_dir");
    get_strlist(L, top, "job_options", &r->job_options, &r->njob_options);
    read_cluster(L, top, r);
    read_job_data(L, top, r);
    read_settings(L, top, r);
    read_model(L, top, r);
    return 0;
}

struct form_args {
    const char *key;
    char *buf;
    size_t len;
    int found;
};

static int form_protected(lua_State *L)
{
    struct form_args *a = lua_touserdata(L, 1);
    push_module_fn(L, "schema", "value_form");
    lua_pushstring(L, a->key);
    lua_call(L, 1, 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
        snprintf(a->buf, a->len, "%s", lua_tostring(L, -1));
        a->found = 1;
    }
    return 0;
}

int pd_recipe_value_form(const char *key, char *buf, size_t len)
{
    struct form_args a = {key, buf, len, 0};
    lua_State *L = pd_lua_open();
    if (!L) return 0;
    lua_pushcfunction(L, form_protected);
    lua_pushlightuserdata(L, &a);
    int rc = pd_lua_pcall(L, 1, 0);
    pd_lua_close(L);
    return rc == 0 && a.found;
}

int pd_recipe_load(pd_recipe *r, const char *path, const char *cluster_path,
                   const pd_kv *overrides, int noverrides)
{
    memset(r, 0, sizeof *r);
    r->predict = -1;
    lua_State *L = pd_lua_open();
    if (!L) return pd_err_set(PD_ENOMEM, "cannot create a Lua state");

    struct load_args a = {r, path, cluster_path, overrides, noverrides};
    lua_pushcfunction(L, load_protected);
    lua_pushlightuserdata(L, &a);
    int rc = pd_lua_pcall(L, 1, 0);
    pd_lua_close(L);
    if (rc < 0) {
        char *msg = pd_xstrdup(pd_err_msg());
        pd_recipe_free(r);
        pd_err_set(rc, "%s", msg); /* PD_ERECIPE, or PD_EIO: a file not read for the machine's sake */
        free(msg);
        return rc;
    }
    r->noverrides = noverrides;
    r->overrides = pd_xcalloc((size_t)noverrides + 1, sizeof *r->overrides);
    for (int i = 0; i < noverrides; i++) {
        r->overrides[i].key = pd_xstrdup(overrides[i].key);
        r->overrides[i].value = pd_xstrdup(overrides[i].value);
    }
    return 0;
}

