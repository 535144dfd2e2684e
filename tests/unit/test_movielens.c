/* test_movielens.c - the MovieLens reader (files, fields, Latin-1 titles,
 * malformed lines, id ranges, the split) and the generator. */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/data/gen.h"
#include "../../src/data/movielens.h"
#include "../../src/data/reader.h"
#include "../../src/lua/recipe.h"

#include <sys/stat.h>
#include <unistd.h>

int pd_cmd_gen(int argc, char **argv);

/* A small dataset: the first lines of ML-1M, plus titles in Latin-1
 * (\xc9 is E acute, \xe9 e acute, \xf1 n tilde). */
static const char *users_dat =
    "1::F::1::10::48067\n"
    "2::M::56::16::70072\n"
    "3::M::25::15::55117\r\n" /* a DOS line end */
    "\n"
    "7::F::35::0::98107-4518\n";
static const char *movies_dat =
    "1::Toy Story (1995)::Animation|Children's|Comedy\n"
    "2::Jumanji (1995)::Adventure|Children's|Fantasy\n"
    "10::City of Lost Children, The (Cit\xe9 des enfants perdus, La) (1995)::Adventure|Sci-Fi\n"
    "11::\xc9T\xc9 Story (1999)::Western\n";
static const char *ratings_dat =
    "1::1::5::978300760\n"
    "1::10::3::978302109\n"
    "2::2::4::978301968\n"
    "3::11::1::978300275\n"
    "7::1::2::978824291\n"
    "7::11::4::978824291\n";

static char *ml_dir(const char *users, const char *movies, const char *ratings)
{
    static char path[300];
    snprintf(path, sizeof path, "%s/ml", pd_test_dir());
    mkdir(path, 0700);
    free(pd_test_write("ml/users.dat", users));
    free(pd_test_write("ml/movies.dat", movies));
    free(pd_test_write("ml/ratings.dat", ratings));
    return path;
}

static int word_id(const pd_movielens *ml, const char *w)
{
    for (int i = 0; i < ml->nwords; i++)
        if (strcmp(ml->words[i], w) == 0) return i;
    pd_test_fail(__FILE__, __LINE__, "title word '%s' is not in the dictionary", w);
}

PD_TEST(movielens_reads_every_file_and_field)
{
    pd_movielens ml;
    if (pd_movielens_load(&ml, ml_dir(users_dat, movies_dat, ratings_dat), 0) < 0)
        pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
    /* users.dat: gender M=0 F=1, age as an index of 1 18 25 35 45 50 56 */
    CHECK_EQ_INT(ml.nusers, 4);
    CHECK_EQ_INT(ml.max_user, 7);
    CHECK_EQ_INT(ml.users[1].gender, 1);
    CHECK_EQ_INT(ml.users[1].age, 0);
    CHECK_EQ_INT(ml.users[1].occupation, 10);
    CHECK_EQ_INT(ml.users[2].gender, 0);
    CHECK_EQ_INT(ml.users[2].age, 6);
    CHECK_EQ_INT(ml.users[3].age, 2);
    CHECK_EQ_INT(ml.users[7].age, 3);
    CHECK_EQ_INT(ml.users[7].occupation, 0);
    CHECK(!ml.users[4].present);
    /* movies.dat: genres in the 18 of ML-1M */
    CHECK_EQ_INT(ml.nmovies, 4);
    CHECK_EQ_INT(ml.max_movie, 11);
    CHECK_EQ_INT(ml.movies[1].ngenres, 3);
    CHECK_EQ_INT(ml.ids[ml.movies[1].genres], 2);     /* Animation */
    CHECK_EQ_INT(ml.ids[ml.movies[1].genres + 1], 3); /* Children's */
    CHECK_EQ_INT(ml.ids[ml.movies[1].genres + 2], 4); /* Comedy */
    CHECK_EQ_INT(ml.ids[ml.movies[10].genres + 1], 14); /* Sci-Fi */
    CHECK_EQ_INT(ml.ids[ml.movies[11].genres], 17);     /* Western */
    CHECK(!ml.movies[5].present);
    /* titles: the words before "(Year)", split at blanks, lower case (Latin-1
     * too), numbered in byte order; brackets and commas stay in the words */
    CHECK_EQ_INT(ml.movies[1].ntitle, 2);
    CHECK_EQ_INT(ml.ids[ml.movies[1].title], word_id(&ml, "toy"));
    CHECK_EQ_INT(ml.ids[ml.movies[1].title + 1], word_id(&ml, "story"));
    CHECK_EQ_INT(ml.movies[10].ntitle, 10);
    CHECK_EQ_INT(ml.ids[ml.movies[10].title + 3], word_id(&ml, "children,"));
    CHECK_EQ_INT(ml.ids[ml.movies[10].title + 5], word_id(&ml, "(cit\xe9"));
    CHECK_EQ_INT(ml.ids[ml.movies[10].title + 9], word_id(&ml, "la)"));
    CHECK_EQ_INT(ml.ids[ml.movies[11].title], word_id(&ml, "\xe9t\xe9"));
    CHECK_EQ_INT(ml.ids[ml.movies[11].title + 1], word_id(&ml, "story"));
    /* toy story jumanji city of lost children, the (cité des enfants perdus, la) été */
    CHECK_EQ_INT(ml.nwords, 14);
    for (int i = 1; i < ml.nwords; i++) CHECK(strcmp(ml.words[i - 1], ml.words[i]) < 0);
    CHECK_STR_EQ(ml.words[ml.nwords - 1], "\xe9t\xe9"); /* bytes above 0x7f sort last */
    /* ratings.dat, in file order */
    CHECK_EQ_INT(ml.nratings, 6);
    CHECK_EQ_INT(ml.ratings[1].user, 1);
    CHECK_EQ_INT(ml.ratings[1].movie, 10);
    CHECK_NEAR(ml.ratings[1].stars, 3, 0);
    CHECK_EQ_INT(ml.ratings[5].user, 7);
    CHECK_EQ_INT(ml.ratings[5].movie, 11);
    CHECK_NEAR(ml.ratings[5].stars, 4, 0);
    pd_movielens_free(&ml);
}

/* Each malformed line is reported with its file and line. */
PD_TEST(movielens_reports_malformed_lines_with_file_and_line)
{
    static const struct {
        int file; /* 0 users, 1 movies, 2 ratings */
        const char *line, *want;
    } cases[] = {
        {0, "9::X::25::1::12345", "Gender must be M or F, got 'X'"},
        {0, "9::M::26::1::12345", "Age must be one of 1, 18, 25, 35, 45, 50, 56, got '26'"},
        {0, "9::M::25::21::12345", "Occupation must be an integer from 0 to 20, got '21'"},
        {0, "9::M::25::-1::12345", "Occupation must be an integer from 0 to 20"},
        {0, "0::M::25::1::12345", "UserID must be an integer from 1 to 4194304, got '0'"},
        {0, "4194305::M::25::1::12345", "UserID must be an integer from 1 to 4194304"},
        {0, "99999999999999999999::M::25::1::1", "UserID must be an integer"},
        {0, "9::M::25::1", "4 fields separated by '::', users.dat lines have 5"},
        {0, "9::M::25::1::2::3", "more than 5 fields"},
        {0, "9:M:25:1:12345", "1 field separated by '::', users.dat lines have 5: UserID::Gender::Age::Occupation::Zip-code"},
        {0, "1::M::25::1::12345", "UserID 1 appears twice"},
        {0, "9::M::25::1::", "Zip-code is empty"},
        {1, "12::Heat::Action", "Title must end with its year in brackets"},
        {1, "12::Heat (19x5)::Action", "Title must end with its year in brackets"},
        {1, "12::Heat ()::Action", "Title must end with its year in brackets"},
        {1, "12:: (1995)::Action", "Title has no words before its year"},
        {1, "12::Heat (1995)::Action|Cartoon", "unknown genre 'Cartoon'"},
        {1, "12::Heat (1995)::", "unknown genre ''"},
        {1, "12::Heat (1995)::Crime|Crime", "genre 'Crime' is listed twice"},
        {1, "1::Heat (1995)::Crime", "MovieID 1 appears twice"},
        {1, "x::Heat (1995)::Crime", "MovieID must be an integer"},
        {2, "1::2::6::978300760", "Rating must be a whole number of stars from 1 to 5, got '6'"},
        {2, "1::2::0::978300760", "Rating must be a whole number of stars from 1 to 5"},
        {2, "1::2::4.5::978300760", "Rating must be a whole number of stars"},
        {2, "1::2::4::yesterday", "Timestamp must be seconds since 1970"},
        {2, "4::2::4::978300760", "UserID 4 is not in users.dat"},
        {2, "1::5::4::978300760", "MovieID 5 is not in movies.dat"},
        {2, "4000::1::4::978300760", "UserID 4000 is not in users.dat"},
        {2, "100000000::1::4::978300760", "UserID must be an integer from 1 to 4194304, got '100000000'"},
        {2, "1::2::4", "3 fields separated by '::', ratings.dat lines have 4"},
    };
    static const char *names[] = {"users.dat", "movies.dat", "ratings.dat"};
    for (size_t i = 0; i < PD_COUNT(cases); i++) {
        /* the bad line is line 2 of its file */
        const char *base[3] = {users_dat, movies_dat, ratings_dat};
        char *text[3];
        for (int f = 0; f < 3; f++) {
            const char *nl = strchr(base[f], '\n');
            text[f] = f == cases[i].file ? pd_xasprintf("%.*s%s\n%s", (int)(nl - base[f] + 1), base[f], cases[i].line, nl + 1)
                                         : pd_xstrdup(base[f]);
        }
        pd_movielens ml;
        char *dir = ml_dir(text[0], text[1], text[2]);
        int rc = pd_movielens_load(&ml, dir, 0);
        if (rc != PD_EDATA) pd_test_fail(__FILE__, __LINE__, "case %zu (%s): rc %d", i, cases[i].line, rc);
        char *where = pd_xasprintf("%s/%s:2: ", dir, names[cases[i].file]);
        CHECK_CONTAINS(pd_err_msg(), where);
        CHECK_CONTAINS(pd_err_msg(), cases[i].want);
        CHECK_EQ_INT(ml.nratings, 0); /* nothing is left half loaded */
        free(where);
        for (int f = 0; f < 3; f++) free(text[f]);
    }
}

PD_TEST(movielens_limits_lines_and_reports_missing_files)
{
    char *big = pd_xmalloc(PD_ML_MAX_LINE + 100);
    memset(big, 'a', PD_ML_MAX_LINE + 10);
    strcpy(big + PD_ML_MAX_LINE + 10, "\n");
    char *users = pd_xasprintf("%s%s", users_dat, big);
    pd_movielens ml;
    char *dir = ml_dir(users, movies_dat, ratings_dat);
    CHECK_EQ_INT(pd_movielens_load(&ml, dir, 0), PD_EDATA);
    CHECK_CONTAINS(pd_err_msg(), "users.dat:6: line longer than 65536 bytes");
    free(users);
    free(big);

    /* a NUL byte: not text */
    char *path = pd_xasprintf("%s/users.dat", dir);
    FILE *f = fopen(path, "wb");
    fwrite("1::F::1::10::4" "\0" "67\n", 1, 18, f);
    fclose(f);
    CHECK_EQ_INT(pd_movielens_load(&ml, dir, 0), PD_EDATA);
    CHECK_CONTAINS(pd_err_msg(), "users.dat:1: NUL byte");
    free(path);

    CHECK_EQ_INT(pd_movielens_load(&ml, ml_dir(users_dat, movies_dat, ""), 0), PD_EDATA);
    CHECK_CONTAINS(pd_err_msg(), "ratings.dat holds no ratings");
    char *gone = pd_xasprintf("%s/nowhere", pd_test_dir());
    CHECK_EQ_INT(pd_movielens_load(&ml, gone, 0), PD_ENOENT);
    CHECK_CONTAINS(pd_err_msg(), "nowhere/users.dat");
    CHECK_CONTAINS(pd_err_msg(), "paddle gen movielens");
    free(gone);
}

PD_TEST(movielens_skip_mode_counts_and_drops_what_depends)
{
    /* user 2's line is bad: it and user 2's rating go */
    const char *users = "1::F::1::10::48067\n2::Q::56::16::70072\n3::M::25::15::55117\n7::F::35::0::9\n";
    pd_movielens ml;
    CHECK_EQ_INT(pd_movielens_load(&ml, ml_dir(users, movies_dat, ratings_dat), 1), 0);
    CHECK_EQ_INT(ml.skipped, 2);
    CHECK_EQ_INT(ml.nusers, 3);
    CHECK_EQ_INT(ml.nratings, 5);
    pd_movielens_free(&ml);
}

PD_TEST(movielens_split_is_a_deterministic_tenth)
{
    long test = 0, n = 0;
    for (int u = 1; u <= 600; u++)
        for (int m = 1; m <= 500; m++) {
            int t = pd_movielens_is_test(u, m, 0.1);
            CHECK_EQ_INT(t, pd_movielens_is_test(u, m, 0.1));
            CHECK(!t || pd_movielens_is_test(u, m, 0.2)); /* a larger fraction holds out a superset */
            test += t;
            n++;
        }
    CHECK_NEAR((double)test / n, 0.1, 0.003);
    CHECK_EQ_INT(pd_movielens_is_test(1, 1, 0), 0);
}

/* The recipe of the tests: every field, with the slot ranges given. */
static int load_recipe(pd_recipe *r, const char *data, const char *slots)
{
    char *text = pd_xasprintf("data { train = \"ml\", test = \"ml\", format = \"movielens\"%s }\n"
                              "model = function(nn)\n%s\n"
                              "  local u = nn.concat { nn.embedding(user_id, 4), nn.embedding(gender, 4),\n"
                              "    nn.embedding(age, 4), nn.embedding(occupation, 4) }\n"
                              "  local m = nn.concat { nn.embedding(movie_id, 4), nn.seq_pool(nn.embedding(genres, 4)),\n"
                              "    nn.seq_pool(nn.embedding(title, 4)), nn.embedding(movie_id, 4) }\n"
                              "  return nn.square_error_cost(nn.cos_sim(u, m, 5), rating)\n"
                              "end\n"
                              "optimizer = nn.adam {}\n",
                              data, slots);
    char *path = pd_test_write("r.lua", text);
    int rc = pd_recipe_load(r, path, NULL, NULL, 0);
    free(text);
    free(path);
    return rc;
}

static const char *all_slots =
    "  local user_id, gender, age = nn.id('user_id', 8), nn.id('gender', 2), nn.id('age', 7)\n"
    "  local occupation, movie_id = nn.id('occupation', 21), nn.id('movie_id', 12)\n"
    "  local genres, title = nn.id_list('genres', 18), nn.id_list('title', 14)\n"
    "  local rating = nn.data('rating', 1)";

PD_TEST(movielens_reader_fills_slots_by_name_and_splits)
{
    pd_recipe r;
    ml_dir(users_dat, movies_dat, ratings_dat);
    if (load_recipe(&r, "", all_slots) < 0) pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
    pd_movielens ml;
    char *dir = pd_xasprintf("%s/ml", pd_test_dir());
    CHECK_EQ_INT(pd_movielens_load(&ml, dir, 0), 0);
    int seen[6] = {0};
    for (int part = PD_PART_TRAIN; part <= PD_PART_TEST; part++) {
        pd_reader *rd;
        pd_reader_opts o = {.part = part, .nshares = 1, .batch_size = 4, .passes = 1};
        if (pd_reader_open(&rd, &r, &o) < 0) pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
        pd_batch *b;
        int rc;
        while ((rc = pd_reader_next(rd, &b)) == 1) {
            CHECK_EQ_INT(b->nslots, 8);
            for (int i = 0; i < b->n; i++) {
                int user = b->slots[0].ids[i], movie = b->slots[4].ids[i];
                long k = -1;
                for (long j = 0; j < ml.nratings; j++)
                    if (ml.ratings[j].user == user && ml.ratings[j].movie == movie) k = j;
                CHECK(k >= 0);
                seen[k]++;
                CHECK_EQ_INT(pd_movielens_is_test(user, movie, 0.1), part == PD_PART_TEST);
                CHECK_EQ_INT(b->slots[1].ids[i], ml.users[user].gender);
                CHECK_EQ_INT(b->slots[2].ids[i], ml.users[user].age);
                CHECK_EQ_INT(b->slots[3].ids[i], ml.users[user].occupation);
                const pd_ml_movie *m = &ml.movies[movie];
                CHECK_EQ_INT(b->slots[5].offsets[i + 1] - b->slots[5].offsets[i], m->ngenres);
                CHECK_EQ_INT(b->slots[5].ids[b->slots[5].offsets[i]], ml.ids[m->genres]);
                CHECK_EQ_INT(b->slots[6].offsets[i + 1] - b->slots[6].offsets[i], m->ntitle);
                CHECK_EQ_INT(b->slots[6].ids[b->slots[6].offsets[i + 1] - 1], ml.ids[m->title + m->ntitle - 1]);
                CHECK_NEAR(b->slots[7].values[i], ml.ratings[k].stars, 0);
            }
            pd_reader_release(rd, b);
        }
        CHECK_EQ_INT(rc, 0);
        pd_reader_close(rd);
    }
    for (int k = 0; k < 6; k++) CHECK_EQ_INT(seen[k], 1); /* every rating once, in train or test */
    pd_movielens_free(&ml);
    free(dir);
    pd_recipe_free(&r);
}

/* The model's slots are checked against the data when the reader opens. */
PD_TEST(movielens_reader_checks_slot_names_kinds_and_ranges)
{
    static const struct {
        const char *from, *to, *want, *from2, *to2;
    } cases[] = {
        {"nn.id('user_id', 8)", "nn.id('user_id', 7)",
         "data layer 'user_id' takes ids below 7, but the largest UserID in", NULL, NULL},
        {"nn.id('user_id', 8)", "nn.id('user_id', 7)", "users.dat is 7: declare nn.id(\"user_id\", 8) or more", NULL, NULL},
        {"nn.id('movie_id', 12)", "nn.id('movie_id', 11)", "the largest MovieID in", NULL, NULL},
        {"nn.id_list('title', 14)", "nn.id_list('title', 13)",
         "have 14 distinct words: declare nn.id_list(\"title\", 14) or more", NULL, NULL},
        {"nn.id('age', 7)", "nn.id('age', 6)", "there are 7 age groups", NULL, NULL},
        {"nn.id('occupation', 21)", "nn.id('occupation', 20)", "occupations are 0 to 20", NULL, NULL},
        {"nn.id('gender', 2)", "nn.id('gender', 1)", "gender ids are 0 (M) and 1 (F)", NULL, NULL},
        {"nn.id_list('genres', 18)", "nn.id_list('genres', 17)", "there are 18 genres", NULL, NULL},
        /* the kinds swapped: the model still builds, the reader refuses */
        {"nn.id('age', 7)", "nn.id('genres', 18)", "data layer 'genres' must be declared nn.id_list(\"genres\", 18)",
         "nn.id_list('genres', 18)", "nn.id_list('age', 7)"},
        {"nn.id_list('title', 14)", "nn.id_list('occupation', 21)",
         "data layer 'title' must be declared nn.id_list(\"title\", 14)", "nn.id('occupation', 21)",
         "nn.id('title', 14)"},
        {"nn.data('rating', 1)", "nn.data('rating', 2)", "declare it nn.data(\"rating\", 1)", NULL, NULL},
        {"nn.id('gender', 2)", "nn.id('sex', 2)", "data layer 'sex' is not a movielens field (the fields are user_id", NULL, NULL},
    };
    ml_dir(users_dat, movies_dat, ratings_dat);
    for (size_t i = 0; i < PD_COUNT(cases); i++) {
        const char *at = strstr(all_slots, cases[i].from);
        CHECK(at != NULL);
        char *slots = pd_xasprintf("%.*s%s%s", (int)(at - all_slots), all_slots, cases[i].to, at + strlen(cases[i].from));
        if (cases[i].from2) {
            at = strstr(slots, cases[i].from2);
            CHECK(at != NULL);
            char *s2 = pd_xasprintf("%.*s%s%s", (int)(at - slots), slots, cases[i].to2, at + strlen(cases[i].from2));
            free(slots);
            slots = s2;
        }
        if (strstr(cases[i].to, "'rating', 2")) {
            char *s2 = pd_xasprintf("%s\n  rating = nn.fc(rating, 1)", slots);
            free(slots);
            slots = s2;
        }
        pd_recipe r;
        if (load_recipe(&r, "", slots) < 0) pd_test_fail(__FILE__, __LINE__, "case %zu: %s", i, pd_err_msg());
        pd_reader *rd;
        pd_reader_opts o = {.part = PD_PART_TRAIN, .nshares = 1, .batch_size = 4, .passes = 1};
        int rc = pd_reader_open(&rd, &r, &o);
        if (rc != PD_ERECIPE) pd_test_fail(__FILE__, __LINE__, "case %zu: rc %d, %s", i, rc, pd_err_msg());
        CHECK_CONTAINS(pd_err_msg(), cases[i].want);
        CHECK_CONTAINS(pd_err_msg(), "r.lua: ");
        pd_recipe_free(&r);
        free(slots);
    }
}

PD_TEST(movielens_reader_takes_the_book_slot_names)
{
    static const char *book =
        "  local user_id, gender, age = nn.id('user_id', 8), nn.id('gender_id', 2), nn.id('age_id', 7)\n"
        "  local occupation, movie_id = nn.id('job_id', 21), nn.id('movie_id', 12)\n"
        "  local genres, title = nn.id_list('category_id', 18), nn.id_list('movie_title', 14)\n"
        "  local rating = nn.data('score', 1)";
    pd_recipe r;
    ml_dir(users_dat, movies_dat, ratings_dat);
    if (load_recipe(&r, ", test_fraction = 0", book) < 0) pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
    pd_reader *rd;
    pd_reader_opts o = {.part = PD_PART_TRAIN, .nshares = 1, .batch_size = 100, .passes = 1};
    if (pd_reader_open(&rd, &r, &o) < 0) pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
    pd_batch *b;
    CHECK_EQ_INT(pd_reader_next(rd, &b), 1);
    CHECK_EQ_INT(b->n, 6); /* test_fraction 0: everything trains */
    CHECK_EQ_INT(b->slots[1].ids[0], 1);   /* user 1 is F */
    CHECK_EQ_INT(b->slots[3].ids[2], 16);  /* user 2's occupation */
    CHECK_NEAR(b->slots[7].values[3], 1, 0);
    pd_reader_release(rd, b);
    pd_reader_close(rd);
    pd_recipe_free(&r);
}

/* Generate MovieLens-shaped data into dir (what `paddle gen movielens
 * --seed S --ratings N` does); its report goes to a file. */
static void run_gen(const char *dir, long seed, long ratings)
{
    char *report = pd_xasprintf("%s.txt", dir);
    pd_gen_opts o = {.seed = (uint64_t)seed, .ratings = ratings};
    pd_gen_movielens_sizes(ratings, &o.users, &o.movies);
    fflush(stdout);
    int saved = dup(1);
    CHECK(freopen(report, "w", stdout) != NULL);
    int rc = pd_gen_movielens(dir, &o);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    if (rc != 0) pd_test_fail(__FILE__, __LINE__, "paddle gen: exit %d: %s", rc, pd_err_msg());
    free(report);
}

static char *slurp(const char *dir, const char *name, long *len)
{
    char *path = pd_xasprintf("%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) pd_test_fail(__FILE__, __LINE__, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    rewind(f);
    char *buf = pd_xmalloc((size_t)*len + 1);
    CHECK_EQ_INT(fread(buf, 1, (size_t)*len, f), *len);
    buf[*len] = '\0';
    fclose(f);
    free(path);
    return buf;
}

PD_TEST(movielens_gen_is_deterministic_for_a_seed)
{
    char *a = pd_xasprintf("%s/a", pd_test_dir()), *b = pd_xasprintf("%s/b", pd_test_dir()),
         *c = pd_xasprintf("%s/c", pd_test_dir());
    run_gen(a, 7, 30000);
    run_gen(b, 7, 30000);
    run_gen(c, 8, 30000);
    static const char *files[] = {"users.dat", "movies.dat", "ratings.dat"};
    for (int i = 0; i < 3; i++) {
        long la, lb, lc;
        char *x = slurp(a, files[i], &la), *y = slurp(b, files[i], &lb), *z = slurp(c, files[i], &lc);
        CHECK_EQ_INT(la, lb);
        CHECK(memcmp(x, y, (size_t)la) == 0);
        CHECK(la != lc || memcmp(x, z, (size_t)la) != 0);
        free(x);
        free(y);
        free(z);
    }
    long len;
    char *report = slurp(pd_test_dir(), "a.txt", &len);
    CHECK_CONTAINS(report, "30000 ratings");
    CHECK_CONTAINS(report, "test RMSE predicting the training mean: ");
    CHECK_CONTAINS(report, "test RMSE predicting the planted truth: ");
    free(report);
    free(a);
    free(b);
    free(c);
}

/* The default size is ML-1M's, every user has 20 ratings or more, a user
 * rates a movie once, some titles are Latin-1, and the planted truth beats
 * the mean by far. */
PD_TEST(movielens_gen_default_is_ml1m_shaped)
{
    char *dir = pd_xasprintf("%s/ml1m", pd_test_dir());
    run_gen(dir, 1, 1000209);
    pd_movielens ml;
    if (pd_movielens_load(&ml, dir, 0) < 0) pd_test_fail(__FILE__, __LINE__, "%s", pd_err_msg());
    CHECK_EQ_INT(ml.nusers, 6040);
    CHECK_EQ_INT(ml.max_user, 6040);
    CHECK_EQ_INT(ml.nmovies, 3883);
    CHECK_EQ_INT(ml.max_movie, 3952);
    CHECK_EQ_INT(ml.nratings, 1000209);
    CHECK(ml.nwords < 6000); /* fits the recipe's title range */
    int *per_user = pd_xcalloc((size_t)ml.max_user + 1, sizeof *per_user);
    uint8_t *seen = pd_xcalloc((size_t)(ml.max_movie + 1), 1);
    int last_user = 0;
    for (long i = 0; i < ml.nratings; i++) {
        const pd_ml_rating *r = &ml.ratings[i];
        per_user[r->user]++;
        CHECK(r->user >= last_user); /* grouped by user, as ML-1M */
        if (r->user != last_user) memset(seen, 0, (size_t)ml.max_movie + 1);
        last_user = r->user;
        CHECK(!seen[r->movie]);
        seen[r->movie] = 1;
    }
    for (int u = 1; u <= ml.max_user; u++) CHECK(per_user[u] >= 20);
    int latin1 = 0;
    for (int w = 0; w < ml.nwords; w++)
        for (const unsigned char *p = (const unsigned char *)ml.words[w]; *p; p++) latin1 += *p >= 0xc0;
    CHECK(latin1 > 10);
    long len;
    char *report = slurp(pd_test_dir(), "ml1m.txt", &len);
    double mean = 0, truth = 0;
    const char *p = strstr(report, "training mean: "), *q = strstr(report, "planted truth: ");
    CHECK(p && q);
    mean = atof(p + strlen("training mean: "));
    truth = atof(q + strlen("planted truth: "));
    CHECK(mean > 0.9 && mean < 1.1);
    CHECK(truth < 0.5);
    free(report);
    free(per_user);
    free(seen);
    pd_movielens_free(&ml);
    free(dir);
}
