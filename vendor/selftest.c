/* selftest.c — link every vendored library and call each one once.
 *
 * Built by `make vendor-selftest` against build/deps/{musl,glibc}: proves the
 * headers and static libraries in a flavour's prefix link together (in the
 * order of DEPS_LIBS) and work. Prints one line per library and exits 0 when
 * every check passed.
 *
 *   musl-gcc -static -D_GNU_SOURCE -Ibuild/deps/musl/include vendor/selftest.c \
 *       -Lbuild/deps/musl/lib -llua -lopenblas -lssh2 -lssl -lcrypto -lz -lm -lpthread
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <lauxlib.h>
#include <libssh2.h>
#include <lua.h>
#include <lualib.h>
#include <openssl/crypto.h>
#include <zlib.h>

static int failures;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "selftest: FAILED: %s\n", what);
        failures++;
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_lua(void)
{
    lua_State *L = luaL_newstate();
    check(L != NULL, "luaL_newstate");
    if (!L)
        return;
    luaL_openlibs(L);
    int rc = luaL_dostring(L, "return _VERSION .. ', 6*7 = ' .. 6*7");
    check(rc == LUA_OK, "luaL_dostring");
    printf("lua:      %s\n", lua_tostring(L, -1));
    lua_close(L);
}

static void test_openblas(void)
{
    /* [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50] */
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2,
                1.0f, a, 2, b, 2, 0.0f, c, 2);
    check(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50, "cblas_sgemm 2x2");
    printf("openblas: sgemm 2x2 = [%g %g; %g %g], core %s, %d threads\n",
           c[0], c[1], c[2], c[3], openblas_get_corename(), openblas_get_num_threads());
    printf("          config: %s\n", openblas_get_config());

    enum { N = 512 };
    static float x[N * N], y[N * N], z[N * N];
    for (int i = 0; i < N * N; i++) {
        x[i] = (float)(i % 7) - 3;
        y[i] = (float)(i % 5) - 2;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N,
                1.0f, x, N, y, N, 0.0f, z, N);                 /* warm up */
    int reps = 10;
    double t = now();
    for (int r = 0; r < reps; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N,
                    1.0f, x, N, y, N, 0.0f, z, N);
    t = now() - t;
    double want = 0;
    for (int k = 0; k < N; k++)
        want += (double)x[k] * y[k * N];
    check(fabs(z[0] - want) < 1e-3, "cblas_sgemm 512x512");
    printf("          sgemm %dx%d: %.1f GFLOP/s\n", N, N, 2.0 * N * N * N * reps / t / 1e9);
}

static void test_libssh2(void)
{
    check(libssh2_init(0) == 0, "libssh2_init");
    printf("libssh2:  %s\n", libssh2_version(0));
    LIBSSH2_SESSION *s = libssh2_session_init();
    check(s != NULL, "libssh2_session_init");
    if (!s)
        return;
    const char **algs = NULL;
    int n = libssh2_session_supported_algs(s, LIBSSH2_METHOD_HOSTKEY, &algs);
    check(n > 0, "libssh2_session_supported_algs");
    int ed25519 = 0, rsa512 = 0;
    printf("          host key algorithms:");
    for (int i = 0; i < n; i++) {
        printf(" %s", algs[i]);
        ed25519 |= strcmp(algs[i], "ssh-ed25519") == 0;
        rsa512 |= strcmp(algs[i], "rsa-sha2-512") == 0;
    }
    printf("\n");
    check(ed25519, "libssh2 offers ssh-ed25519");
    check(rsa512, "libssh2 offers rsa-sha2-512");
    if (algs)
        libssh2_free(s, algs);
    libssh2_session_free(s);
    libssh2_exit();
}

static void test_openssl(void)
{
    const char *v = OpenSSL_version(OPENSSL_VERSION);
    check(strncmp(v, "OpenSSL 3.0.", 12) == 0, "OpenSSL 3.0.x");
    printf("openssl:  %s\n", v);
}

static void test_zlib(void)
{
    const char msg[] = "paddle paddle paddle paddle paddle paddle";
    unsigned char packed[128], back[128];
    uLongf np = sizeof packed, nb = sizeof back;
    int rc = compress(packed, &np, (const Bytef *)msg, sizeof msg);
    check(rc == Z_OK, "compress");
    rc = uncompress(back, &nb, packed, np);
    check(rc == Z_OK && nb == sizeof msg && memcmp(back, msg, nb) == 0, "uncompress");
    printf("zlib:     %s (%zu -> %lu bytes and back)\n", zlibVersion(), sizeof msg,
           (unsigned long)np);
}

int main(void)
{
    test_lua();
    test_openblas();
    test_libssh2();
    test_openssl();
    test_zlib();
    if (failures) {
        fprintf(stderr, "selftest: %d check(s) failed\n", failures);
        return 1;
    }
    printf("selftest: ok\n");
    return 0;
}
