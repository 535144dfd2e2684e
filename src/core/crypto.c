/* crypto.c - SHA-256, HMAC, random bytes and hex. */
#include "crypto.h"
#include "pd.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>

void pd_sha256(const void *data, size_t n, uint8_t *out)
{
    SHA256(data, n, out);
}

int pd_sha256_file(const char *path, char *hex)
{
    FILE *f = fopen(path, "rb");
    if (!f) return pd_err_set(PD_EIO, "cannot read %s: %s", path, strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) EVP_DigestUpdate(ctx, buf, n);
    int bad = ferror(f);
    fclose(f);
    unsigned char md[PD_SHA256];
    unsigned int len = PD_SHA256;
    EVP_DigestFinal_ex(ctx, md, &len);
    EVP_MD_CTX_free(ctx);
    if (bad) return pd_err_set(PD_EIO, "cannot read %s", path);
    pd_hex(md, PD_SHA256, hex);
    return 0;
}

void pd_hmac_sha256(const uint8_t *key, size_t keylen, const void *msg, size_t n, uint8_t *mac)
{
    unsigned int len = PD_SHA256;
    HMAC(EVP_sha256(), key, (int)keylen, msg, n, mac, &len);
}

int pd_random(void *buf, size_t n)
{
    if (RAND_bytes(buf, (int)n) != 1) return pd_err_set(PD_EIO, "no random bytes from OpenSSL");
    return 0;
}

int pd_mac_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

void pd_hex(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

int pd_unhex(const char *s, uint8_t *b, size_t n)
{
    if (strlen(s) != 2 * n) return -1;
    for (size_t i = 0; i < n; i++) {
        int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        b[i] = (uint8_t)(hi * 16 + lo);
    }
    return 0;
}
