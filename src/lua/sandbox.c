/*
 * sandbox.c - the Lua state: limits, embedded modules, protected calls.
 *
 * The recipe sandbox itself (which globals a recipe sees) is built in Lua, in
 * lua/sandbox.lua; this file gives that code a state whose memory and running
 * time are bounded, so that a recipe with an endless loop or an endless table
 * fails with a message instead of hanging the launcher, and turns every
 * error into one printable line.
 *
 * Running time is bounded by one count, checked in the count hook, of Lua
 * instructions, of the work inside one call of Lua's C library (a
 * backtracking pattern, a sort: our Lua patch charges it to the same hook,
 * vendor/patches/lua5.4-count-work.patch) and of the bytes allocated (what
 * string.rep, .. and table.concat cost, charged here); and by the thread's
 * CPU time, checked there too, for what the count misses: a timer on the
 * thread's CPU clock makes the hook run at the next instruction once the
 * CPU limit is reached. The modules of lua/ are embedded; the loader's own
 * code finds them with require (recipes have no require).
 */
#include "lstate.h"
#include "recipe.h"
#include "../core/fs.h"
#include "../core/pd.h"

#include <lauxlib.h>
#include <lualib.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id          /* glibc before 2.35 */
#define sigev_notify_thread_id _sigev_un._tid
#endif

#define MEM_LIMIT ((size_t)1 << 30)       /* 1 GiB */
#define INSTR_LIMIT 500000000L            /* instructions */
#define INSTR_STEP 10000                  /* = LUAL_WORKSTEP: the patch charges C work in these */
#define ALLOC_BYTES 2                     /* bytes allocated that count as one instruction */
#define CPU_LIMIT_S 20                    /* seconds of the thread's CPU time */
#define MODULES "paddle.modules"          /* registry: embedded modules loaded */

struct limits {
    size_t used;
    long instructions;
    size_t alloc_work;  /* bytes allocated not yet counted, / ALLOC_BYTES */
    long alloc_counted; /* the part of instructions that was allocation */
    lua_State *main;    /* the main thread, once it exists */
    double cpu_start, cpu_limit;    /* thread CPU seconds */
    timer_t cpu_timer;  /* fires at cpu_limit (cpu_armed: it exists) */
    int cpu_armed;
    lua_State *outer;   /* the state this thread ran before this one */
    int hit;            /* a limit was reached: msg says which and where */
    char io_msg[256];   /* the error raised where a recipe file could not be read for the machine's sake */
    char msg[256];
    char mem_where[200]; /* "file:line: " of the last allocation refused */
};

/* the state this thread runs, for the CPU timer's signal handler */
static _Thread_local lua_State *running;

/* the files of lua/, compiled in by tools/bin2c */
struct pd_embedded {
    const char *name;
    const unsigned char *data;
    size_t len;
};
extern const struct pd_embedded pd_embedded[];

static struct limits *limits_of(lua_State *L)
{
    void *ud;
    lua_getallocf(L, &ud);
    return ud;
}

static double thread_cpu(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void count_hook(lua_State *L, lua_Debug *ar);

/* The CPU timer's signal: one of the real-time signals, which nothing else
 * in paddle uses. The handler makes the count hook run at the next
 * instruction (lua_sethook may be called from a signal handler; Lua's own
 * interpreter does so for ^C), and the hook sees the CPU time is over. */
static int cpu_signal(void) { return SIGRTMAX - 1; }

static void on_cpu_limit(int sig)
{
    (void)sig;
    lua_State *L = running;
    if (L) lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
}

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static int cpu_handler_ok;

static void install_cpu_handler(void)
{
    struct sigaction sa = {.sa_handler = on_cpu_limit, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    cpu_handler_ok = sigaction(cpu_signal(), &sa, NULL) == 0;
}

/* Arm a one-shot timer on this thread's CPU clock at the CPU limit. Without
 * it (no timer could be made) the hook still checks the CPU time at every
 * count, only later. */
static void arm_cpu_timer(struct limits *lim)
{
    pthread_once(&cpu_once, install_cpu_handler);
    if (!cpu_handler_ok) return;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = cpu_signal();
    ev.sigev_notify_thread_id = gettid();
    if (timer_create(CLOCK_THREAD_CPUTIME_ID, &ev, &lim->cpu_timer) != 0) return;
    struct itimerspec at = {0};
    at.it_value.tv_sec = (time_t)lim->cpu_limit;
    at.it_value.tv_nsec = (long)((lim->cpu_limit - (double)at.it_value.tv_sec) * 1e9);
    if (at.it_value.tv_sec == 0 && at.it_value.tv_nsec == 0) at.it_value.tv_nsec = 1;
    if (timer_settime(lim->cpu_timer, 0, &at, NULL) != 0) {
        timer_delete(lim->cpu_timer);
        return;
    }
    lim->cpu_armed = 1;
}

/* "file:line: " of the innermost Lua function on L's stack, into buf,
 * allocating nothing (the allocator calls it as it refuses memory). */
static void note_lua_where(lua_State *L, char *buf, size_t size)
{
    lua_Debug ar;
    buf[0] = 0;
#if LUA_VERSION_RELEASE_NUM > 50404
    /* later releases move the stack while they grow it: not safe here */
    (void)L, (void)ar, (void)size;
    return;
#endif
    for (int level = 0; L && level < 4 && lua_getstack(L, level, &ar); level++) {
        if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) {
            snprintf(buf, size, "%s:%d: ", ar.short_src, ar.currentline);
            return;
        }
    }
}

static void *alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct limits *lim = ud;
    if (ptr == NULL) osize = 0;
    if (nsize == 0) {
        free(ptr);
        lim->used -= osize;
        return NULL;
    }
    if (nsize > osize && lim->used + (nsize - osize) > MEM_LIMIT) {
        note_lua_where(lim->main, lim->mem_where, sizeof lim->mem_where);
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (!p) return NULL;
    lim->used = lim->used - osize + nsize;
    if (nsize > osize) {
        /* One instruction may allocate (and fill) up to 1 GiB: s .. s in a
         * loop would run 10,000 of those between two counts. Past a count's
         * worth of bytes, the hook runs at the next instruction (lua_sethook
         * may be called anywhere, even from a signal handler). */
        lim->alloc_work += (nsize - osize) / ALLOC_BYTES;
        if (lim->alloc_work >= INSTR_STEP && lim->main && lua_gethookcount(lim->main) != 1)
            lua_sethook(lim->main, count_hook, LUA_MASKCOUNT, 1);
    }
    return p;
}

/* Push "file:line: " of the innermost Lua function on the stack: the
 * running one when the hook counts instructions, the caller when the hook
 * is charging a C function's work. */
static void push_lua_where(lua_State *L)
{
    lua_Debug ar;
    for (int level = 0; level < 4 && lua_getstack(L, level, &ar); level++) {
        if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) {
            luaL_where(L, level);
            return;
        }
    }
    lua_pushliteral(L, "");
}

static void set_hit(lua_State *L, struct limits *lim, const char *what, const char *why)
{
    push_lua_where(L);
    snprintf(lim->msg, sizeof lim->msg, "%srecipe ran %s: %s", lua_tostring(L, -1), what, why);
    lua_pop(L, 1);
    lim->hit = 1;
}

/* Count instructions (and the work charged to them); past a limit, raise an
 * error, and raise it again at every later count, so that a recipe's pcall
 * in a loop cannot swallow it (the sandbox's pcall and xpcall also pass it
 * on: lua/sandbox.lua). A count of 1 was asked for by alloc, or inherited
 * from that by a new coroutine: back to INSTR_STEP. */
static void count_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    struct limits *lim = limits_of(L);
    int count = lua_gethookcount(L);
    lim->instructions += count + (long)lim->alloc_work;
    lim->alloc_counted += (long)lim->alloc_work;
    lim->alloc_work = 0;
    if (count != INSTR_STEP) lua_sethook(L, count_hook, LUA_MASKCOUNT, INSTR_STEP);
    if (!lim->hit && lim->instructions > INSTR_LIMIT) {
        char what[64];
        snprintf(what, sizeof what, "over %d million instructions", (int)(INSTR_LIMIT / 1000000));
        /* most of the count was memory allocated (string.rep, huge tables) */
        set_hit(L, lim, what, lim->alloc_counted > INSTR_LIMIT / 2 ? "most of them allocating memory (huge strings or "
                "tables?)" : "an endless loop?");
    }
    if (!lim->hit && thread_cpu() - lim->cpu_start > lim->cpu_limit) {
        char what[64];
        snprintf(what, sizeof what, "for over %g s of CPU time", lim->cpu_limit);
        set_hit(L, lim, what, "an endless loop?");
    }
    if (lim->hit) {
        lua_pushstring(L, lim->msg);
        lua_error(L);
    }
}

/* pd_sandbox_limit_hit(): the instruction limit's message once it was hit,
 * else nil. */
static int limit_hit(lua_State *L)
{
    struct limits *lim = limits_of(L);
    if (lim->hit) lua_pushstring(L, lim->msg);
    else lua_pushnil(L);
    return 1;
}

/* pd_sandbox_io_fault(errno, message): whether the loader's failure to open
 * or read a recipe file is the machine's (a disk error, no memory or
 * descriptors left, a network filesystem not answering), not the recipe's (a
 * name that is not there, a directory, no permission). The machine's is
 * remembered with the message the loader then raises: if that error is the
 * one that ends the load (not one the recipe caught with pcall), the load
 * fails with PD_EIO instead of PD_ERECIPE (exit status 1: a restart may help). */
static int io_fault(lua_State *L)
{
    int code = (int)luaL_optinteger(L, 1, 0);
    const char *msg = luaL_optstring(L, 2, "");
    int fault = code != 0 && !pd_path_errno(code) && *msg;
    if (fault) snprintf(limits_of(L)->io_msg, sizeof limits_of(L)->io_msg, "%s", msg);
    lua_pushboolean(L, fault);
    return 1;
}

/* pd_sandbox_file_id(path): "dev:inode" of the file path leads to, or nil:
 * the loader's test for an include cycle, whatever links or ".." the paths
 * go through. */
static int file_id(lua_State *L)
{
    struct stat st;
    if (stat(luaL_checkstring(L, 1), &st) != 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushfstring(L, "%I:%I", (lua_Integer)st.st_dev, (lua_Integer)st.st_ino);
    return 1;
}

/* The error that ended the load is the one pd_sandbox_io_fault was told of. */
static int io_fault_ended(const struct limits *lim, const char *msg)
{
    return lim->io_msg[0] && msg && strstr(msg, lim->io_msg) != NULL;
}

/* require(name) for the embedded modules: loads lua/NAME.lua once. */
static int load_embedded(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    lua_getfield(L, LUA_REGISTRYINDEX, MODULES);
    if (lua_getfield(L, -1, name) != LUA_TNIL) return 1;
    lua_pop(L, 1);
    for (const struct pd_embedded *e = pd_embedded; e->name; e++) {
        if (strcmp(e->name, name) == 0) {
            char chunkname[128];
            snprintf(chunkname, sizeof chunkname, "=[paddle %s.lua]", name);
            if (luaL_loadbufferx(L, (const char *)e->data, e->len, chunkname, "t"))
                return lua_error(L);
            lua_call(L, 0, 1);
            if (lua_isnil(L, -1)) return luaL_error(L, "embedded module '%s' returned nothing", name);
            lua_pushvalue(L, -1);
            lua_setfield(L, -3, name);
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
    lim->main = L;
    lim->cpu_start = thread_cpu();
    lim->cpu_limit = CPU_LIMIT_S;
    const char *cpu = getenv("PADDLE_RECIPE_CPU_SECONDS");
    if (cpu && atof(cpu) > 0 && atof(cpu) < 1e6) lim->cpu_limit = atof(cpu);
    lim->outer = running;
    running = L;
    arm_cpu_timer(lim);
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
    /* the loader's modules require each other from the embedded files */
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, MODULES);
    lua_pushcfunction(L, load_embedded);
    lua_setglobal(L, "require");
    lua_pushcfunction(L, limit_hit);
    lua_setglobal(L, "pd_sandbox_limit_hit");
    lua_pushcfunction(L, io_fault);
    lua_setglobal(L, "pd_sandbox_io_fault");
    lua_pushcfunction(L, file_id);
    lua_setglobal(L, "pd_sandbox_file_id");
    lua_sethook(L, count_hook, LUA_MASKCOUNT, INSTR_STEP);
    return L;
}

void pd_lua_close(lua_State *L)
{
    if (!L) return;
    struct limits *lim;
    lua_getallocf(L, (void **)&lim);
    if (lim->cpu_armed) timer_delete(lim->cpu_timer);
    running = lim->outer;
    lim->main = NULL;
    lua_close(L);
    free(lim);
}

/* Push s with every control character escaped (\n, \t, \r, \DDD): an
 * error message is one printable line whatever a recipe put in it. */
static void push_escaped(lua_State *L, const char *s, size_t len)
{
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c >= 32 && c != 127) {
            luaL_addchar(&b, (char)c);
            continue;
        }
        if (c == '\n') snprintf(esc, sizeof esc, "\\n");
        else if (c == '\t') snprintf(esc, sizeof esc, "\\t");
        else if (c == '\r') snprintf(esc, sizeof esc, "\\r");
        else snprintf(esc, sizeof esc, "\\%d", c);
        luaL_addstring(&b, esc);
    }
    luaL_pushresult(&b);
}

/* Push "file:line: " of the innermost recipe frame (a chunk loaded from a
 * file, "@path"), or "" when no recipe code is on the stack. */
static void push_recipe_where(lua_State *L)
{
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        if (lua_getinfo(L, "Sl", &ar) && ar.source[0] == '@' && ar.currentline > 0) {
            lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
            return;
        }
    }
    lua_pushliteral(L, "");
}

/* Does msg hold a position, "...:LINE: ", as Lua's errors and ours do? */
static int has_where(const char *msg, size_t len)
{
    for (size_t i = 0; i < len && i < 4096; i++) {
        if (msg[i] != ':') continue;
        size_t j = i + 1;
        while (j < len && msg[j] >= '0' && msg[j] <= '9') j++;
        if (j > i + 1 && j < len && msg[j] == ':') return 1;
    }
    return 0;
}

static int call_tostring(lua_State *L)
{
    luaL_tolstring(L, 1, NULL);
    return 1;
}

/* Message handler: the error value becomes one line of text. A value that
 * is not a string is described (its __tostring, run protected, or its type)
 * after the recipe line it was raised on. */
static int handler(lua_State *L)
{
    struct limits *lim = limits_of(L);
    if (lim->hit) {
        lua_pushstring(L, lim->msg);
    } else if (lua_type(L, 1) == LUA_TSTRING || lua_type(L, 1) == LUA_TNUMBER) {
        size_t len;
        const char *s = lua_tolstring(L, 1, &len);
        if (has_where(s, len)) {
            lua_pushvalue(L, 1);
        } else {
            push_recipe_where(L);
            lua_pushvalue(L, 1);
            lua_concat(L, 2);
        }
    } else {
        push_recipe_where(L);
        int shown = 0;
        if (luaL_getmetafield(L, 1, "__tostring") != LUA_TNIL) {
            lua_pop(L, 1);
            lua_pushcfunction(L, call_tostring);
            lua_pushvalue(L, 1);
            shown = lua_pcall(L, 1, 1, 0) == LUA_OK && lua_type(L, -1) == LUA_TSTRING;
            if (!shown) lua_pop(L, 1);
        }
        if (shown) {
            lua_pushliteral(L, "error: ");
            lua_insert(L, -2);
            lua_concat(L, 2);
        } else {
            lua_pushfstring(L, "error with a %s value instead of a message", luaL_typename(L, 1));
        }
        lua_concat(L, 2);
    }
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    push_escaped(L, msg, len);
    if (getenv("PADDLE_LUA_TRACE")) luaL_traceback(L, L, lua_tostring(L, -1), 1);
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
        struct limits *lim = limits_of(L);
        const char *msg = lua_tostring(L, -1);
        char mem[sizeof lim->mem_where + 64];
        if (status == LUA_ERRMEM) {
            snprintf(mem, sizeof mem, "%srecipe used over 1 GiB of memory", lim->mem_where);
            msg = mem;
        } else if (lim->hit) msg = lim->msg;
        else if (status == LUA_ERRERR) msg = "error while reporting an error (in an xpcall handler or __tostring?)";
        int code = !lim->hit && status == LUA_ERRRUN && io_fault_ended(lim, msg) ? PD_EIO : PD_ERECIPE;
        pd_err_set(code, "%s", msg ? msg : "unknown Lua error");
        lua_pop(L, 1);
        return code;
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
