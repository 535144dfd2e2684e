/*
 * fuzz_common.h - what the libFuzzer harnesses of tests/fuzz share: a
 * private scratch directory for the files an input becomes (removed at
 * exit), whole-file writes, input fields, and a quiet logger.
 *
 *     int LLVMFuzzerInitialize(int *argc, char ***argv)
 *     {
 *         fz_init();                       // make the scratch directory
 *         path = fz_path("recipe.lua");    // its absolute path
 *     }
 *     fz_write("recipe.lua", data, size);  // a file in it
 *
 * The harnesses never change the working directory: libFuzzer's paths
 * (inputs, -artifact_prefix) are relative to it.
 *
 * See docs/fuzzing.md.
 */
#ifndef PD_FUZZ_COMMON_H
#define PD_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Make the scratch directory and silence the logger (unless PD_FUZZ_LOG=1).
 * Idempotent. */
void fz_init(void);
/* The scratch directory's absolute path (after fz_init). */
const char *fz_dir(void);
/* The absolute path of name in the scratch directory (malloc'd). */
char *fz_path(const char *name);
/* Remove everything in the scratch directory. */
void fz_clear(void);
/* Write n bytes to name in the scratch directory (created or truncated);
 * aborts on failure, since a harness that cannot write its input would fuzz
 * nothing. */
void fz_write(const char *name, const void *data, size_t n);
/* Abort with a message: a harness's own check failed (libFuzzer saves the
 * input as a crash). */
void fz_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* A cursor over the input, for harnesses that read a few fields first. */
typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

uint8_t fz_u8(fz_in *in);      /* 0 once the input is used up */
uint16_t fz_u16(fz_in *in);    /* little-endian */
uint32_t fz_u32(fz_in *in);

#endif
