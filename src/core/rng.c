/* rng.c - splitmix64 (its step is inline in rng.h). */
#include "rng.h"

#define TWO_POW_53 9007199254740992.0

double pd_rng_uniform(uint64_t *s)
{
    return (double)(pd_rng_next(s) >> 11) * (1.0 / TWO_POW_53);
}
