/* rng.c - splitmix64. */
#include "rng.h"

#define GOLDEN 0x9E3779B97F4A7C15ull
#define TWO_POW_53 9007199254740992.0

uint64_t pd_rng_next(uint64_t *s)
{
    uint64_t z = (*s += GOLDEN);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double pd_rng_uniform(uint64_t *s)
{
    return (double)(pd_rng_next(s) >> 11) * (1.0 / TWO_POW_53);
}
