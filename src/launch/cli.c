/* cli.c - parsing subcommand arguments. */
#include "cli.h"
#include "../core/pd.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Is name among known? *flag tells whether it takes no value. */
static int is_known(const char *const *known, const char *name, size_t len, int *flag)
{
    for (int i = 0; known && known[i]; i++) {
        size_t kl = strlen(known[i]);
        int f = known[i][kl - 1] == '!';
        if (f) kl--;
        if (kl == len && strncmp(known[i], name, len) == 0) {
            *flag = f;
            return 1;
        }
    }
    return 0;
}

/* Edit distance of a[0..la) and b[0..lb), both under 64 bytes (else a large
 * number): for "did you mean". */
static int distance(const char *a, size_t la, const char *b, size_t lb)
{
    if (la >= 64 || lb >= 64) return 1 << 20;
    int row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            row[j] = PD_MIN(PD_MIN(row[j] + 1, row[j - 1] + 1), diag + (a[i - 1] != b[j - 1]));
            diag = up;
        }
    }
    return row[lb];
}

/* The command's own option nearest to name, if near enough to be a typo
 * ("--ouput", "--init-model"); NULL if none is. */
static const char *near_known(const char *const *known, const char *name, size_t len)
{
    const char *best = NULL;
    int bestd = 0;
    for (int i = 0; known && known[i]; i++) {
        size_t kl = strlen(known[i]);
        int d = distance(name, len, known[i], known[i][kl - 1] == '!' ? kl - 1 : kl);
        if (!best || d < bestd) best = known[i], bestd = d;
    }
    return best && bestd <= PD_MAX(2, (int)len / 3) ? best : NULL;
}

/* Options of the commands a user types, for a hint where one is given to
 * a command that has none such (paddle check --init_model, paddle run
 * --model): none of them is a recipe key. */
static const struct {
    const char *name, *cmds;
} command_opts[] = {
    {"init_model", "paddle train, paddle run and paddle start"}, {"resume", "paddle run"}, {"model", "paddle predict"},
    {"input", "paddle predict"}, {"output", "paddle predict"}, {"part", "paddle predict"}, {"out", "paddle gen"},
};

static const char *other_command(const char *name, size_t len)
{
    for (size_t i = 0; i < PD_COUNT(command_opts); i++)
        if (strlen(command_opts[i].name) == len && strncmp(command_opts[i].name, name, len) == 0)
            return command_opts[i].cmds;
    return NULL;
}

static pd_cli_setting_fn setting_form;

void pd_cli_set_settings(pd_cli_setting_fn fn) { setting_form = fn; }

int pd_cli_parse(pd_cli *c, const char *cmd, int argc, char **argv, int minpos, int maxpos,
                 const char *const *known)
{
    memset(c, 0, sizeof *c);
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (a[0] == '-' && isalpha((unsigned char)a[1]) && access(a, F_OK) != 0) { /* -passes=2: one dash short */
            fprintf(stderr, "paddle %s: unknown option '%s' (an option begins with two dashes: -%s)\n", cmd, a, a);
            goto usage;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            if (c->npos >= maxpos || c->npos >= (int)PD_COUNT(c->pos)) {
                fprintf(stderr, "paddle %s: unexpected argument '%s'\n", cmd, a);
                goto usage;
            }
            c->pos[c->npos++] = pd_xstrdup(a);
            continue;
        }
        char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const char *value = eq ? eq + 1 : NULL, *near, *other;
        char form[200];
        int flag = 0;
        if (len == 7 && strncmp(name, "cluster", 7) == 0) {
            if (!value) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "paddle %s: --cluster needs a file\n", cmd);
                    goto usage;
                }
                value = argv[++i];
            }
            if (!*value) {
                fprintf(stderr, "paddle %s: --cluster needs a file\n", cmd);
                goto usage;
            }
            free(c->cluster);
            c->cluster = pd_xstrdup(value);
        } else if (is_known(known, name, len, &flag)) {
            if (flag && value) {
                fprintf(stderr, "paddle %s: --%.*s takes no value\n", cmd, (int)len, name);
                goto usage;
            }
            if (!flag && !value) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "paddle %s: --%.*s needs a value\n", cmd, (int)len, name);
                    goto usage;
                }
                if (strncmp(argv[i + 1], "--", 2) == 0 && argv[i + 1][2]) { /* --model --input x: one forgotten */
                    fprintf(stderr, "paddle %s: --%.*s needs a value, not the option '%s' (a value that begins "
                                    "with -- goes after '=': --%.*s=VALUE)\n",
                            cmd, (int)len, name, argv[i + 1], (int)len, name);
                    goto usage;
                }
                value = argv[++i];
            }
            if (!flag && !*value) { /* --init_model= would name the current directory's parent, or / */
                fprintf(stderr, "paddle %s: --%.*s needs a value\n", cmd, (int)len, name);
                goto usage;
            }
            if (c->nopts >= PD_CLI_MAX) goto too_many;
            c->opts[c->nopts].key = pd_xasprintf("%.*s", (int)len, name);
            c->opts[c->nopts++].value = pd_xstrdup(flag ? "1" : value);
        } else if ((other = other_command(name, len)) != NULL) {
            int dummy;
            fprintf(stderr, "paddle %s: --%.*s is an option of %s, not of paddle %s%s\n", cmd, (int)len, name, other,
                    cmd, len == 5 && !strncmp(name, "model", 5) && is_known(known, "init_model", 10, &dummy) ? " (a model to start from: --init_model)" : "");
            goto usage;
        } else if (value) {
            if (len == 0) {
                fprintf(stderr, "paddle %s: bad option '%s'\n", cmd, a);
                goto usage;
            }
            if (c->noverrides >= PD_CLI_MAX) goto too_many;
            c->overrides[c->noverrides].key = pd_xasprintf("%.*s", (int)len, name);
            c->overrides[c->noverrides++].value = pd_xstrdup(value);
        } else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 && c->npos >= minpos) {
            /* --passes 5: a recipe setting with its value after a space; or a
             * typo of the command's own option (--ouput x.csv), or both */
            const char *k = near_known(known, name, len);
            fprintf(stderr, "paddle %s: unknown option '%s'%s%.*s%s; a recipe setting takes its value after '=': --%s=%s\n",
                    cmd, a, k ? " (did you mean '--" : "", k ? (int)strcspn(k, "!") : 0, k ? k : "", k ? "'?)" : "",
                    name, argv[i + 1]);
            goto usage;
        } else if (setting_form && setting_form(name, form, sizeof form)) { /* no '=': name is the whole key */
            fprintf(stderr, "paddle %s: option --%s needs a value: --%s=%s\n", cmd, name, name, form);
            goto usage;
        } else if ((near = near_known(known, name, len)) != NULL) {
            fprintf(stderr, "paddle %s: unknown option '%s' (did you mean '--%.*s'?)\n", cmd, a,
                    (int)strcspn(near, "!"), near);
            goto usage;
        } else {
            fprintf(stderr, "paddle %s: unknown option '%s' (a recipe setting takes a value: --NAME=VALUE)\n", cmd,
                    a);
            goto usage;
        }
    }
    if (c->npos < minpos) {
        fprintf(stderr, "paddle %s: missing argument\n", cmd);
        goto usage;
    }
    return 0;
too_many:
    fprintf(stderr, "paddle %s: too many options\n", cmd);
usage:
    fprintf(stderr, "'paddle help %s' shows the usage.\n", cmd);
    pd_cli_free(c);
    return 2;
}

const char *pd_cli_opt(const pd_cli *c, const char *name)
{
    for (int i = c->nopts - 1; i >= 0; i--)
        if (strcmp(c->opts[i].key, name) == 0) return c->opts[i].value;
    return NULL;
}

void pd_cli_free(pd_cli *c)
{
    for (int i = 0; i < c->npos; i++) free(c->pos[i]);
    for (int i = 0; i < c->noverrides; i++) {
        free(c->overrides[i].key);
        free(c->overrides[i].value);
    }
    for (int i = 0; i < c->nopts; i++) {
        free(c->opts[i].key);
        free(c->opts[i].value);
    }
    free(c->cluster);
    memset(c, 0, sizeof *c);
}

int pd_cli_long(const pd_cli *c, const char *cmd, const char *name, long dflt, long lo, long hi, long *out)
{
    const char *v = pd_cli_opt(c, name);
    *out = dflt;
    if (!v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "paddle %s: --%s must be an integer from %ld to %ld, got '%s'\n", cmd, name, lo, hi, v);
        return 2;
    }
    *out = x;
    return 0;
}

int pd_cli_int(const pd_cli *c, const char *cmd, const char *name, int dflt, int lo, int hi, int *out)
{
    long x;
    int rc = pd_cli_long(c, cmd, name, dflt, lo, hi, &x);
    *out = (int)x;
    return rc;
}
