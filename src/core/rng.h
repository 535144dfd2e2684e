/*
 * rng.h - a small deterministic random stream (splitmix64): same seed, same
 * numbers on every machine. For parameter initialisation, shuffling and
 * synthetic data; not for secrets (see crypto.h).
 *
 *     uint64_t s = seed;
 *     double u = pd_rng_uniform(&s);   // [0, 1)
 */
#ifndef PD_RNG_H
#define PD_RNG_H

#include <stdint.h>

/* Inline: the synthetic reader draws one for every value it makes. */
static inline uint64_t pd_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* Uniform in [0, 1). */
double pd_rng_uniform(uint64_t *state);

#endif
