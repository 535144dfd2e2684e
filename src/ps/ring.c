/* ring.c - the shared-memory rings between roles on one host. */
#include "ring.h"
#include "../core/pd.h"

#include <errno.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The memfd: a page of counters (how far each ring was read, a cache line
 * apart), then the ring the creator writes, then the one it reads. */
#define COUNTERS 4096

static size_t map_len(size_t size)
{
    return COUNTERS + 2 * size;
}

static int bad_size(size_t size)
{
    return size < COUNTERS || size > (64u << 20) || size % COUNTERS;
}

static void attach(pd_rings *r, void *map, size_t size, int creator)
{
    uint8_t *m = map;
    pd_ring a = {m + COUNTERS, (uint64_t *)m, size, 0};
    pd_ring b = {m + COUNTERS + size, (uint64_t *)(m + 64), size, 0};
    r->map = map;
    r->map_len = map_len(size);
    r->tx = creator ? a : b;
    r->rx = creator ? b : a;
}

int pd_rings_create(pd_rings *r, size_t size)
{
    memset(r, 0, sizeof *r);
    if (bad_size(size)) return pd_err_set(PD_EINVAL, "a ring of %zu bytes", size);
    int fd = memfd_create("paddle-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return pd_err_set(PD_EIO, "memfd_create: %s", strerror(errno));
    void *m = MAP_FAILED;
    if (ftruncate(fd, (off_t)map_len(size)) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        m = mmap(NULL, map_len(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        close(fd);
        return pd_err_set(PD_EIO, "shared memory of %zu bytes: %s", map_len(size), strerror(e));
    }
    attach(r, m, size, 1);
    return fd;
}

int pd_rings_map(pd_rings *r, int fd, size_t size)
{
    memset(r, 0, sizeof *r);
    if (bad_size(size)) return pd_err_set(PD_EINVAL, "rings of %zu bytes offered", size);
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != map_len(size))
        return pd_err_set(PD_EPROTO, "the descriptor offered is not a memory file of %zu bytes", map_len(size));
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK) || !(seals & F_SEAL_SEAL))
        return pd_err_set(PD_EPROTO, "the memory file offered is not sealed against shrinking");
    void *m = mmap(NULL, map_len(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return pd_err_set(PD_EIO, "mapping the memory file offered: %s", strerror(errno));
    attach(r, m, size, 0);
    return 0;
}

void pd_rings_free(pd_rings *r)
{
    if (r->map) munmap(r->map, r->map_len);
    memset(r, 0, sizeof *r);
}

uint8_t *pd_ring_room(pd_ring *t, size_t n, size_t line_at, uint64_t *start)
{
    uint64_t done = __atomic_load_n(t->done, __ATOMIC_ACQUIRE);
    if (n > t->size || done > t->pos || t->pos - done > t->size) return NULL;
    /* the smallest start at or after pos that puts byte line_at on a line's
     * start (the ring's size is a whole number of lines) */
    uint64_t s = t->pos + (PD_RING_LINE - (t->pos + line_at) % PD_RING_LINE) % PD_RING_LINE;
    size_t off = (size_t)(s % t->size);
    if (off + n > t->size) /* no payload wraps: the ring's start, moved on as far */
        s += t->size - off + (PD_RING_LINE - line_at % PD_RING_LINE) % PD_RING_LINE;
    if (s % t->size + n > t->size || s + n - done > t->size) return NULL;
    *start = s;
    return t->data + s % t->size;
}

void pd_ring_copy(void *dst, const void *src, size_t n)
{
#ifdef __SSE2__
    if ((uintptr_t)dst % 16 == 0 && n % 16 == 0) {
        __m128i *d = dst;
        const __m128i *s = src;
        for (size_t i = 0; i < n / 16; i++) _mm_stream_si128(d + i, _mm_loadu_si128(s + i));
        return;
    }
#endif
    pd_copy_row(dst, src, n);
}

void pd_ring_wrote(pd_ring *t, uint64_t start, size_t n)
{
#ifdef __SSE2__
    _mm_sfence();
#endif
    t->pos = start + n;
}

const uint8_t *pd_ring_at(const pd_ring *r, uint64_t start, size_t n)
{
    if (start < r->pos || start - r->pos >= r->size || n > r->size || start % r->size + n > r->size) {
        pd_err_set(PD_EPROTO, "a RING_FRAME of %zu bytes at %llu: outside the ring (read up to %llu, %zu bytes)", n,
                   (unsigned long long)start, (unsigned long long)r->pos, r->size);
        return NULL;
    }
    return r->data + start % r->size;
}

void pd_ring_read(pd_ring *r, uint64_t start, size_t n)
{
    r->pos = start + n;
    __atomic_store_n(r->done, r->pos, __ATOMIC_RELEASE);
}
