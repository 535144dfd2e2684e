/*
 * fuzz_recipe.c - the recipe loader, pd_recipe_load (src/lua/recipe.c), on
 * arbitrary Lua source: what a recipe can do to paddle from inside the
 * sandbox (lua/recipe.lua, src/lua/sandbox.c).
 *
 * Each input is written to recipe.lua in the scratch directory and loaded
 * in a fresh Lua state (pd_recipe_load makes one per call); a recipe that
 * loads is then read the way the other layers read it (parameter count,
 * reader slots) and freed. The run uses libFuzzer's -timeout to catch a
 * recipe that gets past the sandbox's limits on instructions and CPU time.
 *
 * Checks, besides the sanitizers: a load either succeeds or fails with
 * PD_ERECIPE and a message.
 */
#include "fuzz_common.h"
#include "../../src/core/pd.h"
#include "../../src/data/reader.h"
#include "../../src/lua/recipe.h"

#include <stdlib.h>
#include <string.h>

static char *path;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fz_init();
    path = fz_path("recipe.lua");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write("recipe.lua", data, size);
    pd_recipe r;
    int rc = pd_recipe_load(&r, path, NULL, NULL, 0);
    if (rc < 0) {
        const char *msg = pd_err_msg();
        if (rc != PD_ERECIPE || !msg || !msg[0]) fz_fail("a failed load returned %d (%s)", rc, msg);
    } else {
        (void)pd_recipe_params(&r);
        pd_slot *slots = NULL;
        int nslots = 0;
        if (pd_reader_layout(&r, &slots, &nslots) == 0) free(slots);
    }
    pd_recipe_free(&r);
    return 0;
}
