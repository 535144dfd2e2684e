/* bin2c - turn the files of lua/ into a C table (build/gen/embed.c).
 *
 *     bin2c lua/recipe.lua lua/x.lua > embed.c
 *
 * Each file becomes an entry named by its base name without ".lua". */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    printf("#include <stddef.h>\n");
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "bin2c: cannot open %s\n", argv[i]);
            return 1;
        }
        printf("static const unsigned char f%d[] = {", i);
        int c, n = 0;
        while ((c = fgetc(f)) != EOF) printf("%s%d,", n++ % 20 ? "" : "\n", c);
        printf("0};\n");
        fclose(f);
    }
    printf("struct pd_embedded { const char *name; const unsigned char *data; size_t len; };\n");
    printf("const struct pd_embedded pd_embedded[] = {\n");
    for (int i = 1; i < argc; i++) {
        const char *base = strrchr(argv[i], '/');
        base = base ? base + 1 : argv[i];
        int len = (int)strlen(base);
        if (len > 4 && strcmp(base + len - 4, ".lua") == 0) len -= 4;
        printf("  {\"%.*s\", f%d, sizeof f%d - 1},\n", len, base, i, i);
    }
    printf("  {NULL, NULL, 0}\n};\n");
    return 0;
}
