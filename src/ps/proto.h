/*
 * proto.h - frames of the pserver protocol (docs/protocol.md), buffered
 * non-blocking connections, and the handshake's proof (HMAC, core/crypto.h).
 *
 *     pd_conn c;
 *     pd_conn_init(&c, fd, PD_MAX_FRAME);
 *     if (pd_conn_queue(&c, PD_MSG_PULL_BLOCK, block, 0, NULL, 0, NULL, 0) < 0) ...;  // over the limit
 *     while (pd_conn_flush(&c) == 0) wait_writable(fd);
 *     pd_frame f;
 *     int eof;
 *     while ((rc = pd_conn_read(&c, &f, &eof)) == 0 && !eof) wait_readable(fd);
 */
#ifndef PD_PROTO_H
#define PD_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PD_PROTO_MAGIC 0x53504450u /* "PDPS" little-endian */
#define PD_PROTO_VERSION 3
#define PD_HEADER_SIZE 24
#define PD_BLOCK_FLOATS 65536
#define PD_MAX_HANDSHAKE 512
#define PD_MAX_FRAME (64u << 20)
/* A pserver drops a peer whose unsent replies would exceed this (a peer that
 * sends requests and never reads the answers). */
#define PD_MAX_QUEUED_OUT (2 * (size_t)PD_MAX_FRAME + 2 * PD_HEADER_SIZE)
#define PD_NONCE 16
#define PD_MAC 32
#define PD_JOB_ID 16
#define PD_SECRET 32

enum {
    PD_MSG_HELLO = 1, PD_MSG_CHALLENGE = 2, PD_MSG_AUTH = 3, PD_MSG_WELCOME = 4,
    PD_MSG_INIT_BLOCK = 10, PD_MSG_INIT_ROWS = 11, PD_MSG_INIT_DONE = 12, PD_MSG_READY = 13,
    PD_MSG_PUSH_BLOCK = 20, PD_MSG_BLOCK_VALUES = 21, PD_MSG_PULL_BLOCK = 22,
    PD_MSG_PUSH_ROWS = 30, PD_MSG_ROWS_DONE = 31, PD_MSG_PULL_ROWS = 32, PD_MSG_ROWS = 33,
    /* growing tables: 64-bit ids (docs/protocol.md) */
    PD_MSG_PULL_KEYS = 34, PD_MSG_KEY_ROWS = 35, PD_MSG_PUSH_KEYS = 36, PD_MSG_DUMP_KEYS = 37, PD_MSG_KEY_DUMP = 38,
    PD_MSG_PASS_END = 40, PD_MSG_PASS_DONE = 41, PD_MSG_DECIDE = 42, PD_MSG_DECIDED = 43,
    PD_MSG_SAVE = 50, PD_MSG_SAVED = 51, PD_MSG_COMMIT = 52,
    PD_MSG_FINISH = 60,
    PD_MSG_HEARTBEAT = 70,
    /* shared memory between roles on one host (ring.h) */
    PD_MSG_RING = 80, PD_MSG_RING_OK = 81, PD_MSG_RING_FRAME = 82,
    PD_MSG_ERROR = 90,
};

/* A pserver's HEARTBEAT with a = PD_HB_SAVING (b: the step), to every
 * trainer, says it writes its checkpoint shard now, and may send nothing
 * until it is written, however long its disk takes: the trainers wait,
 * saying so, instead of calling it hung, until any other frame from it (a
 * plain HEARTBEAT included). */
#define PD_HB_SAVING 1

typedef struct pd_frame {
    uint16_t type;
    uint32_t len, a, b;
    uint8_t *payload;   /* owned by the connection; valid until the next read */
} pd_frame;

typedef struct pd_conn {
    int fd;
    size_t max_frame;   /* payload limit for this connection's state */
    int have_hdr;
    pd_frame cur;
    uint32_t cur_sum;
    uint8_t *in;
    size_t in_got, in_cap;
    /* bytes received ahead: one recv takes as many frames as the socket
     * holds (up to the buffer), not a header and a payload each */
    uint8_t *rbuf;
    size_t r_off, r_len, r_cap;
    uint8_t *out;
    size_t out_len, out_off, out_cap;
    size_t max_out;     /* limit on queued, unsent bytes (0: none) */
    /* where a frame's payload is received: place(place_ctx, header) returns
     * f->len bytes to receive it straight into, or NULL for the
     * connection's buffer; the checksum is checked there afterwards */
    void *(*place)(void *place_ctx, const pd_frame *header);
    void *place_ctx;
    /* a payload read where it lies in the peer's ring (PD_PLACE_IN_RING),
     * given back to the peer at the next pd_conn_read */
    int ring_held;
    uint64_t held_start;
    size_t held_len;
    uint8_t *dst;       /* the payload being received */
    /* bytes moved, for benchmarks and logs */
    uint64_t bytes_in, bytes_out;
    /* shared memory with the peer (Unix sockets only): payloads of
     * PD_RING_MIN bytes or more go through its rings, NULL when none */
    struct pd_rings *rings;
    int take_fd;        /* keep a descriptor the peer passes (a pserver's authenticated Unix peer) */
    int held_fd;        /* that descriptor plus one; 0: none */
    int ring_reserved;  /* pd_conn_reserve's room is in the ring, at ring_start */
    uint64_t ring_start;
    size_t ring_unsent; /* payload bytes in the ring whose RING_FRAMEs wait in out */
} pd_conn;

/* place's answer for a payload to be read where it lies in the peer's
 * ring, not copied (a RING_FRAME's; over the socket it means NULL): the
 * frame's handler takes what it needs before the next pd_conn_read. Only
 * for payloads of values, never of lengths or indices: the peer can still
 * write there. */
#define PD_PLACE_IN_RING ((void *)1)

/* The checksum of a frame's payload (docs/protocol.md); the portable
 * version computes the same on any machine, pd_frame_sum_kind names the one
 * pd_frame_sum runs here ("avx2" or "portable"). */
uint32_t pd_frame_sum(const void *data, size_t n);
uint32_t pd_frame_sum_portable(const void *data, size_t n);
const char *pd_frame_sum_kind(void);
/* The checksum of checkpoint files (protocol version 1's frame checksum). */
uint32_t pd_checksum(const void *data, size_t n);
/* Are all n floats finite (no Inf, no NaN)? 1 or 0. */
int pd_all_finite(const float *v, size_t n);
/* Copy n floats from src (which need not be aligned) to dst in one pass,
 * and say whether they were all finite, 1 or 0: what a peer can still
 * change (a payload read in its ring) is checked in the copy taken. */
int pd_copy_finite(float *dst, const void *src, size_t n);
const char *pd_msg_name(int type);

void pd_conn_init(pd_conn *c, int fd, size_t max_frame);
void pd_conn_free(pd_conn *c);
/* Read what the socket has. 1: *f holds a whole frame; 0: more is needed
 * (or EOF when *eof); < 0: a protocol error (message set) - drop the peer. */
int pd_conn_read(pd_conn *c, pd_frame *f, int *eof);
/* Append a frame whose payload is p1 then p2 to the output buffer; a large
 * frame of one part queued when nothing waits is sent at once from p1, and
 * only what the socket does not take is copied (a send error shows at the
 * next flush). 0, or PD_ERANGE (message set, nothing queued) when the payload is over
 * PD_MAX_FRAME or the unsent output would pass c->max_out. */
int pd_conn_queue(pd_conn *c, int type, uint32_t a, uint32_t b, const void *p1, size_t n1,
                   const void *p2, size_t n2);
/* A frame built in place: pd_conn_reserve returns room for len payload
 * bytes at the end of the output (valid until the next call on c), or NULL
 * (message set) where pd_conn_queue would refuse the frame; the caller
 * writes the payload there, with pd_conn_fill, and pd_conn_commit queues
 * it. No copy. In a ring, the payload's byte line_at (where its rows begin)
 * starts a cache line. */
uint8_t *pd_conn_reserve(pd_conn *c, int type, size_t len, size_t line_at);
/* Copy n bytes into the room pd_conn_reserve gave: into a ring with
 * pd_ring_copy's stores (the peer's core reads them next), into the output
 * buffer with plain ones (this core's kernel does). */
void pd_conn_fill(const pd_conn *c, void *dst, const void *src, size_t n);
void pd_conn_commit(pd_conn *c, int type, uint32_t a, uint32_t b, size_t len);
/* The trainer's side of shared memory, right after the handshake of a
 * Unix socket: create the rings, pass them to the pserver (RING) and wait
 * for its answer (RING_OK). 1: payloads go through the rings from now on;
 * 0: they stay on the socket (message set: why); < 0: the connection
 * failed (message set). The pserver's heartbeats before its answer are
 * passed over; *saving says whether the last of them said it is writing
 * its shard (PD_HB_SAVING). */
int pd_conn_offer_rings(pd_conn *c, double timeout_s, int *saving);
/* The pserver's side, for a RING frame of ring size `size`: map the
 * descriptor that came with it. 0, or < 0 (message set: why not; the
 * connection stays as it was). */
int pd_conn_take_rings(pd_conn *c, uint32_t size);
/* Bytes queued and not sent yet: the output's, and the ring payloads its
 * RING_FRAMEs name (what a socket would still have to take). */
size_t pd_conn_unsent(const pd_conn *c);
/* Are received bytes waiting in the buffer (a frame, or part of one)? A
 * reader that stops before pd_conn_read returned 0 must come back for
 * them: the socket does not say so. */
int pd_conn_buffered(const pd_conn *c);
/* Write what can be written. 1: all sent; 0: more pending; < 0: error. */
int pd_conn_flush(pd_conn *c);
/* Blocking: send everything (waiting up to timeout_s). */
int pd_conn_send_all(pd_conn *c, double timeout_s);
/* Blocking: read one frame (waiting up to timeout_s; < 0 on EOF too). */
int pd_conn_recv(pd_conn *c, pd_frame *f, double timeout_s);

/* A non-blocking TCP socket listening on addr:port (addr: an IPv4 address,
 * a name this node resolves, or NULL/"" for every interface). The fd, or
 * < 0 with "cannot listen on ..." in pd_err_msg(). */
int pd_tcp_listen(const char *addr, int port, int backlog);

/* Socket buffers of PD_TCP_BUFFER bytes each way on a connection, where the
 * host allows that much (net.core.rmem_max and wmem_max); otherwise the
 * kernel's own sizing is left alone (asking for more than the cap would
 * get less and turn the kernel's autotuning off). Blocks of a dense step
 * then flow with fewer wake-ups. */
#define PD_TCP_BUFFER (4 << 20)
void pd_tcp_buffers(int fd);

/* Roles on a pserver's host reach it over a Unix socket beside each of its
 * TCP ports: loopback TCP runs the whole TCP/IP stack twice per send, a
 * Unix socket copies once (a 380 KB step each way: 0.4 of the time).
 * Abstract (no file to clean up; gone with the last descriptor), named by
 * the job, the pserver and the address and port its TCP listener is bound
 * to (addr in network order; INADDR_ANY for every interface): only the
 * process that holds that TCP port can hold the name, so a trainer that
 * reaches the name reaches the pserver of that endpoint, as over TCP.
 * pd_unix_listen: the non-blocking listening fd, or -1 (errno set);
 * pd_unix_connect: a connected blocking fd, or -1. */
int pd_unix_listen(const uint8_t *job, int server, uint32_t addr, int port, int backlog);
int pd_unix_connect(const uint8_t *job, int server, uint32_t addr, int port);
/* Is IPv4 address addr (network order) one of this host's, in this network
 * namespace (where its abstract Unix sockets are)? */
int pd_addr_is_here(uint32_t addr);

/* HMAC-SHA256(secret, label | a | b | job) into mac. */
void pd_proof(const uint8_t *secret, const char *label, const uint8_t *a, const uint8_t *b,
              const uint8_t *job, uint8_t *mac);

#endif
