/*
 * cuda_emu.h - just enough of CUDA and cuBLAS, on the CPU, to run the
 * kernels of cuda.cu on a machine without a GPU. Test use only: cuda.cu
 * compiled with g++ -DPD_CUDA_EMU includes this instead of the CUDA
 * headers (`make cuda-emu-check`, docs/cuda.md).
 *
 * What it checks that a plain CPU port would not:
 *
 *   - Every thread of a launch runs as its own fiber (ucontext) with the
 *     grid and block geometry of the launch, so kernels' index arithmetic
 *     and grid-stride loops run as written.
 *   - __shfl_xor_sync waits for every lane of the warp, as on a GPU, and
 *     fails loudly if a lane of the mask exited or is missing (divergence
 *     the hardware would not forgive).
 *   - "Device" memory is heap memory recorded in a table: every pointer a
 *     kernel or cuBLAS call receives, and every cudaMemcpy side, must lie in
 *     device memory (or, for the host side of a copy, outside it), so a host
 *     pointer handed to a device op is caught. Built with ASan, kernels'
 *     out-of-bounds accesses are caught too, and device memory stays
 *     poisoned except inside the calls above: host code (built with ASan)
 *     that reads or writes device memory directly, which would crash on a
 *     GPU, is reported as a use-after-poison.
 *   - cublasSgemm/Sgemv are column-major reference loops that refuse the
 *     leading dimensions cuBLAS refuses, so the row-major trick of cu_gemm
 *     is checked, not assumed.
 *
 * It does not model timing, memory coalescing, or races between threads
 * (fibers run one at a time), and the result of atomicAdd is exact.
 */
#ifndef PD_CUDA_EMU_H
#define PD_CUDA_EMU_H

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <type_traits>
#include <ucontext.h>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

static dim3 threadIdx, blockIdx, blockDim, gridDim;

#include <cstdarg>

static void emu_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void emu_die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "cuda emulation: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    abort();
}

/* --- runtime API ------------------------------------------------------------ */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
} cudaError_t;

enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
typedef void *cudaStream_t;

struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
};

static cudaError_t emu_last = cudaSuccess;

static const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    }
    return "unknown error";
}

static const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    }
    return "cudaErrorUnknown";
}

static cudaError_t cudaGetLastError(void)
{
    cudaError_t e = emu_last;
    emu_last = cudaSuccess;
    return e;
}

/* device allocations: start -> size */
static std::map<const char *, size_t> emu_mem;

static bool emu_is_device(const void *p, size_t n = 1)
{
    const char *c = (const char *)p;
    auto it = emu_mem.upper_bound(c);
    if (it == emu_mem.begin()) return false;
    --it;
    return c >= it->first && c + n <= it->first + it->second;
}

/* Open device memory to the code of a device call (open = true), or close
 * it to host code again (ASan builds; no-op otherwise). */
static void emu_guard(bool open)
{
#if EMU_ASAN
    for (auto &m : emu_mem) {
        if (open)
            ASAN_UNPOISON_MEMORY_REGION(m.first, m.second);
        else
            ASAN_POISON_MEMORY_REGION(m.first, m.second);
    }
#else
    (void)open;
#endif
}

static cudaError_t cudaMalloc(void **p, size_t n)
{
    if (getenv("PD_CUDA_EMU_OOM")) return emu_last = cudaErrorMemoryAllocation;
    *p = malloc(n);
    if (!*p) return emu_last = cudaErrorMemoryAllocation;
    memset(*p, 0xA5, n); /* not zero: code that forgets to zero shows */
    emu_mem[(const char *)*p] = n;
    emu_guard(false);
    return cudaSuccess;
}

static cudaError_t cudaFree(void *p)
{
    if (!p) return cudaSuccess;
    auto it = emu_mem.find((const char *)p);
    if (it == emu_mem.end()) emu_die("cudaFree of %p: not the start of a device allocation", p);
    emu_guard(true);
    emu_mem.erase(it);
    free(p);
    emu_guard(false);
    return cudaSuccess;
}

static cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    bool dd = emu_is_device(dst, n), sd = emu_is_device(src, n);
    bool want_dd = kind != cudaMemcpyDeviceToHost, want_sd = kind != cudaMemcpyHostToDevice;
    if (dd != want_dd || sd != want_sd)
        emu_die("cudaMemcpy: %s, but the pointers say otherwise (or a range ends outside its allocation)",
                kind == cudaMemcpyHostToDevice   ? "host to device"
                : kind == cudaMemcpyDeviceToHost ? "device to host"
                                                 : "device to device");
    emu_guard(true);
    memmove(dst, src, n);
    emu_guard(false);
    return cudaSuccess;
}

static cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t)
{
    return cudaMemcpy(dst, src, n, kind);
}

static cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t)
{
    if (!emu_is_device(p, n)) emu_die("cudaMemsetAsync on %p: not device memory", p);
    emu_guard(true);
    memset(p, v, n);
    emu_guard(false);
    return cudaSuccess;
}

static cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
static cudaError_t cudaSetDevice(int) { return cudaSuccess; }
static cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
static cudaError_t cudaRuntimeGetVersion(int *v) { *v = 0; return cudaSuccess; }
static cudaError_t cudaDriverGetVersion(int *v) { *v = 0; return cudaSuccess; }

static cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "CPU emulation");
    p->totalGlobalMem = (size_t)1 << 30;
    return cudaSuccess;
}

/* --- threads, warps and launches -------------------------------------------------- */

enum { EMU_READY, EMU_SHFL, EMU_DONE };
#define EMU_STACK (256 * 1024)

struct emu_thread {
    ucontext_t ctx;
    char *stack;
    int state;
    unsigned mask;
    int lane_mask, size;
    unsigned long long val, result;
    void *fake; /* ASan's fake stack while switched out */
};

static struct {
    std::vector<emu_thread> th;
    ucontext_t sched;
    emu_thread *cur;
    const std::function<void()> *body;
    const void *sched_bottom; /* ASan: the scheduler's stack */
    size_t sched_size;
} E;

static void emu_switch_in(emu_thread *t)
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(t->fake, &E.sched_bottom, &E.sched_size);
#else
    (void)t;
#endif
}

static void emu_switch_out(emu_thread *t, bool done)
{
#if EMU_ASAN
    __sanitizer_start_switch_fiber(done ? NULL : &t->fake, E.sched_bottom, E.sched_size);
#else
    (void)done;
#endif
    swapcontext(&t->ctx, &E.sched);
}

static void emu_entry(void)
{
    emu_thread *t = E.cur;
    t->fake = NULL;
    emu_switch_in(t);
    (*E.body)();
    t->state = EMU_DONE;
    emu_switch_out(t, true);
}

template <class T> static T __shfl_xor_sync(unsigned mask, T v, int lane_mask)
{
    static_assert(sizeof(T) <= sizeof(unsigned long long), "shuffle of a large type");
    emu_thread *t = E.cur;
    t->val = 0;
    memcpy(&t->val, &v, sizeof v);
    t->mask = mask;
    t->lane_mask = lane_mask;
    t->size = (int)sizeof v;
    t->state = EMU_SHFL;
    emu_switch_out(t, false);
    emu_switch_in(t);
    T r;
    memcpy(&r, &t->result, sizeof r);
    return r;
}

static float atomicAdd(float *p, float v)
{
    float old = *p;
    *p += v;
    return old;
}

static void emu_resume(unsigned t, const dim3 &b)
{
    E.cur = &E.th[t];
    threadIdx = dim3(t % b.x, t / b.x % b.y, t / (b.x * b.y));
#if EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, E.cur->stack, EMU_STACK);
    swapcontext(&E.sched, &E.cur->ctx);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#else
    swapcontext(&E.sched, &E.cur->ctx);
#endif
}

/* Lanes [w*32, w*32+32) of a block of nt threads: when all that are left
 * wait in a shuffle, exchange. Returns whether it released any. */
static bool emu_warp(unsigned w, unsigned nt, const char *kernel)
{
    unsigned lo = w * 32, hi = lo + 32 < nt ? lo + 32 : nt;
    int waiting = 0, done = 0;
    for (unsigned t = lo; t < hi; t++) {
        if (E.th[t].state == EMU_READY) return false;
        waiting += E.th[t].state == EMU_SHFL;
        done += E.th[t].state == EMU_DONE;
    }
    if (!waiting) return false;
    if (done || hi - lo < 32)
        emu_die("kernel %s: a warp shuffle while %d lanes of the warp have exited or do not exist", kernel,
                done + 32 - (int)(hi - lo));
    for (unsigned t = lo; t < hi; t++) {
        const emu_thread &a = E.th[t], &z = E.th[lo];
        if (a.mask != 0xffffffffu || a.lane_mask != z.lane_mask || a.size != z.size)
            emu_die("kernel %s: lanes of a warp disagree on a shuffle (lane %u)", kernel, t - lo);
    }
    for (unsigned t = lo; t < hi; t++) {
        unsigned src = lo + (((t - lo) ^ (unsigned)E.th[t].lane_mask) & 31);
        E.th[t].result = E.th[src].val;
    }
    for (unsigned t = lo; t < hi; t++) E.th[t].state = EMU_READY;
    return true;
}

static void emu_run(const char *kernel, dim3 g, dim3 b, const std::function<void()> &body)
{
    unsigned nt = b.x * b.y * b.z;
    if (nt == 0 || nt > 1024 || g.x == 0 || g.y == 0 || g.z == 0 || b.z > 64) {
        emu_last = cudaErrorInvalidConfiguration;
        return;
    }
    while (E.th.size() < nt) {
        emu_thread t{};
        t.stack = (char *)malloc(EMU_STACK);
        E.th.push_back(t);
    }
    gridDim = g;
    blockDim = b;
    E.body = &body;
    for (unsigned bz = 0; bz < g.z; bz++)
        for (unsigned by = 0; by < g.y; by++)
            for (unsigned bx = 0; bx < g.x; bx++) {
                blockIdx = dim3(bx, by, bz);
                for (unsigned t = 0; t < nt; t++) {
                    emu_thread *th = &E.th[t];
                    th->state = EMU_READY;
                    getcontext(&th->ctx);
                    th->ctx.uc_stack.ss_sp = th->stack;
                    th->ctx.uc_stack.ss_size = EMU_STACK;
                    th->ctx.uc_link = NULL;
                    makecontext(&th->ctx, emu_entry, 0);
                }
                for (;;) {
                    bool progress = false, alive = false;
                    for (unsigned t = 0; t < nt; t++)
                        if (E.th[t].state == EMU_READY) {
                            emu_resume(t, b);
                            progress = true;
                        }
                    for (unsigned w = 0; w * 32 < nt; w++) progress |= emu_warp(w, nt, kernel);
                    for (unsigned t = 0; t < nt; t++) alive |= E.th[t].state != EMU_DONE;
                    if (!alive) break;
                    if (!progress) emu_die("kernel %s: threads wait forever", kernel);
                }
            }
}

template <class A> static void emu_check_arg(const char *kernel, A a)
{
    if constexpr (std::is_pointer<A>::value)
        if (a && !emu_is_device(a)) emu_die("kernel %s: a pointer argument is not device memory", kernel);
}

template <class K, class... A> static void emu_launch(const char *kernel, dim3 g, dim3 b, K k, A... a)
{
    (emu_check_arg(kernel, a), ...);
    std::function<void()> body = [&] { k(a...); };
    emu_guard(true);
    emu_run(kernel, g, b, body);
    emu_guard(false);
}

/* --- cuBLAS ---------------------------------------------------------------------------- */

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0 } cublasMath_t;
typedef enum { MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL } libraryPropertyType;
typedef int cublasHandle_t;

static cublasStatus_t cublasCreate(cublasHandle_t *h) { *h = 1; return CUBLAS_STATUS_SUCCESS; }
static cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
static cublasStatus_t cublasGetProperty(libraryPropertyType, int *v) { *v = 0; return CUBLAS_STATUS_SUCCESS; }

static const char *cublasGetStatusString(cublasStatus_t s)
{
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}

static int emu_max1(int a) { return a > 1 ? a : 1; }

/* Column-major C = alpha op(A) op(B) + beta C, C m x n, op(A) m x k. */
static cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float *alpha, const float *a, int lda, const float *b, int ldb,
                                  const float *beta, float *c, int ldc)
{
    if (m < 0 || n < 0 || k < 0 || lda < emu_max1(ta == CUBLAS_OP_N ? m : k) ||
        ldb < emu_max1(tb == CUBLAS_OP_N ? k : n) || ldc < emu_max1(m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (!emu_is_device(c + (size_t)(n - 1) * ldc + m - 1) || !emu_is_device(c) ||
        (k > 0 && (!emu_is_device(a) || !emu_is_device(b))))
        emu_die("cublasSgemm: %s is not device memory", "an operand");
    emu_guard(true);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                float x = ta == CUBLAS_OP_N ? a[i + (size_t)l * lda] : a[l + (size_t)i * lda];
                float y = tb == CUBLAS_OP_N ? b[l + (size_t)j * ldb] : b[j + (size_t)l * ldb];
                s += (double)x * y;
            }
            float *o = &c[i + (size_t)j * ldc];
            *o = (float)(*alpha * s + (*beta == 0 ? 0.0 : (double)*beta * *o));
        }
    emu_guard(false);
    return CUBLAS_STATUS_SUCCESS;
}

/* Column-major y = alpha op(A) x + beta y, A m x n. */
static cublasStatus_t cublasSgemv(cublasHandle_t, cublasOperation_t t, int m, int n, const float *alpha,
                                  const float *a, int lda, const float *x, int incx, const float *beta, float *y,
                                  int incy)
{
    if (m < 0 || n < 0 || lda < emu_max1(m) || incx == 0 || incy == 0) return CUBLAS_STATUS_INVALID_VALUE;
    int ny = t == CUBLAS_OP_N ? m : n, nx = t == CUBLAS_OP_N ? n : m;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (!emu_is_device(a) || !emu_is_device(x) || !emu_is_device(y) || !emu_is_device(x + (size_t)(nx - 1) * incx) ||
        !emu_is_device(y + (size_t)(ny - 1) * incy))
        emu_die("cublasSgemv: %s is not device memory", "an operand");
    emu_guard(true);
    for (int i = 0; i < ny; i++) {
        double s = 0;
        for (int l = 0; l < nx; l++) {
            float v = t == CUBLAS_OP_N ? a[i + (size_t)l * lda] : a[l + (size_t)i * lda];
            s += (double)v * x[(size_t)l * incx];
        }
        float *o = &y[(size_t)i * incy];
        *o = (float)(*alpha * s + (*beta == 0 ? 0.0 : (double)*beta * *o));
    }
    emu_guard(false);
    return CUBLAS_STATUS_SUCCESS;
}

#endif
