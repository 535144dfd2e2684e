/*
 * crypto.h - hashing, MACs, random bytes and hex, on OpenSSL's libcrypto.
 *
 *     uint8_t md[PD_SHA256];
 *     char hex[2 * PD_SHA256 + 1];
 *     pd_sha256("abc", 3, md);
 *     pd_hex(md, sizeof md, hex);
 */
#ifndef PD_CRYPTO_H
#define PD_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#define PD_SHA256 32

void pd_sha256(const void *data, size_t n, uint8_t *out);
/* SHA-256 of a file's bytes as 64 hex digits (plus NUL) in hex; 0 or PD_EIO. */
int pd_sha256_file(const char *path, char *hex);
/* HMAC-SHA256(key, msg) into mac (PD_SHA256 bytes). */
void pd_hmac_sha256(const uint8_t *key, size_t keylen, const void *msg, size_t n, uint8_t *mac);
/* n random bytes from the system's CSPRNG; 0 or PD_EIO. */
int pd_random(void *buf, size_t n);
/* Constant-time comparison: 1 when equal. */
int pd_mac_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* hex <-> bytes. out holds 2n + 1 chars. pd_unhex returns 0, or -1 when s
 * is not exactly 2n hex digits. */
void pd_hex(const uint8_t *b, size_t n, char *out);
int pd_unhex(const char *s, uint8_t *b, size_t n);

#endif
