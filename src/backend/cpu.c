/*
 * cpu.c - the CPU backend: OpenBLAS for GEMM, plain loops for the rest.
 */
#include "backend.h"
#include "../core/pd.h"

#include <cblas.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* OpenBLAS extensions (declared in its cblas.h, repeated for clarity) */
char *openblas_get_corename(void);
char *openblas_get_config(void);
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
int blas_thread_shutdown_(void);

static void *cpu_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    return p;
}

static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t n) { if (n) memmove(dst, src, n); }
static void cpu_zero(void *p, size_t n) { if (n) memset(p, 0, n); }
static void cpu_sync(void) {}

/* Loops that the compiler vectorizes are built twice where that pays: for
 * the baseline x86-64 (4 floats wide) and for AVX2 (8 wide), chosen at run
 * time. The AVX2 target has no FMA, so each element gets the same float
 * operations in the same order and the same bits either way. */
#if defined(__x86_64__) && defined(__GNUC__)
#define PD_AVX2 __attribute__((target("avx2")))
static int cpu_has_avx2(void)
{
    static int have = -1; /* any thread may be the first to ask */
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) __atomic_store_n(&have, h = __builtin_cpu_supports("avx2") ? 1 : 0, __ATOMIC_RELAXED);
    return h;
}
#else
#define PD_AVX2
static int cpu_has_avx2(void)
{
    return 0;
}
#endif

/* tanh from one exponential, written without branches or calls so that
 * the loops over a layer's outputs vectorize (libm's tanhf, and even one
 * expf per value, are several times slower: a recommender spent a fifth of
 * its time there). e^(2x) is 2^n * e^f with n = round(2x / ln 2), |f| <=
 * ln 2 / 2, and e^f by its Taylor polynomial to degree 7 (relative error
 * below 1e-8 before rounding); near 0, where (t - 1) / (t + 1) cancels,
 * x - x^3 / 3 + 2 x^5 / 15. |error| < 3e-7 over all x (checked against
 * tanh in double by the unit test opt_fast_tanh_accuracy). */
static inline float fast_tanh(float x)
{
    float y = x > 9.f ? 18.f : x < -9.f ? -18.f : 2.f * x;
    /* round to nearest without rintf: adding 1.5 * 2^23 drops the fraction */
    float n = (y * 1.44269504f + 12582912.f) - 12582912.f;
    float f = (y - n * 0.693145752f) - n * 1.42860677e-6f; /* ln 2 in two parts */
    float p = 1.f + f * (1.f + f * (0.5f + f * (1.f / 6 + f * (1.f / 24 + f * (1.f / 120 + f * (1.f / 720 +
                                                                                           f * (1.f / 5040)))))));
    union {
        int32_t i;
        float f;
    } scale = {.i = ((int32_t)n + 127) << 23};
    float t = p * scale.f;
    float x2 = x * x, small = x * (1.f - x2 * (1.f / 3.f - x2 * (2.f / 15.f)));
    float big = (t - 1.f) / (t + 1.f);
    return x > -0.05f && x < 0.05f ? small : big;
}

/* Products this small cost less as plain loops than as a BLAS call. */
#define SMALL_GEMM 4096

static void small_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                       int ldb, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            for (int p = 0; p < k; p++)
                s += (ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) *
                     (tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
            float *cij = c + (size_t)i * ldc + j;
            *cij = alpha * s + (beta == 0 ? 0 : beta * *cij);
        }
}

/* --- products cut between threads --------------------------------------------------
 *
 * OpenBLAS's own threads wait for work spinning in sched_yield, and this
 * build (NUM_THREADS=64) mallocs half a megabyte of job table for every
 * threaded product, which musl maps and unmaps each time: for the small
 * products of a training step both cost as much as the arithmetic. So
 * OpenBLAS runs single-threaded, and a product big enough to share is cut
 * here into one block of rows or columns of C per thread; each block goes
 * to whichever thread takes it first, the caller included (a worker whose
 * core is busy leaves its block to the caller). A block is computed as
 * OpenBLAS would compute it inside the whole product (the same sums over k,
 * in the same order).
 *
 * A sleeping worker costs a product twice: the caller's wake-up call
 * (about 8 µs on a virtual machine, where it is an interrupt between
 * cores) and the time the worker takes to start (about 26 µs), while the
 * next product of a step usually follows within tens of microseconds. So a
 * worker waits for the next product 20 µs on its core, then up to 100 µs
 * yielding the core between looks (a pserver or reader woken beside it
 * runs at once), and only then sleeps. Not on a crowded machine (threads
 * wait for a core a fifth of the time or more: backend.h, pd_crowd): there
 * a waiting worker takes its share of the cores from the caller, and it
 * sleeps after 20 µs. The caller, its parts done, waits for the parts the
 * workers took as long as its own took, and 20 µs more, before it sleeps. */

#define SPLIT_GEMM (1L << 21) /* m * n * k below which one thread does it all */
#define MAX_THREADS 16
#define SPIN_NS 20000         /* how long a thread waits on its core before it yields it or sleeps */
#define IDLE_SPIN_NS 100000   /* how long a worker waits, yielding, on a machine with cores to spare */
#define CROWD_CHECK_NS 20e6   /* how often a worker looks at how crowded the machine is */

#define SPLIT_OPT (1L << 17) /* elements below which one thread runs an optimizer update */
#define SPLIT_ROWS (1L << 15) /* floats a table-row update moves below which one thread runs it */

/* A block of a product, or (range set) a slice lo..hi of an elementwise
 * or row operation, range(args, lo, hi). */
typedef struct gemm_part {
    int ta, tb, m, n, k;
    float alpha, beta;
    const float *a, *b;
    float *c;
    int lda, ldb, ldc;
    void (*range)(const void *args, int lo, int hi);
    const void *args;
    int lo, hi;
} gemm_part;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    int nthreads;             /* threads a product is cut among, caller included (0: not decided) */
    int nworkers;             /* workers started */
    int driven;               /* 1 while a thread hands work to the workers (pool_take) */
    unsigned long gen;        /* counts products handed to the workers */
    /* the current product's parts, taken by whichever thread comes first:
     * its gen (low 32 bits), its parts and the next part not taken, in one
     * word (a thread late for one product cannot take a part of the next) */
    uint64_t claim;
    int pending;              /* parts not done yet */
    gemm_part part[MAX_THREADS];
    unsigned long born[MAX_THREADS]; /* gen when each worker was started */
} gp = {.mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static void run_part(const gemm_part *p);

#define CLAIM(gen, parts, next) ((uint64_t)(uint32_t)(gen) << 32 | (uint64_t)(parts) << 16 | (uint64_t)(next))

/* Take the next part of product gen: its index, or -1 when none is left
 * (or the product is another). */
static int take_part(unsigned long gen)
{
    uint64_t w = __atomic_load_n(&gp.claim, __ATOMIC_ACQUIRE);
    for (;;) {
        int parts = (int)(w >> 16 & 0xffff), next = (int)(w & 0xffff);
        if ((uint32_t)(w >> 32) != (uint32_t)gen || next >= parts) return -1;
        if (__atomic_compare_exchange_n(&gp.claim, &w, w + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return next;
    }
}

/* Run the parts of product gen that no thread took yet; returns 1 when
 * the last part of all ended here. */
static int run_taken(unsigned long gen)
{
    int last = 0;
    for (int i; (i = take_part(gen)) >= 0;) {
        run_part(&gp.part[i]);
        last = __atomic_sub_fetch(&gp.pending, 1, __ATOMIC_ACQ_REL) == 0;
    }
    return last;
}

static void run_part(const gemm_part *p)
{
    if (p->range) {
        p->range(p->args, p->lo, p->hi);
        return;
    }
    cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans, p->m, p->n,
                p->k, p->alpha, p->a, p->lda, p->b, p->ldb, p->beta, p->c, p->ldc);
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Spin until the int at *word is 0 (is_gen 0), or until the unsigned long
 * at *word differs from old (is_gen 1), for at most ns: the first SPIN_NS
 * on the core, the rest yielding it between looks. Returns whether it
 * happened. */
static int spin_for(const void *word, int is_gen, unsigned long old, double ns)
{
    double start = 0;
    for (unsigned i = 0;; i++) {
        if (is_gen ? __atomic_load_n((const unsigned long *)word, __ATOMIC_ACQUIRE) != old
                   : __atomic_load_n((const int *)word, __ATOMIC_ACQUIRE) == 0)
            return 1;
        if ((i & 63) == 0) {
            double t = now_ns();
            if (start == 0) start = t;
            else if (t > start + ns) return 0;
            else if (t > start + SPIN_NS) sched_yield();
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* The share of the time some thread waited for a core above which the
 * machine counts as crowded: a trainer alone here makes 0.02 to 0.04 of
 * it, a trainer and its pserver 0.07 to 0.11, a trainer beside one busy
 * loop 0.38 and beside two 0.67 (/proc/pressure/cpu). */
#define CROWD_STALL 0.2

static int crowd_from_pressure(pd_crowd *c, const char *pressure, double at_us)
{
    const char *some = strstr(pressure, "some ");
    const char *t = some ? strstr(some, "total=") : NULL;
    char *end;
    double total = t ? strtod(t + 6, &end) : -1;
    if (!t || end == t + 6 || total < 0) return -1;
    if (c->at > 0 && at_us > c->at && total >= c->total) {
        double share = PD_MIN(1.0, (total - c->total) / (at_us - c->at));
        c->ema = c->ema < 0 ? share : 0.5 * c->ema + 0.5 * share;
        c->crowded = c->ema > CROWD_STALL;
    }
    c->total = total;
    c->at = at_us;
    return c->crowded;
}

static int crowd_from_loadavg(pd_crowd *c, const char *loadavg, int cpus)
{
    double load;
    int running, total;
    if (sscanf(loadavg, "%lf %lf %lf %d/%d", &load, &load, &load, &running, &total) != 5 || running < 0)
        return -1;
    c->ema = c->ema < 0 ? running : 0.75 * c->ema + 0.25 * running;
    c->crowded = c->ema > cpus + 1;
    return c->crowded;
}

int pd_crowd_update(pd_crowd *c, const char *pressure, const char *loadavg, int cpus, double at_us)
{
    if (pressure && crowd_from_pressure(c, pressure, at_us) >= 0) return c->crowded;
    if (loadavg && crowd_from_loadavg(c, loadavg, cpus) >= 0) return c->crowded;
    c->ema = -1;
    c->at = 0;
    return c->crowded = 1;
}

/* The text of a small file under /proc in buf, or NULL. */
static const char *read_small(const char *path, char *buf, size_t size)
{
    ssize_t n = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, buf, size - 1);
        close(fd);
    }
    if (n <= 0) return NULL;
    buf[n] = 0;
    return buf;
}

static struct {
    pthread_mutex_t mu;
    double next; /* when to look again */
    int cpus;    /* the cores this process may use (0: not asked yet) */
    pd_crowd c;
} crowd = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {.ema = -1, .crowded = 1}};

/* Whether the machine is crowded (backend.h: pd_crowd), looked at most
 * every CROWD_CHECK_NS; the last answer while another worker looks. */
static int machine_crowded(void)
{
    if (pthread_mutex_trylock(&crowd.mu) != 0) return __atomic_load_n(&crowd.c.crowded, __ATOMIC_RELAXED);
    double t = now_ns();
    if (t >= crowd.next) {
        crowd.next = t + CROWD_CHECK_NS;
        if (!crowd.cpus) {
            cpu_set_t cs;
            crowd.cpus = sched_getaffinity(0, sizeof cs, &cs) == 0 ? PD_MAX(1, CPU_COUNT(&cs)) : 1;
        }
        char pbuf[256], lbuf[128];
        const char *pressure = read_small("/proc/pressure/cpu", pbuf, sizeof pbuf);
        const char *loadavg = pressure ? NULL : read_small("/proc/loadavg", lbuf, sizeof lbuf);
        __atomic_store_n(&crowd.c.crowded, pd_crowd_update(&crowd.c, pressure, loadavg, crowd.cpus, t / 1e3),
                         __ATOMIC_RELAXED);
    }
    int c = crowd.c.crowded;
    pthread_mutex_unlock(&crowd.mu);
    return c;
}

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    pthread_mutex_lock(&gp.mu);
    unsigned long seen = gp.born[id]; /* products from the next one on are for it */
    pthread_mutex_unlock(&gp.mu);
    for (;;) {
        int changed = spin_for(&gp.gen, 1, seen, machine_crowded() ? SPIN_NS : IDLE_SPIN_NS);
        pthread_mutex_lock(&gp.mu);
        while (!changed && gp.gen == seen) pthread_cond_wait(&gp.go, &gp.mu);
        seen = gp.gen;
        pthread_mutex_unlock(&gp.mu);
        /* the caller checks pending under gp.mu before it sleeps: taking
         * gp.mu orders this signal after that, and signalling after the
         * unlock spares the caller waking into a mutex still held */
        if (run_taken(seen)) {
            pthread_mutex_lock(&gp.mu);
            pthread_mutex_unlock(&gp.mu);
            pthread_cond_signal(&gp.done);
        }
    }
    return NULL;
}

/* A forked child has none of its parent's workers. */
static void pool_after_fork(void)
{
    pthread_mutex_init(&gp.mu, NULL);
    pthread_cond_init(&gp.go, NULL);
    pthread_cond_init(&gp.done, NULL);
    pthread_mutex_init(&crowd.mu, NULL);
    gp.nworkers = 0;
    gp.pending = 0;
    gp.driven = 0;
}

/* OpenBLAS single-threaded, and its own threads stopped: they start with
 * the program and spin in sched_yield for about 0.1 s before they sleep,
 * 60 to 100 ms of a core in every process, taken from whatever starts
 * beside it. Only while the count is not 1 yet: setting it again after the stop
 * would start the threads anew (OpenBLAS restarts its pool lazily). */
static void openblas_single(void)
{
    if (openblas_get_num_threads() == 1) return;
    openblas_set_num_threads(1);
    blas_thread_shutdown_();
}

static void openblas_nothreads_init(void)
{
    pthread_mutex_lock(&gp.mu);
    if (gp.nthreads == 0) gp.nthreads = PD_MAX(1, PD_MIN(openblas_get_num_threads(), MAX_THREADS));
    pthread_mutex_unlock(&gp.mu);
    openblas_single();
    pthread_atfork(NULL, NULL, pool_after_fork);
}

/* Threads for products: decided at the first (OpenBLAS's own count, which
 * follows OPENBLAS_NUM_THREADS), then OpenBLAS is made single-threaded. */
static void pool_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, openblas_nothreads_init);
}

/* One thread at a time hands work to the workers (the trainer's): 1 when
 * the caller now does, until run_parts or pool_give gives it back; 0 when
 * another thread does (a second trainer in one process, say), and the
 * caller then runs its work whole, on its own thread. */
static int pool_take(void)
{
    /* looked at first: a thread that fails leaves the line unwritten */
    return !__atomic_load_n(&gp.driven, __ATOMIC_RELAXED) && !__atomic_exchange_n(&gp.driven, 1, __ATOMIC_ACQUIRE);
}

static void pool_give(void) { __atomic_store_n(&gp.driven, 0, __ATOMIC_RELEASE); }

/* The threads to cut a product for, the workers started as needed; called
 * by the thread that took the pool. */
static int pool_threads(void)
{
    pool_init();
    pthread_mutex_lock(&gp.mu); /* pd_blas_threads may set it from another thread */
    int threads = gp.nthreads;
    pthread_mutex_unlock(&gp.mu);
    while (gp.nworkers < threads - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        gp.born[gp.nworkers + 1] = gp.gen;
        int rc = pthread_create(&t, &attr, worker, (void *)(intptr_t)(gp.nworkers + 1));
        pthread_attr_destroy(&attr);
        if (rc) {
            threads = gp.nworkers + 1; /* make do with those there are */
            pthread_mutex_lock(&gp.mu);
            gp.nthreads = threads;
            pthread_mutex_unlock(&gp.mu);
            break;
        }
        gp.nworkers++;
    }
    return threads;
}

/* Part i of p cut in parts blocks of rows (or columns) of C, at multiples
 * of 16 so that no block but the last has a ragged edge for the kernels. */
static void cut(const gemm_part *p, int by_rows, int parts, int i, gemm_part *out)
{
    int len = by_rows ? p->m : p->n;
    int step = ((len + parts - 1) / parts + 15) / 16 * 16;
    int lo = PD_MIN(len, i * step), hi = PD_MIN(len, lo + step);
    *out = *p;
    if (by_rows) {
        out->m = hi - lo;
        out->a = p->ta ? p->a + lo : p->a + (size_t)lo * p->lda;
        out->c = p->c + (size_t)lo * p->ldc;
    } else {
        out->n = hi - lo;
        out->b = p->tb ? p->b + (size_t)lo * p->ldb : p->b + lo;
        out->c = p->c + lo;
    }
}

static void run_parts(int parts);

static void cpu_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                     const float *b, int ldb, float beta, float *c, int ldc)
{
    if (m == 0 || n == 0) return;
    if ((long)m * n * k <= SMALL_GEMM) {
        small_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    gemm_part whole = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta, .a = a, .b = b,
                       .c = c, .lda = lda, .ldb = ldb, .ldc = ldc};
    pool_init(); /* OpenBLAS single-threaded before its first product */
    if ((long)m * n * k < SPLIT_GEMM || !pool_take()) {
        run_part(&whole);
        return;
    }
    /* cut the larger side of C: each thread packs the whole of the other operand */
    int by_rows = m >= n, len = by_rows ? m : n;
    int parts = PD_MIN(pool_threads(), (len + 15) / 16);
    if (parts < 2) {
        pool_give();
        run_part(&whole);
        return;
    }
    pthread_mutex_lock(&gp.mu);
    for (int i = 0; i < parts; i++) cut(&whole, by_rows, parts, i, &gp.part[i]);
    run_parts(parts);
}

/* Run gp.part[0..parts) (filled under gp.mu, which this unlocks, by the
 * thread that took the pool, which this gives back): each taken by the
 * caller or a worker, whichever comes first (a worker whose core is busy
 * leaves its part to the caller); returns when all are done. */
static void run_parts(int parts)
{
    unsigned long gen = gp.gen + 1;
    __atomic_store_n(&gp.pending, parts, __ATOMIC_RELEASE);
    __atomic_store_n(&gp.claim, CLAIM(gen, parts, 0), __ATOMIC_RELEASE);
    __atomic_store_n(&gp.gen, gen, __ATOMIC_RELEASE);
    /* gen changed under gp.mu, which a worker holds while it checks it
     * before it sleeps: woken after the unlock, it takes gp.mu free */
    pthread_mutex_unlock(&gp.mu);
    pthread_cond_broadcast(&gp.go);
    double t0 = now_ns();
    run_taken(gen);
    /* the parts left are being run: wait about as long as ours took */
    if (!spin_for(&gp.pending, 0, 0, SPIN_NS + (now_ns() - t0))) {
        pthread_mutex_lock(&gp.mu);
        while (__atomic_load_n(&gp.pending, __ATOMIC_ACQUIRE) != 0) pthread_cond_wait(&gp.done, &gp.mu);
        pthread_mutex_unlock(&gp.mu);
    }
    pool_give();
}

/* Slices 0..n of an operation where no slice reads what another writes
 * (an elementwise update, or distinct rows of a table: each element is
 * written by one thread, so the result is the same bit for bit), one
 * slice per thread where split says the work is worth a hand-off, else
 * all here. Only optimizer updates and operations on rows scattered over
 * a large table are cut: they wait on memory, and what they write is not
 * read next by the caller. A gather or a copy of a layer's values is not:
 * what the worker's core wrote, the caller's core reads next, and its
 * lines crossing between the cores cost what the cut saved (the
 * recommender's step was slower with those cut). */
static void run_split(void (*range)(const void *, int, int), const void *args, int n, int split)
{
    if (!split || n < 2 || !pool_take()) {
        range(args, 0, n);
        return;
    }
    int threads = pool_threads();
    if (threads < 2) {
        pool_give();
        range(args, 0, n);
        return;
    }
    int parts = PD_MIN(threads, n);
    pthread_mutex_lock(&gp.mu);
    for (int i = 0; i < parts; i++)
        gp.part[i] = (gemm_part){.range = range, .args = args, .lo = (int)((long)n * i / parts),
                                 .hi = (int)((long)n * (i + 1) / parts)};
    run_parts(parts);
}

/* What the slices of a row operation or an update share (each uses what
 * it needs). */
typedef struct row_args {
    float *dst;
    const float *src;
    const int32_t *ids;
    int dim;
    size_t len; /* a dense update's elements */
    const pd_opt_hyper *h;
    float *s1, *s2;
} row_args;

static void cpu_axpy(size_t n, float alpha, const float *x, float *y)
{
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

static void cpu_scale(size_t n, float alpha, float *x)
{
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

static void cpu_add_bias(float *y, const float *b, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        float *row = y + (size_t)r * cols;
        for (int c = 0; c < cols; c++) row[c] += b[c];
    }
}

static void cpu_bias_grad(float *db, const float *dy, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        const float *row = dy + (size_t)r * cols;
        for (int c = 0; c < cols; c++) db[c] += row[c];
    }
}

static void cpu_act_forward(int act, float *y, const float *x, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    switch (act) {
    case PD_ACT_LINEAR:
        if (y != x) memmove(y, x, n * sizeof *y);
        break;
    case PD_ACT_RELU:
        for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
        break;
    case PD_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++) y[i] = 1.f / (1.f + expf(-x[i]));
        break;
    case PD_ACT_TANH:
        for (size_t i = 0; i < n; i++) y[i] = fast_tanh(x[i]);
        break;
    case PD_ACT_SOFTMAX:
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * cols;
            float *yr = y + (size_t)r * cols;
            float mx = -FLT_MAX, sum = 0;
            for (int c = 0; c < cols; c++) mx = xr[c] > mx ? xr[c] : mx;
            for (int c = 0; c < cols; c++) sum += (yr[c] = expf(xr[c] - mx));
            for (int c = 0; c < cols; c++) yr[c] /= sum;
        }
        break;
    default: PD_ASSERT(!"unknown activation");
    }
}

static void cpu_act_backward(int act, float *dx, const float *y, const float *dy, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    switch (act) {
    case PD_ACT_LINEAR:
        if (dx != dy) memmove(dx, dy, n * sizeof *dx);
        break;
    case PD_ACT_RELU:
        for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0 ? dy[i] : 0;
        break;
    case PD_ACT_SIGMOID:
        for (size_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1 - y[i]);
        break;
    case PD_ACT_TANH:
        for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (1 - y[i] * y[i]);
        break;
    case PD_ACT_SOFTMAX:
        for (int r = 0; r < rows; r++) {
            const float *yr = y + (size_t)r * cols, *dyr = dy + (size_t)r * cols;
            float *dxr = dx + (size_t)r * cols;
            float dot = 0;
            for (int c = 0; c < cols; c++) dot += yr[c] * dyr[c];
            for (int c = 0; c < cols; c++) dxr[c] = yr[c] * (dyr[c] - dot);
        }
        break;
    default: PD_ASSERT(!"unknown activation");
    }
}

/* Rows are done one at a time, so that the bias add, the activation and
 * (backward) the bias gradient read the row while it is in cache. */
static inline __attribute__((always_inline)) void bias_act_rows(int act, float *y, const float *b, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        float *restrict yr = y + (size_t)r * cols;
        switch (act) {
        case PD_ACT_LINEAR:
            for (int c = 0; c < cols; c++) yr[c] += b[c];
            break;
        case PD_ACT_RELU:
            for (int c = 0; c < cols; c++) {
                float v = yr[c] + b[c];
                yr[c] = v > 0 ? v : 0;
            }
            break;
        case PD_ACT_SIGMOID:
            for (int c = 0; c < cols; c++) yr[c] = 1.f / (1.f + expf(-(yr[c] + b[c])));
            break;
        case PD_ACT_TANH:
            for (int c = 0; c < cols; c++) yr[c] = fast_tanh(yr[c] + b[c]);
            break;
        case PD_ACT_SOFTMAX:
            for (int c = 0; c < cols; c++) yr[c] += b[c];
            cpu_act_forward(act, yr, yr, 1, cols);
            break;
        default: PD_ASSERT(!"unknown activation");
        }
    }
}

static void bias_act_portable(int act, float *y, const float *b, int rows, int cols)
{
    bias_act_rows(act, y, b, rows, cols);
}

PD_AVX2 static void bias_act_avx2(int act, float *y, const float *b, int rows, int cols)
{
    bias_act_rows(act, y, b, rows, cols);
}

static void cpu_bias_act_forward(int act, float *y, const float *b, int rows, int cols)
{
    if (!b)
        cpu_act_forward(act, y, y, rows, cols);
    else if (cpu_has_avx2())
        bias_act_avx2(act, y, b, rows, cols);
    else
        bias_act_portable(act, y, b, rows, cols);
}

static inline __attribute__((always_inline)) void act_bias_rows(int act, float *dy, const float *y, float *db,
                                                                int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        float *restrict d = dy + (size_t)r * cols;
        const float *restrict yr = y + (size_t)r * cols;
        float *restrict g = db;
        switch (act) {
        case PD_ACT_LINEAR:
            break;
        case PD_ACT_RELU:
            for (int c = 0; c < cols; c++) d[c] = yr[c] > 0 ? d[c] : 0;
            break;
        case PD_ACT_SIGMOID:
            for (int c = 0; c < cols; c++) d[c] = d[c] * yr[c] * (1 - yr[c]);
            break;
        case PD_ACT_TANH:
            for (int c = 0; c < cols; c++) d[c] = d[c] * (1 - yr[c] * yr[c]);
            break;
        case PD_ACT_SOFTMAX:
            cpu_act_backward(act, d, yr, d, 1, cols);
            break;
        default: PD_ASSERT(!"unknown activation");
        }
        for (int c = 0; c < cols; c++) g[c] += d[c];
    }
}

static void act_bias_portable(int act, float *dy, const float *y, float *db, int rows, int cols)
{
    act_bias_rows(act, dy, y, db, rows, cols);
}

PD_AVX2 static void act_bias_avx2(int act, float *dy, const float *y, float *db, int rows, int cols)
{
    act_bias_rows(act, dy, y, db, rows, cols);
}

static void cpu_act_bias_backward(int act, float *dy, const float *y, float *db, int acc, int rows, int cols)
{
    if (!db) {
        cpu_act_backward(act, dy, y, dy, rows, cols);
        return;
    }
    if (!acc) memset(db, 0, (size_t)cols * sizeof *db);
    if (cpu_has_avx2())
        act_bias_avx2(act, dy, y, db, rows, cols);
    else
        act_bias_portable(act, dy, y, db, rows, cols);
}

static void cpu_gather(float *out, const float *table, const int32_t *ids, int n, int dim)
{
    for (int i = 0; i < n; i++) {
        if (i + PD_AHEAD < n) PD_PREFETCH_ROW(table + (size_t)ids[i + PD_AHEAD] * dim, dim, 0);
        pd_copy_row(out + (size_t)i * dim, table + (size_t)ids[i] * dim, (size_t)dim * sizeof *out);
    }
}

static void cpu_scatter_add(float *g, const float *dout, const int32_t *ids, int n, int dim)
{
    for (int i = 0; i < n; i++) {
        if (i + PD_AHEAD < n) PD_PREFETCH_ROW(g + (size_t)ids[i + PD_AHEAD] * dim, dim, 1);
        float *row = g + (size_t)ids[i] * dim;
        const float *d = dout + (size_t)i * dim;
        for (int c = 0; c < dim; c++) row[c] += d[c];
    }
}

static void cpu_seq_pool_forward(int pool, float *out, const float *in, const int32_t *off, int n,
                                 int dim, int32_t *argmax)
{
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * dim;
        int len = off[i + 1] - off[i];
        if (len == 0) {
            memset(o, 0, (size_t)dim * sizeof *o);
            if (pool == PD_POOL_MAX)
                for (int c = 0; c < dim; c++) argmax[(size_t)i * dim + c] = -1;
            continue;
        }
        const float *first = in + (size_t)off[i] * dim;
        pd_copy_row(o, first, (size_t)dim * sizeof *o);
        if (pool == PD_POOL_MAX)
            for (int c = 0; c < dim; c++) argmax[(size_t)i * dim + c] = off[i];
        for (int r = off[i] + 1; r < off[i + 1]; r++) {
            const float *x = in + (size_t)r * dim;
            if (pool == PD_POOL_MAX) {
                for (int c = 0; c < dim; c++)
                    if (x[c] > o[c]) {
                        o[c] = x[c];
                        argmax[(size_t)i * dim + c] = r;
                    }
            } else {
                for (int c = 0; c < dim; c++) o[c] += x[c];
            }
        }
        if (pool == PD_POOL_AVERAGE)
            for (int c = 0; c < dim; c++) o[c] /= (float)len;
    }
}

static void cpu_seq_pool_backward(int pool, float *din, const float *dout, const int32_t *off, int n,
                                  int dim, const int32_t *argmax, int acc)
{
    for (int i = 0; i < n; i++) {
        const float *d = dout + (size_t)i * dim;
        int len = off[i + 1] - off[i];
        if (len == 0) continue;
        if (pool == PD_POOL_MAX) {
            for (int c = 0; c < dim; c++) {
                int r = argmax[(size_t)i * dim + c];
                if (r >= 0) din[(size_t)r * dim + c] += d[c];
            }
            continue;
        }
        float k = pool == PD_POOL_AVERAGE ? 1.f / (float)len : 1.f;
        for (int r = off[i]; r < off[i + 1]; r++) {
            float *x = din + (size_t)r * dim;
            if (acc)
                for (int c = 0; c < dim; c++) x[c] += k * d[c];
            else
                for (int c = 0; c < dim; c++) x[c] = k * d[c];
        }
    }
}

static void cpu_copy_cols(float *dst, int ldd, const float *src, int lds, int rows, int cols, int acc)
{
    for (int r = 0; r < rows; r++) {
        float *d = dst + (size_t)r * ldd;
        const float *s = src + (size_t)r * lds;
        if (acc)
            for (int c = 0; c < cols; c++) d[c] += s[c];
        else
            pd_copy_row(d, s, (size_t)cols * sizeof *d);
    }
}

#define COS_EPS 1e-8f

static void cpu_cos_sim_forward(float *out, const float *a, const float *b, int rows, int dim, float scale)
{
    for (int r = 0; r < rows; r++) {
        const float *x = a + (size_t)r * dim, *y = b + (size_t)r * dim;
        float xy = 0, xx = 0, yy = 0;
        for (int c = 0; c < dim; c++) {
            xy += x[c] * y[c];
            xx += x[c] * x[c];
            yy += y[c] * y[c];
        }
        out[r] = scale * xy / (sqrtf(xx) * sqrtf(yy) + COS_EPS);
    }
}

static inline __attribute__((always_inline)) void cos_sim_back_rows(float *da, float *db, const float *a,
                                                                    const float *b, const float *dout, int rows,
                                                                    int dim, float scale, int acc_a, int acc_b)
{
    for (int r = 0; r < rows; r++) {
        const float *x = a + (size_t)r * dim, *y = b + (size_t)r * dim;
        float xy = 0, xx = 0, yy = 0;
        for (int c = 0; c < dim; c++) {
            xy += x[c] * y[c];
            xx += x[c] * x[c];
            yy += y[c] * y[c];
        }
        float nx = sqrtf(xx), ny = sqrtf(yy), den = nx * ny + COS_EPS;
        float g = dout[r] * scale;
        /* d/dx [xy / (|x||y| + e)] = y/den - xy * (|y| x / |x|) / den^2 */
        float kx = nx > 0 ? xy * ny / (nx * den * den) : 0;
        float ky = ny > 0 ? xy * nx / (ny * den * den) : 0;
        /* da before db, element by element: they may be one buffer */
        float *ra = da ? da + (size_t)r * dim : NULL, *rb = db ? db + (size_t)r * dim : NULL;
        if (ra && acc_a)
            for (int c = 0; c < dim; c++) ra[c] += g * (y[c] / den - kx * x[c]);
        else if (ra)
            for (int c = 0; c < dim; c++) ra[c] = g * (y[c] / den - kx * x[c]);
        if (rb && acc_b)
            for (int c = 0; c < dim; c++) rb[c] += g * (x[c] / den - ky * y[c]);
        else if (rb)
            for (int c = 0; c < dim; c++) rb[c] = g * (x[c] / den - ky * y[c]);
    }
}

static void cos_sim_back_portable(float *da, float *db, const float *a, const float *b, const float *dout, int rows,
                                  int dim, float scale, int acc_a, int acc_b)
{
    cos_sim_back_rows(da, db, a, b, dout, rows, dim, scale, acc_a, acc_b);
}

/* the sums stay in order (the same bits); the gradients' divisions go 8 wide */
PD_AVX2 static void cos_sim_back_avx2(float *da, float *db, const float *a, const float *b, const float *dout,
                                      int rows, int dim, float scale, int acc_a, int acc_b)
{
    cos_sim_back_rows(da, db, a, b, dout, rows, dim, scale, acc_a, acc_b);
}

static void cpu_cos_sim_backward(float *da, float *db, const float *a, const float *b, const float *out,
                                 const float *dout, int rows, int dim, float scale, int acc_a, int acc_b)
{
    (void)out;
    if (cpu_has_avx2())
        cos_sim_back_avx2(da, db, a, b, dout, rows, dim, scale, acc_a, acc_b);
    else
        cos_sim_back_portable(da, db, a, b, dout, rows, dim, scale, acc_a, acc_b);
}

static void cpu_square_error_forward(float *out, const float *pred, const float *label, int rows, int dim)
{
    for (int r = 0; r < rows; r++) {
        float s = 0;
        for (int c = 0; c < dim; c++) {
            float d = pred[(size_t)r * dim + c] - label[(size_t)r * dim + c];
            s += d * d;
        }
        out[r] = s;
    }
}

static void cpu_square_error_backward(float *dpred, const float *pred, const float *label, int rows, int dim)
{
    float k = 2.f / (float)rows;
    for (size_t i = 0; i < (size_t)rows * dim; i++) dpred[i] += k * (pred[i] - label[i]);
}

static void cpu_sigmoid_xent_forward(float *out, const float *x, const float *y, int rows, int dim)
{
    for (int r = 0; r < rows; r++) {
        float s = 0;
        for (int c = 0; c < dim; c++) {
            float v = x[(size_t)r * dim + c];
            s += fmaxf(v, 0.f) - v * y[(size_t)r * dim + c] + log1pf(expf(-fabsf(v)));
        }
        out[r] = s;
    }
}

static void cpu_sigmoid_xent_backward(float *dx, const float *x, const float *y, int rows, int dim)
{
    float k = 1.f / (float)rows;
    for (size_t i = 0; i < (size_t)rows * dim; i++) {
        /* sigmoid without overflow: exp of a non-positive number only */
        float e = expf(-fabsf(x[i])), p = x[i] >= 0 ? 1.f / (1.f + e) : e / (1.f + e);
        dx[i] += k * (p - y[i]);
    }
}

#define PROB_EPS 1e-20f

static void cpu_cross_entropy_forward(float *out, const float *prob, const int32_t *label, int rows, int k)
{
    for (int r = 0; r < rows; r++) out[r] = -logf(prob[(size_t)r * k + label[r]] + PROB_EPS);
}

static void cpu_cross_entropy_backward(float *dprob, const float *prob, const int32_t *label, int rows, int k)
{
    for (int r = 0; r < rows; r++) {
        size_t i = (size_t)r * k + label[r];
        dprob[i] += -1.f / ((prob[i] + PROB_EPS) * (float)rows);
    }
}

static void cpu_softmax_xent_forward(float *out, float *prob, const float *logits, const int32_t *label,
                                     int rows, int k)
{
    cpu_act_forward(PD_ACT_SOFTMAX, prob, logits, rows, k);
    for (int r = 0; r < rows; r++) {
        const float *x = logits + (size_t)r * k;
        float mx = -FLT_MAX, sum = 0;
        for (int c = 0; c < k; c++) mx = x[c] > mx ? x[c] : mx;
        for (int c = 0; c < k; c++) sum += expf(x[c] - mx);
        out[r] = logf(sum) + mx - x[label[r]];
    }
}

static void cpu_softmax_xent_backward(float *dlogits, const float *prob, const int32_t *label, int rows, int k)
{
    float inv = 1.f / (float)rows;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < k; c++) {
            size_t i = (size_t)r * k + c;
            dlogits[i] += inv * (prob[i] - (c == label[r] ? 1.f : 0.f));
        }
}

static void cpu_class_error(float *out, const float *pred, const int32_t *label, int rows, int k)
{
    for (int r = 0; r < rows; r++) {
        const float *p = pred + (size_t)r * k;
        int best = 0;
        for (int c = 1; c < k; c++)
            if (p[c] > p[best]) best = c;
        out[r] = best != label[r];
    }
}

/* set_rows, zero_rows and opt_update_rows get distinct ids (backend.h):
 * their rows are cut among threads as they come. */
static void set_rows_range(const void *args, int lo, int hi)
{
    const row_args *a = args;
    const int32_t *ids = a->ids;
    int dim = a->dim;
    for (int i = lo; i < hi; i++) {
        if (i + PD_AHEAD < hi) PD_PREFETCH_ROW(a->dst + (size_t)ids[i + PD_AHEAD] * dim, dim, 1);
        pd_copy_row(a->dst + (size_t)ids[i] * dim, a->src + (size_t)i * dim, (size_t)dim * sizeof *a->src);
    }
}

static void cpu_set_rows(float *table, const float *src, const int32_t *ids, int n, int dim)
{
    row_args a = {.dst = table, .src = src, .ids = ids, .dim = dim};
    run_split(set_rows_range, &a, n, (long)n * dim >= SPLIT_ROWS);
}

static void zero_rows_range(const void *args, int lo, int hi)
{
    const row_args *a = args;
    for (int i = lo; i < hi; i++) memset(a->dst + (size_t)a->ids[i] * a->dim, 0, (size_t)a->dim * sizeof *a->dst);
}

static void cpu_zero_rows(float *table, const int32_t *ids, int n, int dim)
{
    row_args a = {.dst = table, .ids = ids, .dim = dim};
    run_split(zero_rows_range, &a, n, (long)n * dim >= SPLIT_ROWS);
}

static void opt_update_serial(const pd_opt_hyper *h, float *w, const float *g, float *s1, float *s2, size_t n);

/* Row by row, the rows PD_AHEAD further on fetched meanwhile (they are
 * scattered over a table larger than the caches). */
static void opt_update_rows_range(const void *args, int lo, int hi)
{
    const row_args *a = args;
    const pd_opt_hyper *h = a->h;
    float *w = a->dst, *s1 = a->s1, *s2 = a->s2;
    const float *g = a->src;
    const int32_t *ids = a->ids;
    int dim = a->dim;
    for (int k = lo; k < hi; k++) {
        size_t off = (size_t)ids[k] * dim;
        if (k + PD_AHEAD < hi) {
            size_t ahead = (size_t)ids[k + PD_AHEAD] * dim;
            PD_PREFETCH_ROW(w + ahead, dim, 1);
            PD_PREFETCH_ROW(g + ahead, dim, 0);
            if (s1) PD_PREFETCH_ROW(s1 + ahead, dim, 1);
            if (s2) PD_PREFETCH_ROW(s2 + ahead, dim, 1);
        }
        /* not cpu_opt_update: a slice must not cut its work again */
        opt_update_serial(h, w + off, g + off, s1 ? s1 + off : NULL, s2 ? s2 + off : NULL, (size_t)dim);
    }
}

static void cpu_opt_update_rows(const pd_opt_hyper *h, float *w, const float *g, float *s1, float *s2,
                                const int32_t *ids, int n, int dim)
{
    row_args a = {.dst = w, .src = g, .ids = ids, .dim = dim, .h = h, .s1 = s1, .s2 = s2};
    run_split(opt_update_rows_range, &a, n, (long)n * dim >= SPLIT_ROWS);
}

/* Blocks lo..hi of 16 elements of a dense update (the last one short). */
static void opt_update_blocks(const void *args, int lo, int hi)
{
    const row_args *a = args;
    size_t from = (size_t)lo * 16, to = PD_MIN((size_t)hi * 16, a->len);
    opt_update_serial(a->h, a->dst + from, a->src + from, a->s1 ? a->s1 + from : NULL,
                      a->s2 ? a->s2 + from : NULL, to - from);
}

/* A large update is cut in slices (at multiples of 16 elements) run on the
 * product threads. */
static void cpu_opt_update(const pd_opt_hyper *h, float *w, const float *g, float *s1, float *s2, size_t n)
{
    if ((long)n < SPLIT_OPT || (n + 15) / 16 > INT_MAX) {
        opt_update_serial(h, w, g, s1, s2, n);
        return;
    }
    row_args a = {.dst = w, .src = g, .len = n, .h = h, .s1 = s1, .s2 = s2};
    run_split(opt_update_blocks, &a, (int)((n + 15) / 16), 1);
}

/* Adam's loop, on its own with every hyper-parameter in a local and no
 * aliasing, so that the compiler vectorizes it (cpu.o is built with
 * -fno-math-errno: sqrtf needs no call to set errno). Each element is
 * computed as the plain loop computes it. */
static inline __attribute__((always_inline)) void adam_loop(float lr_t, float b1, float b2, float eps, float wd,
                                                            float *restrict w, const float *restrict g,
                                                            float *restrict s1, float *restrict s2, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        float m = b1 * s1[i] + (1 - b1) * gi;
        float v = b2 * s2[i] + (1 - b2) * gi * gi;
        s1[i] = m;
        s2[i] = v;
        w[i] -= lr_t * m / (sqrtf(v) + eps);
    }
}

static void adam_portable(float lr_t, float b1, float b2, float eps, float wd, float *restrict w,
                          const float *restrict g, float *restrict s1, float *restrict s2, size_t n)
{
    adam_loop(lr_t, b1, b2, eps, wd, w, g, s1, s2, n);
}

/* The same loop 8 floats wide where the CPU has AVX2: its square roots and
 * divisions are most of Adam's time, and they take as long for 8 floats as
 * for 4 (unit test opt_adam_is_the_plain_loop_bit_for_bit). */
PD_AVX2 static void adam_avx2(float lr_t, float b1, float b2, float eps, float wd, float *restrict w,
                              const float *restrict g, float *restrict s1, float *restrict s2, size_t n)
{
    adam_loop(lr_t, b1, b2, eps, wd, w, g, s1, s2, n);
}

static void adam(float lr_t, float b1, float b2, float eps, float wd, float *restrict w, const float *restrict g,
                 float *restrict s1, float *restrict s2, size_t n)
{
    if (cpu_has_avx2())
        adam_avx2(lr_t, b1, b2, eps, wd, w, g, s1, s2, n);
    else
        adam_portable(lr_t, b1, b2, eps, wd, w, g, s1, s2, n);
}

static void opt_update_serial(const pd_opt_hyper *h, float *w, const float *g, float *s1, float *s2, size_t n)
{
    const float lr = h->lr, wd = h->weight_decay;
    switch (h->type) {
    case PD_OPT_SGD:
        for (size_t i = 0; i < n; i++) w[i] -= lr * (g[i] + wd * w[i]);
        break;
    case PD_OPT_MOMENTUM:
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            s1[i] = h->momentum * s1[i] + gi;
            w[i] -= lr * (h->nesterov ? gi + h->momentum * s1[i] : s1[i]);
        }
        break;
    case PD_OPT_ADAGRAD:
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            s1[i] += gi * gi;
            w[i] -= lr * gi / (sqrtf(s1[i]) + h->epsilon);
        }
        break;
    case PD_OPT_ADAM: {
        /* the bias correction depends on the step only: cached across the
         * calls of one step (sparse tables call once per row) */
        static _Thread_local double c_lr, c_b1, c_b2;
        static _Thread_local long c_t = -1;
        static _Thread_local float c_val;
        if (c_t != h->t || c_lr != lr || c_b1 != h->beta1 || c_b2 != h->beta2) {
            double t = (double)h->t;
            c_val = (float)(lr * sqrt(1 - pow(h->beta2, t)) / (1 - pow(h->beta1, t)));
            c_t = h->t;
            c_lr = lr;
            c_b1 = h->beta1;
            c_b2 = h->beta2;
        }
        adam(c_val, h->beta1, h->beta2, h->epsilon, wd, w, g, s1, s2, n);
        break;
    }
    case PD_OPT_RMSPROP:
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * w[i];
            s1[i] = h->rho * s1[i] + (1 - h->rho) * gi * gi;
            float step = lr * gi / sqrtf(s1[i] + h->epsilon);
            if (s2) {
                s2[i] = h->momentum * s2[i] + step;
                w[i] -= s2[i];
            } else {
                w[i] -= step;
            }
        }
        break;
    default: PD_ASSERT(!"unknown optimizer");
    }
}

int pd_opt_state_floats(int type)
{
    switch (type) {
    case PD_OPT_SGD: return 0;
    case PD_OPT_MOMENTUM: return 1;
    case PD_OPT_ADAGRAD: return 1;
    case PD_OPT_ADAM: return 2;
    case PD_OPT_RMSPROP: return 2;
    }
    return 0;
}

const char *pd_blas_version(void)
{
    static char buf[128];
    /* "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64" */
    snprintf(buf, sizeof buf, "%s", openblas_get_config());
    return buf;
}

const char *pd_blas_core(void) { return openblas_get_corename(); }
/* Threads for the products, set before training (the recipe's threads). */
void pd_blas_threads(int n)
{
    pthread_mutex_lock(&gp.mu);
    gp.nthreads = PD_MAX(1, PD_MIN(n, MAX_THREADS));
    pthread_mutex_unlock(&gp.mu);
    openblas_single();
}

/* (the count OpenBLAS would have used is kept for the products) */
void pd_blas_quiet(void) { pd_blas_threads(pd_blas_threads_get()); }

int pd_blas_threads_get(void)
{
    pthread_mutex_lock(&gp.mu);
    int n = gp.nthreads ? gp.nthreads : openblas_get_num_threads();
    pthread_mutex_unlock(&gp.mu);
    return PD_MAX(1, PD_MIN(n, MAX_THREADS));
}

const pd_backend pd_backend_cpu = {
    .name = "cpu",
    .host_memory = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .gemm = cpu_gemm,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .add_bias = cpu_add_bias,
    .bias_grad = cpu_bias_grad,
    .act_forward = cpu_act_forward,
    .act_backward = cpu_act_backward,
    .bias_act_forward = cpu_bias_act_forward,
    .act_bias_backward = cpu_act_bias_backward,
    .gather = cpu_gather,
    .scatter_add = cpu_scatter_add,
    .set_rows = cpu_set_rows,
    .zero_rows = cpu_zero_rows,
    .seq_pool_forward = cpu_seq_pool_forward,
    .seq_pool_backward = cpu_seq_pool_backward,
    .copy_cols = cpu_copy_cols,
    .cos_sim_forward = cpu_cos_sim_forward,
    .cos_sim_backward = cpu_cos_sim_backward,
    .square_error_forward = cpu_square_error_forward,
    .square_error_backward = cpu_square_error_backward,
    .cross_entropy_forward = cpu_cross_entropy_forward,
    .cross_entropy_backward = cpu_cross_entropy_backward,
    .softmax_xent_forward = cpu_softmax_xent_forward,
    .softmax_xent_backward = cpu_softmax_xent_backward,
    .sigmoid_xent_forward = cpu_sigmoid_xent_forward,
    .sigmoid_xent_backward = cpu_sigmoid_xent_backward,
    .class_error = cpu_class_error,
    .opt_update = cpu_opt_update,
    .opt_update_rows = cpu_opt_update_rows,
};
