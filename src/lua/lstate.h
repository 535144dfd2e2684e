/*
 * lstate.h - the Lua state paddle runs recipes in (internal to src/lua/).
 *
 * pd_lua_open() makes a state with a memory limit, limits on running time
 * and the embedded modules of lua/ preloaded; pd_lua_pcall() is the one way
 * into Lua: it turns any error into PD_ERECIPE with the message in
 * pd_err_msg(), or into PD_EIO where a recipe file could not be read for the
 * machine's sake (a disk error: the loader called pd_sandbox_io_fault).
 */
#ifndef PD_LSTATE_H
#define PD_LSTATE_H

#include <lua.h>

lua_State *pd_lua_open(void);
void pd_lua_close(lua_State *L);
/* Call the function below nargs arguments on the stack, protected. */
int pd_lua_pcall(lua_State *L, int nargs, int nresults);
/* Push the embedded module `name` (as require would return it). */
int pd_lua_require(lua_State *L, const char *name);

#endif
