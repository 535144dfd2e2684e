/* movielens.c - reading the MovieLens-1M files. See movielens.h. */
#include "movielens.h"
#include "../core/log.h"
#include "../core/pd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const int pd_ml_ages[PD_ML_NAGES] = {1, 18, 25, 35, 45, 50, 56};

const char *const pd_ml_genres[PD_ML_NGENRES] = {
    "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime",
    "Documentary", "Drama", "Fantasy", "Film-Noir", "Horror", "Musical",
    "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western",
};

/* What the load builds before it is a pd_movielens. */
typedef struct loader {
    pd_movielens *ml;
    const char *path;       /* the file being read */
    long lineno;
    int cap_users, cap_movies;
    long cap_ids, cap_ratings;
    char **tw;              /* title words in movie order (ids hold indices) */
    long ntw, cap_tw;
} loader;

/* --- fields -------------------------------------------------------------- */

static int bad(loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(loader *ld, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pd_err_set(PD_EDATA, "%s:%ld: %s", ld->path, ld->lineno, msg);
}

/* A decimal integer of digits only, at most max: 0, -1 (not one), -2 (over). */
static int parse_uint(const char *s, long max, long *out)
{
    long v = 0;
    if (!*s) return -1;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (v > max) return -2;
    }
    *out = v;
    return 0;
}

static int parse_id(loader *ld, const char *s, const char *what, long *id)
{
    if (parse_uint(s, PD_ML_MAX_ID, id) < 0 || *id < 1)
        return bad(ld, "%s must be an integer from 1 to %d, got '%.40s'", what, PD_ML_MAX_ID, s);
    return 0;
}

/* Split s at "::" in place into at most max fields; returns the number of
 * fields, max + 1 when there are more. */
static int split(char *s, char **f, int max)
{
    int n = 0;
    f[n++] = s;
    while ((s = strstr(s, "::")) != NULL) {
        *s = '\0';
        s += 2;
        if (n == max) return max + 1;
        f[n++] = s;
    }
    return n;
}

/* White space as Python's str.split() sees Latin-1 text. */
static int is_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0;
}

/* Latin-1 lower case: A-Z and À-Þ but ×. */
static unsigned char lower1(unsigned char c)
{
    if ((c >= 'A' && c <= 'Z') || (c >= 0xc0 && c <= 0xde && c != 0xd7)) return (unsigned char)(c + 32);
    return c;
}

/* Make room in a by-id table for id; new entries are zero. */
static void *grow_ids(void *p, int *cap, long id, size_t elem)
{
    if (id < *cap) return p;
    long c = *cap ? *cap : 1024;
    while (c <= id) c *= 2;
    if (c > PD_ML_MAX_ID + 1) c = PD_ML_MAX_ID + 1;
    p = pd_xrealloc(p, (size_t)c * elem);
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
    *cap = (int)c;
    return p;
}

static void push_id(loader *ld, int32_t id)
{
    PD_GROW(&ld->ml->ids, &ld->cap_ids, ld->ml->nids + 1);
    ld->ml->ids[ld->ml->nids++] = id;
}

/* --- the three files ------------------------------------------------------- */

/* UserID::Gender::Age::Occupation::Zip-code */
static int user_line(loader *ld, char **f)
{
    pd_movielens *ml = ld->ml;
    long id, age, occ;
    int a = -1;
    if (parse_id(ld, f[0], "UserID", &id) < 0) return PD_EDATA;
    if (strcmp(f[1], "M") != 0 && strcmp(f[1], "F") != 0)
        return bad(ld, "Gender must be M or F, got '%.40s'", f[1]);
    if (parse_uint(f[2], 1000, &age) == 0)
        for (int i = 0; i < PD_ML_NAGES; i++)
            if (pd_ml_ages[i] == age) a = i;
    if (a < 0) return bad(ld, "Age must be one of 1, 18, 25, 35, 45, 50, 56, got '%.40s'", f[2]);
    if (parse_uint(f[3], PD_ML_NOCCUPATIONS - 1, &occ) < 0)
        return bad(ld, "Occupation must be an integer from 0 to %d, got '%.40s'", PD_ML_NOCCUPATIONS - 1, f[3]);
    if (!f[4][0]) return bad(ld, "Zip-code is empty");
    ml->users = grow_ids(ml->users, &ld->cap_users, id, sizeof *ml->users);
    pd_ml_user *u = &ml->users[id];
    if (u->present) return bad(ld, "UserID %ld appears twice", id);
    u->present = 1;
    u->gender = f[1][0] == 'F';
    u->age = (uint8_t)a;
    u->occupation = (uint8_t)occ;
    ml->nusers++;
    if (id > ml->max_user) ml->max_user = (int)id;
    return 0;
}

/* MovieID::Title (Year)::Genre|Genre|... */
static int movie_line(loader *ld, char **f)
{
    pd_movielens *ml = ld->ml;
    long id;
    if (parse_id(ld, f[0], "MovieID", &id) < 0) return PD_EDATA;

    /* the title: words before "(Year)", as PaddlePaddle's ^(.*)\((\d+)\)$ */
    char *title = f[1];
    size_t len = strlen(title);
    char *open = strrchr(title, '(');
    int year_ok = len > 0 && title[len - 1] == ')' && open && open + 1 < title + len - 1;
    for (char *p = open ? open + 1 : NULL; year_ok && p < title + len - 1; p++)
        if (*p < '0' || *p > '9') year_ok = 0;
    if (!year_ok) return bad(ld, "Title must end with its year in brackets, as in 'Toy Story (1995)', got '%.60s'", title);
    char *words[PD_ML_MAX_TITLE_WORDS];
    int nwords = 0;
    char *p = title;
    *open = '\0';
    for (;;) {
        while (*p && is_space((unsigned char)*p)) p++;
        if (!*p) break;
        if (nwords == PD_ML_MAX_TITLE_WORDS)
            return bad(ld, "Title has more than %d words", PD_ML_MAX_TITLE_WORDS);
        words[nwords++] = p;
        while (*p && !is_space((unsigned char)*p)) {
            *p = (char)lower1((unsigned char)*p);
            p++;
        }
        if (*p) *p++ = '\0';
    }
    if (nwords == 0) return bad(ld, "Title has no words before its year");

    /* the genres: '|'-separated, each one of the 18 */
    int32_t genres[PD_ML_NGENRES];
    int ngenres = 0;
    char *g = f[2];
    for (;;) {
        char *bar = strchr(g, '|');
        size_t glen = bar ? (size_t)(bar - g) : strlen(g);
        int k = -1;
        for (int i = 0; i < PD_ML_NGENRES; i++)
            if (strlen(pd_ml_genres[i]) == glen && strncmp(pd_ml_genres[i], g, glen) == 0) k = i;
        if (k < 0)
            return bad(ld, "unknown genre '%.*s' (MovieLens-1M has Action, Adventure, Animation, Children's, "
                           "Comedy, Crime, Documentary, Drama, Fantasy, Film-Noir, Horror, Musical, Mystery, "
                           "Romance, Sci-Fi, Thriller, War, Western)", (int)PD_MIN(glen, 40), g);
        for (int i = 0; i < ngenres; i++)
            if (genres[i] == k) return bad(ld, "genre '%s' is listed twice", pd_ml_genres[k]);
        genres[ngenres++] = k;
        if (!bar) break;
        g = bar + 1;
    }

    ml->movies = grow_ids(ml->movies, &ld->cap_movies, id, sizeof *ml->movies);
    pd_ml_movie *m = &ml->movies[id];
    if (m->present) return bad(ld, "MovieID %ld appears twice", id);
    m->present = 1;
    m->genres = (int32_t)ml->nids;
    m->ngenres = (uint16_t)ngenres;
    for (int i = 0; i < ngenres; i++) push_id(ld, genres[i]);
    m->title = (int32_t)ml->nids;
    m->ntitle = (uint16_t)nwords;
    for (int i = 0; i < nwords; i++) {
        PD_GROW(&ld->tw, &ld->cap_tw, ld->ntw + 1);
        ld->tw[ld->ntw] = pd_xstrdup(words[i]);
        push_id(ld, (int32_t)ld->ntw++);
    }
    ml->nmovies++;
    if (id > ml->max_movie) ml->max_movie = (int)id;
    return 0;
}

/* UserID::MovieID::Rating::Timestamp */
static int rating_line(loader *ld, char **f)
{
    pd_movielens *ml = ld->ml;
    long user, movie, stars, ts;
    if (parse_id(ld, f[0], "UserID", &user) < 0 || parse_id(ld, f[1], "MovieID", &movie) < 0) return PD_EDATA;
    if (user > ml->max_user || !ml->users[user].present) return bad(ld, "UserID %ld is not in users.dat", user);
    if (movie > ml->max_movie || !ml->movies[movie].present)
        return bad(ld, "MovieID %ld is not in movies.dat", movie);
    if (parse_uint(f[2], 5, &stars) < 0 || stars < 1)
        return bad(ld, "Rating must be a whole number of stars from 1 to 5, got '%.40s'", f[2]);
    if (parse_uint(f[3], 99999999999L, &ts) < 0)
        return bad(ld, "Timestamp must be seconds since 1970, got '%.40s'", f[3]);
    if (ml->nratings >= PD_ML_MAX_RATINGS) return bad(ld, "more than %ld ratings", PD_ML_MAX_RATINGS);
    PD_GROW(&ml->ratings, &ld->cap_ratings, ml->nratings + 1);
    pd_ml_rating *r = &ml->ratings[ml->nratings++];
    r->user = (int32_t)user;
    r->movie = (int32_t)movie;
    r->stars = (float)stars;
    return 0;
}

/* Read one line into buf (without its end of line). 1: a line; 0: end of
 * file; -1: the line is too long or holds a NUL byte (it was consumed). */
static int read_line(FILE *f, char *buf, int *nul)
{
    int c, n = 0;
    *nul = 0;
    while ((c = getc_unlocked(f)) != EOF && c != '\n') {
        if (n == PD_ML_MAX_LINE) {
            while ((c = getc_unlocked(f)) != EOF && c != '\n') {}
            return -1;
        }
        if (c == '\0') *nul = 1;
        buf[n++] = (char)c;
    }
    if (c == EOF && n == 0) return 0;
    buf[n] = '\0';
    return *nul ? -1 : 1;
}

static int read_file(loader *ld, const char *dir, const char *name, int nfields, const char *layout,
                     int (*line_fn)(loader *, char **), int skip_bad)
{
    char *path = pd_xasprintf("%s/%s", dir, name);
    int rc = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        rc = pd_err_set(PD_ENOENT, "cannot open %s: %s (a movielens dataset is a directory holding users.dat, "
                                   "movies.dat and ratings.dat; 'paddle gen movielens --out DIR' makes one)",
                        path, strerror(errno));
        free(path);
        return rc;
    }
    char *buf = pd_xmalloc(PD_ML_MAX_LINE + 1);
    char *fields[8];
    int got, nul;
    ld->path = path;
    ld->lineno = 0;
    while (rc == 0 && (got = read_line(f, buf, &nul)) != 0) {
        ld->lineno++;
        int st;
        if (got < 0) {
            st = nul ? bad(ld, "NUL byte in the line (not a Latin-1 text file?)")
                     : bad(ld, "line longer than %d bytes", PD_ML_MAX_LINE);
        } else {
            /* strip white space at both ends, as PaddlePaddle's line.strip() */
            char *p = buf, *e = buf + strlen(buf);
            while (e > p && is_space((unsigned char)e[-1])) *--e = '\0';
            while (is_space((unsigned char)*p)) p++;
            if (!*p) continue;
            int n = split(p, fields, nfields);
            if (n != nfields)
                st = bad(ld, "%s%d field%s separated by '::', %s lines have %d: %s", n > nfields ? "more than " : "",
                         n > nfields ? nfields : n, n == 1 ? "" : "s", name, nfields, layout);
            else
                st = line_fn(ld, fields);
        }
        if (st < 0) {
            if (!skip_bad) {
                rc = pd_err_set(st, "%s (data.on_error = \"skip\" would skip such lines)", pd_err_msg());
                break;
            }
            if (ld->ml->skipped < 10) PD_WARN("skipping: %s", pd_err_msg());
            ld->ml->skipped++;
        }
    }
    if (rc == 0 && ferror(f)) rc = pd_err_set(PD_EIO, "reading %s: %s", path, strerror(errno));
    fclose(f);
    free(buf);
    free(path);
    ld->path = NULL;
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Number the distinct title words in byte order; title ids become word ids. */
static void build_dictionary(loader *ld)
{
    pd_movielens *ml = ld->ml;
    char **sorted = pd_xmalloc((size_t)(ld->ntw ? ld->ntw : 1) * sizeof *sorted);
    memcpy(sorted, ld->tw, (size_t)ld->ntw * sizeof *sorted);
    qsort(sorted, (size_t)ld->ntw, sizeof *sorted, cmp_str);
    ml->words = pd_xmalloc((size_t)(ld->ntw ? ld->ntw : 1) * sizeof *ml->words);
    for (long i = 0; i < ld->ntw; i++)
        if (ml->nwords == 0 || strcmp(sorted[i], ml->words[ml->nwords - 1]) != 0)
            ml->words[ml->nwords++] = pd_xstrdup(sorted[i]);
    free(sorted);
    for (int id = 1; id <= ml->max_movie; id++) {
        pd_ml_movie *m = &ml->movies[id];
        if (!m->present) continue;
        for (int k = 0; k < m->ntitle; k++) {
            const char *w = ld->tw[ml->ids[m->title + k]];
            char **hit = bsearch(&w, ml->words, (size_t)ml->nwords, sizeof *ml->words, cmp_str);
            PD_ASSERT(hit != NULL);
            ml->ids[m->title + k] = (int32_t)(hit - ml->words);
        }
    }
}

int pd_movielens_load(pd_movielens *ml, const char *dir, int skip_bad)
{
    loader ld = {.ml = ml};
    int rc;
    memset(ml, 0, sizeof *ml);
    ml->dir = pd_xstrdup(dir);
    if ((rc = read_file(&ld, dir, "users.dat", 5, "UserID::Gender::Age::Occupation::Zip-code", user_line,
                        skip_bad)) < 0 ||
        (rc = read_file(&ld, dir, "movies.dat", 3, "MovieID::Title (Year)::Genres", movie_line, skip_bad)) < 0 ||
        (rc = read_file(&ld, dir, "ratings.dat", 4, "UserID::MovieID::Rating::Timestamp", rating_line,
                        skip_bad)) < 0)
        goto out;
    if (ml->nusers == 0) rc = pd_err_set(PD_EDATA, "%s/users.dat holds no users", dir);
    else if (ml->nmovies == 0) rc = pd_err_set(PD_EDATA, "%s/movies.dat holds no movies", dir);
    else if (ml->nratings == 0) rc = pd_err_set(PD_EDATA, "%s/ratings.dat holds no ratings", dir);
    if (rc == 0) build_dictionary(&ld);
out:
    for (long i = 0; i < ld.ntw; i++) free(ld.tw[i]);
    free(ld.tw);
    if (rc < 0) pd_movielens_free(ml);
    return rc;
}

void pd_movielens_free(pd_movielens *ml)
{
    for (int i = 0; i < ml->nwords; i++) free(ml->words[i]);
    free(ml->words);
    free(ml->users);
    free(ml->movies);
    free(ml->ids);
    free(ml->ratings);
    free(ml->dir);
    memset(ml, 0, sizeof *ml);
}

int pd_movielens_is_test(int32_t user, int32_t movie, double fraction)
{
    /* splitmix64's finaliser over the pair */
    uint64_t h = ((uint64_t)(uint32_t)user << 32 | (uint32_t)movie) + 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    return (double)(h >> 11) * (1.0 / 9007199254740992.0) < fraction;
}

/* --- samples ------------------------------------------------------------------ */

static const struct {
    const char *name, *book;    /* our name, the PaddlePaddle book's */
    int kind;
} field_info[PD_ML_NFIELDS] = {
    {"user_id", "user_id", PD_SLOT_ID},       {"gender", "gender_id", PD_SLOT_ID},
    {"age", "age_id", PD_SLOT_ID},            {"occupation", "job_id", PD_SLOT_ID},
    {"movie_id", "movie_id", PD_SLOT_ID},     {"genres", "category_id", PD_SLOT_ID_LIST},
    {"title", "movie_title", PD_SLOT_ID_LIST}, {"rating", "score", PD_SLOT_DENSE},
};

int pd_movielens_field(const char *slot)
{
    for (int i = 0; i < PD_ML_NFIELDS; i++)
        if (strcmp(slot, field_info[i].name) == 0 || strcmp(slot, field_info[i].book) == 0) return i;
    return -1;
}

int pd_movielens_bind(const pd_movielens *ml, const pd_slot *layout, int nslots, int *fields, const char *recipe)
{
    for (int i = 0; i < nslots; i++) {
        const pd_slot *s = &layout[i];
        int f = pd_movielens_field(s->name);
        if (f < 0)
            return pd_err_set(PD_ERECIPE, "%s: data layer '%s' is not a movielens field (the fields are user_id, "
                                          "gender, age, occupation, movie_id, genres, title, rating)",
                              recipe, s->name);
        fields[i] = f;
        int need = 0;
        char why[160];
        switch (f) {
        case PD_ML_USER_ID:
            need = ml->max_user + 1;
            snprintf(why, sizeof why, "the largest UserID in %s/users.dat is %d", ml->dir, ml->max_user);
            break;
        case PD_ML_MOVIE_ID:
            need = ml->max_movie + 1;
            snprintf(why, sizeof why, "the largest MovieID in %s/movies.dat is %d", ml->dir, ml->max_movie);
            break;
        case PD_ML_TITLE:
            need = ml->nwords;
            snprintf(why, sizeof why, "the titles in %s/movies.dat have %d distinct words", ml->dir, ml->nwords);
            break;
        case PD_ML_GENDER: need = 2; snprintf(why, sizeof why, "gender ids are 0 (M) and 1 (F)"); break;
        case PD_ML_AGE: need = PD_ML_NAGES; snprintf(why, sizeof why, "there are %d age groups", PD_ML_NAGES); break;
        case PD_ML_OCCUPATION:
            need = PD_ML_NOCCUPATIONS;
            snprintf(why, sizeof why, "occupations are 0 to %d", PD_ML_NOCCUPATIONS - 1);
            break;
        case PD_ML_GENRES:
            need = PD_ML_NGENRES;
            snprintf(why, sizeof why, "there are %d genres", PD_ML_NGENRES);
            break;
        default: break;
        }
        const char *decl = field_info[f].kind == PD_SLOT_ID ? "nn.id" : field_info[f].kind == PD_SLOT_ID_LIST
                                                                           ? "nn.id_list" : "nn.data";
        if (f == PD_ML_RATING) {
            if (s->kind != PD_SLOT_DENSE || s->width != 1)
                return pd_err_set(PD_ERECIPE, "%s: data layer '%s' holds the rating: declare it nn.data(\"%s\", 1)",
                                  recipe, s->name, s->name);
            continue;
        }
        if (s->kind != field_info[f].kind)
            return pd_err_set(PD_ERECIPE, "%s: data layer '%s' must be declared %s(\"%s\", %d)", recipe, s->name,
                              decl, s->name, need);
        if (s->width < need)
            return pd_err_set(PD_ERECIPE, "%s: data layer '%s' takes ids below %d, but %s: declare %s(\"%s\", %d) "
                                          "or more", recipe, s->name, s->width, why, decl, s->name, need);
    }
    return 0;
}

void pd_movielens_stage(const pd_movielens *ml, long i, const int *fields, pd_batch *st)
{
    const pd_ml_rating *r = &ml->ratings[i];
    const pd_ml_user *u = &ml->users[r->user];
    const pd_ml_movie *m = &ml->movies[r->movie];
    pd_batch_clear(st);
    for (int k = 0; k < st->nslots; k++) {
        pd_slot *s = &st->slots[k];
        switch (fields[k]) {
        case PD_ML_USER_ID: pd_slot_push_id(s, 0, r->user); break;
        case PD_ML_GENDER: pd_slot_push_id(s, 0, u->gender); break;
        case PD_ML_AGE: pd_slot_push_id(s, 0, u->age); break;
        case PD_ML_OCCUPATION: pd_slot_push_id(s, 0, u->occupation); break;
        case PD_ML_MOVIE_ID: pd_slot_push_id(s, 0, r->movie); break;
        case PD_ML_GENRES: pd_slot_push_ids(s, 0, ml->ids + m->genres, m->ngenres); break;
        case PD_ML_TITLE: pd_slot_push_ids(s, 0, ml->ids + m->title, m->ntitle); break;
        case PD_ML_RATING: *pd_slot_push_dense(s, 0) = r->stars; break;
        default: PD_ASSERT(!"unknown movielens field");
        }
    }
    st->n = 1;
}
