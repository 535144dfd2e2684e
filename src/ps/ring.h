/*
 * ring.h - shared memory between a trainer and a pserver of one host: two
 * rings in one sealed memfd, one each way (docs/protocol.md, "Shared
 * memory"). A large payload is written into the sender's ring and only a
 * small RING_FRAME reference goes through the Unix socket, in the stream's
 * order; the reader copies the payload out and says how far it read.
 *
 *     pd_rings r;
 *     int fd = pd_rings_create(&r, PD_RING_SIZE);      // the trainer; fd passed over the socket
 *     pd_rings_map(&r, fd, PD_RING_SIZE);              // the pserver, with the fd it was passed
 *     uint64_t start;
 *     uint8_t *p = pd_ring_room(&r.tx, n, 0, &start);  // NULL: full, send through the socket
 *     pd_ring_copy(p, payload, n);
 *     pd_ring_wrote(&r.tx, start, n);                   // then the reference, through the socket
 *     const uint8_t *q = pd_ring_at(&r.rx, start, n);  // the reader, from the reference: NULL if out of bounds
 *     memcpy(dst, q, n);
 *     pd_ring_read(&r.rx, start, n);
 *     pd_rings_free(&r);
 */
#ifndef PD_RING_H
#define PD_RING_H
#include <stddef.h>
#include <stdint.h>

/* Bytes of each ring (the recommender's step is 380 KB each way), and the
 * smallest payload worth one (smaller ones ride the socket with the
 * others in one write). */
#define PD_RING_SIZE (1u << 20)
#define PD_RING_MIN 4096

typedef struct pd_ring {
    uint8_t *data;
    uint64_t *done;     /* in the shared page: how far the reader read */
    size_t size;
    uint64_t pos;       /* writer: bytes written; reader: bytes read */
} pd_ring;

typedef struct pd_rings {
    void *map;
    size_t map_len;
    pd_ring tx, rx;
} pd_rings;

/* The creator's side (the trainer): a sealed memfd holding two rings of
 * size bytes, mapped. The fd (the caller passes it to the peer and closes
 * it), or < 0 (message set: no shared memory here). */
int pd_rings_create(pd_rings *r, size_t size);
/* The other side (the pserver): map the memfd fd a peer passed, once it is
 * checked to be a memfd sealed against shrinking, of exactly the size two
 * rings of size take (nothing the peer does later can make a read of the
 * map fault). 0, or < 0 (message set). The caller closes fd. */
int pd_rings_map(pd_rings *r, int fd, size_t size);
void pd_rings_free(pd_rings *r);
/* Room for n contiguous bytes in the writer's ring: where to write them
 * (starting at *start), or NULL when the reader has not read enough yet
 * (or says nonsense about how far it read). The payload's byte line_at
 * falls on the start of a cache line (PD_RING_LINE bytes): where the
 * rows or values of a payload begin, after its ids. */
#define PD_RING_LINE 64
uint8_t *pd_ring_room(pd_ring *t, size_t n, size_t line_at, uint64_t *start);
/* Copy n bytes into the ring: where dst and n are whole 16-byte units,
 * with stores that do not read the lines first (the reader's core holds
 * them, from reading the ring's last round: a plain store waits for each
 * line to come over, 4 times as long for rows gathered into the ring
 * here); otherwise a plain copy. */
void pd_ring_copy(void *dst, const void *src, size_t n);
/* Written: the stores above are made visible before the reference to them
 * goes out. */
void pd_ring_wrote(pd_ring *t, uint64_t start, size_t n);
/* The n bytes at start a reference names, checked to lie within the ring
 * and after what was read; NULL (message set) otherwise. */
const uint8_t *pd_ring_at(const pd_ring *r, uint64_t start, size_t n);
/* Tell the writer that everything up to start + n is read. */
void pd_ring_read(pd_ring *r, uint64_t start, size_t n);
#endif
