/* rng.h - a small seeded generator (xoshiro256**, seeded by splitmix64).
 * Used for initialisation, dropout masks and batch order, so that a run is
 * reproducible from its seed. Not cryptographic. */
#ifndef NIGHTSHIFT_RNG_H
#define NIGHTSHIFT_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} rng_t;

void rng_seed(rng_t *r, uint64_t seed);
uint64_t rng_next(rng_t *r);
/* Uniform in [0, 1) with 24 random bits (exactly representable in float). */
float rng_uniform(rng_t *r);
/* Standard normal (Box-Muller, one value per call). */
float rng_normal(rng_t *r);
/* Uniform integer in [0, n). */
uint64_t rng_below(rng_t *r, uint64_t n);

#endif
