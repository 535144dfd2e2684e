/* test_ring.c - the shared-memory rings between roles on one host: payloads
 * come out whole and in the stream's order, through the ring or the socket
 * as room allows; a peer cannot make the reader go outside the map, nor
 * hand it memory that could shrink under it. */
#include "test.h"
#include "../../src/core/pd.h"
#include "../../src/ps/proto.h"
#include "../../src/ps/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

/* A writer's rings w and a reader's r mapping the same memory. */
static void ring_pair(pd_rings *w, pd_rings *r)
{
    int fd = pd_rings_create(w, PD_RING_SIZE);
    CHECK(fd >= 0);
    CHECK(pd_rings_map(r, fd, PD_RING_SIZE) == 0);
    close(fd);
}

/* A connected pair, w writing to r, both non-blocking; with rings when
 * rings is set (w created them, r mapped them). */
static void pair(pd_conn *w, pd_conn *r, int rings)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    fcntl(sv[1], F_SETFL, O_NONBLOCK);
    pd_conn_init(w, sv[1], PD_MAX_FRAME);
    pd_conn_init(r, sv[0], PD_MAX_FRAME);
    if (!rings) return;
    w->rings = malloc(sizeof *w->rings);
    r->rings = malloc(sizeof *r->rings);
    ring_pair(w->rings, r->rings);
}

/* The next frame on r, flushing w as the socket takes it: 1, or < 0. */
static int next(pd_conn *w, pd_conn *r, pd_frame *f)
{
    double deadline = pd_now() + 5;
    while (pd_now() < deadline) {
        int eof = 0, rc = pd_conn_read(r, f, &eof);
        if (rc != 0) return rc;
        CHECK(!eof);
        CHECK(pd_conn_flush(w) >= 0);
    }
    CHECK(!"no frame within 5 s");
    return -1;
}

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = malloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 131 + seed);
    return p;
}

PD_TEST(ring_payloads_come_out_in_order_with_the_socket_frames)
{
    pd_conn w, r;
    pair(&w, &r, 1);
    size_t big = 600 << 10;
    uint8_t *block = pattern(16384, 1), *rows = pattern(8192, 2), *large1 = pattern(big, 3), *large2 = pattern(big, 4);
    CHECK(pd_conn_queue(&w, PD_MSG_HEARTBEAT, 1, 0, NULL, 0, NULL, 0) == 0);
    CHECK(pd_conn_queue(&w, PD_MSG_BLOCK_VALUES, 5, 6, block, 16384, NULL, 0) == 0); /* the ring */
    uint8_t *v = pd_conn_reserve(&w, PD_MSG_ROWS, 8192, 0);                             /* the ring */
    CHECK(v != NULL);
    memcpy(v, rows, 8192);
    pd_conn_commit(&w, PD_MSG_ROWS, 7, 8, 8192);
    CHECK(pd_conn_queue(&w, PD_MSG_ERROR, 2, 0, "small", 5, NULL, 0) == 0);          /* the socket */
    CHECK(pd_conn_queue(&w, PD_MSG_BLOCK_VALUES, 9, 0, large1, big, NULL, 0) == 0);  /* the ring */
    uint64_t ring_after_large1 = w.rings->tx.pos;
    CHECK(ring_after_large1 == 16384 + 8192 + big);
    /* no room for a second one until the reader has read: the socket */
    CHECK(pd_conn_queue(&w, PD_MSG_BLOCK_VALUES, 10, 0, large2, big, NULL, 0) == 0);
    CHECK(w.rings->tx.pos == ring_after_large1);
    pd_frame f;
    CHECK(next(&w, &r, &f) == 1);
    CHECK_EQ_INT(f.type, PD_MSG_HEARTBEAT);
    CHECK(next(&w, &r, &f) == 1);
    CHECK(f.type == PD_MSG_BLOCK_VALUES && f.a == 5 && f.b == 6 && f.len == 16384);
    CHECK(memcmp(f.payload, block, 16384) == 0);
    CHECK(next(&w, &r, &f) == 1);
    CHECK(f.type == PD_MSG_ROWS && f.a == 7 && f.b == 8 && f.len == 8192 && memcmp(f.payload, rows, 8192) == 0);
    CHECK(next(&w, &r, &f) == 1);
    CHECK(f.type == PD_MSG_ERROR && f.len == 5 && memcmp(f.payload, "small", 5) == 0);
    CHECK(next(&w, &r, &f) == 1);
    CHECK(f.type == PD_MSG_BLOCK_VALUES && f.a == 9 && f.len == big && memcmp(f.payload, large1, big) == 0);
    /* read: the writer sees the room again */
    CHECK(*w.rings->tx.done == ring_after_large1);
    CHECK(next(&w, &r, &f) == 1);
    CHECK(f.type == PD_MSG_BLOCK_VALUES && f.a == 10 && f.len == big && memcmp(f.payload, large2, big) == 0);
    CHECK(r.rings->rx.pos == ring_after_large1);
    /* the next large payload does not fit before the ring's end: it starts
     * at the ring's start, whole */
    CHECK(pd_conn_queue(&w, PD_MSG_BLOCK_VALUES, 11, 0, large2, big, NULL, 0) == 0);
    CHECK(w.rings->tx.pos == (uint64_t)PD_RING_SIZE + big);
    CHECK(next(&w, &r, &f) == 1);
    CHECK(f.type == PD_MSG_BLOCK_VALUES && f.a == 11 && memcmp(f.payload, large2, big) == 0);
    /* the bytes moved count the payloads, wherever they went */
    CHECK(r.bytes_in == w.bytes_out);
    CHECK(w.bytes_out > 3 * big);
    pd_conn_free(&w);
    pd_conn_free(&r);
    free(block); free(rows); free(large1); free(large2);
}

static void *rows_in_ring(void *ctx, const pd_frame *h)
{
    (void)ctx;
    return h->type == PD_MSG_ROWS ? PD_PLACE_IN_RING : NULL;
}

PD_TEST(ring_payload_read_in_place_is_given_back_at_the_next_read)
{
    pd_conn w, r;
    pair(&w, &r, 1);
    r.place = rows_in_ring;
    uint8_t *rows = pattern(8192, 5), *small = pattern(100, 6);
    CHECK(pd_conn_queue(&w, PD_MSG_ROWS, 1, 2, rows, 8192, NULL, 0) == 0);  /* the ring */
    CHECK(pd_conn_queue(&w, PD_MSG_ROWS, 3, 4, small, 100, NULL, 0) == 0);  /* the socket */
    pd_frame f;
    CHECK(next(&w, &r, &f) == 1);
    CHECK(f.type == PD_MSG_ROWS && f.a == 1 && f.len == 8192 && memcmp(f.payload, rows, 8192) == 0);
    /* read where it lies, not copied: the writer may not reuse it yet */
    CHECK(f.payload >= r.rings->rx.data && f.payload + 8192 <= r.rings->rx.data + r.rings->rx.size);
    CHECK(*w.rings->tx.done == 0);
    CHECK(next(&w, &r, &f) == 1);
    CHECK(*w.rings->tx.done == 8192); /* given back by this read */
    /* over the socket the answer means the connection's buffer */
    CHECK(f.type == PD_MSG_ROWS && f.a == 3 && f.len == 100 && memcmp(f.payload, small, 100) == 0);
    CHECK(f.payload == r.in);
    pd_conn_free(&w);
    pd_conn_free(&r);
    free(rows);
    free(small);
}

/* Write a RING_FRAME naming (type, len, start) to w's socket by hand, and
 * return what r makes of it (its error message in pd_err_msg()). */
static int forged(pd_conn *w, pd_conn *r, uint32_t type, uint32_t len, uint64_t start, pd_frame *f)
{
    uint8_t ref[16];
    for (int i = 0; i < 4; i++) {
        ref[i] = (uint8_t)(type >> 8 * i);
        ref[4 + i] = (uint8_t)(len >> 8 * i);
    }
    for (int i = 0; i < 8; i++) ref[8 + i] = (uint8_t)(start >> 8 * i);
    CHECK(pd_conn_queue(w, PD_MSG_RING_FRAME, 0, 0, ref, sizeof ref, NULL, 0) == 0);
    return next(w, r, f);
}

/* Where a payload starts: its byte line_at on a 64-byte line, never
 * before what was written, never across the ring's end; and what is
 * copied there, aligned or not, comes out the same. */
PD_TEST(ring_payload_values_start_on_a_line)
{
    pd_rings w, r;
    ring_pair(&w, &r);
    uint8_t *src = pattern(70000, 7);
    uint64_t start = 0;
    size_t lens[] = {4100, 8192, 6000, 65536, 5000, 4444};
    size_t line_at[] = {0, 12, 0, 400, 36, 4};
    for (int round = 0; round < 120; round++) {
        size_t k = (size_t)round % PD_COUNT(lens), n = lens[k];
        uint64_t before = w.tx.pos;
        uint8_t *p = pd_ring_room(&w.tx, n, line_at[k], &start);
        CHECK(p != NULL);
        CHECK(start >= before);
        CHECK((start + line_at[k]) % PD_RING_LINE == 0);
        CHECK(start % PD_RING_SIZE + n <= PD_RING_SIZE);
        CHECK(start - before < PD_RING_LINE || start % PD_RING_SIZE < PD_RING_LINE);
        /* a value part that starts on a line goes with streaming stores,
         * the ids before it with plain ones */
        pd_ring_copy(p, src + round, line_at[k]);
        pd_ring_copy(p + line_at[k], src + round + line_at[k], n - line_at[k]);
        pd_ring_wrote(&w.tx, start, n);
        const uint8_t *q = pd_ring_at(&r.rx, start, n);
        CHECK(q != NULL);
        CHECK(memcmp(q, src + round, n) == 0);
        pd_ring_read(&r.rx, start, n);
    }
    CHECK(w.tx.pos > (uint64_t)PD_RING_SIZE); /* it went round */
    /* no room for more than the ring holds, aligned or not */
    CHECK(pd_ring_room(&w.tx, PD_RING_SIZE - 8, 4, &start) == NULL);
    pd_rings_free(&w);
    pd_rings_free(&r);
    free(src);
}

/* The room a payload needs counts the bytes skipped to put its values on
 * a line: with a payload still unread, the largest that fits after the
 * skip is given room and one byte more is not. A frame built in place
 * with pd_conn_fill and one queued in two parts come out whole. */
PD_TEST(ring_room_counts_the_bytes_skipped_for_the_line)
{
    pd_rings w, r;
    ring_pair(&w, &r);
    uint64_t start;
    /* 4000 bytes written and read; then, 32 bytes on, a payload up to the
     * ring's end, left unread: 4000 bytes free at the ring's start */
    CHECK(pd_ring_room(&w.tx, 4000, 0, &start) != NULL && start == 0);
    pd_ring_wrote(&w.tx, start, 4000);
    CHECK(pd_ring_at(&r.rx, start, 4000) != NULL);
    pd_ring_read(&r.rx, start, 4000);
    CHECK(pd_ring_room(&w.tx, PD_RING_SIZE - 4032, 0, &start) != NULL && start == 4032);
    pd_ring_wrote(&w.tx, start, PD_RING_SIZE - 4032);
    /* byte 4 on a line: 60 bytes skipped at the ring's start */
    CHECK(pd_ring_room(&w.tx, 3941, 4, &start) == NULL);
    CHECK(pd_ring_room(&w.tx, 3940, 4, &start) != NULL && start == PD_RING_SIZE + 60);
    pd_rings_free(&w);
    pd_rings_free(&r);

    pd_conn cw, cr;
    pair(&cw, &cr, 1);
    uint8_t *ids = pattern(64, 11), *rows = pattern(16384, 12);
    uint8_t *v = pd_conn_reserve(&cw, PD_MSG_PUSH_ROWS, 12 + 8192, 12);
    CHECK(v != NULL && cw.ring_reserved);
    CHECK((uintptr_t)(v + 12) % PD_RING_LINE == 0);
    memcpy(v, ids, 12);
    for (int i = 0; i < 64; i++) pd_conn_fill(&cw, v + 12 + 128 * (size_t)i, rows + 128 * (size_t)i, 128);
    pd_conn_commit(&cw, PD_MSG_PUSH_ROWS, 1, 3, 12 + 8192);
    CHECK(pd_conn_queue(&cw, PD_MSG_PUSH_KEYS, 2, 5, ids, 40, rows, 8000) == 0); /* the ring, two parts */
    CHECK((cw.rings->tx.pos - 8000) % PD_RING_LINE == 0);                       /* its values on a line */
    pd_frame f;
    CHECK(next(&cw, &cr, &f) == 1);
    CHECK(f.type == PD_MSG_PUSH_ROWS && f.a == 1 && f.b == 3 && f.len == 12 + 8192);
    CHECK(memcmp(f.payload, ids, 12) == 0 && memcmp(f.payload + 12, rows, 8192) == 0);
    CHECK(next(&cw, &cr, &f) == 1);
    CHECK(f.type == PD_MSG_PUSH_KEYS && f.a == 2 && f.b == 5 && f.len == 8040);
    CHECK(memcmp(f.payload, ids, 40) == 0 && memcmp(f.payload + 40, rows, 8000) == 0);
    pd_conn_free(&cw);
    pd_conn_free(&cr);
    free(ids);
    free(rows);
}

PD_TEST(ring_copy_and_row_copy_copy_every_length)
{
    uint8_t *src = pattern(600, 9);
    uint8_t *buf = aligned_alloc(64, 704);
    for (size_t off = 0; off < 64; off += 4)
        for (size_t n = 0; n <= 520; n++) {
            memset(buf, 0xEE, 704);
            pd_ring_copy(buf + off, src + 1, n);
            CHECK(memcmp(buf + off, src + 1, n) == 0);
            CHECK(buf[off + n] == 0xEE && (off == 0 || buf[off - 1] == 0xEE));
            memset(buf, 0xEE, 704);
            pd_copy_row(buf + off + 1, src, n);
            CHECK(memcmp(buf + off + 1, src, n) == 0);
            CHECK(buf[off + 1 + n] == 0xEE && buf[off] == 0xEE);
        }
    free(buf);
    free(src);
}

PD_TEST(ring_references_outside_the_ring_are_refused)
{
    struct {
        uint32_t type, len;
        uint64_t start;
        const char *why;
    } bad[] = {
        {PD_MSG_BLOCK_VALUES, 4096, PD_RING_SIZE, "outside the ring"},          /* a whole ring ahead */
        {PD_MSG_BLOCK_VALUES, 4096, PD_RING_SIZE - 100, "outside the ring"},    /* across its end */
        {PD_MSG_BLOCK_VALUES, PD_RING_SIZE + 1, 0, "outside the ring"},         /* longer than it */
        {PD_MSG_BLOCK_VALUES, 0xffffffffu, 0, "over the"},                     /* over the frame limit */
        {PD_MSG_RING_FRAME, 4096, 0, "RING_FRAME of message type"},             /* a reference to a reference */
        {999, 4096, 0, "RING_FRAME of message type"},                           /* no such message */
        {PD_MSG_BLOCK_VALUES, 0, 0, "RING_FRAME of message type"},              /* an empty payload */
    };
    for (size_t i = 0; i < PD_COUNT(bad); i++) {
        pd_conn w, r;
        pair(&w, &r, 1);
        pd_frame f;
        CHECK(forged(&w, &r, bad[i].type, bad[i].len, bad[i].start, &f) < 0);
        CHECK_CONTAINS(pd_err_msg(), bad[i].why);
        pd_conn_free(&w);
        pd_conn_free(&r);
    }
    /* behind what was read: refused once the reader is past it */
    pd_conn w, r;
    pair(&w, &r, 1);
    uint8_t *p = pattern(8192, 5);
    CHECK(pd_conn_queue(&w, PD_MSG_BLOCK_VALUES, 1, 0, p, 8192, NULL, 0) == 0);
    pd_frame f;
    CHECK(next(&w, &r, &f) == 1);
    CHECK(forged(&w, &r, PD_MSG_BLOCK_VALUES, 4096, 0, &f) < 0);
    CHECK_CONTAINS(pd_err_msg(), "outside the ring");
    pd_conn_free(&w);
    pd_conn_free(&r);
    /* no rings on the connection */
    pair(&w, &r, 0);
    CHECK(forged(&w, &r, PD_MSG_BLOCK_VALUES, 4096, 0, &f) < 0);
    CHECK_CONTAINS(pd_err_msg(), "without shared memory");
    pd_conn_free(&w);
    pd_conn_free(&r);
    free(p);
}

PD_TEST(ring_writer_ignores_a_read_counter_it_cannot_believe)
{
    /* a peer that says it read more than was written, or that leaves more
     * than the ring unread: the writer sends through the socket instead */
    uint64_t lies[] = {1u << 30, 0};
    for (size_t i = 0; i < PD_COUNT(lies); i++) {
        pd_conn w, r;
        pair(&w, &r, 1);
        if (lies[i] == 0) w.rings->tx.pos = 3 * (uint64_t)PD_RING_SIZE; /* and done stays 0 */
        else *w.rings->tx.done = lies[i];
        uint64_t before = w.rings->tx.pos;
        uint8_t *p = pattern(16384, 6);
        CHECK(pd_conn_queue(&w, PD_MSG_BLOCK_VALUES, 3, 0, p, 16384, NULL, 0) == 0);
        CHECK(w.rings->tx.pos == before);
        pd_frame f;
        CHECK(next(&w, &r, &f) == 1);
        CHECK(f.type == PD_MSG_BLOCK_VALUES && f.len == 16384 && memcmp(f.payload, p, 16384) == 0);
        pd_conn_free(&w);
        pd_conn_free(&r);
        free(p);
    }
}

/* Send a bare RING header over w with descriptor fd attached (-1: none). */
static void offer(pd_conn *w, int fd)
{
    CHECK(pd_conn_queue(w, PD_MSG_RING, PD_RING_SIZE, 0, NULL, 0, NULL, 0) == 0);
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {w->out + w->out_off, w->out_len - w->out_off};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        m.msg_control = &ctl;
        m.msg_controllen = sizeof ctl;
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &fd, sizeof fd);
    }
    CHECK(sendmsg(w->fd, &m, 0) == (ssize_t)iov.iov_len);
    w->out_off = w->out_len = 0;
}

static int memfd(size_t len, int seals)
{
    int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, (off_t)len) == 0);
    if (seals) CHECK(fcntl(fd, F_ADD_SEALS, seals) == 0);
    return fd;
}

static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++) n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

PD_TEST(ring_offers_of_memory_that_could_change_under_the_reader_are_refused)
{
    size_t right = 4096 + 2 * (size_t)PD_RING_SIZE;
    int before = open_fds();
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    struct {
        int fd;
        const char *why;
    } bad[] = {
        {-1, "no descriptor came with the offer"},
        {pipefd[0], "not a memory file"},
        {memfd(right, 0), "not sealed"},                                   /* could shrink */
        {memfd(right, F_SEAL_GROW | F_SEAL_SEAL), "not sealed"},           /* could shrink */
        {memfd(right / 2, F_SEAL_SHRINK | F_SEAL_SEAL), "not a memory file"}, /* too small */
    };
    for (size_t i = 0; i < PD_COUNT(bad); i++) {
        pd_conn w, r;
        pair(&w, &r, 0);
        r.take_fd = 1;
        offer(&w, bad[i].fd);
        pd_frame f;
        CHECK(next(&w, &r, &f) == 1);
        CHECK_EQ_INT(f.type, PD_MSG_RING);
        CHECK(pd_conn_take_rings(&r, f.a) < 0);
        CHECK_CONTAINS(pd_err_msg(), bad[i].why);
        CHECK(r.rings == NULL);
        /* the connection still carries frames, through the socket */
        uint8_t *p = pattern(16384, 7);
        CHECK(pd_conn_queue(&w, PD_MSG_BLOCK_VALUES, 3, 0, p, 16384, NULL, 0) == 0);
        CHECK(next(&w, &r, &f) == 1);
        CHECK(f.len == 16384 && memcmp(f.payload, p, 16384) == 0);
        free(p);
        pd_conn_free(&w);
        pd_conn_free(&r);
        if (bad[i].fd >= 0) close(bad[i].fd);
    }
    close(pipefd[1]);
    /* a descriptor passed where none is taken is not kept; of two passed
     * where one is, the second is closed at once */
    pd_conn w, r;
    pair(&w, &r, 0);
    int fd = memfd(right, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    offer(&w, fd);
    pd_frame f;
    CHECK(next(&w, &r, &f) == 1);
    CHECK(r.held_fd == 0);
    r.take_fd = 1;
    offer(&w, fd);
    offer(&w, fd);
    CHECK(next(&w, &r, &f) == 1);
    CHECK(next(&w, &r, &f) == 1);
    CHECK(r.held_fd != 0);
    CHECK(pd_conn_take_rings(&r, f.a) == 0);
    CHECK(r.rings != NULL && r.held_fd == 0);
    CHECK(pd_conn_take_rings(&r, f.a) < 0);
    CHECK_CONTAINS(pd_err_msg(), "offered twice");
    close(fd);
    pd_conn_free(&w);
    pd_conn_free(&r);
    CHECK_EQ_INT(open_fds(), before);
}

/* A trainer's offer of shared memory (pd_conn_offer_rings): the pserver
 * heartbeats every connection past its handshake, and one may come before
 * its answer: passed over, where it ended the trainer's start before. An
 * ERROR in the answer's place is reported with its text. */
PD_TEST(ring_offer_passes_over_heartbeats_before_the_answer)
{
    int before = open_fds();
    pd_conn ps, tr;
    pair(&ps, &tr, 0); /* the answers are in the socket before the offer goes */
    CHECK(pd_conn_queue(&ps, PD_MSG_HEARTBEAT, 0, 0, NULL, 0, NULL, 0) == 0);
    CHECK(pd_conn_queue(&ps, PD_MSG_HEARTBEAT, PD_HB_SAVING, 7, NULL, 0, NULL, 0) == 0);
    CHECK(pd_conn_queue(&ps, PD_MSG_RING_OK, 1, 0, NULL, 0, NULL, 0) == 0);
    CHECK(pd_conn_send_all(&ps, 5) == 0);
    int saving = 0;
    CHECK_EQ_INT(pd_conn_offer_rings(&tr, 5, &saving), 1);
    CHECK(tr.rings != NULL);
    CHECK_EQ_INT(saving, 1); /* the last heartbeat said the pserver writes its shard */
    pd_conn_free(&ps);
    pd_conn_free(&tr);

    static const char why[] = "trainer 0: no room for its rings";
    pair(&ps, &tr, 0);
    CHECK(pd_conn_queue(&ps, PD_MSG_HEARTBEAT, 0, 0, NULL, 0, NULL, 0) == 0);
    CHECK(pd_conn_queue(&ps, PD_MSG_ERROR, (uint32_t)-PD_EPROTO, 0, why, sizeof why - 1, NULL, 0) == 0);
    CHECK(pd_conn_send_all(&ps, 5) == 0);
    CHECK(pd_conn_offer_rings(&tr, 5, &saving) < 0);
    CHECK_EQ_INT(saving, 0);
    CHECK_CONTAINS(pd_err_msg(), why);
    CHECK(tr.rings == NULL);
    pd_conn_free(&ps);
    pd_conn_free(&tr);
    CHECK_EQ_INT(open_fds(), before);
}
