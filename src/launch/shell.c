/* shell.c - quoting values for a remote shell. */
#include "shell.h"
#include "../core/buf.h"
#include "../core/pd.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

char *pd_sh_quote(const char *s)
{
    size_t n = 3;
    for (const char *p = s; *p; p++) n += *p == '\'' ? 4 : 1;
    char *out = pd_xmalloc(n), *o = out;
    *o++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *p;
        }
    }
    *o++ = '\'';
    *o = '\0';
    return out;
}

/* A literal run s[0..n) as a single-quoted word. */
static void put_literal(pd_buf *t, const char *s, size_t n)
{
    if (n == 0) return;
    char *lit = pd_xasprintf("%.*s", (int)n, s), *q = pd_sh_quote(lit);
    pd_buf_put(t, q);
    free(lit);
    free(q);
}

/* Length of a variable name at s (0 if none). */
static size_t name_len(const char *s)
{
    size_t n = 0;
    if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) return 0;
    while (isalnum((unsigned char)s[n]) || s[n] == '_') n++;
    return n;
}

int pd_sh_path(const char *s, const char *what, char **out)
{
    pd_buf t = {0};
    pd_buf_put(&t, "");
    const char *p = s, *lit = s;
    if (p[0] == '~' && (p[1] == '\0' || p[1] == '/')) {
        pd_buf_put(&t, "\"$HOME\"");
        lit = ++p;
    }
    for (; *p; p++) {
        if (iscntrl((unsigned char)*p)) {
            free(t.s);
            return pd_err_set(PD_EINVAL, "%s holds a control character (byte %d)", what, (unsigned char)*p);
        }
        if (*p != '$') continue;
        int braced = p[1] == '{';
        size_t n = name_len(p + 1 + braced);
        if (n == 0 || (braced && p[2 + n] != '}')) {
            free(t.s);
            return pd_err_set(PD_EINVAL, "%s '%s': only $NAME, ${NAME} and a leading ~ are expanded on the nodes "
                                         "(found '%.3s')", what, s, p);
        }
        put_literal(&t, lit, (size_t)(p - lit));
        char *var = pd_xasprintf("\"${%.*s:?is not set on this node (%s)}\"", (int)n, p + 1 + braced, what);
        pd_buf_put(&t, var);
        free(var);
        p += n + braced * 2;
        lit = p + 1;
    }
    put_literal(&t, lit, (size_t)(p - lit));
    if (t.len == 0) pd_buf_put(&t, "''");
    *out = t.s;
    return 0;
}
