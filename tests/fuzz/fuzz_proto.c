/*
 * fuzz_proto.c - the frame decoder, pd_conn_read (src/ps/proto.c), on
 * arbitrary bytes from a peer.
 *
 * Input: one byte of options, then the bytes the peer sends. Bit 0 of the
 * options picks the connection's payload limit (0: handshake frames, 1: data
 * frames); bits 1-7 the size of the pieces the bytes arrive in (1 to 127
 * bytes; 0: all at once), so that frames split anywhere are read too. The
 * bytes go through a socketpair, as they would through a socket.
 *
 * Checks, besides the sanitizers: every frame the decoder accepts is within
 * the limit and re-encodes (pd_conn_queue) to exactly the bytes it was
 * decoded from; the decoder ends every input with EOF or an error.
 */
#include "fuzz_common.h"
#include "../../src/core/pd.h"
#include "../../src/ps/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    fz_init();
    return 0;
}

/* Check frame f, decoded from data[*used...], and move *used past it. */
static void check_frame(pd_conn *enc, const pd_frame *f, size_t limit, const uint8_t *data, size_t size,
                        size_t *used)
{
    if (f->len > limit) fz_fail("a frame of %u bytes passed the %zu limit", f->len, limit);
    size_t whole = PD_HEADER_SIZE + (size_t)f->len;
    if (whole > size - *used) fz_fail("a frame of %zu bytes decoded from %zu bytes", whole, size - *used);
    enc->out_len = enc->out_off = 0;
    pd_conn_queue(enc, f->type, f->a, f->b, f->payload, f->len, NULL, 0);
    if (enc->out_len != whole || memcmp(enc->out, data + *used, whole) != 0)
        fz_fail("%s frame at offset %zu does not re-encode to its bytes", pd_msg_name(f->type), *used);
    *used += whole;
}

/* Send what fits of data[*sent..min(*sent + piece, size)); shut the writing
 * side once everything went. */
static void feed(int fd, const uint8_t *data, size_t size, size_t piece, size_t *sent)
{
    size_t end = size - *sent < piece ? size : *sent + piece;
    while (*sent < end) {
        ssize_t k = send(fd, data + *sent, end - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (k < 0) fz_fail("socketpair send: %s", strerror(errno));
        *sent += (size_t)k;
    }
    if (*sent == size) shutdown(fd, SHUT_WR);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    uint8_t opt = data[0];
    data++, size--;
    size_t limit = opt & 1 ? PD_MAX_FRAME : PD_MAX_HANDSHAKE;
    size_t piece = opt >> 1 ? (size_t)(opt >> 1) : size + 1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) fz_fail("socketpair: %s", strerror(errno));
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
    pd_conn c, enc;
    pd_conn_init(&c, sv[0], limit);
    pd_conn_init(&enc, -1, PD_MAX_FRAME);
    size_t sent = 0, used = 0;
    int done = 0, idle = 0;
    if (size == 0) shutdown(sv[1], SHUT_WR);
    while (!done) {
        size_t before = sent + (size_t)c.bytes_in;
        if (sent < size) feed(sv[1], data, size, piece, &sent);
        for (;;) {
            pd_frame f;
            int eof = 0;
            int rc = pd_conn_read(&c, &f, &eof);
            if (rc < 0 || (rc == 0 && eof)) done = 1;
            if (rc <= 0) break;
            check_frame(&enc, &f, limit, data, size, &used);
        }
        /* everything sent and read, and still no EOF: the decoder is stuck */
        if (!done && sent + (size_t)c.bytes_in == before && ++idle > 3)
            fz_fail("the decoder neither ended nor failed after %zu of %zu bytes", (size_t)c.bytes_in, size);
    }
    pd_conn_free(&c);
    pd_conn_free(&enc);
    close(sv[1]);
    return 0;
}
