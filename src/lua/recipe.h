/*
 * recipe.h - load a recipe: run it in the sandbox and copy what it declared
 * into a pd_recipe (core/recipe.h). The only way into the recipe language;
 * nothing outside src/lua/ sees Lua.
 *
 *     pd_recipe r;
 *     if (pd_recipe_load(&r, "recipes/fit_a_line.lua", NULL, NULL, 0) < 0)
 *         fprintf(stderr, "%s\n", pd_err_msg());
 *     ...
 *     pd_recipe_free(&r);
 */
#ifndef PD_LUA_LOAD_H
#define PD_LUA_LOAD_H

#include "../core/recipe.h"

/* Load and validate the recipe at path. cluster_path (may be NULL) names a
 * file whose cluster { } replaces the recipe's. overrides are --key=value
 * options. On error returns PD_ERECIPE with a one-line message (file:line)
 * in pd_err_msg(), or PD_EIO where a recipe file could not be read for the
 * machine's sake (a disk error, no memory); r is then empty but safe to free. */
int pd_recipe_load(pd_recipe *r, const char *path, const char *cluster_path,
                   const pd_kv *overrides, int noverrides);

/* Whether key names a recipe setting (--key=value); if so, the form of its
 * value goes into buf ("N", "true", "sync|async"), for a message about an
 * option given without one. */
int pd_recipe_value_form(const char *key, char *buf, size_t len);

/* Lua's own version string ("Lua 5.4.x"). */
const char *pd_lua_version(void);

#endif
