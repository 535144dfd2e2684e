/*
 * cli.h - command-line arguments of the subcommands.
 *
 * Positional arguments, the command's own options (listed in `known`; a name
 * ending in '!' is a flag without value), --cluster FILE, and every other
 * --key=value, kept as an override of the recipe setting `key`.
 *
 *     static const char *const known[] = {"init_model", NULL};
 *     pd_cli cli;
 *     if ((rc = pd_cli_parse(&cli, "train", argc, argv, 1, 1, known))) return rc;
 *     const char *init = pd_cli_opt(&cli, "init_model");
 */
#ifndef PD_CLI_H
#define PD_CLI_H

#include "../core/recipe.h"

#define PD_CLI_MAX 64

typedef struct pd_cli {
    int npos;
    char *pos[8];
    char *cluster;
    int noverrides;
    pd_kv overrides[PD_CLI_MAX];
    int nopts;
    pd_kv opts[PD_CLI_MAX];
} pd_cli;

/* How pd_cli_parse tells a recipe setting given without a value
 * (--passes) from an unknown option: 1 when key is a setting, with the form
 * of its value ("N") in buf. main sets it; without it every such option is
 * unknown. */
typedef int (*pd_cli_setting_fn)(const char *key, char *buf, size_t len);
void pd_cli_set_settings(pd_cli_setting_fn fn);

/* Returns 0, or 2 after printing a usage error naming the argument. */
int pd_cli_parse(pd_cli *c, const char *cmd, int argc, char **argv, int minpos, int maxpos,
                 const char *const *known);
/* The value of a known option ("1" for flags), or NULL when not given. */
const char *pd_cli_opt(const pd_cli *c, const char *name);
/* The integer value of option name in [lo, hi], or dflt when not given.
 * Returns 0, or 2 after printing "paddle CMD: --name must be an integer
 * from lo to hi, got 'v'". */
int pd_cli_long(const pd_cli *c, const char *cmd, const char *name, long dflt, long lo, long hi, long *out);
int pd_cli_int(const pd_cli *c, const char *cmd, const char *name, int dflt, int lo, int hi, int *out);
void pd_cli_free(pd_cli *c);

#endif
