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

uint64_t pd_rng_next(uint64_t *state);
/* Uniform in [0, 1). */
double pd_rng_uniform(uint64_t *state);

#endif
