/*
 * sandbox.c - the Lua state: limits, embedded modules, protected calls.
 *
 * The recipe sandbox itself (which globals a recipe sees) is built in Lua, in
 * lua/recipe.lua; this file gives that code a state whose memory and running
 * time are bounded, so that a recipe with an endless loop or an endless table
 * fails with a message instead of hanging the launcher.
 */
#include "lstate.h"
#include "recipe.h"
#include "../core/pd.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdlib.h>
#include <string.h>

#define MEM_LIMIT ((size_t)1 << 30)       /* 1 GiB */
#define INSTR_LIMIT 500000000L            /* instructions */
#define INSTR_STEP 10000

struct limits {
    size_t used;
    long instructions;
};

/* the files of lua/, compiled in by tools/bin2c */
struct pd_embedded {
    const char *name;
    const unsigned char *data;
    size_t len;
};
extern const struct pd_embedded pd_embedded[];

static void *alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct limits *lim = ud;
    if (ptr == NULL) osize = 0;
    if (nsize == 0) {
        free(ptr);
        lim->used -= osize;
        return NULL;
    }
    if (nsize > osize && lim->used + (nsize - osize) > MEM_LIMIT) return NULL;
    void *p = realloc(ptr, nsize);
    if (p) lim->used = lim->used - osize + nsize;
    return p;
}

static void count_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    struct limits *lim;
    lua_getallocf(L, (void **)&lim);
    lim->instructions += INSTR_STEP;
    if (lim->instructions > INSTR_LIMIT) {
        /* level 0 inside a hook is the running function: the recipe line */
        luaL_where(L, 0);
        lua_pushfstring(L, "recipe ran over %d million instructions: an endless loop?",
                        (int)(INSTR_LIMIT / 1000000));
        lua_concat(L, 2);
        lua_error(L);
    }
}

static int load_embedded(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    for (const struct pd_embedded *e = pd_embedded; e->name; e++) {
        if (strcmp(e->name, name) == 0) {
            char chunkname[128];
            snprintf(chunkname, sizeof chunkname, "=[paddle %s.lua]", name);
            if (luaL_loadbuffer(L, (const char *)e->data, e->len, chunkname))
                return lua_error(L);
            lua_call(L, 0, 1);
            return 1;
        }
    }
    return luaL_error(L, "no embedded module '%s'", name);
}

lua_State *pd_lua_open(void)
{
    struct limits *lim = calloc(1, sizeof *lim);
    if (!lim) return NULL;
    lua_State *L = lua_newstate(alloc, lim);
    if (!L) {
        free(lim);
        return NULL;
    }
    /* The loader needs io (to read recipes) and debug (for line numbers);
     * recipes only see the allow-list lua/recipe.lua hands them. */
    static const luaL_Reg libs[] = {
        {LUA_GNAME, luaopen_base},     {LUA_TABLIBNAME, luaopen_table},
        {LUA_STRLIBNAME, luaopen_string}, {LUA_MATHLIBNAME, luaopen_math},
        {LUA_UTF8LIBNAME, luaopen_utf8}, {LUA_OSLIBNAME, luaopen_os},
        {LUA_IOLIBNAME, luaopen_io},   {LUA_DBLIBNAME, luaopen_debug},
        {NULL, NULL},
    };
    for (const luaL_Reg *lib = libs; lib->func; lib++) {
        luaL_requiref(L, lib->name, lib->func, 1);
        lua_pop(L, 1);
    }
    /* Nothing that runs programs or loads native code exists at all. */
    lua_getglobal(L, "os");
    lua_pushnil(L); lua_setfield(L, -2, "execute");
    lua_pushnil(L); lua_setfield(L, -2, "remove");
    lua_pushnil(L); lua_setfield(L, -2, "rename");
    lua_pushnil(L); lua_setfield(L, -2, "exit");
    lua_pushnil(L); lua_setfield(L, -2, "tmpname");
    lua_pop(L, 1);
    lua_getglobal(L, "io");
    lua_pushnil(L); lua_setfield(L, -2, "popen");
    lua_pop(L, 1);
    lua_pushnil(L); lua_setglobal(L, "dofile");
    lua_pushnil(L); lua_setglobal(L, "loadfile");
    lua_pushnil(L); lua_setglobal(L, "require");

    lua_pushcfunction(L, load_embedded);
    lua_setglobal(L, "pd_embedded_module");
    lua_sethook(L, count_hook, LUA_MASKCOUNT, INSTR_STEP);
    return L;
}

void pd_lua_close(lua_State *L)
{
    if (!L) return;
    struct limits *lim;
    lua_getallocf(L, (void **)&lim);
    lua_close(L);
    free(lim);
}

static int handler(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (msg == NULL) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    if (getenv("PADDLE_LUA_TRACE"))
        luaL_traceback(L, L, msg, 1);
    else
        lua_pushstring(L, msg);
    return 1;
}

int pd_lua_pcall(lua_State *L, int nargs, int nresults)
{
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, handler);
    lua_insert(L, base);
    int status = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    if (status != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        if (status == LUA_ERRMEM) msg = "recipe used over 1 GiB of memory";
        pd_err_set(PD_ERECIPE, "%s", msg ? msg : "unknown Lua error");
        lua_pop(L, 1);
        return PD_ERECIPE;
    }
    return 0;
}

int pd_lua_require(lua_State *L, const char *name)
{
    lua_pushcfunction(L, load_embedded);
    lua_pushstring(L, name);
    return pd_lua_pcall(L, 1, 1);
}

const char *pd_lua_version(void)
{
    return LUA_RELEASE;
}
